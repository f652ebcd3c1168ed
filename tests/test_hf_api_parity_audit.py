"""API parity audit against HF ``datasets`` 5.2 for a user switching by changing one import: each
test runs the same call on HF's ``IterableDataset`` and on ours, side by side, and (where the call
touches iteration) checks every cut point with the state through JSON."""

from __future__ import annotations

import inspect
import json
import os

import datasets
import pytest
from datasets import Features, Value

import resumable_iterable as ri
from harness import assert_resumes_exactly

ROWS = {"a": list(range(6)), "b": [str(i) for i in range(6)]}


def _hf(num_shards: int = 3):
    return datasets.Dataset.from_dict(ROWS).to_iterable_dataset(num_shards=num_shards)


def _ours(num_shards: int = 3):
    return ri.to_iterable_dataset(datasets.Dataset.from_dict(ROWS), num_shards=num_shards)


# ---------------------------------------------------------------- a column named twice
@pytest.mark.parametrize("fmt", [None, "arrow", "pandas", "numpy"])
def test_select_columns_with_a_name_twice_is_that_column_once_as_hf(fmt):
    hf = datasets.Dataset.from_dict(ROWS).select_columns(["a", "a"])  # HF's map-style: its rows have it once
    assert list(hf.features) == ["a"] and hf.to_list() == [{"a": i} for i in range(6)]
    assert _hf().select_columns(["a", "a"]).column_names == ["a"]  # HF's iterable names it once
    ours = _ours().select_columns(["a", "a"]).with_format(fmt)
    assert ours.column_names == ["a"] and ours.num_columns == 1 and list(ours.features) == ["a"]
    assert ours.to_list() == hf.to_list()  # the Arrow export had the column twice and raised
    if fmt in ("arrow", "pandas"):  # one column, not two of the same name
        batch = next(iter(ours.iter(batch_size=4)))
        assert list(batch.column_names if fmt == "arrow" else batch.columns) == ["a"]
    if fmt != "pandas":  # (the harness compares rows, not DataFrames)
        assert_resumes_exactly(lambda: _ours().select_columns(["a", "a"]).with_format(fmt).shuffle(seed=1, buffer_size=2))


def test_remove_columns_with_a_name_twice_keeps_the_other_columns_as_hf():
    hf = _hf().remove_columns(["a", "a"])
    ours = _ours().remove_columns(["a", "a"])
    assert ours.column_names == hf.column_names == ["b"]
    assert list(ours) == list(hf)
    # the Arrow path dropped every column (pyarrow's drop_columns of a name twice): empty tables,
    # and an export of None values
    assert next(iter(ours.with_format("arrow").iter(batch_size=6))).to_pylist() == list(hf)
    assert ours.to_list() == list(hf)
    assert_resumes_exactly(lambda: _ours().remove_columns(["a", "a"]).with_format("arrow").skip(1))


def test_a_name_twice_keeps_the_fingerprint_of_states_saved_before():
    # states saved by earlier versions record the names as given: they must keep loading
    shape = _ours().select_columns(["a", "a"]).pipeline.shape()
    assert shape["columns"] == ["a", "a"]


# ---------------------------------------------------------------- from_generator: HF's arguments, in HF's order
def _gen(shards, tag="x"):
    for s in shards:
        for i in range(3):
            yield {"a": s * 10 + i, "b": f"{tag}{i}"}


FEATURES = Features({"a": Value("int32"), "b": Value("string")})


def test_from_generator_takes_hf_arguments_in_hf_order():
    assert (list(inspect.signature(ri.IterableDataset.from_generator).parameters)
            == list(inspect.signature(datasets.IterableDataset.from_generator).parameters))
    # features second, gen_kwargs third, split fourth: positionally, as HF's callers write it
    hf = datasets.IterableDataset.from_generator(_gen, FEATURES, {"shards": [0, 1, 2]}, "test")
    ours = ri.IterableDataset.from_generator(_gen, FEATURES, {"shards": [0, 1, 2]}, "test")
    assert list(ours) == list(hf)
    assert ours.features == hf.features and ours.num_shards == hf.num_shards == 3
    assert ours.split == hf.split == "test"
    hf2 = datasets.IterableDataset.from_generator(_gen, FEATURES, gen_kwargs={"shards": [1]})
    ours2 = ri.IterableDataset.from_generator(_gen, FEATURES, gen_kwargs={"shards": [1]})
    assert list(ours2) == list(hf2) and ours2.features == hf2.features
    assert_resumes_exactly(lambda: ri.IterableDataset.from_generator(_gen, FEATURES, {"shards": [0, 1, 2]})
                           .shuffle(seed=2, buffer_size=2))


def test_from_generator_names_its_split_train_and_its_builder_as_hf():
    hf = datasets.IterableDataset.from_generator(_gen, gen_kwargs={"shards": [0]})
    ours = ri.IterableDataset.from_generator(_gen, gen_kwargs={"shards": [0]})
    assert ours.split == hf.split == "train"
    for key in ("builder_name", "dataset_name", "config_name", "version"):
        assert getattr(ours.info, key) == getattr(hf.info, key), key
    assert ours.map(lambda x: x).take(2).split == "train"  # kept by what is built on it, as HF


def test_from_generator_refuses_gen_kwargs_given_where_hf_takes_features():
    # our earlier order put gen_kwargs second: said at the call (HF raises a TypeError too), not
    # as an error from inside the generator at the first example
    with pytest.raises(TypeError):
        datasets.IterableDataset.from_generator(_gen, {"shards": [0, 1]})
    with pytest.raises(TypeError, match="gen_kwargs by name"):
        ri.IterableDataset.from_generator(_gen, {"shards": [0, 1]})
    # a plain dict of features is made Features (HF raises TypeError on it)
    ours = ri.IterableDataset.from_generator(_gen, {"a": Value("int32"), "b": Value("string")},
                                             {"shards": [0]})
    assert ours.features == FEATURES and [r["a"] for r in ours] == [0, 1, 2]


# ---------------------------------------------------------------- globs of the file readers leave out what HF's leave out
def _tree(tmp_path):
    for folder in ("sub/.hid", "sub/__pycache__", "only", ".top"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("README.md", "sub/.hidden.jsonl", "sub/.hid/x.jsonl", "sub/__pycache__/y.jsonl", "only/.h.jsonl",
                 "only/README.md", "sub/README.md", "sub/config.json", ".top/t.jsonl"):
        (tmp_path / name).write_text(json.dumps({"a": 1, "f": name}) + "\n")
    (tmp_path / "sub/ok.jsonl").write_text(json.dumps({"a": 2, "f": "ok"}) + "\n")


GLOBS = ["README.md", "sub/*", "sub/**", "sub/**/*.jsonl", "sub/.*", "sub/.*/*", "sub/__*/*", "**/*.jsonl",
         "*/*.jsonl", "**", ".top/*", ["sub/*.jsonl", "only/*"], ["only/*", "sub/*.jsonl"]]


@pytest.mark.parametrize("reader", ["from_json", "from_text"])
def test_reader_globs_read_the_files_hf_reads(tmp_path, reader):
    # HF's readers leave dataset metadata (README.md, config.json...), hidden files and folders and
    # __pycache__ out of a glob unless the pattern names them; ours read them as data (a README as
    # JSON Lines or text, a hidden copy of a file twice)
    _tree(tmp_path)
    for pattern in GLOBS:
        given = [str(tmp_path / p) for p in pattern] if isinstance(pattern, list) else str(tmp_path / pattern)
        theirs = list(getattr(datasets.IterableDataset, reader)(given))
        ours = list(getattr(ri.IterableDataset, reader)(given))
        assert ours == theirs, pattern
    assert_resumes_exactly(lambda: ri.IterableDataset.from_json([str(tmp_path / "only/*"), str(tmp_path / "**")]))


def test_reader_glob_of_only_left_out_files_says_so(tmp_path):
    # HF: the JSON reader raises StopIteration, the text reader reads an empty dataset; ours says
    # which files the glob matched and why none is read
    _tree(tmp_path)
    for pattern in ("*.md", "only/*", "sub/*.json"):
        with pytest.raises(FileNotFoundError, match="leave out"):
            ri.IterableDataset.from_json(str(tmp_path / pattern))
    with pytest.raises(FileNotFoundError, match=r"Unable to find data files matching '.*nothing\*'$"):
        ri.IterableDataset.from_text(str(tmp_path / "nothing*"))
    # named, they are read, as by HF
    assert [r["f"] for r in ri.IterableDataset.from_json(str(tmp_path / "only/.h.jsonl"))] == ["only/.h.jsonl"]


# ---------------------------------------------------------------- interleave / concatenate: HF's arguments, in HF's order
def test_interleave_and_concatenate_take_hf_arguments_in_hf_order():
    for ours_fn, hf_fn in ((ri.interleave_datasets, datasets.interleave_datasets),
                           (ri.concatenate_datasets, datasets.concatenate_datasets)):
        assert list(inspect.signature(ours_fn).parameters) == list(inspect.signature(hf_fn).parameters)
    info = datasets.DatasetInfo(description="mixed", license="mit")
    # positionally, as HF's callers write them: info 4th, split 5th, stopping_strategy 6th
    hf = datasets.interleave_datasets([_hf(2), _hf(3).take(2)], None, None, info, "train", "all_exhausted")
    ours = ri.interleave_datasets([_ours(2), _ours(3).take(2)], None, None, info, "train", "all_exhausted")
    assert list(ours) == list(hf)
    assert (ours.description, ours.license, ours.split) == (hf.description, hf.license, hf.split) == ("mixed", "mit", "train")
    assert ours.info.features == ours.features
    hf = datasets.concatenate_datasets(dsets=[_hf(2), _hf(3)], info=info, split="x")
    ours = ri.concatenate_datasets(dsets=[_ours(2), _ours(3)], info=info, split="x")
    assert list(ours) == list(hf) and ours.description == hf.description == "mixed" and ours.split == "x"
    hf = datasets.concatenate_datasets([_hf(2), _hf(3).rename_columns({"a": "c", "b": "d"})], None, None, 1)
    ours = ri.concatenate_datasets([_ours(2), _ours(3).rename_columns({"a": "c", "b": "d"})], None, None, 1)
    assert list(ours) == list(hf)
    info.description = "changed"  # the dataset keeps a copy
    assert ours.description != "changed"
    assert_resumes_exactly(lambda: ri.interleave_datasets([_ours(2), _ours(3).take(2)], [0.5, 0.5], 3, info,
                                                          None, "all_exhausted"))


def test_arguments_in_the_former_order_are_refused_at_the_call():
    # before, the 4th argument of interleave_datasets was stopping_strategy and the 2nd of
    # concatenate_datasets axis: now HF's info, which must be a DatasetInfo
    with pytest.raises(TypeError, match="info must be a datasets.DatasetInfo"):
        ri.interleave_datasets([_ours(), _ours()], None, None, "all_exhausted")
    with pytest.raises(TypeError, match="info must be a datasets.DatasetInfo"):
        ri.concatenate_datasets([_ours(), _ours()], 1)


# ---------------------------------------------------------------- a checkpoint of HF's
def test_a_state_saved_by_hf_is_refused_saying_what_it_is():
    # a script switched from HF resumes a checkpoint holding HF's state_dict(): say so (before: "format
    # is None"), and leave the dataset as it was
    hf = _hf().shuffle(seed=0, buffer_size=2)
    it = iter(hf)
    next(it)
    state = json.loads(json.dumps(hf.state_dict()))
    ours = _ours().shuffle(seed=0, buffer_size=2)
    with pytest.raises(ValueError, match="state of HF datasets' IterableDataset.state_dict"):
        ours.load_state_dict(state)
    assert sorted(r["a"] for r in ours) == list(range(6))  # a fresh pass, whole


# ---------------------------------------------------------------- integers held in tensors
def test_integer_tensors_are_integers_as_in_hf():
    torch = pytest.importorskip("torch")
    import numpy as np

    n = torch.tensor(2)  # e.g. an epoch or a count broadcast between ranks
    hf, ours = _hf(), _ours()
    assert list(ours.take(n)) == list(hf.take(n)) and list(ours.skip(n)) == list(hf.skip(n))
    assert list(ours.repeat(n)) == list(hf.repeat(n))
    assert list(ours.batch(torch.tensor([4]))) == list(hf.batch(torch.tensor([4])))
    assert list(ours.shard(torch.tensor(3), torch.tensor(1))) == list(hf.shard(torch.tensor(3), torch.tensor(1)))
    hf.set_epoch(n)
    ours.set_epoch(n)
    assert ours.epoch == hf.epoch == 2 and type(ours.epoch) is int
    assert list(ours.take(np.array(3))) == list(hf.take(np.array(3)))
    # what is no integer stays refused: booleans of any library, floats, several values
    for bad in (torch.tensor(True), np.bool_(True), True, torch.tensor(2.0), torch.tensor([1, 2]), np.array(2.0)):
        with pytest.raises(ValueError, match="must be"):
            ours.take(bad)

    def build():
        ds = _ours().shuffle(seed=torch.tensor(3), buffer_size=torch.tensor(2)).take(torch.tensor(5))
        ds.set_epoch(torch.tensor(1))
        return ds

    full = assert_resumes_exactly(build)  # the state holds plain ints: through JSON at every cut point
    assert len(full) == 5


@pytest.mark.parametrize("kind", ["numpy", "0-d array", "tensor"])
def test_pack_prefetch_and_buffer_input_shards_take_any_integer(kind):
    """pack(seq_len, separator=), prefetch(n) and shuffle(max_buffer_input_shards=) refused numpy
    integers (prefetch, max_buffer_input_shards) and one-element tensors / 0-d arrays (all three),
    which every other integer argument takes; the state holds plain ints (JSON, every cut point)."""
    torch = pytest.importorskip("torch")
    import numpy as np

    as_kind = {"numpy": np.int64, "0-d array": np.array, "tensor": torch.tensor}[kind]

    def build(n=as_kind):
        ds = ri.IterableDataset.from_list([{"ids": list(range(i % 3 + 1))} for i in range(12)])
        ds = ds.pack(n(4), columns=["ids"], separator=n(9)).prefetch(n(2))
        return ds.shuffle(seed=n(1), buffer_size=n(3), max_buffer_input_shards=n(2))

    full = assert_resumes_exactly(build)
    assert full == [dict(x) for x in build(int)]
    for bad in (True, np.bool_(True), 2.0, np.array([1, 2])):
        with pytest.raises(ValueError, match="must be"):
            build(lambda v: bad)
