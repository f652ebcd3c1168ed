"""The user guide builds with ``mkdocs build --strict`` (broken links, missing pages, unresolved API
references and docstring warnings all fail), and the API reference is really generated."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISSING = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
           if importlib.util.find_spec(m.split(".")[0]) is None
           or (m == "mkdocstrings_handlers.python" and importlib.util.find_spec(m) is None)]


@pytest.mark.skipif(bool(MISSING), reason=f"docs tools not installed (pip install -e '.[docs]'): {MISSING}")
def test_mkdocs_build_strict(tmp_path):
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                          os.path.join(ROOT, "mkdocs.yml"), "--site-dir", str(site)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    # mkdocstrings rendered the docstrings, not just the headings
    for needle in ("load_state_dict", "ResumableDataCallback", "attach", "load_dataset", "interleave_datasets",
                   "split_dataset_by_node", "save_state", "one shard per file"):
        assert needle in api, needle
    for page in ("index.html", "state-contract/index.html", "trainer/index.html", "hub/index.html",
                 "cli/index.html"):
        assert (site / page).is_file(), page
