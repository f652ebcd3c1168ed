"""The README's demo (`make demo`) runs and proves what it says."""

from __future__ import annotations

import os
import subprocess
import sys

DEMO = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "demo.py")


def test_demo_resumes_identically_after_sigkill():
    proc = subprocess.run([sys.executable, DEMO], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "killed: True" in out
    assert "identical to the uninterrupted run, same order: True" in out
    assert "examples lost: 0, examples repeated: 0" in out
    assert "(1000 buffered examples kept)" in out
