"""Batches of a map's numpy arrays under ``with_format("numpy" | "torch")``, either order with
``batch()``, formatted as HF 5.2 formats them:

* arrays of fixed-width strings or bytes (``'<U2'``, ``'|S2'``) were object arrays of arrays (the
  Python batch went through an Arrow table of lists of strings); HF stacks them (``'<U2'``);
* a column holding numpy arrays in some rows and Python lists in others was stacked as float32
  by ``batch().with_format("numpy")`` (through the table, the arrays became lists too); HF formats
  each value on its own (float32 arrays, float64 lists) and stacks them only where the dtypes
  agree: an object array;
* in ``with_format("numpy").batch()`` a column of arrays whose later rows are PIL images was an
  object array (the images were formatted, the batch not formatted again); HF stacks it (int64).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
PIL = pytest.importorskip("PIL.Image")
from datasets import IterableDataset as HFIterable  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from harness import assert_loader_resumes_exactly, assert_resumes_exactly  # noqa: E402
from test_format_unarrowable_batches import Plain, batched, plain  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:To copy construct from a tensor")


def _strings(ex):
    i = ex["i"]
    return {"u": np.array(["ab", "c" * (i % 3)]), "s": np.array([b"a\0", b"cd"])}


def _mixed(ex):
    i = ex["i"]
    return {"m": [1.0 * i, 2.0] if i % 2 else np.array([1.0 * i, 2.0])}


def _images(ex):
    i = ex["i"]
    a = np.full((2, 2, 3), i, dtype=np.uint8)
    return {"im": a if i % 2 == 0 else PIL.fromarray(a)}


MAPS = {"strings": _strings, "lists and arrays": _mixed, "arrays then images": _images}


def build(cls, kind, fmt, order, shards=(0, 1)):
    return batched(cls, MAPS[kind], fmt, order, 2, shards)


@pytest.mark.parametrize("order", ["batch, format", "format, batch"])
@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("kind", list(MAPS))
def test_array_batches_are_formatted_as_hf(kind, fmt, order):
    ours = [plain(b) for b in build(ri.IterableDataset, kind, fmt, order)]
    assert ours == [plain(b) for b in build(HFIterable, kind, fmt, order)]


def test_the_differences_seen():
    b = next(iter(build(ri.IterableDataset, "strings", "numpy", "batch, format")))
    assert b["u"].dtype == np.dtype("<U2") and b["s"].dtype == np.dtype("S2") and b["u"].shape == (2, 2)
    b = next(iter(build(ri.IterableDataset, "lists and arrays", "numpy", "batch, format")))
    assert b["m"].dtype == object and b["m"][0].dtype == np.float32 and b["m"][1].dtype == np.float64
    b = next(iter(build(ri.IterableDataset, "arrays then images", "numpy", "format, batch")))
    assert b["im"].dtype == np.int64 and b["im"].shape == (2, 2, 2, 3)


@pytest.mark.parametrize("order", ["batch, format", "format, batch"])
@pytest.mark.parametrize("kind", list(MAPS))
def test_array_batches_resume_exactly_at_every_cut(kind, order):
    assert_resumes_exactly(lambda: Plain(build(ri.IterableDataset, kind, "numpy", order, shards=(0, 1, 2))))


@pytest.mark.parametrize("kind", list(MAPS))
def test_array_batches_through_the_loader_with_workers(kind):
    assert_loader_resumes_exactly(lambda: build(ri.IterableDataset, kind, "numpy", "format, batch", shards=(0, 1, 2, 3)),
                                  workers=2, batch_size=None, item=plain, cuts=lambda n: range(1, n))
