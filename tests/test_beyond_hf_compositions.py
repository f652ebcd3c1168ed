"""The features that go beyond HF composed as users run them: a replay-mode or stored shuffle
buffer, the global shuffle, ``pack``, ``with_format("numpy" / "torch")`` + ``batch``, maps that
edit their input in place (and return it, or nothing), over image and numpy data; checked at every
cut point (or many), through ``ri.StatefulDataLoader`` with ranks and workers, and after elastic
resumes (2 ranks x 2 workers -> 1 x 3 -> 3 x 0, exactly once). The longer runs are ``slow``."""

from __future__ import annotations

import numpy as np
import pytest
from datasets import Dataset

import resumable_iterable as ri
from harness import assert_resumes_exactly, codec_roundtrip

torch = pytest.importorskip("torch")


# ------------------------------------------------------------- maps after with_format that edit

def _rows(n: int = 12) -> dict:
    return {"id": list(range(n)), "x": [[float(i), i + 0.5] for i in range(n)], "s": [f"s{i}" for i in range(n)]}


def _double_and_return(ex):
    ex["x"] *= 2  # in place, on the formatted array / tensor
    ex["y"] = ex["id"] * 3
    return ex


def _double(ex):
    ex["x"] *= 2


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("batched", [False, True])
def test_a_map_returning_the_formatted_example_it_was_given_drops_remove_columns_as_hf(fmt, batched):
    """After with_format('numpy' / 'torch'), a map that edits the example (batch) it was given and
    returns it, with remove_columns, kept the removed columns: the function returns the formatted
    dict, which the map node took for a new dict, and a new dict's columns go onto the example
    after the removal. HF removes them, as for a function returning its input without a format."""
    hf = Dataset.from_dict(_rows())
    kw = {"batched": True, "batch_size": 5} if batched else {}
    ours = list(ri.to_iterable_dataset(hf).with_format(fmt).map(_double_and_return, remove_columns=["s"], **kw))
    theirs = list(hf.to_iterable_dataset().with_format(fmt).map(_double_and_return, remove_columns=["s"], **kw))
    assert [sorted(r) for r in ours] == [sorted(r) for r in theirs] == [["id", "x", "y"]] * 12
    assert [r["x"].tolist() for r in ours] == [r["x"].tolist() for r in theirs]
    assert ours[3]["x"].tolist() == [6.0, 7.0]


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("source", ["arrow", "generator"])
def test_a_map_returning_none_after_with_format_keeps_its_in_place_edits(fmt, batched, source):
    """A map may return None (HF refuses it): the example is kept as the function left it. After
    with_format('numpy' / 'torch') the function's edits in place were lost (they were made on the
    formatted copy, and the unformatted input was kept), and the row came out re-formatted from
    Python (a float32 column as float64, an integer as a 0-d array)."""
    rows = _rows()
    hf = Dataset.from_dict(rows)
    if source == "arrow":
        ds = ri.to_iterable_dataset(hf)
    else:
        ds = ri.IterableDataset.from_generator(lambda: ({k: v[i] for k, v in rows.items()} for i in range(12)))
    kw = {"batched": True, "batch_size": 5} if batched else {}
    got = list(ds.with_format(fmt).map(_double, **kw))
    want = list(ds.with_format(fmt).map(lambda ex: {"x": ex["x"] * 2}, **kw))
    assert [r["x"].tolist() for r in got] == [r["x"].tolist() for r in want]
    assert [str(r["x"].dtype) for r in got] == [str(r["x"].dtype) for r in want]
    assert [type(r["id"]) for r in got] == [type(r["id"]) for r in want]


def _norm(x):
    if isinstance(x, dict):
        return {k: _norm(v) for k, v in x.items()}
    if isinstance(x, (np.ndarray, torch.Tensor, np.generic)):
        return (type(x).__name__, str(x.dtype), x.tolist())
    return x


class _Plain:
    """A dataset whose examples are compared as plain values (tensors hold no ``==``)."""

    def __init__(self, ds):
        self.ds = ds

    def __iter__(self):
        return (_norm(x) for x in self.ds)

    def state_dict(self):
        return self.ds.state_dict()

    def load_state_dict(self, state):
        self.ds.load_state_dict(state)


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("buffer_state", ["replay", "examples"])
def test_formatted_maps_editing_in_place_under_a_shuffle_resume_exactly(fmt, buffer_state):
    hf = Dataset.from_dict(_rows(20))

    def build():
        ds = ri.to_iterable_dataset(hf, num_shards=3).with_format(fmt).map(_double)
        ds = ds.map(_double_and_return, remove_columns=["s"])
        return _Plain(ds.shuffle(seed=1, buffer_size=4, buffer_state=buffer_state).batch(3))

    full = assert_resumes_exactly(build, roundtrip=codec_roundtrip)
    assert all(row[0] % 4 == 0 for row in full[0]["x"][2]) and "s" not in full[0]


# ------------------------------------------------------------- images: the decode(False) recipe

def _image_dataset(n: int = 12) -> Dataset:
    from datasets import Features, Image, Value
    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    imgs = [PILImage.fromarray(rng.integers(0, 255, (4, 5, 3), dtype=np.uint8)) for _ in range(n)]
    return Dataset.from_dict({"image": imgs, "id": list(range(n))},
                             features=Features({"image": Image(), "id": Value("int64")}))


def test_the_documented_recipe_for_a_map_that_needs_no_pixels_runs_and_buffers_the_files():
    """docs/torch.md recommended ``ds.decode(False).map(f).shuffle(...).decode()``, which raises
    ValueError (a map's output features are unknown, so decode() does not know what to decode, as
    in HF); the recipe gives the map its features. Run as written there."""
    import os
    import re

    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "torch.md")).read()
    (recipe,) = re.findall(r"`(ds\.decode\(False\)\.map\(.*?\)\.shuffle\(\.\.\.\)\.decode\(\))`", doc)
    seen = []

    def f(ex):
        seen.append(type(ex["image"]).__name__)
        ex["id"] += 100
        return ex

    def build():
        ds = ri.to_iterable_dataset(_image_dataset(), num_shards=3)
        return eval(recipe.replace("shuffle(...)", "shuffle(seed=0, buffer_size=4)"), {"ds": ds, "f": f})

    out = list(build())
    assert set(seen) == {"dict"} and all(type(r["image"]).__name__.endswith("ImageFile") for r in out)
    assert sorted(r["id"] for r in out) == list(range(100, 112))
    ds = build()
    it = iter(ds)
    [next(it) for _ in range(5)]
    assert "PNG" in repr(ds.state_dict()), "the buffer holds the image files"
