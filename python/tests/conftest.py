"""Shared by the recorder's tests: the memscope binary, and running a script under the counting
allocator (``python -m memscope run``) the way a user does."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The package reads it once, when first imported (here, and in every process the tests start):
# a field a message's schema does not name is an error, not a silent drop.
os.environ["MEMSCOPE_STRICT_CONTRACT"] = "1"

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.fixture(scope="session")
def memscope_bin():
    path = Path(os.environ.get("MEMSCOPE_BIN", ROOT / "target" / "release" / "memscope"))
    if not path.is_file():
        pytest.fail(f"memscope binary not found at {path}: build it with `cargo build --release` "
                    "in the repository root, or point MEMSCOPE_BIN at one")
    return str(path)


def run_script(name, tmp_path, *args, preload=True, timeout=240):
    """Runs tests/scripts/NAME with ARGS in tmp_path; returns the CompletedProcess."""
    cmd = [sys.executable] + (["-m", "memscope", "run"] if preload else []) + \
        [str(SCRIPTS / name)] + [str(a) for a in args]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}"
    return p


def rendered_dom(page, tmp_path):
    """The DOM of the HTML file ``page`` as headless Chromium renders it."""
    import shutil
    chromium = shutil.which("chromium")
    assert chromium, "chromium not found on PATH: install it (apt-get install chromium)"
    out = subprocess.run(
        ["timeout", "180", chromium, "--headless", "--no-sandbox", "--disable-gpu",
         f"--user-data-dir={tmp_path / 'chrome-profile'}", "--dump-dom", f"file://{page}"],
        capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def cli(memscope_bin, *args, cwd=None, ok=True):
    p = subprocess.run([memscope_bin] + [str(a) for a in args], capture_output=True, text=True,
                       cwd=cwd, timeout=120)
    if ok:
        assert p.returncode == 0, f"memscope {' '.join(map(str, args))}:\n{p.stdout}\n{p.stderr}"
    return p


def own_processes(marker):
    """The pids of live processes whose command line holds ``marker`` (bytes) and that this test
    run started: under pytest-xdist (``-n``), those whose environment names this worker, so that
    one worker's checks and signals never reach another's jobs. Read from /proc."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    tag = f"PYTEST_XDIST_WORKER={worker}".encode() if worker else None
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if marker in cmd and (tag is None or tag in env):
            pids.append(int(pid))
    return pids


def load(path):
    return json.loads(Path(path).read_text())
