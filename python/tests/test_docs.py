"""docs/pytorch.md's first example runs as written in a fresh directory and writes a Record that
memscope reads; under `python -m memscope run` its CPU figures are counted allocations."""

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
