"""scripts/torch_reference.py resolves --model / --config with memscope's own loader (through
`memscope._native`), so its errors and its configs are the CLI's."""

import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "torch_reference.py"


def reference(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def test_an_unknown_preset_is_refused_with_memscope_s_own_list(memscope_bin):
    p = reference("--model", "gpt2-smal")
    assert p.returncode == 2, p.stderr
    listed = subprocess.run([memscope_bin, "bench", "--model", "gpt2-smal"], capture_output=True,
                            text=True, timeout=60).stderr
    assert "no such preset; choose one of gpt2-small" in p.stderr and "tiny-bert" in p.stderr
    assert p.stderr.strip().removeprefix("error: ") in listed, (p.stderr, listed)


def test_a_bad_config_file_is_refused_as_memscope_refuses_it(tmp_path, memscope_bin):
    bad = tmp_path / "bad.json"
    bad.write_text('{"family": "gpt2", "n_layers": 2}')
    p = reference("--config", bad)
    assert p.returncode == 2, p.stderr
    assert f"{bad}: missing required field `n_heads`" in p.stderr, p.stderr
    cli = subprocess.run([memscope_bin, "estimate", "--config", bad], capture_output=True,
                         text=True, timeout=60)
    assert cli.returncode == 2 and p.stderr == cli.stderr, (p.stderr, cli.stderr)
