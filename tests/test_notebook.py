"""notebooks/walkthrough.ipynb runs top to bottom in a Jupyter kernel of this interpreter."""

from __future__ import annotations

import os
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "walkthrough.ipynb")


def outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def test_walkthrough_executes(tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager

    # the notebook asks for the standard "python3" kernel; it must exist here (ipykernel's spec)
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.language == "python"
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    # first, a probe cell (not saved): which interpreter runs the kernel?
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys, os; print(os.path.realpath(sys.executable))"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=240,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    assert outputs_text(nb.cells[0]).strip() == os.path.realpath(sys.executable)
    text = "\n".join(outputs_text(c) for c in nb.cells if c.cell_type == "code")
    assert "child exit code: -9 (killed by SIGKILL)" in text
    assert "identical to the uninterrupted run: True" in text
    assert "examples lost" in text
    assert "shards in shuffled order" in text  # the inspect report
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 1  # the per-shard progress plot
