"""The quickstart (docs/index.md), the state-contract page and the README must run verbatim:
every ```python block of a page, in order, in one namespace."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(page: str) -> list[str]:
    path = os.path.join(ROOT, page) if page == "README.md" else os.path.join(ROOT, "docs", page)
    with open(path, encoding="utf-8") as f:
        return FENCE.findall(f.read())


def test_fence_extraction_finds_blocks():
    blocks = python_blocks("index.md")
    assert len(blocks) >= 5
    assert "import resumable_iterable as ri" in blocks[0]


@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")
@pytest.mark.parametrize("page", ["index.md", "state-contract.md", "README.md"])
def test_page_code_runs_verbatim(page, tmp_path, monkeypatch, capsys):
    if page == "index.md":
        pytest.importorskip("torchdata")
    monkeypatch.chdir(tmp_path)  # the examples write state files in the working directory
    namespace: dict = {"__name__": "__main__"}
    for i, block in enumerate(python_blocks(page)):
        try:
            exec(compile(block, f"docs/{page}[block {i}]", "exec"), namespace)
        except Exception as e:  # noqa: BLE001 - name the block that failed
            raise AssertionError(f"{page}: python block {i} failed: {type(e).__name__}: {e}\n{block}") from e
    out = capsys.readouterr().out
    if page == "index.md":
        assert "10 batches before the checkpoint" in out
        assert "different pipeline" in out
