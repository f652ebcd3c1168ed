"""An empty list of numbers inside a struct, in the rows of an Arrow-backed source on HF's Arrow
path (after a ``shuffle``, ``take``, interleave...) under ``with_format("numpy" | "torch")``: HF
gives it the type of its Arrow column (a float32 / int64 empty array or tensor, as for a
top-level empty list); ours gave an object array (numpy) or ``[]`` (torch), the list having no
values to tell its type. The struct's features now type it."""

from __future__ import annotations

import datasets
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import resumable_iterable as ri  # noqa: E402
from harness import assert_loader_resumes_exactly, assert_resumes_exactly  # noqa: E402
from test_format_unarrowable_batches import Plain, plain  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:To copy construct from a tensor")


def _hf(n=8):
    rows = [{"i": i, "s": {"x": [] if i % 2 else [i + 0.5], "n": [] if i % 3 else [i],
                           "inner": {"y": [] if i % 4 < 2 else [1.5, 2.5]}, "t": "a"}} for i in range(n)]
    return datasets.Dataset.from_list(rows)


def build(lib, fmt, n=8, shards=1):
    hf = _hf(n)
    ds = hf.to_iterable_dataset(num_shards=shards) if lib == "HF" else ri.to_iterable_dataset(hf, num_shards=shards)
    return ds.shuffle(seed=1, buffer_size=3).with_format(fmt)


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_empty_lists_in_a_struct_are_typed_as_hf(fmt):
    # (the shuffles' orders differ: compared by row)
    ours = sorted((plain(x) for x in build("RI", fmt)), key=lambda r: r["i"][-1])
    assert ours == sorted((plain(x) for x in build("HF", fmt)), key=lambda r: r["i"][-1])
    x = next(r for r in build("RI", fmt) if r["i"] % 2)["s"]["x"]
    assert x.dtype == (np.float32 if fmt == "numpy" else torch.float32) and tuple(x.shape) == (0,)


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_a_map_after_the_format_gets_them_typed_as_from_hf(fmt):
    def run(lib):
        seen = []
        list(build(lib, fmt).map(lambda ex: seen.append(plain(ex)) or {}))
        return sorted(seen, key=lambda r: r["i"][-1])

    assert run("RI") == run("HF")


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_such_rows_resume_exactly_at_every_cut(fmt):
    assert_resumes_exactly(lambda: Plain(build("RI", fmt, shards=2)))


def test_such_rows_through_the_loader_with_workers():
    assert_loader_resumes_exactly(lambda: build("RI", "torch", n=12, shards=4), workers=2, batch_size=None,
                                  item=plain, cuts=lambda n: range(1, n))
