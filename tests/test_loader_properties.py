"""Property test through the DataLoader: random pipelines of ``pack``, ``prefetch``, the global
shuffle, ``repeat(None)``, mixed with replay-mode and stored shuffle buffers, ``skip``/``take``,
nested ``interleave_datasets`` / ``concatenate_datasets`` of inputs whose columns (and struct
fields) come in different orders, ``map`` functions that edit nested values of their input in
place, numpy rows, and maps returning numpy arrays then ``batch().with_format("numpy" | "torch")``,
resumed through ``resumable_iterable.StatefulDataLoader`` with 2, 1 or 0 workers over two epochs
(``set_epoch``).

Each pipeline is checkpointed once at a drawn batch of a drawn epoch; the state goes through a JSON
round trip (the codec when the buffer holds arrays) and is loaded into a new loader over a freshly
built dataset: with the same workers the rest, the next epoch included, must be the uninterrupted
run (examples compared with their column order); with another number of workers (elastic) the
resumed epoch must hold every example exactly once.

The bounded ``ci`` profile runs 6 pipelines (about 20 s: each run starts worker processes);
``HYPOTHESIS_PROFILE=soak`` runs 200.
"""

from __future__ import annotations

import collections
import functools
import json
import os

import numpy as np
import pytest
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

import resumable_iterable as ri  # noqa: E402
from harness import normalize  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.torch,
              pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

EXAMPLES = 200 if os.environ.get("HYPOTHESIS_PROFILE") == "soak" else 6
STATS: collections.Counter = collections.Counter()

# --------------------------------------------------------------------------- sources and functions


@functools.lru_cache(maxsize=None)
def _hf(n: int, tag: int, rev: bool = False) -> Dataset:
    """``id`` then ``ids``, or (``rev``) the other way round with a struct ``s`` whose fields come
    in the other order too: a combination yields every row in its merged column order."""
    ids, lists = [tag * 1000 + i for i in range(n)], [[i] * (1 + i % 4) for i in range(n)]
    if rev:
        return Dataset.from_dict({"ids": lists, "id": ids, "s": [{"b": f"b{i}", "a": i} for i in range(n)]})
    return Dataset.from_dict({"id": ids, "ids": lists})


def _gen(shards, n, tag):
    for s in shards:
        for i in range(n):
            yield {"id": tag * 1000 + s * 100 + i, "ids": list(range(i % 5 + 1)),
                   "arr": np.full(2, s * 100 + i, dtype=np.int64), "s": {"a": i, "b": f"g{i}"}}


def edit_in_place(ex):
    """Edits nested values of its input in place, as many user functions do."""
    ex["ids"].append(len(ex["ids"]) % 3)
    if isinstance(ex.get("arr"), np.ndarray):
        ex["arr"] += 1
    return ex


def to_numpy(ex):
    """A map returning numpy arrays (normalized pixels, features...): batches of them are stacked."""
    return {"feat": np.full(3, ex["id"] % 17, dtype=np.float32), "n": np.int64(len(ex["ids"]))}


def ordered(x):
    """``x`` comparable with its column order (dicts as their items), tensors and arrays by dtype,
    shape and values."""
    if isinstance(x, dict):
        return tuple((k, ordered(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return [ordered(v) for v in x]
    if isinstance(x, torch.Tensor):  # NaN != NaN: compared by its text
        values = x.tolist()
        return ("tensor", str(x.dtype), tuple(x.shape), repr(values) if x.is_floating_point() else values)
    if isinstance(x, np.ndarray) and x.dtype == object:
        return ("ndarray", "object", x.shape, [ordered(v) for v in x.tolist()])
    return normalize(x)


def _rows(batch):
    return [ordered(ex) for ex in batch]


# --------------------------------------------------------------------------- recipes


@st.composite
def recipes(draw, depth=0):
    if depth >= 2 or draw(st.integers(0, 9)) < 5:
        tag = draw(st.integers(0, 9))
        if draw(st.booleans()):
            node = ("hf", draw(st.integers(3, 24)), draw(st.integers(1, 3)), tag, draw(st.booleans()),
                    draw(st.integers(0, 3)) > 0)  # unmapped: a shuffle right above keeps positions
            if draw(st.integers(0, 2)) == 0:
                node = ("global", draw(st.integers(0, 99)), draw(st.booleans()), node)
        else:
            node = ("gen", draw(st.integers(1, 3)), draw(st.integers(1, 7)), tag)
    else:
        kids = draw(st.lists(recipes(depth + 1), min_size=2, max_size=3))
        if draw(st.booleans()):
            strategy = draw(st.sampled_from(["first_exhausted", "all_exhausted", "all_exhausted_without_replacement"]))
            probs = None
            if draw(st.booleans()):
                w = draw(st.lists(st.integers(1, 5), min_size=len(kids), max_size=len(kids)))
                probs = [x / sum(w) for x in w]
            node = ("interleave", kids, probs, strategy, draw(st.integers(0, 99)))
        else:
            node = ("concat", kids)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["map", "shuffle", "replay", "take", "skip", "repeat", "forever", "prefetch",
                                   "pack"]))
        if op in ("take", "skip"):
            node = (op, draw(st.integers(0, 30)), node)
        elif op == "repeat":
            node = ("repeat", draw(st.integers(1, 3)), node)
        elif op == "forever":
            node = ("take", draw(st.integers(1, 50)), ("repeat", None, node))
        elif op in ("shuffle", "replay"):
            node = ("shuffle", draw(st.integers(0, 99)), draw(st.sampled_from([1, 3, 7, 1000])),
                    "replay" if op == "replay" else "examples", node)
        elif op == "prefetch":
            node = ("prefetch", draw(st.integers(1, 4)), node)
        elif op == "pack":
            node = ("pack", draw(st.integers(1, 8)), draw(st.sampled_from(["concat", "greedy"])), node)
        else:
            node = ("map", node)
    if depth == 0 and draw(st.integers(0, 2)) == 0:
        # a map returning numpy arrays, batched and formatted: the loader's items are batches of them
        node = ("format", draw(st.sampled_from(["numpy", "torch"])), draw(st.integers(1, 4)), node)
    return node


def build(r) -> ri.IterableDataset:
    kind = r[0]
    if kind == "hf":
        _, n, shards, tag, rev, mapped = r
        ds = ri.to_iterable_dataset(_hf(n, tag, rev), num_shards=min(shards, n))
        return ds.map(edit_in_place) if mapped else ds
    if kind == "global":
        _, seed, mapped, (_, n, shards, tag, rev, _) = r
        ds = ri.to_iterable_dataset(_hf(n, tag, rev), num_shards=min(shards, n))
        return (ds.map(edit_in_place) if mapped else ds).shuffle(seed=seed, buffer_size=None)
    if kind == "gen":
        _, shards, n, tag = r
        return ri.IterableDataset.from_generator(
            _gen, gen_kwargs={"shards": list(range(shards)), "n": n, "tag": tag}).map(edit_in_place)
    if kind == "interleave":
        _, kids, probs, strategy, seed = r
        return ri.interleave_datasets([build(k) for k in kids], probabilities=probs, stopping_strategy=strategy,
                                      seed=seed)
    if kind == "concat":
        return ri.concatenate_datasets([build(k) for k in r[1]])
    child = build(r[-1])
    if kind == "take":
        return child.take(r[1])
    if kind == "skip":
        return child.skip(r[1])
    if kind == "repeat":
        return child.repeat(r[1])
    if kind == "shuffle":
        try:
            return child.shuffle(seed=r[1], buffer_size=r[2], buffer_state=r[3])
        except ValueError as e:  # a pack, prefetch or global shuffle below cannot be replayed
            assert r[3] == "replay" and "cannot re-read its buffer through" in str(e)
            return child.shuffle(seed=r[1], buffer_size=r[2])
    if kind == "prefetch":
        return child.prefetch(r[1])
    if kind == "pack":
        # pack keeps only "ids"; the map gives the chunk an id again, so anything can sit above
        return child.pack(r[1], mode=r[2], columns=["ids"]).map(lambda ex: {"id": sum(ex["ids"])})
    if kind == "map":
        return child.map(edit_in_place)
    if kind == "format":
        return child.map(to_numpy).batch(r[2]).with_format(r[1])
    raise AssertionError(r)


# --------------------------------------------------------------------------- the loader runs


def _roundtrip(state: dict) -> dict:
    try:
        return json.loads(json.dumps(state))
    except TypeError:  # numpy arrays in a stored buffer: the codec keeps them
        return ri.loads_state(ri.dumps_state(state))


def _run(recipe, workers: int, state=None, start: int = 0, stop=None):
    ds = build(recipe)
    loader = ri.StatefulDataLoader(ds, batch_size=3, num_workers=workers, collate_fn=_rows)
    if state is not None:
        loader.load_state_dict(state)
    out = []
    for epoch in range(start, 2):
        ds.set_epoch(epoch)
        for k, batch in enumerate(loader, 1):
            out.append((epoch, batch))
            if stop == (epoch, k):
                return out, _roundtrip(loader.state_dict())
    return out, None


def _units(item) -> list:
    """What must come exactly once: the item, or the ids of a formatted batch's rows (a worker-count
    change regroups the rows of the batches the pipeline makes)."""
    cols = dict(item)
    if isinstance(cols.get("feat"), tuple) and cols["feat"][0] in ("tensor", "ndarray"):
        ids = cols["id"]
        return [repr(i) for i in (ids[3] if isinstance(ids, tuple) else ids)]
    return [repr(item)]


def _epoch(out, e) -> collections.Counter:
    return collections.Counter(u for epoch, batch in out if epoch == e for x in batch for u in _units(x))


@settings(max_examples=EXAMPLES)
@given(recipe=recipes(), data=st.data())
def _prop(recipe, data):
    workers = data.draw(st.sampled_from([2, 2, 1, 0]))
    full, _ = _run(recipe, workers)
    STATS["pipelines"] += 1
    STATS["examples"] += sum(len(b) for _, b in full)
    epochs = [e for e in (0, 1) if any(x == e for x, _ in full)]
    if not epochs:
        return
    e = data.draw(st.sampled_from(epochs))
    k = data.draw(st.integers(1, sum(1 for x, _ in full if x == e)))
    head, state = _run(recipe, workers, stop=(e, k))
    tail, _ = _run(recipe, workers, state=state, start=e)
    assert head + tail == full, f"{workers} workers, resumed after batch {k} of epoch {e}"
    STATS[f"workers:{workers}"] += 1
    STATS[f"format:{recipe[1]}" if recipe[0] == "format" else "format:none"] += 1
    other = data.draw(st.sampled_from([w for w in (3, 2, 1, 0) if w != workers]))
    tail, _ = _run(recipe, other, state=state, start=e)
    assert _epoch(head, e) + _epoch(tail, e) == _epoch(full, e), (
        f"{workers} -> {other} workers, resumed after batch {k} of epoch {e}: not every example exactly once")
    STATS["cuts"] += 2


def test_random_loader_pipelines_resume_exactly(capsys):
    STATS.clear()
    _prop()
    with capsys.disabled():
        print(f"\n[loader properties] {STATS['pipelines']} pipelines, {STATS['examples']} examples, "
              f"{STATS['cuts']} resumes; " + ", ".join(f"{k}={v}" for k, v in sorted(STATS.items()) if ":" in k))
    assert STATS["pipelines"] >= min(EXAMPLES, 5)
