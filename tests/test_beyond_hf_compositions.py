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


# ------------------------------------------------------------- copies, rank moves, the CLI, at every cut

def _tokens(n: int = 24) -> Dataset:
    return Dataset.from_dict({"id": list(range(n)), "input_ids": [[100 * i + j for j in range(i % 4 + 1)] for i in range(n)],
                              "x": [np.arange(3, dtype=np.float32) + i for i in range(n)]})


def _append_in_place(ex):
    ex["input_ids"].append(-1)
    return ex


def _keep(ex):
    return ex["id"] % 5 != 2


def _beyond_hf_pipelines() -> dict:
    hf, img = _tokens(), _image_dataset()
    return {
        "replay_over_in_place_map": lambda: ri.to_iterable_dataset(hf, num_shards=3).map(_append_in_place)
        .shuffle(seed=1, buffer_size=4, buffer_state="replay"),
        "global_over_filter_then_stored_buffer": lambda: ri.to_iterable_dataset(hf, num_shards=3).filter(_keep)
        .shuffle(seed=1, buffer_size=None).map(_append_in_place).shuffle(seed=2, buffer_size=3),
        "pack_numpy_batches": lambda: ri.to_iterable_dataset(hf, num_shards=3).shuffle(seed=1, buffer_size=4)
        .pack(5, position_ids=True).with_format("numpy").batch(2),
        "images_replay_torch_batches": lambda: ri.to_iterable_dataset(img, num_shards=3)
        .shuffle(seed=1, buffer_size=4, buffer_state="replay").with_format("torch").batch(3),
    }


@pytest.mark.parametrize("name", list(_beyond_hf_pipelines()))
def test_copies_made_mid_iteration_start_afresh_and_carry_a_loaded_state(name):
    """compat.md: a copy (pickle, deepcopy, copy) made during an iteration starts from scratch and
    leaves the running iteration alone; a state loaded and not iterated yet travels with it."""
    import copy
    import pickle

    build = _beyond_hf_pipelines()[name]
    full = [_norm(x) for x in build()]
    for k in range(len(full) + 1):
        ds = build()
        it = iter(ds)
        head = [_norm(next(it)) for _ in range(k)]
        state = ds.state_dict()
        for make in (lambda d: pickle.loads(pickle.dumps(d)), copy.deepcopy, copy.copy):
            assert [_norm(x) for x in make(ds)] == full, f"{name}: a copy at cut {k} is not a fresh pass"
        assert head + [_norm(x) for x in it] == full, f"{name}: copying disturbed the iteration at cut {k}"
        loaded = build()
        loaded.load_state_dict(codec_roundtrip(state))
        for make in (lambda d: pickle.loads(pickle.dumps(d)), copy.deepcopy):
            assert head + [_norm(x) for x in make(loaded)] == full, f"{name}: the loaded state at cut {k}"
        assert head + [_norm(x) for x in loaded] == full


@pytest.mark.parametrize("name", list(_beyond_hf_pipelines()))
def test_every_state_of_the_run_inspects_without_problems(name):
    from resumable_iterable.cli import inspect_document, render

    build = _beyond_hf_pipelines()[name]
    for split in (None, (1, 2)):
        n = sum(1 for _ in (build() if split is None else ri.split_dataset_by_node(build(), *split)))
        for k in range(n + 1):
            ds = build() if split is None else ri.split_dataset_by_node(build(), *split)
            it = iter(ds)
            for _ in range(k):
                next(it)
            report = inspect_document(codec_roundtrip(ds.state_dict()), name)
            assert report["problems"] == [], (name, split, k, report["problems"])
            assert render(report)


@pytest.mark.parametrize("strategy", ["auto", "examples"])
@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (4, 1)])
def test_rank_states_of_beyond_hf_pipelines_move_to_another_world_size(strategy, old, new):
    """Dataset states of ranks iterating themselves (no DataLoader), through the state codec, moved
    to another world size, then checkpointed again part-way: each example once."""
    from collections import Counter

    pipes = _beyond_hf_pipelines()
    for name in ("replay_over_in_place_map", "global_over_filter_then_stored_buffer", "pack_numpy_batches"):
        build = pipes[name]

        def part(r, world):
            return ri.split_dataset_by_node(build(), r, world, strategy=strategy)

        def keys(x):
            ids = x["input_ids"] if "pack" in name else [x["input_ids"]]
            return [int(t) for row in ids for t in row if t >= 0]  # (the maps append -1)

        everything = sorted(t for r in range(old) for x in part(r, old) for t in keys(x))
        for cut in (1, 3):
            head, states = [], []
            for r in range(old):
                ds = part(r, old)
                it = iter(ds)
                for _ in range(cut + r % 2):
                    x = next(it, None)
                    head += keys(x) if x is not None else []
                states.append(codec_roundtrip(ds.state_dict()))
            tail = []
            for r, st in enumerate(ri.redistribute_states(states, new)):
                ds = part(r, new)
                ds.load_state_dict(st)
                it = iter(ds)
                tail += [t for x in (next(it, None),) if x is not None for t in keys(x)]
                again = part(r, new)
                again.load_state_dict(codec_roundtrip(ds.state_dict()))
                tail += [t for x in again for t in keys(x)]
            got = Counter(head + tail)
            assert sorted(got.elements()) == everything and max(got.values()) == 1, (name, strategy, old, new, cut)


def _pop_and_add(batch):
    """Tokenizer habit: take a column out of the batch, add new ones, return the batch."""
    text = batch.pop("s")
    batch["n"] = [len(t) for t in text]
    return batch


def _tag_and_return(batch):
    batch["y"] = [3 * i for i in batch["id"]]
    return batch


def _new_dict_with_a_removed_column(batch):
    return {"x": [[0.0]] * len(batch["id"]), "y": batch["id"]}


@pytest.mark.parametrize("fmt", [None, "numpy"])
@pytest.mark.parametrize("function,kw", [(_pop_and_add, {}), (_tag_and_return, {"remove_columns": ["x"]}),
                                         (_new_dict_with_a_removed_column, {"remove_columns": ["x"]})])
def test_a_batched_map_keeps_hf_column_order(fmt, function, kw):
    """A batched map gave the input columns it did not return first and its output after them
    ({**kept, **out}): a function popping a column from the batch and returning the batch put that
    column first (HF: {**input columns, **output}, the input's order kept, new columns last), which
    changes column_names of what is exported and the order of to_pandas / arrow batches."""
    hf = Dataset.from_dict(_rows(6))
    ours = list(ri.to_iterable_dataset(hf).with_format(fmt).map(function, batched=True, batch_size=4, **kw))
    theirs = list(hf.to_iterable_dataset().with_format(fmt).map(function, batched=True, batch_size=4, **kw))
    assert [list(r) for r in ours] == [list(r) for r in theirs]


def _to_bfloat16(ex):
    ex["x"] = ex["x"].to(torch.bfloat16)
    return ex


@pytest.mark.parametrize("buffer_state", ["examples", "replay"])
def test_a_map_after_with_format_torch_may_return_bfloat16_tensors(buffer_state):
    """A map after with_format('torch') returning a bfloat16 tensor (embeddings kept in the model's
    dtype) raised TypeError ("Got unsupported ScalarType BFloat16"): its output tensors were turned
    into numpy arrays, and numpy has no bfloat16. Such a tensor is kept as a tensor (states store
    tensors exactly), as HF yields it; exact at every cut under a shuffle."""
    hf = Dataset.from_dict(_rows(8))
    rows = list(ri.to_iterable_dataset(hf).with_format("torch").map(_to_bfloat16))
    theirs = list(hf.to_iterable_dataset().with_format("torch").map(_to_bfloat16))
    assert [(r["x"].dtype, r["x"].tolist()) for r in rows] == [(r["x"].dtype, r["x"].tolist()) for r in theirs]
    assert rows[0]["x"].dtype == torch.bfloat16
    # batched by the dataset too: stacked as HF stacks them (not through numpy, which has no bfloat16)
    ours = ri.to_iterable_dataset(hf).with_format("torch").map(_to_bfloat16)
    for batch in (next(iter(ours.batch(3))), next(ours.iter(batch_size=3))):
        assert batch["x"].dtype == torch.bfloat16 and batch["x"].tolist() == [r["x"].tolist() for r in rows[:3]]

    def build():
        return _Plain(ri.to_iterable_dataset(hf, num_shards=2).with_format("torch").map(_to_bfloat16)
                      .shuffle(seed=0, buffer_size=3, buffer_state=buffer_state))

    full = assert_resumes_exactly(build, roundtrip=codec_roundtrip)
    assert {r["x"][1] for r in full} == {"torch.bfloat16"}


def _tokenize_to_batch_encoding(batch):
    """What a tokenizer returns: a BatchEncoding, a Mapping that is not a dict."""
    from transformers import BatchEncoding

    return BatchEncoding({"input_ids": [[len(w) for w in t.split()] for t in batch["s"]]})


@pytest.mark.parametrize("batched", [False, True])
def test_a_map_after_with_format_numpy_returning_a_batch_encoding_keeps_hf_types(batched):
    """After with_format('numpy'), a map returning a tokenizer's BatchEncoding (a UserDict) had the
    columns it left alone come out as 0-d arrays and Python strings instead of HF's numpy scalars:
    only a dict output was merged with the formatted input."""
    pytest.importorskip("transformers")
    hf = Dataset.from_dict({"id": list(range(5)), "s": ["a bc", "d", "ef g h", "i", "jk l"]})
    from transformers import BatchEncoding

    if batched:
        kw, fn = {"batched": True, "batch_size": 2}, _tokenize_to_batch_encoding
    else:
        kw = {}

        def fn(ex):
            return BatchEncoding({"input_ids": [len(w) for w in str(ex["s"]).split()]})

    def typed(rows):
        return [{k: (type(v).__name__, str(getattr(v, "dtype", "")), v.tolist() if hasattr(v, "tolist") else v)
                 for k, v in r.items()} for r in rows]

    ours = typed(ri.to_iterable_dataset(hf).with_format("numpy").map(fn, **kw))
    theirs = typed(hf.to_iterable_dataset().with_format("numpy").map(fn, **kw))
    assert ours == theirs
    assert ours[0]["id"][0] == "int64" and ours[0]["s"][0] == "str_"


def _new_column(ex):
    return {"y": ex["id"] * 2}


def _new_columns(batch):
    return {"y": [2 * i for i in batch["id"]]}


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("source", ["arrow", "generator"])
@pytest.mark.parametrize("batched", [False, True])
def test_remove_columns_of_a_map_after_with_format_returning_a_new_dict_are_removed(fmt, source, batched):
    """After with_format('numpy' / 'torch'), map(f, remove_columns=['s']) with f returning a new dict
    kept 's': the formatted input merged into the output (HF's columns left alone keep their
    formatted values) still held it, and an output column goes onto the example after the removal.
    A string column the user removed then reached default_collate. HF removes it."""
    rows = _rows(6)
    hf = Dataset.from_dict(rows)
    fn, kw = (_new_columns, {"batched": True, "batch_size": 4}) if batched else (_new_column, {})
    if source == "arrow":
        ours = ri.to_iterable_dataset(hf)
    else:
        ours = ri.IterableDataset.from_generator(lambda: ({k: v[i] for k, v in rows.items()} for i in range(6)))
    got = list(ours.with_format(fmt).map(fn, remove_columns=["s"], **kw))
    want = list(hf.to_iterable_dataset().with_format(fmt).map(fn, remove_columns=["s"], **kw))
    assert [list(r) for r in got] == [list(r) for r in want] == [["id", "x", "y"]] * 6


def _pop_s_and_return(ex):
    ex.pop("s")
    ex["z"] = 1
    return ex


def test_a_column_popped_by_a_map_after_with_format_comes_back_formatted_as_hf():
    """A map that pops a column from the formatted example and returns the example gets that column
    back, as in HF ({**input, **output}); after with_format('numpy') it came back as the Python str
    of the unformatted row instead of HF's numpy string."""
    hf = Dataset.from_dict(_rows(4))
    got = list(ri.to_iterable_dataset(hf).with_format("numpy").map(_pop_s_and_return))
    want = list(hf.to_iterable_dataset().with_format("numpy").map(_pop_s_and_return))
    assert [[(k, type(v).__name__) for k, v in r.items()] for r in got] == \
        [[(k, type(v).__name__) for k, v in r.items()] for r in want]
    assert type(got[0]["s"]) is np.str_


def test_a_state_holding_tensors_loads_without_warnings():
    """Reading a state whose buffer holds a tensor (a formatted map's bfloat16 output) warned
    "ComplexHalf support is experimental" in every process (also under resumable-iterable inspect):
    the table of torch dtypes allocated a tensor of each to learn its size."""
    import warnings

    from resumable_iterable import state_tensors

    state = {"x": torch.ones(2, dtype=torch.bfloat16)}
    state_tensors._dtypes.cache_clear()  # as in a new process
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = ri.loads_state(ri.dumps_state(state))
    assert back["x"].dtype == torch.bfloat16 and back["x"].tolist() == [1.0, 1.0]
