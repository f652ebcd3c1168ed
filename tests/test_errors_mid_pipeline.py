"""Errors raised in the middle of a pipeline (issue 10).

The rule: whatever raised and wherever (a ``map`` function, a generator source), ``state_dict()``
taken right after the exception, loaded into a fresh pipeline (bug fixed), continues exactly where
the uninterrupted run would have been - no example lost, none repeated - however much work the
nodes above had done part-way (a partial batch, an interleave's turn, a row of
``concatenate_datasets(axis=1)``, a batched map's batch). Loading it back into the same dataset
object continues the same way, and a state taken earlier never changes afterwards, even when the
user's functions edit the examples they are given in place.

Also here: batched ``map`` with ``remove_columns`` and a function returning its input, and
``async def`` functions in ``map`` / ``filter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import pickle

import numpy as np
import pytest

import resumable_iterable as ri
from harness import assert_resumes_exactly, codec_roundtrip, json_roundtrip, normalize


class Boom(RuntimeError):
    pass


class Fault:
    """Raises :class:`Boom` once, on its ``at``-th hit (counting from 0); never when ``at`` is None."""

    def __init__(self, at: int | None = None):
        self.at = at
        self.hits = 0

    def hit(self) -> None:
        n = self.hits
        self.hits += 1
        if n == self.at:
            raise Boom(f"injected failure at hit {n}")


def rows(shard_ids, n, base, fault):
    for s in shard_ids:
        for i in range(n):
            fault.hit()
            # fresh mutable values in every row: a user function may edit them in place
            yield {"id": base + s * 100 + i, "tags": [s, i], "arr": np.array([i, s], dtype=np.int64)}


def source(fault: Fault, n_shards: int = 3, n: int = 5, base: int = 0) -> ri.IterableDataset:
    return ri.IterableDataset.from_generator(rows, gen_kwargs={"shard_ids": list(range(n_shards)), "n": n,
                                                               "base": base, "fault": fault})


KINDS = ("generator", "map", "filter", "batched_map")


def faulty(faults: dict | None = None, batched: bool = True, **kw: Fault) -> ri.IterableDataset:
    """The input that fails: a generator source under a per-example map, a per-example filter and
    (if ``batched``) a batched map, each with its own fault (``faults`` by kind; absent: never raises)."""
    faults = {k: Fault() for k in KINDS} | (faults or {}) | kw

    def f(ex):
        faults["map"].hit()
        return {"y": ex["id"] * 2}

    def keep(ex):
        faults["filter"].hit()
        return ex["id"] % 5 != 3

    def plus_one(b):
        faults["batched_map"].hit()
        return {"z": [i + 1 for i in b["id"]]}

    ds = source(faults["generator"]).map(f).filter(keep)
    return ds.map(plus_one, batched=True, batch_size=2) if batched else ds


def failing_map(fault: Fault) -> ri.IterableDataset:
    """A generator source under a per-example map whose function raises at ``fault``."""

    def f(ex):
        fault.hit()
        return {"y": 0}  # the output shares the input's lists and arrays

    return source(Fault()).map(f)


def other(base: int = 1000, n_shards: int = 2, n: int = 4) -> ri.IterableDataset:
    return source(Fault(), n_shards=n_shards, n=n, base=base)


def scribble(ex):
    """A user function that edits what it is given in place: appends to every list, bumps every
    array (also inside the columns of a batch)."""

    def edit(v):
        if isinstance(v, list):
            for x in v:
                edit(x)
            v.append(-1)
        elif isinstance(v, np.ndarray):
            v += 1

    for v in ex.values():
        edit(v)


def batch_sum(b):
    return {"s": [sum(b["id"])] * len(b["id"])}


def renamed(ds):
    return ds.rename_columns({"id": "bid", "tags": "btags", "arr": "barr"})


P = [0.6, 0.4]
# name -> (compose(faulty input) -> dataset, whether a shuffle buffer (shared with states by design,
# see the shuffle's own copy-on-write) holds examples the final `scribble` would edit)
COMPOSITIONS = {
    "plain": (lambda a: a, False),
    "batch": (lambda a: a.batch(4), False),
    "batch_drop_last": (lambda a: a.batch(4, drop_last_batch=True), False),
    # the example that ended a run is held across the yield: the next batch must not share it with a state
    "batch_by_column": (lambda a: a.map(lambda ex: {"g": ex["id"] // 3}).batch(by_column="g"), False),
    "batched_map": (lambda a: a.map(batch_sum, batched=True, batch_size=4), False),
    "batched_filter": (lambda a: a.filter(lambda b: [i % 3 != 1 for i in b["id"]], batched=True, batch_size=4), False),
    "interleave_cycle": (lambda a: ri.interleave_datasets([a, other()]), False),
    "interleave_cycle_all": (lambda a: ri.interleave_datasets([other(), a], stopping_strategy="all_exhausted"), False),
    "interleave_p_first": (lambda a: ri.interleave_datasets([a, other()], probabilities=P, seed=3), False),
    "interleave_p_all": (lambda a: ri.interleave_datasets([a, other()], probabilities=P, seed=4,
                                                          stopping_strategy="all_exhausted"), False),
    "interleave_p_without_replacement": (lambda a: ri.interleave_datasets(
        [other(), a], probabilities=P, seed=5, stopping_strategy="all_exhausted_without_replacement"), False),
    "concat0_first": (lambda a: ri.concatenate_datasets([a, other()]), False),
    "concat0_second": (lambda a: ri.concatenate_datasets([other(), a]), False),
    "concat1_first": (lambda a: ri.concatenate_datasets([a, renamed(other())], axis=1), False),
    "concat1_second": (lambda a: ri.concatenate_datasets([renamed(other(n=9)), a], axis=1), False),
    "repeat": (lambda a: a.repeat(2), False),
    "repeat_forever_take": (lambda a: a.repeat(None).take(37), False),
    "shuffle": (lambda a: a.shuffle(seed=3, buffer_size=4), True),
    "shuffle_replay": (lambda a: a.shuffle(seed=3, buffer_size=4, buffer_state="replay"), False),
    "skip_take": (lambda a: a.skip(2).take(9), False),
    "replay_shuffle_of_interleave": (lambda a: ri.interleave_datasets(
        [a, other()], probabilities=P, seed=8, stopping_strategy="all_exhausted").shuffle(
        seed=2, buffer_size=3, buffer_state="replay"), False),
    "replay_shuffle_of_concat1": (lambda a: ri.concatenate_datasets([renamed(other()), a], axis=1).shuffle(
        seed=2, buffer_size=3, buffer_state="replay"), False),
    # the row part read from the interleave is held while `a` raises: its position must survive the resume
    "replay_shuffle_of_concat1_of_interleave": (lambda a: ri.concatenate_datasets(
        [renamed(ri.interleave_datasets([other(), other(2000)], probabilities=P, seed=5)), a], axis=1).shuffle(
        seed=2, buffer_size=3, buffer_state="replay"), False),
    "batch_of_interleave": (lambda a: ri.interleave_datasets(
        [a, other()], probabilities=P, seed=6, stopping_strategy="all_exhausted").batch(3), False),
    "batch_of_shuffled_interleave": (lambda a: ri.interleave_datasets(
        [other(), a], stopping_strategy="all_exhausted_without_replacement").shuffle(seed=1, buffer_size=3).batch(4),
        True),
    # the batched map keeps its rows by value (the buffer below holds as many): 'retry', not 'prev'
    "batched_map_of_shuffle": (lambda a: a.shuffle(seed=3, buffer_size=4).map(batch_sum, batched=True, batch_size=3),
                               True),
    "batched_map_of_concat": (lambda a: ri.concatenate_datasets([other(), a]).map(batch_sum, batched=True,
                                                                                  batch_size=3), False),
    "batch_of_concat1": (lambda a: ri.concatenate_datasets([renamed(other()), a], axis=1).batch(4), False),
    "interleave_of_batches": (lambda a: ri.interleave_datasets([a.batch(2), other().batch(3)], probabilities=P,
                                                               seed=7, stopping_strategy="all_exhausted"), False),
    "interleave_of_repeat": (lambda a: ri.interleave_datasets([a.repeat(2), other()]).batch(5), False),
    "batch_of_batched_map_of_interleave": (lambda a: ri.interleave_datasets([other(), a]).map(
        batch_sum, batched=True, batch_size=4).batch(3), False),
}


# a replay-mode shuffle cannot re-derive rows through a batched map: these run without it
REPLAY = {"shuffle_replay", "replay_shuffle_of_interleave", "replay_shuffle_of_concat1",
          "replay_shuffle_of_concat1_of_interleave"}


def build(name: str, faults: dict | None = None) -> ri.IterableDataset:
    compose = COMPOSITIONS[name][0]
    return compose(faulty(faults, batched=name not in REPLAY)).map(scribble)


def run_until_error(ds) -> tuple[list, bool]:
    head = []
    try:
        for x in ds:
            head.append(normalize(x))
    except Boom:
        return head, True
    return head, False


def check_state_after_error(name: str, full: list, ds, head: list, where: str) -> None:
    state = ds.state_dict()
    frozen = ri.dumps_state(state)
    # a fresh pipeline, the bug fixed, from the state saved to JSON
    resumed = build(name)
    resumed.load_state_dict(ri.loads_state(frozen))
    tail = [normalize(x) for x in resumed]
    assert head + tail == full, f"{name}, {where}: resumed {len(head)} + {len(tail)} examples, expected {len(full)}"
    # the same object (its fault fired once: fixed), from the state in memory, which shares the
    # examples held in it: the user's in-place edits must not reach it
    ds.load_state_dict(state)
    again = [normalize(x) for x in ds]
    assert head + again == full, f"{name}, {where}: the same dataset did not continue exactly"
    if not COMPOSITIONS[name][1]:
        assert ri.dumps_state(state) == frozen, f"{name}, {where}: a state taken after the error changed later"


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_a_state_taken_after_an_error_continues_exactly(name):
    counters = {k: Fault() for k in KINDS}
    full = [normalize(x) for x in build(name, counters)]
    assert full
    for kind in KINDS:
        count = counters[kind].hits
        assert count > 0 or (kind == "batched_map" and name in REPLAY)
        for k in range(count):
            ds = build(name, {kind: Fault(k)})
            head, raised = run_until_error(ds)
            assert raised, f"{name}: the {kind} fault at hit {k} did not fire"
            check_state_after_error(name, full, ds, head, f"{kind} raised at hit {k}")
    positions = sum(c.hits for c in counters.values())
    print(f"[errors] {name}: {len(full)} outputs, failure injected at {positions} positions, each resumed twice")


@pytest.mark.parametrize("name", ["batch", "interleave_p_all", "concat1_second", "batched_map_of_concat",
                                  "batch_of_shuffled_interleave", "interleave_of_batches"])
def test_errors_again_while_resuming_still_leave_an_exact_state(name):
    """Resume with the bug not fixed: it raises again (on the retried example, or while a generator
    is re-run to its position); the state taken then is still exact, and so on."""
    full = [normalize(x) for x in build(name)]
    for kind in KINDS:
        for k in (0, 3, 7):
            seen, state = [], None
            for at in (k, 0, 0, 2, None):
                fault = Fault(at)
                ds = build(name, {kind: fault})
                if state is not None:
                    ds.load_state_dict(codec_roundtrip(state))
                head, raised = run_until_error(ds)
                seen += head
                assert raised == (at is not None and fault.hits > at)
                state = ds.state_dict()
            assert seen == full, f"{name}: {kind} faults from hit {k}"


def test_the_example_of_the_issue():
    """ds.map(f).batch(4) with f raising at id 5: the resumed pipeline yields [[4..7], [8, 9]]."""
    broken = {"on": True}

    def f(ex):
        if ex["id"] == 5 and broken["on"]:
            raise ValueError("bad row")
        return {}

    def gen():
        yield from ({"id": i} for i in range(10))

    def pipeline():
        return ri.IterableDataset.from_generator(gen).map(f).batch(4)

    ds = pipeline()
    it = iter(ds)
    assert next(it)["id"] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="bad row"):
        next(it)
    state = json.loads(json.dumps(ds.state_dict()))
    broken["on"] = False
    resumed = pipeline()
    resumed.load_state_dict(state)
    assert [b["id"] for b in resumed] == [[4, 5, 6, 7], [8, 9]]


def test_a_generator_raising_under_batch_loses_no_row():
    broken = {"on": True}

    def gen():
        for i in range(10):
            if i == 6 and broken["on"]:
                broken["on"] = False
                raise OSError("connection reset")
            yield {"id": i}

    ds = ri.IterableDataset.from_generator(gen).batch(4)
    got = []
    with pytest.raises(OSError):
        for b in ds:
            got.append(b["id"])
    state = ds.state_dict()
    assert got == [[0, 1, 2, 3]] and state["state"]["rows"] == [{"id": 4}, {"id": 5}]
    ds.load_state_dict(json.loads(json.dumps(state)))
    assert [b["id"] for b in ds] == [[4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize("fmt", [None, "numpy", "arrow", "pandas"])
@pytest.mark.parametrize("kind", ["map", "generator", "batched_map"])
def test_iter_batch_size_loses_no_row_of_the_batch_it_was_reading(fmt, kind):
    """``iter(batch_size)`` reads a batch inside one ``next()``, in no node of the pipeline: a state
    taken after the pipeline raised part-way through a batch read those rows again (they were lost:
    ``map(f)`` raising at row 7 under ``iter(5)`` resumed with rows 7.. instead of 5..)."""

    def ids(batches):
        # batches or (plain iteration) rows: a value, a column, a one-row table or DataFrame
        return [int(i) for b in batches for i in np.atleast_1d(np.asarray(b["id"]))]

    def pipeline(fault):
        return faulty({kind: fault}).with_format(fmt)

    full = ids(pipeline(Fault()).iter(5))
    for k in (0, 3, 5):
        ds = pipeline(Fault(k))
        got = []
        with pytest.raises(Boom):
            for b in ds.iter(5):
                got.append(b)
        state = codec_roundtrip(ds.state_dict())
        resumed = pipeline(Fault())
        resumed.load_state_dict(state)
        assert ids(got) + ids(resumed.iter(5)) == full, f"{kind} fault at hit {k}"
        ds.load_state_dict(state)  # the same dataset, plain iteration
        assert ids(got) + ids(ds) == full


@pytest.mark.parametrize("edit_in_place", [True, False])
def test_iter_batch_size_over_a_shuffle_rewinds_exactly_and_copies_only_when_a_map_may_edit(edit_in_place, monkeypatch):
    """Over a shuffle, ``iter(batch_size)`` copies the pipeline's state before each batch. Unless a
    map above the buffer may edit an example in place (one that nests a list here, in place, then
    a later row of the same batch raises), the examples leave the buffer uncopied; either way a
    state taken after the error resumes exactly (an edit made before it is not made twice)."""
    from resumable_iterable import state as state_module

    boom_at = {"id": 17, "armed": True}

    def tag(ex):
        if ex["id"] == boom_at["id"] and boom_at["armed"]:
            boom_at["armed"] = False
            raise Boom()
        if edit_in_place:
            ex["tags"].append("seen")  # nested: reaches the buffered example
            return ex
        return {"n": len(ex["tags"])}

    def pipeline():
        ds = ri.IterableDataset.from_dict({"id": list(range(40)), "tags": [[i] for i in range(40)]})
        return ds.shuffle(seed=3, buffer_size=8).map(tag) if edit_in_place else ds.shuffle(seed=3, buffer_size=8)

    copies = [0]
    real = state_module.copy_example
    monkeypatch.setattr("resumable_iterable.nodes.shuffle_examples.copy_example",
                        lambda ex: copies.__setitem__(0, copies[0] + 1) or real(ex))
    boom_at["armed"] = False
    full = [normalize(b) for b in pipeline().iter(5)]
    assert (copies[0] > 0) == edit_in_place  # unedited: nothing copied for the rewinding
    if not edit_in_place:
        return
    boom_at["armed"] = True
    ds, got = pipeline(), []
    with pytest.raises(Boom):
        for b in ds.iter(5):
            got.append(normalize(b))
    state = codec_roundtrip(ds.state_dict())
    resumed = pipeline()
    resumed.load_state_dict(state)
    assert got + [normalize(b) for b in resumed.iter(5)] == full


def test_interleave_gives_back_the_turn_of_an_input_that_raised():
    """Both cases: the input raised on the example it was to yield, or on the one read ahead."""
    for probabilities in (None, P):
        def pipeline(fault):
            return ri.interleave_datasets([faulty(map=fault), other()], probabilities=probabilities, seed=2,
                                          stopping_strategy="all_exhausted")

        full = [normalize(x) for x in pipeline(Fault())]
        for k in range(15):
            ds = pipeline(Fault(k))
            head, raised = run_until_error(ds)
            assert raised
            state = codec_roundtrip(ds.state_dict())
            resumed = pipeline(Fault())
            resumed.load_state_dict(state)
            assert head + [normalize(x) for x in resumed] == full


def test_the_new_state_fields_resume_at_every_cut_point():
    """The nodes that now keep part-way work: every cut point of the uninterrupted run still resumes."""
    for name in ("batch", "concat1_second", "interleave_p_all", "batch_of_concat1", "batched_map_of_concat"):
        assert_resumes_exactly(lambda: build(name), roundtrip=codec_roundtrip, max_cuts=12)


def test_bad_held_rows_in_a_state_are_refused():
    ds = other().batch(3)
    state = ds.state_dict()
    # (rows of a batch as large as batch_size load: a state saved with a larger batch size holds them)
    for rows, what in (([1], "examples \\(objects\\) of a batch in progress"), ({"id": 1}, "list of examples")):
        bad = codec_roundtrip(state)
        bad["state"]["rows"] = rows
        with pytest.raises(ValueError, match=what):
            other().batch(3).load_state_dict(bad)
    cat = ri.concatenate_datasets([other(), renamed(other())], axis=1)
    bad = cat.state_dict()
    bad["state"]["pending"] = [None]
    with pytest.raises(ValueError, match="'pending' must hold 2 examples or nulls"):
        ri.concatenate_datasets([other(), renamed(other())], axis=1).load_state_dict(bad)


# ---------------------------------------------------------------------- a state never changes


def test_peeked_examples_are_yielded_as_copies_once_a_state_shares_them():
    """An interleave keeps the example it read ahead in its state; the user edits the yielded
    example in place. Every state taken along the way must stay as it was."""

    def pipeline():
        return ri.interleave_datasets([other(0), other(500)], probabilities=P, seed=1,
                                      stopping_strategy="all_exhausted").map(scribble)

    full = [normalize(x) for x in pipeline()]
    ds = pipeline()
    it = iter(ds)
    states = []
    for _ in range(len(full)):
        s = ds.state_dict()
        states.append((s, ri.dumps_state(s)))
        next(it)
    assert all(ri.dumps_state(s) == text for s, text in states), "a state changed after it was taken"
    # and each still resumes exactly
    for k in (0, 3, len(full) // 2):
        resumed = pipeline()
        resumed.load_state_dict(states[k][0])
        assert [normalize(x) for x in resumed] == full[k:]


def test_examples_held_in_a_loaded_state_are_not_edited_by_the_resumed_run():
    fault = Fault(6)
    ds = ri.concatenate_datasets([renamed(other()), failing_map(fault)], axis=1).batch(4).map(scribble)
    head, raised = run_until_error(ds)
    assert raised
    state = ds.state_dict()
    assert state["state"]["children"][0]["rows"] and any(state["state"]["children"][0]["children"][0]["pending"])
    frozen = ri.dumps_state(state)
    for _ in range(2):  # twice from the same dict: the first run must leave it as it was
        resumed = ri.concatenate_datasets([renamed(other()), failing_map(Fault())], axis=1).batch(4).map(scribble)
        resumed.load_state_dict(state)
        list(resumed)
        assert ri.dumps_state(state) == frozen


def test_the_retried_example_of_a_map_is_copied():
    ds = failing_map(Fault(4)).map(scribble)
    head, raised = run_until_error(ds)
    state = ds.state_dict()
    frozen = ri.dumps_state(state)
    assert raised and len(head) == 4
    ds.load_state_dict(state)
    assert [x["id"] for x in ds] == [4, 100, 101, 102, 103, 104, 200, 201, 202, 203, 204]
    assert ri.dumps_state(state) == frozen


# ---------------------------------------------------------------------- remove_columns (HF's rule)


def _hf_and_ours(fn, **kw):
    from datasets import Dataset

    data = {"x": [1, 2, 3, 4, 5], "z": ["a", "b", "c", "d", "e"]}
    hf = list(Dataset.from_dict(data).to_iterable_dataset().map(fn, **kw))
    ours = list(ri.to_iterable_dataset(Dataset.from_dict(data)).map(fn, **kw))
    return hf, ours


def test_batched_map_returning_its_edited_input_drops_removed_columns_as_hf():
    def add_y(b):
        b["y"] = [v * 10 for v in b["x"]]
        return b

    hf, ours = _hf_and_ours(add_y, batched=True, batch_size=2, remove_columns=["x"])
    assert ours == hf and all("x" not in r for r in ours)


def test_removed_columns_returned_in_a_new_dict_are_kept_as_hf():
    hf, ours = _hf_and_ours(lambda b: {"x": [v + 1 for v in b["x"]]}, batched=True, batch_size=2,
                            remove_columns=["x"])
    assert ours == hf and [r["x"] for r in ours] == [2, 3, 4, 5, 6]
    hf, ours = _hf_and_ours(lambda ex: {"x": ex["x"] + 1}, remove_columns=["x"])
    assert ours == hf and [r["x"] for r in ours] == [2, 3, 4, 5, 6]

    def edit(ex):
        ex["y"] = ex["x"]
        return ex

    hf, ours = _hf_and_ours(edit, remove_columns=["x", "z"])
    assert ours == hf == [{"y": v} for v in [1, 2, 3, 4, 5]]


def test_batched_map_returning_its_input_with_remove_columns_resumes_exactly():
    def add_y(b):
        b["y"] = [v * 10 for v in b["id"]]
        return b

    full = assert_resumes_exactly(lambda: other().map(add_y, batched=True, batch_size=3, remove_columns=["tags"]),
                                  roundtrip=codec_roundtrip)
    assert all("tags" not in r and "y" in r for r in full)


# ---------------------------------------------------------------------- async functions


async def slow_double(ex):
    await asyncio.sleep(0)
    return {"y": ex["id"] * 2}


async def is_even(ex):
    await asyncio.sleep(0)
    return ex["id"] % 2 == 0


async def slow_double_batch(b):
    await asyncio.sleep(0)
    return {"y": [i * 2 for i in b["id"]]}


async def every_third(b):
    await asyncio.sleep(0)
    return [i % 3 == 0 for i in b["id"]]


class AsyncCallable:
    async def __call__(self, ex, i):
        await asyncio.sleep(0)
        return {"i": i}


ASYNC = {
    "map": lambda ds: ds.map(slow_double),
    "map_batched": lambda ds: ds.map(slow_double_batch, batched=True, batch_size=3),
    "filter": lambda ds: ds.filter(is_even),
    "filter_batched": lambda ds: ds.filter(every_third, batched=True, batch_size=4),
    "map_callable_with_indices": lambda ds: ds.map(AsyncCallable(), with_indices=True),
}
SYNC = {
    "map": lambda ds: ds.map(lambda ex: {"y": ex["id"] * 2}),
    "map_batched": lambda ds: ds.map(lambda b: {"y": [i * 2 for i in b["id"]]}, batched=True, batch_size=3),
    "filter": lambda ds: ds.filter(lambda ex: ex["id"] % 2 == 0),
    "filter_batched": lambda ds: ds.filter(lambda b: [i % 3 == 0 for i in b["id"]], batched=True, batch_size=4),
    "map_callable_with_indices": lambda ds: ds.map(lambda ex, i: {"i": i}, with_indices=True),
}


@pytest.mark.parametrize("name", sorted(ASYNC))
def test_async_functions_give_what_their_sync_twins_give_and_resume_exactly(name):
    want = [normalize(x) for x in SYNC[name](other())]
    got = assert_resumes_exactly(lambda: ASYNC[name](other()), roundtrip=codec_roundtrip)
    assert got == want


@pytest.mark.parametrize("name", ["map", "filter", "filter_batched"])
def test_async_functions_match_hf(name):
    from datasets import Dataset

    data = Dataset.from_dict({"id": list(range(12))})
    hf = list(ASYNC[name](data.to_iterable_dataset()))
    assert list(ASYNC[name](ri.to_iterable_dataset(data, num_shards=3))) == hf


def test_async_filter_inside_a_running_event_loop():
    """A notebook or an async training loop already runs an event loop in this thread."""

    async def main():
        return [x["id"] for x in other().filter(is_even)]

    assert asyncio.run(main()) == [x["id"] for x in other() if x["id"] % 2 == 0]


def test_async_map_that_raises_keeps_the_failed_example():
    state = {"broken": True}

    async def f(ex):
        await asyncio.sleep(0)
        if ex["id"] == 1101 and state["broken"]:
            raise Boom("async failure")
        return {"y": 1}

    ds = other().map(f).batch(2)
    got = []
    with pytest.raises(Boom):
        for b in ds:
            got += b["id"]
    saved = codec_roundtrip(ds.state_dict())
    state["broken"] = False
    resumed = other().map(f).batch(2)
    resumed.load_state_dict(saved)
    assert got + [i for b in resumed for i in b["id"]] == [x["id"] for x in other()]


def test_async_calls_run_at_once_as_in_hf_and_a_state_taken_meanwhile_resumes_exactly():
    running, peak = [0], [0]

    async def slow(ex):
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.001)
        running[0] -= 1
        ex["tags"].append("seen")  # edits its input in place: the inputs held in states stay as read
        return {"y": ex["id"] * 2}

    want = [{**x, "y": x["id"] * 2, "tags": x["tags"] + ["seen"]} for x in other()]
    assert [normalize(x) for x in other().map(slow)] == [normalize(x) for x in want]
    assert peak[0] > 1  # HF runs up to 1000 calls of an async function at once; so do we
    assert_resumes_exactly(lambda: other().map(slow).shuffle(seed=3, buffer_size=4), roundtrip=codec_roundtrip)


def test_an_input_that_raises_under_async_calls_comes_after_the_outputs_read_before_it():
    broken = {"on": True}

    def gen(parts):
        for p in parts:
            for i in range(10):
                if p == 1 and i == 4 and broken["on"]:
                    raise Boom("generator failure")
                yield {"id": p * 10 + i}

    def build():
        return ri.IterableDataset.from_generator(gen, gen_kwargs={"parts": [0, 1, 2]}).map(slow_double)

    ds = build()
    got = []
    with pytest.raises(Boom):
        for x in ds:
            got.append(x["id"])
    assert got == list(range(14))  # every input read before the failure was processed and yielded
    saved = codec_roundtrip(ds.state_dict())
    broken["on"] = False
    resumed = build()
    resumed.load_state_dict(saved)
    assert got + [x["id"] for x in resumed] == list(range(30))


def test_an_async_call_that_raises_again_after_a_resume_is_named_as_retried():
    async def f(ex):
        await asyncio.sleep(0)
        if ex["id"] == 1103:
            raise Boom("still broken")
        return {"y": 1}

    ds = other().map(f)
    with pytest.raises(Boom) as first:
        list(ds)
    assert "example #7 (source generator shard 1, row 3)" in "".join(first.value.__notes__)
    resumed = other().map(f)
    resumed.load_state_dict(codec_roundtrip(ds.state_dict()))
    with pytest.raises(Boom) as again:
        list(resumed)
    assert "example #7 (retried from the state)" in "".join(again.value.__notes__)


def test_async_map_under_a_dataloader_worker():
    torch = pytest.importorskip("torch")
    loader = torch.utils.data.DataLoader(other().map(slow_double), batch_size=None, num_workers=1)
    assert [x["y"] for x in loader] == [x["id"] * 2 for x in other()]



# ---------------------------------------------------------------------- through a StatefulDataLoader


@pytest.mark.parametrize("ours,num_workers", [(False, 0), (True, 0), (False, 2), (True, 2)])
def test_stateful_dataloader_state_after_an_error_resumes_exactly(ours, num_workers):
    """What a trainer does: the loader raises, the trainer saves ``loader.state_dict()``, the job
    restarts with the bug fixed and loads it. With workers the loader keeps the state each worker
    sent with its last batch, so the loader may batch itself. In one process the loader's state is
    the dataset's state at that moment: torchdata's loader, batching itself, drops the rows of the
    batch it was collecting when the dataset raised, so there batches are made by ``ds.batch()``;
    ours puts the pipeline back where that batch began, so it may batch itself too."""
    pytest.importorskip("torch")
    tdl = pytest.importorskip("torchdata.stateful_dataloader")
    loader_class = ri.StatefulDataLoader if ours else tdl.StatefulDataLoader
    batch_in_pipeline = num_workers == 0 and not ours

    def pipeline(fault):
        ds = ri.interleave_datasets([faulty(map=fault), other(n=6)], probabilities=P, seed=9,
                                    stopping_strategy="all_exhausted").map(scribble)
        return ds.batch(3) if batch_in_pipeline else ds

    def loader(ds):
        if batch_in_pipeline:
            return loader_class(ds, batch_size=None, collate_fn=lambda b: b["id"])
        return loader_class(ds, batch_size=3, num_workers=num_workers,
                            collate_fn=lambda b: [ex["id"] for ex in b])

    def ids(batches):
        return [i for b in batches for i in b]

    full = ids(loader(pipeline(Fault())))
    for k in (0, 5) if num_workers else (0, 4, 9, 13):
        ld = loader(pipeline(Fault(k)))
        got = []
        with pytest.raises(Boom):
            for b in ld:
                got.append(b)
        state = pickle.loads(pickle.dumps(ld.state_dict()))  # as torch.save would keep it
        resumed = loader(pipeline(Fault()))
        resumed.load_state_dict(state)
        assert ids(got) + ids(resumed) == full, f"fault at {k}"



@pytest.mark.parametrize("ours", [False, True])
def test_a_rank_with_persistent_workers_resumes_after_an_error_into_the_next_epoch(ours):
    """The user pattern where users run it: rank 1 of 2 (``split_dataset_by_node``), persistent
    workers, a map that raises under a shuffle buffer and a formatted batch. The trainer catches
    the error, keeps ``loader.state_dict()``, rebuilds loader and pipeline with the function fixed
    and loads it: the rest of the epoch is the uninterrupted run's (the failed example included,
    computed by the fixed function), and so is the next epoch."""
    pytest.importorskip("torch")
    tdl = pytest.importorskip("torchdata.stateful_dataloader")
    loader_class = ri.StatefulDataLoader if ours else tdl.StatefulDataLoader

    def pipeline(fault):
        ds = ri.interleave_datasets([faulty(map=fault, batched=False), other(n=6)], probabilities=P, seed=2,
                                    stopping_strategy="all_exhausted").shuffle(seed=5, buffer_size=3)
        return ri.split_dataset_by_node(ds.batch(2).with_format("numpy"), rank=1, world_size=2)

    def ids(ds, loader, epochs, out):
        for epoch in epochs:
            ds.set_epoch(epoch)
            out.extend((epoch, int(i)) for b in loader for i in b["id"])
        return out

    def loader(ds):
        return loader_class(ds, batch_size=None, num_workers=2, persistent_workers=True)

    ds = pipeline(Fault())
    full = ids(ds, loader(ds), (0, 1), [])
    ds = pipeline(Fault(7))
    failing = loader(ds)
    got = []
    with pytest.raises(Boom):
        ids(ds, failing, (0, 1), got)
    state = pickle.loads(pickle.dumps(failing.state_dict()))  # as torch.save would keep it
    fixed = pipeline(Fault())
    resumed = loader(fixed)
    resumed.load_state_dict(state)
    assert ids(fixed, resumed, (0, 1), got) == full

def test_our_loader_without_workers_keeps_the_rows_of_the_batch_that_raised():
    """``ri.StatefulDataLoader(num_workers=0)`` batching itself: whichever call of the function
    raises (first, middle or last row of a batch, or a batch over a shuffle whose buffered examples
    a map edits in place), the loader's state and the dataset's, taken after the error and loaded
    (JSON round trip) into a fixed pipeline, give the rest of the uninterrupted run; the same
    dataset object, loaded in place, too. torchdata's own loader loses those rows (shown)."""
    pytest.importorskip("torch")
    tdl = pytest.importorskip("torchdata.stateful_dataloader")

    def pipeline(fault, shuffled):
        ds = faulty(map=fault)
        if shuffled:
            ds = ds.shuffle(seed=3, buffer_size=4).map(scribble)
        return ds

    def ids(loader):
        return [i for b in loader for i in b]

    collate = lambda b: [ex["id"] for ex in b]  # noqa: E731
    for shuffled in (False, True):
        full = ids(ri.StatefulDataLoader(pipeline(Fault(), shuffled), batch_size=4, collate_fn=collate))
        for k in range(len(full)):
            for which in ("loader", "dataset", "in place"):
                ds = pipeline(Fault(k), shuffled)
                ld = ri.StatefulDataLoader(ds, batch_size=4, collate_fn=collate)
                got = []
                with pytest.raises(Boom):
                    for b in ld:
                        got.extend(b)
                where = f"fault at {k}, shuffled={shuffled}, {which}"
                if which == "loader":
                    resumed = ri.StatefulDataLoader(pipeline(Fault(), shuffled), batch_size=4, collate_fn=collate)
                    resumed.load_state_dict(pickle.loads(pickle.dumps(ld.state_dict())))
                    assert got + ids(resumed) == full, where
                elif which == "dataset":
                    fresh = pipeline(Fault(), shuffled)
                    fresh.load_state_dict(codec_roundtrip(ds.state_dict()))
                    assert got + [ex["id"] for ex in fresh] == full, where
                else:
                    ds.load_state_dict(ds.state_dict())  # the fault is spent: the same object goes on
                    assert got + ids(ld) == full, where
    # torchdata's loader, without the rewinding, loses the rows of the batch in progress
    full = ids(tdl.StatefulDataLoader(pipeline(Fault(), False), batch_size=4, collate_fn=collate))
    ds = pipeline(Fault(7), False)
    ld = tdl.StatefulDataLoader(ds, batch_size=4, collate_fn=collate)
    got = []
    with pytest.raises(Boom):
        for b in ld:
            got.extend(b)
    resumed = tdl.StatefulDataLoader(pipeline(Fault(), False), batch_size=4, collate_fn=collate)
    resumed.load_state_dict(ld.state_dict())
    # the map raised on the third row of the second batch (the batched map above it reads that
    # row again): the first two are lost
    assert (got, ids(resumed)) == (full[:4], full[6:])


def test_async_map_below_a_replay_shuffle_is_re_derived_on_resume():
    """Resuming a replay-mode shuffle re-runs the function on the buffered rows outside any
    iteration of the map: the async function is awaited there too."""
    full = assert_resumes_exactly(
        lambda: other(n_shards=3, n=6).map(slow_double).shuffle(seed=4, buffer_size=5, buffer_state="replay"),
        roundtrip=codec_roundtrip, max_cuts=6)
    assert sorted(x["y"] for x in full) == sorted(x["id"] * 2 for x in other(n_shards=3, n=6))


class Interrupt(Fault):
    """Ctrl-C at the ``at``-th hit: a ``KeyboardInterrupt`` is not an ``Exception``."""

    def hit(self) -> None:
        try:
            super().hit()
        except Boom:
            raise KeyboardInterrupt from None


@pytest.mark.parametrize("name", ["plain", "batch", "interleave_p_all", "concat1_second", "batched_map_of_concat"])
def test_a_state_saved_on_ctrl_c_continues_exactly(name):
    counters = {k: Fault() for k in KINDS}
    full = [normalize(x) for x in build(name, counters)]
    for kind in KINDS:
        for k in range(0, counters[kind].hits, 3):
            ds = build(name, {kind: Interrupt(k)})
            head = []
            with pytest.raises(KeyboardInterrupt):
                for x in ds:
                    head.append(normalize(x))
            check_state_after_error(name, full, ds, head, f"Ctrl-C in the {kind} at hit {k}")


@pytest.mark.parametrize("name", ["batch", "interleave_p_all", "concat1_second", "batched_map_of_concat", "repeat"])
def test_iterating_again_without_loading_starts_a_new_pass(name):
    """As after any partial iteration (and as in HF): a new ``for`` loop over the dataset is a new
    pass; to continue, load the state taken after the error (done in every test above)."""
    full = [normalize(x) for x in build(name)]
    ds = build(name, {"map": Fault(7)})
    head, raised = run_until_error(ds)
    assert raised and head == full[:len(head)]
    assert [normalize(x) for x in ds] == full
    state = ds.state_dict()  # taken after that full pass: nothing left
    resumed = build(name)
    resumed.load_state_dict(codec_roundtrip(state))
    assert list(resumed) == []


# ---------------------------------------------------------------------- random pipelines, failing sources


@contextlib.contextmanager
def failing_sources(fault: Fault, every_node: bool = False):
    """Every source (or every node) of the pipelines iterated inside raises through ``fault``:
    before each example is pulled from a source (of any kind: HF, Arrow, generator, Parquet),
    ``fault.hit()`` - as a generator or a file read failing at that row. With ``every_node``, the
    pulls from every node count: whatever raises below any node."""
    from resumable_iterable.nodes.base import Node
    from resumable_iterable.nodes.source import SourceNode

    cls = Node if every_node else SourceNode
    inherited = Node.__iter__

    def iterate(self):
        inner = inherited(self)

        def pull():
            while True:
                fault.hit()
                try:
                    ex = next(inner)
                except StopIteration:
                    return
                yield ex

        return pull()

    cls.__iter__ = iterate
    try:
        yield
    finally:
        cls.__iter__ = inherited
        if cls is SourceNode:
            del SourceNode.__iter__  # inherited again


@pytest.mark.parametrize("every_node", [False, True], ids=["failing_source", "failing_any_node"])
def test_random_pipelines_with_a_failing_source_resume_exactly(capsys, every_node):
    """The random pipelines of ``test_properties.py`` (every node kind, nested combinators), a
    source (or any node) failing at random positions: the state taken after the exception
    resumes exactly."""
    from hypothesis import given
    from hypothesis import strategies as hst

    from test_properties import build as build_recipe
    from test_properties import pipelines

    stats = {"pipelines": 0, "faults": 0, "examples": 0}

    @given(recipe=pipelines(), data=hst.data())
    def prop(recipe, data):
        counter = Fault()
        with failing_sources(counter, every_node):
            full = [normalize(x) for x in build_recipe(recipe)]
        stats["pipelines"] += 1
        stats["examples"] += len(full)
        if not counter.hits:  # no source is ever read (take(0) and the like)
            return
        ks = data.draw(hst.lists(hst.integers(0, counter.hits - 1), min_size=1, max_size=4, unique=True))
        for k in ks:
            with failing_sources(Fault(k), every_node):
                ds = build_recipe(recipe)
                head, raised = run_until_error(ds)
                state = codec_roundtrip(ds.state_dict())
            if not raised:  # the pull failed read ahead past the end (an async map's calls): nothing lost
                assert head == full
                continue
            assert head == full[:len(head)]
            resumed = build_recipe(recipe)
            resumed.load_state_dict(state)
            tail = [normalize(x) for x in resumed]
            assert head + tail == full, f"source failing at pull {k}: {len(head)} + {len(tail)} != {len(full)}"
            stats["faults"] += 1

    prop()
    with capsys.disabled():
        print(f"\n[errors] random pipelines: {stats['pipelines']} composed, {stats['examples']} examples, "
              f"{stats['faults']} {'node' if every_node else 'source'} failures resumed")


def test_a_map_retrying_an_interleaved_example_under_a_replay_shuffle():
    """The map holds the interleave's example it raised on; resumed, the replay-mode shuffle above
    asks where that example came from: the interleave keeps it in its state (``last_pos``)."""

    def pipeline(fault):
        def f(ex):
            fault.hit()
            return {"y": ex["id"] % 7}

        mixed = ri.interleave_datasets([other(), other(2000, n=3)], probabilities=P, seed=3,
                                       stopping_strategy="all_exhausted")
        return mixed.map(f).shuffle(seed=1, buffer_size=4, buffer_state="replay")

    counter = Fault()
    full = [normalize(x) for x in pipeline(counter)]
    for k in range(counter.hits):
        ds = pipeline(Fault(k))
        head, raised = run_until_error(ds)
        assert raised
        resumed = pipeline(Fault())
        resumed.load_state_dict(codec_roundtrip(ds.state_dict()))
        assert head + [normalize(x) for x in resumed] == full, f"fault at {k}"


def test_a_map_retrying_the_output_of_a_nested_replay_shuffle():
    """Same with a nested replay-mode shuffle: it keeps where its last example came from (``last``)."""

    def pipeline(fault):
        def f(ex):
            fault.hit()
            return {"y": ex["id"] % 7}

        inner = other(n_shards=3, n=5).shuffle(seed=2, buffer_size=3, buffer_state="replay")
        return inner.map(f).shuffle(seed=1, buffer_size=4, buffer_state="replay")

    counter = Fault()
    full = [normalize(x) for x in pipeline(counter)]
    for k in range(counter.hits):
        ds = pipeline(Fault(k))
        head, raised = run_until_error(ds)
        assert raised
        resumed = pipeline(Fault())
        resumed.load_state_dict(codec_roundtrip(ds.state_dict()))
        it = iter(resumed)
        more = [normalize(x) for x in itertools.islice(it, 2)]
        # the outer buffer now holds the retried example: resume once more from there
        again = pipeline(Fault())
        again.load_state_dict(codec_roundtrip(resumed.state_dict()))
        assert head + more + [normalize(x) for x in again] == full, f"fault at {k}"


class _Flaky:
    """A value whose first use raises (a lazily fetched array, a remote key...): ``tolist()`` for
    pack, comparing it for batch(by_column=)."""

    failures = 0

    def __init__(self, value):
        self.value = value

    def _once(self):
        if _Flaky.failures:
            _Flaky.failures -= 1
            raise OSError("fetching the value failed")

    def tolist(self):
        self._once()
        return list(self.value)

    def __eq__(self, other):
        self._once()
        return self.value == (other.value if isinstance(other, _Flaky) else other)

    def __hash__(self):
        return hash(self.value)


def _pack_or_group(node: str, flaky_at: int | None) -> ri.IterableDataset:
    ds = ri.IterableDataset.from_dict({"id": list(range(12))})
    if node == "batch_by_column":
        return ds.map(lambda ex: {"g": _Flaky(ex["id"] // 3) if ex["id"] == flaky_at else ex["id"] // 3}
                      ).batch(by_column="g")
    ds = ds.map(lambda ex: {"input_ids": (_Flaky if ex["id"] == flaky_at else list)([ex["id"]] * (1 + ex["id"] % 3))})
    return ds.pack(4, position_ids=node == "pack_positions")


@pytest.mark.parametrize("node", ["pack", "pack_positions", "batch_by_column"])
def test_the_example_pack_or_batch_by_column_raised_on_is_taken_in_first_on_resume(node):
    """pack and batch(by_column=) read an example before they can fail on it: a state taken after the
    error holds it (``retry``) instead of counting it consumed, and resuming takes it in first (it was
    lost); one that fails again raises again. A state of an earlier release (no ``retry``) loads."""
    expected = [normalize(x) for x in _pack_or_group(node, None)]
    for flaky_at in (0, 4, 11):
        _Flaky.failures = 1
        ds = _pack_or_group(node, flaky_at)
        head = []
        with pytest.raises(OSError):
            for x in ds:
                head.append(normalize(x))
        state = ds.state_dict()
        assert len(state["state"]["retry"]) == 1
        again = _pack_or_group(node, flaky_at)
        again.load_state_dict(state)
        assert head + [normalize(x) for x in again] == expected, flaky_at
        # fails again: raises again, and the state still holds it
        _Flaky.failures = 1
        again = _pack_or_group(node, flaky_at)
        again.load_state_dict(state)
        with pytest.raises(OSError):
            list(again)
        assert len(again.state_dict()["state"]["retry"]) == 1
    # a state without 'retry' (an earlier release) loads and resumes
    ds = _pack_or_group(node, None)
    it = iter(ds)
    head = [normalize(next(it)) for _ in range(2)]
    old = json.loads(json.dumps(ds.state_dict()))
    del old["state"]["retry"]
    again = _pack_or_group(node, None)
    again.load_state_dict(old)
    assert head + [normalize(x) for x in again] == expected


def test_the_retried_example_of_batch_by_column_is_a_copy_a_loaded_state_keeps_unchanged():
    """batch(by_column=) puts the example it retries into a batch: a state that holds it (taken after
    the error, then loaded) kept the very example, and in-place edits of the resumed batches changed
    that state (a second resume from it then yielded the edit)."""

    def pipeline(flaky_at):
        ds = ri.IterableDataset.from_dict({"id": list(range(12))})
        return ds.map(lambda ex: {"g": _Flaky(ex["id"] // 3) if ex["id"] == flaky_at else ex["id"] // 3,
                                  "tags": [ex["id"]]}).batch(by_column="g")

    _Flaky.failures = 1
    ds = pipeline(4)
    head = []
    with pytest.raises(OSError):
        for b in ds:
            head.append(normalize(b))
    state = ds.state_dict()
    assert state["state"]["retry"][0]["tags"] == [4]
    for _ in range(2):  # the second resume reads the state the first one left
        again = pipeline(4)
        again.load_state_dict(state)
        rest = []
        for b in again:
            rest.append(normalize(b))
            for tags in b["tags"]:
                tags.append(-1)
        assert state["state"]["retry"][0]["tags"] == [4]
        assert [tags for b in head + rest for tags in b["tags"]] == [[i] for i in range(12)]


def test_our_loader_without_workers_keeps_the_batch_that_raised_after_an_elastic_resume():
    """A state saved with 2 workers, loaded into ``ri.StatefulDataLoader(num_workers=0)`` (an elastic
    plan), whose pipeline then raises at every possible call: the state taken after the error,
    loaded into a fixed pipeline, still yields every example exactly once in all."""
    pytest.importorskip("torchdata.stateful_dataloader")
    collate = lambda b: [ex["id"] for ex in b]  # noqa: E731

    def pipeline(fault):
        return faulty(map=fault).shuffle(seed=1, buffer_size=3)

    def loader(fault, num_workers=0):
        return ri.StatefulDataLoader(pipeline(fault), batch_size=2, num_workers=num_workers, collate_fn=collate)

    full = sorted(i for b in loader(Fault()) for i in b)
    ld = loader(Fault(), num_workers=2)
    head = [i for b in itertools.islice(ld, 1) for i in b]
    saved = pickle.dumps(ld.state_dict())
    raised = 0
    for k in range(12):
        got = list(head)
        ld = loader(Fault(k))
        ld.load_state_dict(pickle.loads(saved))
        try:
            for b in ld:
                got += b
        except Boom:
            raised += 1
            again = loader(Fault())
            again.load_state_dict(pickle.loads(pickle.dumps(ld.state_dict())))
            got += [i for b in again for i in b]
        assert sorted(got) == full, f"fault at {k}"
    assert raised >= 8


# ---------------------------------------------------------------------- a real Ctrl-C in a node's own code


@contextlib.contextmanager
def ctrl_c_after(module: str, frame_name: str, call: str, nth: int):
    """A Ctrl-C (SIGINT) is raised as the next call returns: raise ``KeyboardInterrupt`` as the
    ``nth`` call (from 0) of the C function ``call`` (``None``: any) made in function ``frame_name``
    of the node module ``module`` returns."""
    import sys

    seen = [0]

    def profile(frame, event, arg):
        code = frame.f_code
        if (event == "c_return" and code.co_name == frame_name and call in (None, getattr(arg, "__name__", ""))
                and code.co_filename.endswith(f"nodes/{module}.py")):
            seen[0] += 1
            if seen[0] - 1 == nth:
                raise KeyboardInterrupt

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


class _Touchy(dict):
    """An example whose copy raises once (as a Ctrl-C landing on ``dict(example)`` in ``map``)."""
    armed = [True]

    def keys(self):
        if self.armed[0]:
            self.armed[0] = False
            raise KeyboardInterrupt
        return super().keys()

    def __iter__(self):
        return iter(self.keys())


def _touchy_rows(n):
    for i in range(n):
        yield _Touchy(id=i) if i == 5 else {"id": i}


@pytest.mark.parametrize("where", ["map_copy", "batch_clear", "interleave_block"])
def test_a_ctrl_c_in_the_bookkeeping_of_a_node_loses_nothing(where):
    """Where a node's own code (not a user function) is interrupted between taking an example and
    recording it: ``map`` copying the input, ``batch`` emptying its rows, an interleave drawing its
    next block of random turns (its state took the new generator state before the block was drawn,
    so a resume skipped a whole block of draws)."""
    _Touchy.armed[0] = False
    if where == "map_copy":
        build = lambda: ri.IterableDataset.from_generator(_touchy_rows, gen_kwargs={"n": 12}).map(  # noqa: E731
            lambda ex: {"y": ex["id"]})
        hook = contextlib.nullcontext()
    elif where == "batch_clear":  # every call the batch's loop makes (emptying its rows was one)
        build = lambda: other(n_shards=2, n=7).batch(3)  # noqa: E731
        for nth in range(40):
            full = [normalize(x) for x in build()]
            ds = build()
            head = []
            with ctrl_c_after("batch", "_iter", None, nth) as seen:
                try:
                    for x in ds:
                        head.append(normalize(x))
                except KeyboardInterrupt:
                    pass
            resumed = build()
            resumed.load_state_dict(codec_roundtrip(ds.state_dict()))
            assert head + [normalize(x) for x in resumed] == full, f"Ctrl-C after call {nth} of the batch's loop"
            if seen[0] <= nth:
                break
        else:
            raise AssertionError("the batch's loop made more calls than tried")
        return
    else:
        build = lambda: ri.interleave_datasets([other(n_shards=2, n=700), other(5000, n_shards=2, n=700)],  # noqa: E731
                                               probabilities=P, seed=4)
        hook = ctrl_c_after("interleave", "_iter_plain", "tolist", 1)  # the second block, drawn after 1000 turns
    full = [normalize(x) for x in build()]
    _Touchy.armed[0] = True
    ds = build()
    head = []
    with hook, pytest.raises(KeyboardInterrupt):
        for x in ds:
            head.append(normalize(x))
    resumed = build()
    # the kept example is a dict subclass (_Touchy), which the codec refuses (it would come back a dict)
    roundtrip = json_roundtrip if where == "map_copy" else codec_roundtrip
    resumed.load_state_dict(roundtrip(ds.state_dict()))
    tail = [normalize(x) for x in resumed]
    assert head + tail == full, f"{len(head)} + {len(tail)} examples, expected {len(full)}"
