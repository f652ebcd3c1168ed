"""Property tests: random pipelines composed from every node resume exactly at every cut point.

Hypothesis draws a *recipe* (plain data: sources, operations, combinators, parameters) and
:func:`build` turns it into a fresh pipeline as often as the exactness harness needs. Sources
have random shard counts and lengths, empty shards included (HF ``Dataset``, ``pyarrow.Table``,
generator, Parquet files); operations are ``map``/``filter`` per example or batched (with indices,
in place, changing row counts), column operations, ``skip``/``take``/``repeat`` (also forever,
then ``take``), ``shuffle`` with buffers from 1 to larger than the data in both exact modes
(``"examples"`` and ``"replay"``), ``batch``, ``interleave_datasets`` with each stopping strategy
with and without probabilities, ``concatenate_datasets`` on both axes, ``shard``,
``split_dataset_by_node`` and ``set_epoch``.

The bounded ``ci`` profile (the default, see conftest.py) runs 40 pipelines per property;
``HYPOTHESIS_PROFILE=soak`` runs 2000. Each test prints how many pipelines it composed.
"""

from __future__ import annotations

import atexit
import collections
import functools
import os
import shutil
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_iterable as ri
from harness import assert_resume_chain, assert_resumes_exactly, codec_roundtrip, json_roundtrip

pytestmark = pytest.mark.slow  # bounded in CI by the "ci" profile; `make soak` runs the "soak" profile

STATS: collections.Counter = collections.Counter()

# --------------------------------------------------------------------------- deterministic functions


def _num(v) -> int:
    """A deterministic integer summarising any example value (robust to missing columns and batches)."""
    if v is None:
        return 0
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        return len(v) + sum(map(ord, v[-2:]))
    if isinstance(v, (list, tuple)):
        return sum(_num(x) for x in v)
    if isinstance(v, dict):
        return sum(_num(x) for x in v.values())
    return 0


def _rows(batch: dict) -> list[dict]:
    cols = list(batch)
    n = len(batch[cols[0]]) if cols else 0
    return [{c: batch[c][j] for c in cols} for j in range(n)]


def f_add(ex, name, k):
    return {name: _num(ex) % 97 + k}


async def f_async_add(ex, name, k):  # its calls run up to 1000 at once (map.py, calls.py)
    return {name: _num(ex) % 97 + k}


def f_index(ex, i, name, k):
    return {name: i * 7 + k}


def f_inplace(ex, name, k):
    ex[name] = _num(ex) % 13 + k  # edits the copy it receives and returns None


def f_batched_add(batch, name, k):
    return {name: [_num(r) % 89 + k for r in _rows(batch)]}


def f_batched_index(batch, idx, name, k):
    return {name: [i * 3 + k for i in idx]}


def f_batched_rows(batch, k):
    """Changes the row count: each row 0, 1 or 2 times."""
    rows = [r for r in _rows(batch) for _ in range((_num(r) + k) % 3)]
    return {c: [r[c] for r in rows] for c in batch}


def p_mod(ex, m, r):
    return _num(ex) % m != r


def p_index(ex, i, k):
    return (i + k) % 3 != 0


def p_batched(batch, m, r):
    return [_num(row) % m != r for row in _rows(batch)]


# --------------------------------------------------------------------------- sources


@functools.lru_cache(maxsize=None)
def _hf(n: int, tag: int) -> Dataset:
    return Dataset.from_dict({"id": [tag * 10_000 + i for i in range(n)], "x": [f"s{tag}-{i}" for i in range(n)]})


@functools.lru_cache(maxsize=None)
def _table(n: int, tag: int) -> pa.Table:
    return pa.table({"id": pa.array([tag * 10_000 + i for i in range(n)], pa.int64()),
                     "x": pa.array([f"t{tag}-{i}" for i in range(n)], pa.string())})


def _gen(shard, n, tag):
    for s, k in zip(shard, n):
        for i in range(k):
            yield {"id": tag * 10_000 + s * 100 + i, "x": f"g{tag}-{s}-{i}"}


_DIR = tempfile.mkdtemp(prefix="ri-properties-")
atexit.register(shutil.rmtree, _DIR, True)


@functools.lru_cache(maxsize=None)
def _parquet(lengths: tuple, tag: int) -> list[str]:
    paths = []
    for s, n in enumerate(lengths):
        path = os.path.join(_DIR, f"p{tag}-{s}-{n}.parquet")
        rows = pa.table({"id": pa.array([tag * 10_000 + s * 100 + i for i in range(n)], pa.int64()),
                         "x": pa.array([f"p{tag}-{s}-{i}" for i in range(n)], pa.string())})
        pq.write_table(rows, path, row_group_size=3)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- recipes

COLS = ("id", "x")


@st.composite
def sources(draw, tag):
    kind = draw(st.sampled_from(["hf", "table", "gen", "parquet"]))
    if kind in ("hf", "table"):
        n = draw(st.one_of(st.integers(0, 3), st.integers(4, 60)))
        shards = draw(st.integers(1, max(1, min(n, 4))))
        recipe = (kind, n, shards, tag)
        nshards = shards
    else:
        lengths = tuple(draw(st.lists(st.one_of(st.just(0), st.integers(1, 25)), min_size=1, max_size=4)))
        recipe = (kind, lengths, tag)
        nshards = len(lengths)
    if nshards > 1 and draw(st.integers(0, 4)) == 0:
        groups = draw(st.integers(2, nshards))
        recipe = ("shard", groups, draw(st.integers(0, groups - 1)), draw(st.booleans()), recipe)
    return recipe, frozenset(COLS)


@st.composite
def operations(draw, child, uid):
    """One operation over ``child`` = (recipe, guaranteed columns)."""
    recipe, cols = child
    op = draw(st.sampled_from(["map", "map", "filter", "cols", "skip", "take", "repeat", "shuffle", "shuffle",
                               "batch"]))
    k = draw(st.integers(0, 5))
    name = f"c{uid}"
    if op == "map":
        kind = draw(st.sampled_from(["add", "async_add", "index", "inplace", "batched_add", "batched_index",
                                     "batched_rows"]))
        batch_size = draw(st.sampled_from([1, 2, 3, 7, 1000]))
        return ("map", kind, name, k, batch_size, draw(st.booleans()), recipe), (
            cols if kind == "batched_rows" else cols | {name})
    if op == "filter":
        kind = draw(st.sampled_from(["mod", "index", "batched"]))
        return ("filter", kind, draw(st.integers(2, 5)), k % 2, draw(st.sampled_from([1, 3, 8])), recipe), cols
    if op == "cols":
        avail = sorted(cols)
        choices = ["rename"] + (["select"] if avail else []) + (["remove"] if len(avail) >= 2 else [])
        if not avail:
            return ("take", 30, recipe), cols
        kind = draw(st.sampled_from(choices))
        if kind == "rename":
            old = draw(st.sampled_from(avail))
            return ("cols", "rename", {old: name}, recipe), (cols - {old}) | {name}
        if kind == "select":
            keep = draw(st.lists(st.sampled_from(avail), min_size=1, unique=True))
            return ("cols", "select", keep, recipe), frozenset(keep)
        drop = draw(st.sampled_from(avail))
        return ("cols", "remove", [drop], recipe), cols - {drop}
    if op == "skip":
        return ("skip", draw(st.integers(0, 12)), recipe), cols
    if op == "take":
        return ("take", draw(st.integers(0, 40)), recipe), cols
    if op == "repeat":
        times = draw(st.sampled_from([0, 1, 2, 3, None]))
        return ("repeat", times, draw(st.integers(1, 45)), recipe), cols
    if op == "shuffle":
        size = draw(st.sampled_from([1, 2, 5, 16, 1000]))
        mode = draw(st.sampled_from(["examples", "replay", "replay"]))
        return ("shuffle", draw(st.integers(0, 2**32)), size, mode, recipe), cols
    return ("batch", draw(st.integers(1, 6)), draw(st.booleans()), recipe), cols


def _aligned_kids(kids: list) -> list:
    """The first of ``kids`` and each later one whose features align with those kept (a batched input
    beside rows types a column as a list of it, refused by interleave / concatenate as by HF)."""
    kept = kids[:1]
    for kid in kids[1:]:
        try:
            ri.concatenate_datasets([build(r) for r, _ in kept + [kid]])
        except ValueError as e:
            if "can't be aligned" not in str(e):
                raise
            continue
        kept.append(kid)
    return kept


@st.composite
def pipelines(draw, depth=0, counter=None):
    counter = counter if counter is not None else [0]

    def uid():
        counter[0] += 1
        return counter[0]

    roll = draw(st.integers(0, 9))
    if depth >= 2 or roll < 5:
        node = draw(sources(uid()))
    else:
        kids = draw(st.lists(pipelines(depth + 1, counter), min_size=1 if roll < 8 else 2, max_size=3))
        axis1 = roll >= 8 and draw(st.booleans()) and sum(1 for _, c in kids if c) >= 2
        if not axis1:  # interleave, concatenate(axis=0): their features must align
            kids = _aligned_kids(kids)
        if roll < 8:
            strategy = draw(st.sampled_from(["first_exhausted", "all_exhausted", "all_exhausted_without_replacement"]))
            probs = None
            if draw(st.booleans()):
                w = draw(st.lists(st.integers(1, 5), min_size=len(kids), max_size=len(kids)))
                probs = [x / sum(w) for x in w]
            cols = frozenset.intersection(*[c for _, c in kids])
            node = ("interleave", [r for r, _ in kids], probs, draw(st.integers(0, 1000)), strategy), cols
        else:
            usable = [(r, c) for r, c in kids if c]
            if axis1:
                # axis 1: columns must not clash, so each input keeps its guaranteed columns under new names
                parts = []
                for j, (r, c) in enumerate(usable):
                    u = uid()
                    parts.append(("cols", "rename", {col: f"{col}_{u}" for col in sorted(c)},
                                  ("cols", "select", sorted(c), r)))
                node = ("concat", 1, parts), frozenset()
            else:
                node = ("concat", 0, [r for r, _ in kids]), frozenset.intersection(*[c for _, c in kids])
    for _ in range(draw(st.integers(0, 3 if depth == 0 else 2))):
        node = draw(operations(node, uid()))
    if depth == 0:
        recipe, _ = node
        top = draw(st.sampled_from([None, None, None, "split", "epoch"]))
        if top == "split":
            return ("split", draw(st.integers(2, 3)), draw(st.integers(0, 1)), recipe)
        if top == "epoch":
            return ("epoch", draw(st.integers(1, 4)), recipe)
        return recipe
    return node


# --------------------------------------------------------------------------- building

#: a replay-mode shuffle over a subtree replay refuses becomes a stored-buffer one (False: raise)
FALLBACK = [True]


def build(recipe) -> ri.IterableDataset:
    kind = recipe[0]
    if kind == "hf":
        _, n, shards, tag = recipe
        return ri.to_iterable_dataset(_hf(n, tag), num_shards=shards)
    if kind == "table":
        _, n, shards, tag = recipe
        return ri.IterableDataset.from_arrow_table(_table(n, tag), num_shards=shards)
    if kind == "gen":
        _, lengths, tag = recipe
        return ri.IterableDataset.from_generator(_gen, gen_kwargs={"shard": list(range(len(lengths))),
                                                                   "n": list(lengths), "tag": tag})
    if kind == "parquet":
        _, lengths, tag = recipe
        return ri.IterableDataset.from_parquet(_parquet(lengths, tag))
    if kind == "shard":
        _, groups, index, contiguous, child = recipe
        return build(child).shard(groups, index, contiguous=contiguous)
    if kind == "map":
        _, fk, name, k, batch_size, drop_last, child = recipe
        ds = build(child)
        if fk == "add":
            return ds.map(functools.partial(f_add, name=name, k=k))
        if fk == "async_add":
            return ds.map(functools.partial(f_async_add, name=name, k=k))
        if fk == "index":
            return ds.map(functools.partial(f_index, name=name, k=k), with_indices=True)
        if fk == "inplace":
            return ds.map(functools.partial(f_inplace, name=name, k=k))
        if fk == "batched_add":
            return ds.map(functools.partial(f_batched_add, name=name, k=k), batched=True, batch_size=batch_size,
                          drop_last_batch=drop_last)
        if fk == "batched_index":
            return ds.map(functools.partial(f_batched_index, name=name, k=k), batched=True, with_indices=True,
                          batch_size=batch_size)
        return ds.map(functools.partial(f_batched_rows, k=k), batched=True, batch_size=batch_size)
    if kind == "filter":
        _, fk, m, r, batch_size, child = recipe
        ds = build(child)
        if fk == "mod":
            return ds.filter(functools.partial(p_mod, m=m, r=r))
        if fk == "index":
            return ds.filter(functools.partial(p_index, k=m), with_indices=True)
        return ds.filter(functools.partial(p_batched, m=m, r=r), batched=True, batch_size=batch_size)
    if kind == "cols":
        _, op, arg, child = recipe
        ds = build(child)
        return {"rename": ds.rename_columns, "select": ds.select_columns, "remove": ds.remove_columns}[op](arg)
    if kind == "skip":
        return build(recipe[2]).skip(recipe[1])
    if kind == "take":
        return build(recipe[2]).take(recipe[1])
    if kind == "repeat":
        _, times, bound, child = recipe
        ds = build(child).repeat(times)
        return ds.take(bound) if times is None else ds
    if kind == "shuffle":
        _, seed, size, mode, child = recipe
        ds = build(child)
        try:
            return ds.shuffle(seed=seed, buffer_size=size, buffer_state=mode)
        except ValueError as e:
            assert mode == "replay" and "cannot re-read its buffer through" in str(e)
            if not FALLBACK[0]:
                raise
            return ds.shuffle(seed=seed, buffer_size=size, buffer_state="examples")
    if kind == "batch":
        return build(recipe[3]).batch(recipe[1], drop_last_batch=recipe[2])
    if kind == "interleave":
        _, kids, probs, seed, strategy = recipe
        return ri.interleave_datasets([build(k) for k in kids], probabilities=probs, seed=seed,
                                      stopping_strategy=strategy)
    if kind == "concat":
        _, axis, kids = recipe
        return ri.concatenate_datasets([build(k) for k in kids], axis=axis)
    if kind == "split":
        _, world, rank, child = recipe
        return ri.split_dataset_by_node(build(child), rank=rank % world, world_size=world)
    if kind == "epoch":
        ds = build(recipe[2])
        ds.set_epoch(recipe[1])
        return ds
    raise AssertionError(recipe)


def _count_nodes(ds: ri.IterableDataset) -> None:
    for node in ds._node.walk():
        STATS[f"node:{node.kind}"] += 1
        if node.kind == "shuffle":
            STATS[f"shuffle:{node.buffer_state}"] += 1
        if node.kind == "interleave":
            STATS[f"interleave:{node.stopping_strategy}{'+p' if node.probabilities else ''}"] += 1
        if node.kind == "concat":
            STATS[f"concat:axis{node.axis}"] += 1
        if node.kind in ("map", "filter"):
            STATS[f"{node.kind}:{'batched' if node.batched else 'per-example'}"] += 1


def _report(capsys, what: str) -> None:
    with capsys.disabled():
        print(f"\n[properties] {what}: {STATS['pipelines']} pipelines composed, {STATS['examples']} examples "
              f"checked ({STATS['empty']} pipelines yielded nothing), {STATS['cuts']} cut points resumed")
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(STATS.items()) if ":" in k)
        print(f"[properties] nodes: {kinds}")


def _check(recipe, roundtrip, chain: list[int] | None = None) -> None:
    ds = build(recipe)
    _count_nodes(ds)
    n = sum(1 for _ in build(recipe))
    cuts = 12 if n <= 150 else 6
    full = assert_resumes_exactly(lambda: build(recipe), max_cuts=cuts, roundtrip=roundtrip)
    STATS["pipelines"] += 1
    STATS["empty"] += not full
    STATS["examples"] += len(full)
    STATS["cuts"] += min(len(full) + 1, cuts + 4)
    if chain:
        steps, left = [], len(full)
        for s in chain:
            steps.append(s % (left + 1))
            left -= steps[-1]
        assert_resume_chain(lambda: build(recipe), steps, roundtrip=roundtrip)


@given(recipe=pipelines(), data=st.data())
def _prop_json(recipe, data):
    chain = data.draw(st.lists(st.integers(0, 40), min_size=2, max_size=4)) if data.draw(st.booleans()) else None
    _check(recipe, json_roundtrip, chain)


@given(recipe=pipelines())
def _prop_codec(recipe):
    _check(recipe, codec_roundtrip)


def test_random_pipelines_resume_exactly_at_every_cut_point(capsys):
    STATS.clear()
    _prop_json()
    _report(capsys, "JSON round trip")
    assert STATS["pipelines"] >= min(30, settings().max_examples)
    assert STATS["shuffle:replay"] > 0


def test_random_pipelines_resume_exactly_through_the_state_codec(capsys):
    STATS.clear()
    _prop_codec()
    _report(capsys, "save_state codec")
    assert STATS["pipelines"] >= 10


@st.composite
def replay_pipelines(draw):
    """Pipelines ending in a replay-mode shuffle over replayable nodes only (so none falls back)."""
    recipe = draw(pipelines())
    size = draw(st.sampled_from([1, 3, 8, 1000]))
    return ("shuffle", draw(st.integers(0, 2**32)), size, "replay", _replayable(recipe))


def _replayable(recipe):
    """Turn what replay refuses into what it accepts: batched map/filter into per-example ones,
    stored-buffer shuffles into replay ones, no batch."""
    kind = recipe[0]
    if kind in ("hf", "table", "gen", "parquet"):
        return recipe
    if kind == "map" and recipe[1].startswith("batched"):  # its per-example twin adds the same column
        twin = {"batched_add": "add", "batched_index": "index"}.get(recipe[1])
        return _replayable(recipe[-1]) if twin is None else ("map", twin, *recipe[2:-1], _replayable(recipe[-1]))
    if kind == "filter" and recipe[1] == "batched":
        return ("filter", "mod", *recipe[2:-1], _replayable(recipe[-1]))
    if kind == "batch":
        return _replayable(recipe[-1])
    if kind == "shuffle":
        return (*recipe[:3], "replay", _replayable(recipe[-1]))
    if kind in ("interleave", "concat"):
        kids = [_replayable(k) for k in recipe[1 if kind == "interleave" else 2]]
        if kind == "interleave":
            return ("interleave", kids, *recipe[2:])
        return ("concat", recipe[1], kids)
    if kind in ("split", "epoch"):
        return (*recipe[:-1], _replayable(recipe[-1]))
    return (*recipe[:-1], _replayable(recipe[-1]))


@given(recipe=replay_pipelines())
def _prop_replay(recipe):
    FALLBACK[0] = False
    try:
        ds = build(recipe)  # every node of a replayable recipe is accepted
    finally:
        FALLBACK[0] = True
    assert all(n.buffer_state == "replay" for n in ds._node.walk() if n.kind == "shuffle")
    _check(recipe, json_roundtrip)
    # same examples as the stored-buffer mode
    stored = ("shuffle", recipe[1], recipe[2], "examples", recipe[4])
    assert [x for x in build(recipe)] == [x for x in build(stored)]


def test_random_replay_buffers_resume_exactly_and_match_stored_buffers(capsys):
    STATS.clear()
    _prop_replay()
    _report(capsys, "replay-mode shuffle on top")
    assert STATS["pipelines"] >= 8


def test_recipes_cover_every_node_kind():
    """The strategy can draw every node kind (guards against a strategy that silently narrowed)."""
    seen = collections.Counter()

    @given(recipe=pipelines())
    @settings(max_examples=300, database=None)
    def draw(recipe):
        for node in build(recipe)._node.walk():
            seen[node.kind] += 1

    draw()
    expected = {"arrow", "generator", "files", "map", "filter", "columns", "skip", "take", "repeat", "shuffle",
                "batch", "interleave", "concat"}
    assert expected <= set(seen), expected - set(seen)
