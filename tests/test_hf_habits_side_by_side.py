"""HF ``datasets`` 5.2 habits run side by side with ours (``import resumable_iterable as ri`` in
place of HF's ``IterableDataset``): where a call an HF user writes gives something else here,
a test pins what HF gives and that ours gives the same (or the difference documented in
docs/compat.md)."""

from __future__ import annotations

import datasets
import pytest

import resumable_iterable as ri

ROWS = {"a": list(range(6)), "t": [f"s{i}" for i in range(6)], "f": [i / 2 for i in range(6)]}


def _hf(num_shards: int = 2):
    return datasets.Dataset.from_dict(ROWS).to_iterable_dataset(num_shards=num_shards)


def _ours(num_shards: int = 2):
    return ri.to_iterable_dataset(datasets.Dataset.from_dict(ROWS), num_shards=num_shards)


# ---------------------------------------------------------------- with_format(columns=...)
@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow", "pandas", None])
@pytest.mark.parametrize("kwargs", [{"columns": ["a"]}, {"output_all_columns": True},
                                    {"columns": ["a"], "output_all_columns": False}])
def test_with_format_refuses_the_map_style_column_arguments_at_the_call_as_hf(fmt, kwargs):
    """The map-style ``Dataset.with_format(type, columns=[...])`` habit: HF's IterableDataset raises
    TypeError at the call. Ours took the arguments as numpy/torch options: under numpy the format of
    the Arrow rows ignored them (every column came out, formatted), elsewhere iterating raised
    ``asarray() got an unexpected keyword argument 'columns'``."""
    if fmt == "torch":
        pytest.importorskip("torch")
    with pytest.raises(TypeError):
        _hf().with_format(fmt, **kwargs)
    with pytest.raises(TypeError, match="select_columns"):
        _ours().with_format(fmt, **kwargs)
    with pytest.raises(TypeError, match="select_columns"):
        _ours().map(lambda x: x).with_format(fmt, **kwargs)
    with pytest.raises(TypeError, match="select_columns"):  # and a dict of splits
        ri.IterableDatasetDict({"train": _ours()}).with_format(fmt, **kwargs)


def test_with_format_after_select_columns_is_what_columns_asked_for():
    """The way to HF's map-style ``with_format("numpy", columns=["a"])`` rows (output_all_columns=False)."""
    hf = datasets.Dataset.from_dict(ROWS).with_format("numpy", columns=["a"])
    hf_rows = [hf[i] for i in range(len(hf))]
    ours = list(_ours().select_columns(["a"]).with_format("numpy"))
    assert [{k: (type(v), v.item()) for k, v in r.items()} for r in ours] == \
        [{k: (type(v), v.item()) for k, v in r.items()} for r in hf_rows]
