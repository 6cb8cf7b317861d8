"""`pip install ./python` gives the whole tool: the wheel ships memscope's command-line binary in
its scripts, so `memscope` is on PATH beside `python` and the docs' next line after a recorded run
(`memscope report run.json -o run.html`) works in a new shell with no Rust toolchain; `python -m
memscope COMMAND` runs the same binary."""

import os
import subprocess
import sys
import sysconfig

from conftest import run_script

SCRIPTS_DIR = sysconfig.get_path("scripts")


def fresh_shell(cmd, tmp_path):
    """``cmd`` in a new bash with a PATH of this Python's scripts and the system's only: no cargo,
    no repository target/."""
    env = {"PATH": f"{SCRIPTS_DIR}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    return subprocess.run(["bash", "--noprofile", "--norc", "-c", cmd], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_pip_install_puts_memscope_on_path_and_report_works_in_a_new_shell(tmp_path):
    cli = os.path.join(SCRIPTS_DIR, "memscope")
    assert os.access(cli, os.X_OK), (
        f"no memscope at {cli}: `pip install ./python` installs it (python/_build/backend.py)")
    run_script("exact.py", tmp_path)
    p = fresh_shell("command -v cargo; memscope --version && "
                    "memscope report exact.json -o run.html", tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "memscope 0.1.0", "cargo was on the shell's PATH: " + p.stdout
    page = (tmp_path / "run.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "exact.json" in page


def test_python_dash_m_memscope_runs_the_same_tool(tmp_path):
    p = subprocess.run([sys.executable, "-m", "memscope", "models"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "gpt2-small" in p.stdout and "124,439,808" in p.stdout, p.stdout
    # Its own command still runs scripts; with nothing to run it says both usages.
    p = subprocess.run([sys.executable, "-m", "memscope", "run"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "run SCRIPT.py" in p.stderr and "COMMAND" in p.stderr


def test_the_installed_tool_is_this_checkout_s(memscope_bin, tmp_path):
    # The wheel's binary is built from this repository: the same help as cargo's build of it.
    ours = subprocess.run([memscope_bin, "estimate", "--help"], capture_output=True, text=True)
    theirs = fresh_shell("memscope estimate --help", tmp_path)
    assert theirs.returncode == 0 and theirs.stdout == ours.stdout
