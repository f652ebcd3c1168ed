"""Property tests: random pipelines composed from every node resume exactly at every cut point.

Hypothesis draws a *recipe* (plain data: sources, operations, combinators, parameters) and
:func:`build` turns it into a fresh pipeline as often as the exactness harness needs. Sources
have random shard counts and lengths, empty shards included (HF ``Dataset``, ``pyarrow.Table``,
generator, Parquet files), their columns and struct fields in drawn orders; operations are
``map``/``filter`` per example or batched (with indices, in place, editing nested values of the
input, returning numpy arrays, changing row counts), column operations (a name sometimes twice),
``skip``/``take``/``repeat`` (also forever, then ``take``), ``shuffle`` with buffers from 1 to
larger than the data in both exact modes (``"examples"`` and ``"replay"``) and the global one,
``batch``, ``pack``, ``prefetch``, ``reshard``, a step chained on an ``IterableDatasetDict``,
``interleave_datasets`` with each stopping strategy with and without probabilities,
``concatenate_datasets`` on both axes, ``shard``, ``split_dataset_by_node``, ``set_epoch``,
``with_format("numpy" | "torch")`` of rows or batches and ``.iter(batch_size)``; integer
arguments are sometimes numpy integers, 0-d arrays or one-element tensors. Examples are compared
with their column order (:func:`ordered`).

The bounded ``ci`` profile (the default, see conftest.py) runs 40 pipelines per property;
``HYPOTHESIS_PROFILE=soak`` runs 2000. Each test prints how many pipelines it composed.
"""

from __future__ import annotations

import atexit
import collections
import functools
import json
import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset
from datasets.table import InMemoryTable
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_iterable as ri
from harness import assert_resume_chain, assert_resumes_exactly, codec_roundtrip, normalize

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

pytestmark = [pytest.mark.slow,  # bounded in CI by the "ci" profile; `make soak` runs the "soak" profile
              # 2000 pipelines a property take longer than setup.cfg's 600 s per test on 2 cores
              pytest.mark.timeout(6 * 3600 if os.environ.get("HYPOTHESIS_PROFILE") == "soak" else 600)]

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
    if isinstance(v, np.ndarray):
        return int(np.nan_to_num(v.astype(np.float64)).sum()) if v.dtype.kind in "biuf" else _num(v.tolist())
    if isinstance(v, np.generic):
        return _num(v.item())
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


def f_numpy(ex, name, k):
    return {name: np.full(k % 3 + 1, _num(ex) % 11, dtype=np.float32 if k % 2 else np.int64)}


def f_batched_numpy(batch, name, k):
    return {name: [np.arange(k % 3 + 1, dtype=np.float32) + _num(r) % 11 for r in _rows(batch)]}


def f_mutate(ex):
    """Edits nested values of its input in place (a struct's field, an array, a list) and returns it."""
    for v in ex.values():
        if isinstance(v, dict):
            v["a"] = _num(v) % 5
        elif isinstance(v, np.ndarray) and v.dtype.kind in "iuf":
            v += 1
        elif isinstance(v, list):
            v.append(len(v) % 3)
    return ex


def f_ids(ex, name):
    """Token ids for ``pack``: 1 to 3 of them from the example."""
    n = _num(ex)
    return {name: [n % 50 + j for j in range(n % 3 + 1)]}


def f_split_add(ex, split, name, k):
    return {name: _num(ex) % 97 + k + len(split)}


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


def _row(ident: int, text: str, variant: tuple) -> dict:
    """A source row: ``id`` and ``x`` (in that order, or ``x`` first), and with ``variant``'s struct
    ``s`` its fields ``a``/``b`` in the drawn order (or ``a`` alone): inputs of a combination then list
    their columns and struct fields in different orders, which it yields in the merged order."""
    rev, struct = variant
    row = {"x": text, "id": ident} if rev else {"id": ident, "x": text}
    if struct:
        row["s"] = {f: (ident % 7 if f == "a" else text[-3:]) for f in struct}
    return row


@functools.lru_cache(maxsize=None)
def _hf(n: int, tag: int, variant: tuple = (False, None)) -> Dataset:
    if not n:
        return Dataset(InMemoryTable(_arrow([], variant)))
    return Dataset.from_list([_row(tag * 10_000 + i, f"s{tag}-{i}", variant) for i in range(n)])


def _arrow(rows: list, variant: tuple) -> pa.Table:
    if rows:
        return pa.Table.from_pylist(rows)
    cols = {"x": pa.array([], pa.string()), "id": pa.array([], pa.int64())} if variant[0] else \
        {"id": pa.array([], pa.int64()), "x": pa.array([], pa.string())}
    if variant[1]:
        cols["s"] = pa.array([], pa.struct([(f, pa.int64() if f == "a" else pa.string()) for f in variant[1]]))
    return pa.table(cols)


@functools.lru_cache(maxsize=None)
def _table(n: int, tag: int, variant: tuple = (False, None)) -> pa.Table:
    return _arrow([_row(tag * 10_000 + i, f"t{tag}-{i}", variant) for i in range(n)], variant)


def _gen(shard, n, tag, variant):
    for s, k, v in zip(shard, n, variant):  # lists of gen_kwargs are split among shards
        for i in range(k):
            yield _row(tag * 10_000 + s * 100 + i, f"g{tag}-{s}-{i}", tuple(v))


_DIR = tempfile.mkdtemp(prefix="ri-properties-")
atexit.register(shutil.rmtree, _DIR, True)


@functools.lru_cache(maxsize=None)
def _parquet(lengths: tuple, tag: int, variant: tuple = (False, None)) -> list[str]:
    paths = []
    for s, n in enumerate(lengths):
        path = os.path.join(_DIR, f"p{tag}-{s}-{n}-{int(variant[0])}{variant[1] or ''}.parquet")
        rows = _arrow([_row(tag * 10_000 + s * 100 + i, f"p{tag}-{s}-{i}", variant) for i in range(n)], variant)
        pq.write_table(rows, path, row_group_size=3)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- recipes

COLS = ("id", "x")
#: struct ``s`` of a source: none, its fields in either order, or one of them only
STRUCTS = (None, None, "ab", "ba", "a")


@st.composite
def ints(draw, lo, hi):
    """An integer argument, sometimes as a numpy or torch scalar (``#int``, made by :func:`_n`): the
    nodes take any integer a training script holds."""
    v = draw(st.integers(lo, hi))
    how = draw(st.sampled_from([None, None, None, "np", "np0d", "torch"]))
    return v if how is None or torch is None else ("#int", how, v)


def _n(v):
    """The value of an argument drawn by :func:`ints`, as the type it was drawn as."""
    if not (isinstance(v, tuple) and v and v[0] == "#int"):
        return v
    _, how, x = v
    if how == "np":
        return np.int64(x)
    if how == "np0d":
        return np.array(x, dtype=np.int64)
    return torch.tensor(x)


def _v(v):
    """The plain integer of an argument drawn by :func:`ints`."""
    return v[2] if isinstance(v, tuple) and v and v[0] == "#int" else v


@st.composite
def sources(draw, tag):
    kind = draw(st.sampled_from(["hf", "table", "gen", "parquet"]))
    variant = (draw(st.booleans()), draw(st.sampled_from(STRUCTS)))
    if kind in ("hf", "table"):
        n = draw(st.one_of(st.integers(0, 3), st.integers(4, 60)))
        shards = draw(st.integers(1, max(1, min(n, 4))))
        recipe = (kind, n, shards, tag, variant)
        nshards = shards
    else:
        lengths = tuple(draw(st.lists(st.one_of(st.just(0), st.integers(1, 25)), min_size=1, max_size=4)))
        recipe = (kind, lengths, tag, variant)
        nshards = len(lengths)
    if nshards > 1 and draw(st.integers(0, 4)) == 0:
        groups = draw(st.integers(2, nshards))
        recipe = ("shard", draw(ints(groups, groups)), draw(ints(0, groups - 1)), draw(st.booleans()), recipe)
    return recipe, frozenset(COLS) | ({"s"} if variant[1] else set())


@st.composite
def operations(draw, child, uid):
    """One operation over ``child`` = (recipe, guaranteed columns)."""
    recipe, cols = child
    if draw(st.integers(0, 9)) < 7:
        op = draw(st.sampled_from(["map", "map", "filter", "cols", "skip", "take", "repeat", "shuffle", "shuffle",
                                   "batch"]))
    else:
        op = draw(st.sampled_from(["numpy", "mutate", "pack", "prefetch", "reshard", "global", "dict"]))
    k = draw(st.integers(0, 5))
    name = f"c{uid}"
    if op == "map":
        kind = draw(st.sampled_from(["add", "async_add", "index", "inplace", "batched_add", "batched_index",
                                     "batched_rows"]))
        batch_size = draw(st.sampled_from([1, 2, 3, 7, 1000]))
        return ("map", kind, name, k, batch_size, draw(st.booleans()), recipe), (
            cols if kind == "batched_rows" else cols | {name})
    if op == "numpy":  # a map returning numpy arrays (per example or batched)
        kind = draw(st.sampled_from(["numpy", "batched_numpy"]))
        return ("map", kind, name, k, draw(st.sampled_from([1, 3, 1000])), False, recipe), cols | {name}
    if op == "mutate":  # a map editing nested values of its input in place (structs, arrays, lists)
        return ("map", "mutate", name, k, 1, False, recipe), cols
    if op == "pack":  # token lists from a map, packed: only they remain
        return ("pack", name, draw(ints(1, 6)), draw(st.sampled_from(["concat", "greedy"])), recipe), frozenset({name})
    if op == "prefetch":
        return ("prefetch", draw(ints(1, 4)), recipe), cols
    if op == "reshard":
        return ("reshard", recipe), cols
    if op == "global":
        return ("global", draw(ints(0, 2**31)), recipe), cols
    if op == "dict":  # the same pipeline as the "train" split of an IterableDatasetDict, chained on the dict
        kind = draw(st.sampled_from(["map", "split_map", "filter", "shuffle", "select", "remove", "rename"]))
        avail = sorted(cols)
        if kind in ("select", "remove", "rename") and len(avail) < 2:
            kind = "map"
        if kind in ("map", "split_map"):
            return ("dict", kind, (name, k), recipe), cols | {name}
        if kind == "filter":
            return ("dict", kind, (draw(st.integers(2, 5)), k % 2), recipe), cols
        if kind == "shuffle":
            return ("dict", kind, (draw(ints(0, 99)), draw(st.sampled_from([1, 4, 1000])),
                                   draw(st.sampled_from(["examples", "replay"]))), recipe), cols
        if kind == "select":
            keep = draw(st.lists(st.sampled_from(avail), min_size=1, unique=True))
            return ("dict", kind, keep, recipe), frozenset(keep)
        if kind == "remove":
            drop = draw(st.sampled_from(avail))
            return ("dict", kind, [drop], recipe), cols - {drop}
        old = draw(st.sampled_from(avail))
        return ("dict", kind, {old: name}, recipe), (cols - {old}) | {name}
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
            keep += draw(st.lists(st.sampled_from(keep), max_size=2))  # a name given twice is taken once
            return ("cols", "select", keep, recipe), frozenset(keep)
        drop = draw(st.sampled_from(avail))
        return ("cols", "remove", [drop] * draw(st.integers(1, 2)), recipe), cols - {drop}
    if op == "skip":
        return ("skip", draw(ints(0, 12)), recipe), cols
    if op == "take":
        return ("take", draw(ints(0, 40)), recipe), cols
    if op == "repeat":
        times = draw(st.one_of(ints(0, 3), st.none()))
        return ("repeat", times, draw(st.integers(1, 45)), recipe), cols
    if op == "shuffle":
        size = draw(st.sampled_from([1, 2, 5, 16, 1000]))
        if draw(st.integers(0, 3)) == 0:
            size = ("#int", draw(st.sampled_from(["np", "np0d", "torch"])), size) if torch is not None else size
        mode = draw(st.sampled_from(["examples", "replay", "replay"]))
        return ("shuffle", draw(ints(0, 2**32)), size, mode, recipe), cols
    return ("batch", draw(ints(1, 6)), draw(st.booleans()), recipe), cols


def _batched(recipe) -> bool:
    """Whether ``recipe`` yields batches (of a ``batch`` not turned back into rows by a ``pack``)."""
    kind = recipe[0]
    if kind in ("hf", "table", "gen", "parquet", "pack"):
        return False
    if kind == "batch":
        return True
    if kind in ("interleave", "concat"):
        return any(_batched(k) for k in recipe[1 if kind == "interleave" else 2])
    return _batched(recipe[-1])


def _aligned_kids(kids: list) -> list:
    """The first of ``kids`` and each later one whose features align with those kept (a batched input
    beside rows types a column as a list of it, refused by interleave / concatenate as by HF; where
    the features are unknown, the rows of such a mix fail the formats, as in HF)."""
    kept = kids[:1]
    for kid in kids[1:]:
        if _batched(kid[0]) != _batched(kept[0][0]):
            continue
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
        top = draw(st.sampled_from([None, None, None, "split", "epoch", "format", "iter"]))
        if top == "split":
            world = draw(ints(2, 3))
            return ("split", world, draw(ints(0, _v(world) - 1)), recipe)
        if top == "epoch":
            return ("epoch", draw(ints(1, 4)), recipe)
        if top == "format":  # rows, or batch() of them, as numpy arrays or torch tensors
            fmt = draw(st.sampled_from(["numpy", "torch"] if torch is not None else ["numpy"]))
            return ("format", fmt, draw(st.sampled_from([None, 1, 3, 8])), recipe)
        if top == "iter":  # iterated with .iter(batch_size): resumable like plain iteration
            return ("iter", draw(st.integers(1, 5)), recipe)
        return recipe
    return node


# --------------------------------------------------------------------------- building

#: a replay-mode shuffle over a subtree replay refuses becomes a stored-buffer one (False: raise)
FALLBACK = [True]


def build(recipe) -> ri.IterableDataset:
    kind = recipe[0]
    if kind == "hf":
        _, n, shards, tag, variant = recipe
        return ri.to_iterable_dataset(_hf(n, tag, variant), num_shards=shards)
    if kind == "table":
        _, n, shards, tag, variant = recipe
        return ri.IterableDataset.from_arrow_table(_table(n, tag, variant), num_shards=shards)
    if kind == "gen":
        _, lengths, tag, variant = recipe
        return ri.IterableDataset.from_generator(_gen, gen_kwargs={"shard": list(range(len(lengths))),
                                                                   "n": list(lengths), "tag": tag,
                                                                   "variant": [variant] * len(lengths)})
    if kind == "parquet":
        _, lengths, tag, variant = recipe
        return ri.IterableDataset.from_parquet(_parquet(lengths, tag, variant))
    if kind == "shard":
        _, groups, index, contiguous, child = recipe
        return build(child).shard(_n(groups), _n(index), contiguous=contiguous)
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
        if fk == "numpy":
            return ds.map(functools.partial(f_numpy, name=name, k=k))
        if fk == "batched_numpy":
            return ds.map(functools.partial(f_batched_numpy, name=name, k=k), batched=True, batch_size=batch_size)
        if fk == "mutate":
            return ds.map(f_mutate)
        if fk == "ids":
            return ds.map(functools.partial(f_ids, name=name))
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
        return build(recipe[2]).skip(_n(recipe[1]))
    if kind == "take":
        return build(recipe[2]).take(_n(recipe[1]))
    if kind == "repeat":
        _, times, bound, child = recipe
        ds = build(child).repeat(_n(times))
        return ds.take(bound) if times is None else ds
    if kind == "shuffle":
        _, seed, size, mode, child = recipe
        ds = build(child)
        try:
            return ds.shuffle(seed=_n(seed), buffer_size=_n(size), buffer_state=mode)
        except ValueError as e:
            assert mode == "replay" and "cannot re-read its buffer through" in str(e), e
            if not FALLBACK[0]:
                raise
            return ds.shuffle(seed=_n(seed), buffer_size=_n(size), buffer_state="examples")
    if kind == "global":
        ds = build(recipe[2])
        try:
            return ds.shuffle(seed=_n(recipe[1]), buffer_size=None)
        except ValueError as e:  # only a random-access source (under column operations) has a global shuffle
            assert "cannot be applied" in str(e), e
            return ds.shuffle(seed=_n(recipe[1]), buffer_size=3)
    if kind == "pack":
        _, name, seq_len, mode, child = recipe
        ds = build(child).map(functools.partial(f_ids, name=name))
        return ds.pack(_n(seq_len), columns=[name], mode=mode)
    if kind == "prefetch":
        return build(recipe[2]).prefetch(_n(recipe[1]))
    if kind == "reshard":
        return build(recipe[1]).reshard()
    if kind == "dict":
        _, op, arg, child = recipe
        splits = ri.IterableDatasetDict({"train": build(child), "test": build(child)})
        if op == "map":
            splits = splits.map(functools.partial(f_add, name=arg[0], k=arg[1]))
        elif op == "split_map":
            splits = splits.map(functools.partial(f_split_add, name=arg[0], k=arg[1]), with_split=True)
        elif op == "filter":
            splits = splits.filter(functools.partial(p_mod, m=arg[0], r=arg[1]))
        elif op == "shuffle":
            seed, size, mode = arg
            try:
                splits = splits.shuffle(seed=_n(seed), buffer_size=size, buffer_state=mode)
            except ValueError as e:
                assert mode == "replay" and "cannot re-read its buffer through" in str(e), e
                if not FALLBACK[0]:
                    raise
                splits = splits.shuffle(seed=_n(seed), buffer_size=size)
        elif op == "select":
            splits = splits.select_columns(arg)
        elif op == "remove":
            splits = splits.remove_columns(arg)
        else:
            splits = splits.rename_columns(arg)
        assert isinstance(splits, ri.IterableDatasetDict) and list(splits) == ["train", "test"]
        return splits["train"]
    if kind == "batch":
        return build(recipe[3]).batch(_n(recipe[1]), drop_last_batch=recipe[2])
    if kind == "interleave":
        _, kids, probs, seed, strategy = recipe
        return ri.interleave_datasets([build(k) for k in kids], probabilities=probs, seed=seed,
                                      stopping_strategy=strategy)
    if kind == "concat":
        _, axis, kids = recipe
        return ri.concatenate_datasets([build(k) for k in kids], axis=axis)
    if kind == "split":
        _, world, rank, child = recipe
        return ri.split_dataset_by_node(build(child), rank=_n(rank), world_size=_n(world))
    if kind == "epoch":
        ds = build(recipe[2])
        ds.set_epoch(_n(recipe[1]))
        return ds
    if kind == "format":
        _, fmt, batch_size, child = recipe
        ds = build(child)
        return (ds if batch_size is None else ds.batch(batch_size)).with_format(fmt)
    if kind == "iter":
        return build(recipe[2])
    raise AssertionError(recipe)


class Ordered:
    """A dataset whose examples compare with their column order (and struct field order), tensors
    and arrays by dtype, shape and values; iterated with ``.iter(batch_size)`` if given."""

    def __init__(self, ds, batch_size=None):
        self.ds, self.batch_size = ds, batch_size

    def __iter__(self):
        it = iter(self.ds) if self.batch_size is None else self.ds.iter(self.batch_size)
        for x in it:
            yield ordered(x)

    def state_dict(self):
        return self.ds.state_dict()

    def load_state_dict(self, state):
        self.ds.load_state_dict(state)


def ordered(x):
    if isinstance(x, dict):
        return ("dict", tuple((k, ordered(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return type(x)(ordered(v) for v in x)
    if torch is not None and isinstance(x, torch.Tensor):  # NaN != NaN: compared by its text
        values = x.tolist()
        return ("tensor", str(x.dtype), tuple(x.shape), repr(values) if x.is_floating_point() else values)
    if isinstance(x, np.ndarray) and x.dtype == object:
        return ("ndarray", "object", x.shape, [ordered(v) for v in x.tolist()])
    return normalize(x)


def built(recipe):
    """What the property iterates: ``build(recipe)`` seen through :class:`Ordered`."""
    if recipe[0] == "iter":
        return Ordered(build(recipe[2]), recipe[1])
    return Ordered(build(recipe))


def roundtrip_json(state: dict) -> dict:
    """JSON round trip; ``save_state``'s codec for a state holding numpy values (a buffer of a
    map's arrays), which JSON cannot hold."""
    try:
        text = json.dumps(state)
    except TypeError:
        STATS["codec (numpy in the state)"] += 1
        return codec_roundtrip(state)
    return json.loads(text)


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


def _count_recipe(recipe) -> None:
    """Counts what the recipe asks for that the node tree does not tell."""
    if isinstance(recipe, tuple) and recipe:
        if recipe[0] == "#int":
            STATS[f"int:{recipe[1]}"] += 1
            return
        if recipe[0] in ("hf", "table", "gen", "parquet"):
            rev, struct = recipe[-1]
            STATS[f"source:{'x-first' if rev else 'id-first'}{'+s.' + struct if struct else ''}"] += 1
        if recipe[0] in ("format", "iter", "dict", "global", "pack", "prefetch", "reshard"):
            STATS[f"recipe:{recipe[0]}{':' + str(recipe[1]) if recipe[0] in ('format', 'dict') else ''}"] += 1
        if recipe[0] == "cols" and isinstance(recipe[2], list) and len(set(recipe[2])) < len(recipe[2]):
            STATS[f"cols:{recipe[1]} a name twice"] += 1
        if recipe[0] == "map" and recipe[1] in ("numpy", "batched_numpy", "mutate"):
            STATS[f"map:{recipe[1]}"] += 1
        for part in recipe[1:]:
            _count_recipe(part)
    elif isinstance(recipe, list):
        for part in recipe:
            _count_recipe(part)


def _check(recipe, roundtrip, chain: list[int] | None = None) -> None:
    ds = build(recipe)
    _count_nodes(ds)
    _count_recipe(recipe)
    n = sum(1 for _ in built(recipe))
    cuts = 12 if n <= 150 else 6
    full = assert_resumes_exactly(lambda: built(recipe), max_cuts=cuts, roundtrip=roundtrip)
    STATS["pipelines"] += 1
    STATS["empty"] += not full
    STATS["examples"] += len(full)
    STATS["cuts"] += min(len(full) + 1, cuts + 4)
    if chain:
        steps, left = [], len(full)
        for s in chain:
            steps.append(s % (left + 1))
            left -= steps[-1]
        assert_resume_chain(lambda: built(recipe), steps, roundtrip=roundtrip)


@given(recipe=pipelines(), data=st.data())
def _prop_json(recipe, data):
    chain = data.draw(st.lists(st.integers(0, 40), min_size=2, max_size=4)) if data.draw(st.booleans()) else None
    _check(recipe, roundtrip_json, chain)


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
    return ("shuffle", draw(ints(0, 2**32)), size, "replay", _replayable(recipe))


def _replayable(recipe):
    """Turn what replay refuses into what it accepts: batched map/filter into per-example ones,
    stored-buffer shuffles into replay ones, no batch."""
    kind = recipe[0]
    if kind in ("hf", "table", "gen", "parquet"):
        return recipe
    if kind == "map" and recipe[1].startswith("batched"):  # its per-example twin adds the same column
        twin = {"batched_add": "add", "batched_index": "index", "batched_numpy": "numpy"}.get(recipe[1])
        return _replayable(recipe[-1]) if twin is None else ("map", twin, *recipe[2:-1], _replayable(recipe[-1]))
    if kind == "filter" and recipe[1] == "batched":
        return ("filter", "mod", *recipe[2:-1], _replayable(recipe[-1]))
    if kind in ("batch", "prefetch", "reshard", "global", "format", "iter"):
        return _replayable(recipe[-1])
    if kind == "pack":  # the map of its token ids, the only column kept
        _, name, _, _, child = recipe
        return ("cols", "select", [name], ("map", "ids", name, 0, 1, False, _replayable(child)))
    if kind == "dict" and recipe[1] == "shuffle":
        return ("dict", "shuffle", (*recipe[2][:2], "replay"), _replayable(recipe[-1]))
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
    _check(recipe, roundtrip_json)
    # same examples as the stored-buffer mode
    stored = ("shuffle", recipe[1], recipe[2], "examples", recipe[4])
    assert list(built(recipe)) == list(built(stored))


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
                "batch", "interleave", "concat", "pack", "prefetch", "global_shuffle"}
    assert expected <= set(seen), expected - set(seen)
