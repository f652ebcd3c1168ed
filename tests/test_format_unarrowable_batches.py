"""``batch().with_format("numpy" | "torch")`` (either order) of a map's values that no Arrow column
holds - complex or datetime arrays, object arrays, numpy scalars in some rows and 0-d arrays in
others, torch tensors in some rows and numpy arrays in others - raised ``ArrowInvalid`` /
``ArrowNotImplementedError`` / ``TypeError`` at the first batch, where HF formats them: the Python
batch went through an Arrow table. Such columns are now formatted from their values, as HF's
formatter formats every Python batch; the other columns keep the table's path."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from datasets import IterableDataset as HFIterable  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from harness import assert_resumes_exactly, codec_roundtrip  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:To copy construct from a tensor")


def _ids(shards):
    for s in shards:
        for i in range(4):
            yield {"i": s * 10 + i}


VALUES = {
    "complex": lambda i: np.arange(3, dtype=np.complex64) + i,
    "datetime": lambda i: np.array(["2020-01-01", "2021-02-03"], dtype="datetime64[D]") + i,
    "object": lambda i: np.array([i, "x"], dtype=object),
    "scalar or 0-d": lambda i: np.float32(i) if i % 2 else np.array(i + 0.5, dtype=np.float32),
    "tensor or array": lambda i: torch.full((2,), float(i)) if i % 2 else np.full(2, i, dtype=np.float32),
}


def _row(kind):
    def f(ex):
        return {"i": ex["i"], "v": VALUES[kind](ex["i"]), "w": np.arange(2, dtype=np.float32) * ex["i"]}
    return f


def plain(x):
    """Values with their types, comparable with ``==``."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [plain(v) for v in x])
    if isinstance(x, np.ndarray):
        return ("ndarray", str(x.dtype), x.shape, [plain(v) for v in x.ravel()] if x.dtype == object else x.tolist())
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), tuple(x.shape), x.tolist())
    if isinstance(x, np.generic):
        return ("npscalar", str(x.dtype), x.item())
    return x


def batched(cls, fn, fmt, order, size, shards=(0, 1)):
    """``cls`` (ours or HF's) over ``_ids`` mapped by ``fn``, then ``batch(size)`` and ``with_format(fmt)``
    in the ``order`` given (``"batch, format"`` or ``"format, batch"``)."""
    ds = cls.from_generator(_ids, gen_kwargs={"shards": list(shards)}).map(fn)
    return ds.batch(size).with_format(fmt) if order == "batch, format" else ds.with_format(fmt).batch(size)


def build(cls, kind, fmt, order):
    return batched(cls, _row(kind), fmt, order, 3)


@pytest.mark.parametrize("order", ["batch, format", "format, batch"])
@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("kind", list(VALUES))
def test_values_no_arrow_column_holds_are_formatted_as_hf(kind, fmt, order):
    if kind == "datetime" and fmt == "torch":
        pytest.skip("torch has no datetime tensors (HF raises too)")
    ours = [plain(b) for b in build(ri.IterableDataset, kind, fmt, order)]
    theirs = [plain(b) for b in build(HFIterable, kind, fmt, order)]
    assert ours == theirs


class Plain:
    def __init__(self, ds):
        self.ds = ds

    def __iter__(self):
        return (plain(b) for b in self.ds)

    def state_dict(self):
        return self.ds.state_dict()

    def load_state_dict(self, state):
        self.ds.load_state_dict(state)


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["complex", "tensor or array"])
def test_such_batches_resume_exactly_at_every_cut(kind, fmt):
    assert_resumes_exactly(lambda: Plain(ri.IterableDataset.from_generator(_ids, gen_kwargs={"shards": [0, 1, 2]})
                                         .map(_row(kind)).shuffle(seed=1, buffer_size=4)
                                         .batch(3).with_format(fmt)), roundtrip=codec_roundtrip)


def test_such_batches_through_the_loader_with_workers():
    from harness import assert_loader_resumes_exactly

    def item(b):
        return plain(b)

    assert_loader_resumes_exactly(
        lambda: ri.IterableDataset.from_generator(_ids, gen_kwargs={"shards": [0, 1, 2, 3]})
        .map(_row("scalar or 0-d")).batch(2).with_format("torch"),
        workers=2, batch_size=None, item=item, cuts=lambda n: range(1, n))


# ---------------------------------------------------------------------------- images in lists / structs

PIL = pytest.importorskip("PIL.Image")


def _crops(ex):
    """A multi-crop augmentation's output: a list of images, and a struct holding one."""
    i = ex["i"]
    return {"i": i, "crops": [PIL.new("RGB", (3, 2), (i, 0, 0)), PIL.new("RGB", (3, 2), (0, i, 0))],
            "view": {"img": PIL.new("L", (2, 2), i), "n": i}}


@pytest.mark.parametrize("order", ["batch, format", "format, batch"])
@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_images_in_a_list_or_struct_are_formatted_as_hf_not_encoded(fmt, order):
    """They came out as {'path': None, 'bytes': b'\\x89PNG...'} dicts: the Arrow table encoded them."""
    ours = [plain(b) for b in batched(ri.IterableDataset, _crops, fmt, order, 3)]
    assert "bytes" not in str(ours)
    assert ours == [plain(b) for b in batched(HFIterable, _crops, fmt, order, 3)]


@pytest.mark.parametrize("workers", [0, 2])
def test_images_in_a_list_resume_exactly_at_every_cut(workers):
    def build_():
        return (ri.IterableDataset.from_generator(_ids, gen_kwargs={"shards": [0, 1, 2, 3]}).map(_crops)
                .shuffle(seed=2, buffer_size=3).batch(2).with_format("torch"))

    if workers == 0:
        assert_resumes_exactly(lambda: Plain(build_()), roundtrip=codec_roundtrip)
    else:
        from harness import assert_loader_resumes_exactly

        assert_loader_resumes_exactly(build_, workers=2, batch_size=None, item=plain, cuts=lambda n: range(1, n))


# ---------------------------------------------------------------------------- numpy scalars

SCALARS = [np.float64, np.float16, np.int32, np.int16, np.uint8, np.bool_]


def _scores(ex):
    i = ex["i"]
    return {"i": i, **{t.__name__: t(i % 3) for t in SCALARS}}


@pytest.mark.parametrize("order", ["batch, format", "format, batch"])
def test_numpy_scalars_of_a_map_keep_hfs_dtypes_in_numpy_batches(order):
    """batch().with_format("numpy") of a map's np.float64 score or np.int32 label gave float32 /
    int64 columns (through an Arrow table) where HF keeps the scalar's dtype (and with_format before
    batch() formats them again, as HF: float32 / int64)."""
    def build_(cls):
        ds = cls.from_generator(_ids, gen_kwargs={"shards": [0, 1]}).map(_scores)
        return ds.batch(3).with_format("numpy") if order == "batch, format" else ds.with_format("numpy").batch(3)

    ours = [plain(b) for b in build_(ri.IterableDataset)]
    assert ours == [plain(b) for b in build_(HFIterable)]
    if order == "batch, format":
        assert ours[0]["float64"][1] == "float64" and ours[0]["int32"][1] == "int32"


def test_numpy_scalar_batches_resume_exactly_at_every_cut():
    assert_resumes_exactly(lambda: Plain(ri.IterableDataset.from_generator(_ids, gen_kwargs={"shards": [0, 1, 2]})
                                         .map(_scores).shuffle(seed=3, buffer_size=4)
                                         .batch(3).with_format("numpy")), roundtrip=codec_roundtrip)
