"""docs/pytorch.md's first example runs as written in a fresh directory and writes a Record that
memscope reads; under `python -m memscope run` its CPU figures are counted allocations."""

import json
import re
import subprocess
import sys

from conftest import ROOT, cli, load


def first_python_block():
    text = (ROOT / "docs" / "pytorch.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_the_plain_loop_in_the_docs_runs_as_written(tmp_path, memscope_bin):
    code = first_python_block()
    assert len(code.strip().splitlines()) <= 14
    (tmp_path / "train.py").write_text(code)
    for launcher, memory in (([], "rss"), (["-m", "memscope", "run"], "malloc usable")):
        p = subprocess.run([sys.executable] + launcher + ["train.py"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        r = load(tmp_path / "run.json")
        assert r["spec"]["engine"]["memory"] == memory
        assert r["spec"]["steps"] == 18 and len(r["memory"]["series"]) == 20
        assert len((tmp_path / "run.steps.jsonl").read_text().splitlines()) == 20
        cli(memscope_bin, "report", "run.json", "-o", "run.html", cwd=tmp_path)
        cli(memscope_bin, "analyze", "run.steps.jsonl", cwd=tmp_path)


def test_the_torchrun_recipe_in_the_docs_writes_one_record_per_rank(tmp_path, memscope_bin):
    # The plain loop as written (no init_process_group) under the docs' torchrun line: each rank
    # its own Record, and report reads both.
    (tmp_path / "train.py").write_text(first_python_block())
    text = (ROOT / "docs" / "pytorch.md").read_text()
    line = re.search(r"^torchrun (.*) -m memscope run train.py$", text, re.M)
    assert line, "docs/pytorch.md has no torchrun line for train.py"
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run"] + line.group(1).split()
                       + ["-m", "memscope", "run", "train.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for rank in (0, 1):
        r = load(tmp_path / f"run.rank{rank}.json")
        assert r["spec"]["engine"]["memory"] == "malloc usable"
        assert (r["spec"]["engine"]["rank"], r["spec"]["engine"]["world_size"]) == (rank, 2)
        assert len(r["memory"]["series"]) == 20
    assert not (tmp_path / "run.json").exists()
    report = re.search(r"^memscope report (run\.rank0\.json run\.rank1\.json) -o (\S+)", text,
                       re.M)
    cli(memscope_bin, "report", *report.group(1).split(), "-o", report.group(2), cwd=tmp_path)


def _record_fields():
    """The Record's fields by the contract's schema: the top level's, and each section's as
    ``section.field`` (``spec.torch.parallel`` one level further)."""
    schema = json.loads((ROOT / "python" / "memscope" / "contract.schema.json").read_text())
    defs = schema["$defs"]

    def props(d):
        if "$ref" in d:
            return props(defs[d["$ref"].split("/")[-1]])
        for key in ("allOf", "anyOf", "oneOf"):
            for x in d.get(key, []):
                if x.get("type") != "null" and props(x):
                    return props(x)
        return d.get("properties", {})
    top = props(defs["Record"])
    out = [(k, None) for k in top]
    for section, d in top.items():
        for k, v in props(d).items():
            out.append((k, section))
            if section == "spec" and k == "torch":
                out += [(kk, "spec.torch") for kk in props(v)]
    return out


def test_docs_record_md_names_every_field_of_the_record():
    # A field the Record gains is a field its reference describes.
    text = (ROOT / "docs" / "record.md").read_text()
    missing = [f"{s}.{k}" if s else k for k, s in _record_fields()
               if f"`{k}" not in text and f".{k}" not in text]
    assert missing == [], f"Record fields docs/record.md does not describe: {missing}"
