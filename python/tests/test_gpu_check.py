"""scripts/gpu_check_recorder.py, run on the CPU under the counting allocator: every per-phase
peak the recorder wrote equals the counter's peak the script read inside the same phase, to the
byte (on a GPU the same script compares with torch.cuda.max_memory_allocated)."""

import subprocess
import sys

from conftest import ROOT


def test_every_phase_peak_equals_the_scripts_own_reading(tmp_path):
    p = subprocess.run([sys.executable, "-m", "memscope", "run",
                        str(ROOT / "scripts" / "gpu_check_recorder.py"), "--device", "cpu",
                        "--steps", "3"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "ALL PASS" in p.stdout, p.stdout + p.stderr
    assert p.stdout.count("PASS step") == 3 * 5
