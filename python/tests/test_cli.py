"""Every memscope command that reads Records reads a Python-written one unchanged: report (drawn
in headless Chromium), compare, diff; analyze reads the JSONL series. The Rust writer refuses a
Record that does not fit the schema, naming the field."""

import json
import shutil

import pytest

from conftest import cli, load, rendered_dom, run_script

from memscope import _native


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("records")
    run_script("exact.py", d)
    shutil.move(d / "exact.json", d / "one.json")
    shutil.move(d / "exact.steps.jsonl", d / "one.steps.jsonl")
    run_script("exact.py", d, 4)
    return d


def test_report_draws_a_python_record_in_chromium(records, memscope_bin, tmp_path):
    page = tmp_path / "report.html"
    p = cli(memscope_bin, "report", records / "one.json", "-o", page)
    for chart in ("memory-stacked", "memory-breakdown", "timing-step", "timing-backward"):
        assert chart in p.stdout, p.stdout
    dom = rendered_dom(page, tmp_path)
    for chart in ("memory-stacked", "memory-breakdown"):
        at = dom.find(f'data-chart="{chart}"')
        assert at > 0, f"{chart} missing from the rendered page"
        svg = dom[dom.rfind("<svg", 0, at):dom.find("</svg>", at)]
        assert svg.count("<rect") + svg.count("<path") + svg.count("<polygon") > 3, chart
    # The stacked timeline names the categories the recorder measured, as the tables do.
    for cat in ("parameters", "gradients", "optimizer state", "activations"):
        assert cat in dom, cat
    assert "optimizer_state" not in dom
    assert "PyTorch" in dom  # the warning that says what the heap figures are


def test_compare_and_diff_read_python_records(records, memscope_bin):
    # Four micro-batches a step against one: different workloads, refused by name...
    c = cli(memscope_bin, "compare", records / "one.json", records / "exact.json", ok=False)
    assert c.returncode == 2 and "grad-accum" in c.stderr, c.stderr
    # ...and compared when asked; compare may call the step times a regression (exit status 1);
    # either way it read both Records.
    c = cli(
        memscope_bin, "compare", "--allow-different", records / "one.json", records / "exact.json",
        ok=False,
    )
    assert c.returncode in (0, 1), c.stderr
    assert "step time: forward" in c.stdout and "heap peak" in c.stdout, c.stdout
    d = cli(memscope_bin, "diff", records / "one.json", records / "exact.json")
    assert "optimizer_state" in d.stdout and "backward" in d.stdout, d.stdout


def test_analyze_reads_the_series(records, memscope_bin):
    p = cli(memscope_bin, "analyze", records / "one.steps.jsonl")
    assert "heap live" in p.stdout, p.stdout
    assert "several memory keys" not in p.stderr, p.stderr


def test_the_writer_refuses_a_record_off_the_schema(records):
    r = load(records / "one.json")
    del r["memory"]["param_bytes"]
    with pytest.raises(ValueError, match="param_bytes"):
        _native.finish_record(json.dumps(r), [], None)
    r = load(records / "one.json")
    r["memory"]["series"][0]["heap_live_bytes"] = -1
    with pytest.raises(ValueError, match="does not fit its schema"):
        _native.finish_record(json.dumps(r), [], None)
