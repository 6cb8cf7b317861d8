"""DDP under torchrun with gloo, 2 processes, each under the counting allocator
(`torchrun … -m memscope run script.py`): one Record per rank, read side by side by report."""

import json
import socket
import subprocess
import sys

from conftest import SCRIPTS, cli, load


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_two_records_one_report(tmp_path, memscope_bin):
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         f"--master_port={free_port()}", "-m", "memscope", "run", str(SCRIPTS / "ddp.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # Each worker ran counted, and no child inherited the preload.
    for r in (0, 1):
        assert (tmp_path / f"worker{r}.txt").read_text() == "True ''", r
    recs = [load(tmp_path / f"ddp.rank{r}.json") for r in (0, 1)]
    for r, rec in enumerate(recs):
        e = rec["spec"]["engine"]
        assert (e["rank"], e["world_size"], e["memory"]) == (r, 2, "malloc usable")
        assert [m["phase"] for m in rec["memory"]["series"][-1]["phases"]] == \
            ["forward", "backward", "optimizer"]
        lines = (tmp_path / f"ddp.rank{r}.steps.jsonl").read_text().splitlines()
        assert len(lines) == 6
        # The backward phase holds loss.backward(), DDP's wait for its last all-reduce included
        # (it ran in autograd's final callbacks after the recorder's: 9% of the call was in the
        # phase before); the phase starts at autograd's first saved tensor, a little after the
        # call, which on a step of 1-2 ms is a tenth of it.
        timed = json.loads((tmp_path / f"backward{r}.json").read_text())
        recorded = [json.loads(line)["times_ms"]["backward"] for line in lines]
        assert sum(recorded) >= 0.75 * sum(timed), (recorded, timed)
    # Same model on both ranks: the same parameter, gradient and optimizer bytes.
    cats = [{m["phase"]: m["heap_live_by_category"] for m in rec["memory"]["series"][-1]["phases"]}
            for rec in recs]
    for k in ("parameters", "gradients", "optimizer_state"):
        assert cats[0]["optimizer"][k] == cats[1]["optimizer"][k], k
    page = tmp_path / "ranks.html"
    cli(memscope_bin, "report", tmp_path / "ddp.rank0.json", tmp_path / "ddp.rank1.json",
        "-o", page)
    html = page.read_text()
    assert "ddp.rank0.json" in html and "ddp.rank1.json" in html
    # The ranks side by side, the one with the largest peak marked.
    assert "Ranks side by side" in html, html[:2000]
    peaks = [rec["memory"]["heap_peak_bytes"] for rec in recs]
    worst = max(range(2), key=lambda r: (peaks[r], -r))
    assert f"<td>{worst} (worst)</td>" in html, html
