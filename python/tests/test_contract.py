"""The contract between memscope's binary and this package (`src/contract.rs`, the Rust types'
JSON Schema, shipped as `memscope/contract.schema.json`): what the engine receives and sends is
checked against it, on real processes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli, load
from memscope import _contract

REPO_SCHEMA = Path(__file__).parents[1] / "memscope" / "contract.schema.json"


def test_the_installed_package_ships_the_repository_s_schema():
    assert _contract.SCHEMA_FILE.read_text() == REPO_SCHEMA.read_text(), (
        "the installed memscope package has another contract.schema.json: reinstall it "
        "(pip install ./python)")


def test_a_record_the_engine_wrote_keeps_the_contract_and_a_retyped_field_breaks_it(
        memscope_bin, tmp_path):
    out = tmp_path / "run.json"
    cli(memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2", "--batch", "1",
        "--seq", "8", "--warmup", "0", "--steps", "2", "-q", "--json", str(out))
    record = load(out)
    assert _contract.check("record", record) is record
    record["spec"]["batch"] = "1"
    with pytest.raises(_contract.ContractError, match=r"record\.spec\.batch: expected integer"):
        _contract.check("record", record)
    del record["memory"]
    with pytest.raises(_contract.ContractError, match="record: missing 'memory'"):
        _contract.check("record", record)
    record = load(out)
    record["loss"] = [1.5, "NaN", "-Infinity", "nan"]
    with pytest.raises(_contract.ContractError, match=r"record\.loss\[3\]"):
        _contract.check("record", record)


def test_the_engine_refuses_a_request_that_breaks_the_contract_naming_the_field(
        memscope_bin, tmp_path):
    # The request memscope sends, captured by standing in for Python.
    capture = tmp_path / "capture.sh"
    capture.write_text(f"#!/bin/sh\ncat > {tmp_path}/request.json\nexit 3\n")
    capture.chmod(0o755)
    subprocess.run([memscope_bin, "bench", "--engine", "torch", "--model", "tiny-gpt2",
                    "--steps", "1"], env={"MEMSCOPE_PYTHON": str(capture), "PATH": "/usr/bin:/bin"},
                   capture_output=True, timeout=60)
    request = json.loads((tmp_path / "request.json").read_text())
    _contract.check("request", request)
    request["spec"]["seq"] = -4
    p = subprocess.run([sys.executable, "-m", "memscope._workers.engine"], input=json.dumps(request),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "request breaks the contract" in p.stderr and "request.spec.seq: -4 is below 0" \
        in p.stderr, p.stderr
    del request["expected_params"]
    p = subprocess.run([sys.executable, "-m", "memscope._workers.trace"], input=json.dumps(request),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "request: missing 'expected_params'" in p.stderr, p.stderr


def test_a_request_reads_by_the_contract_s_field_names_and_nothing_else(memscope_bin, tmp_path):
    capture = tmp_path / "capture.sh"
    capture.write_text(f"#!/bin/sh\ncat > {tmp_path}/request.json\nexit 3\n")
    capture.chmod(0o755)
    subprocess.run([memscope_bin, "bench", "--engine", "torch", "--model", "tiny-llama",
                    "--batch", "3", "--seq", "16", "--steps", "1"],
                   env={"MEMSCOPE_PYTHON": str(capture), "PATH": "/usr/bin:/bin"},
                   capture_output=True, timeout=60)
    raw = json.loads((tmp_path / "request.json").read_text())
    request = _contract.read("request", raw)
    spec = request.spec
    assert (spec.batch, spec.seq, spec.config.family, spec.torch.device) == (3, 16, "llama", "cpu")
    # Left out by the Rust side: null where the type allows it, serde's default object otherwise.
    assert spec.data is None and spec.variant.fusion is None and spec.variant.raw == {}
    with pytest.raises(AttributeError, match=r"request\.spec has no field 'batch_size'"):
        spec.batch_size
    with pytest.raises(AttributeError, match="read-only"):
        spec.batch = 4
    changed = spec.replace(batch=4, variant=spec.variant.replace(fusion="full"))
    assert (changed.batch, changed.variant.fusion, spec.batch) == (4, "full", 3)
    with pytest.raises(AttributeError, match="no field 'batches'"):
        spec.replace(batches=4)
    with pytest.raises(_contract.ContractError, match=r"request\.spec\.mode"):
        _contract.read("request", dict(raw, spec=dict(raw["spec"], mode="fly")))


def test_a_misspelt_field_is_an_error_in_the_tests_not_a_silent_drop():
    from memscope import _contract
    assert _contract.STRICT
    assert _contract.unknown_fields("record", {"spec": {"batch": 2, "batchh": 2},
                                               "memory": {"series": [{"stepp": 1}]}}) \
        == ["record.spec.batchh", "record.memory.series[0].stepp"]
    # The out-of-memory line with its phase misspelt: Rust would read it and drop the phase.
    with pytest.raises(_contract.ContractError, match="oom_facts.phaze"):
        _contract.check("oom_facts", {"device": "cpu", "phaze": "forward"})
    assert _contract.check("oom_facts", {"device": "cpu", "phase": "forward"})
