"""Running a snippet of Python in a fresh interpreter, for what only a new process shows (which
modules an import pulls in, the import order of torch and us, a lock taken twice)."""

from __future__ import annotations

import subprocess
import sys


def run_fresh(code: str, timeout: float = 120, env: dict | None = None) -> str:
    """Run ``code`` with ``python -c``; fail the test with its stderr unless it exits 0. Returns
    its standard output, stripped."""
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()
