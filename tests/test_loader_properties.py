"""Property test through the DataLoader: random pipelines of the nodes test_properties.py does not
compose - ``pack``, ``prefetch``, the global shuffle, ``repeat(None)`` - mixed with replay-mode and
stored shuffle buffers, ``skip``/``take``, nested ``interleave_datasets`` / ``concatenate_datasets``,
``map`` functions that edit nested values of their input in place, and numpy rows, resumed through
``resumable_iterable.StatefulDataLoader`` with 2 workers over two epochs (``set_epoch``).

Each pipeline is checkpointed once at a drawn batch of a drawn epoch; the state goes through a JSON
round trip (the codec when the buffer holds arrays) and is loaded into a new loader over a freshly
built dataset: with 2 workers the rest, the next epoch included, must be the uninterrupted run;
with 3, 1 or 0 workers (elastic) the resumed epoch must hold every example exactly once.

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
def _hf(n: int, tag: int) -> Dataset:
    return Dataset.from_dict({"id": [tag * 1000 + i for i in range(n)], "ids": [[i] * (1 + i % 4) for i in range(n)]})


def _gen(shards, n, tag):
    for s in shards:
        for i in range(n):
            yield {"id": tag * 1000 + s * 100 + i, "ids": list(range(i % 5 + 1)),
                   "arr": np.full(2, s * 100 + i, dtype=np.int64)}


def edit_in_place(ex):
    """Edits nested values of its input in place, as many user functions do."""
    ex["ids"].append(len(ex["ids"]) % 3)
    if isinstance(ex.get("arr"), np.ndarray):
        ex["arr"] += 1
    return ex


def _rows(batch):
    return [normalize(ex) for ex in batch]


# --------------------------------------------------------------------------- recipes


@st.composite
def recipes(draw, depth=0):
    if depth >= 2 or draw(st.integers(0, 9)) < 5:
        tag = draw(st.integers(0, 9))
        if draw(st.booleans()):
            node = ("hf", draw(st.integers(3, 24)), draw(st.integers(1, 3)), tag)
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
    return node


def build(r) -> ri.IterableDataset:
    kind = r[0]
    if kind == "hf":
        _, n, shards, tag = r
        return ri.to_iterable_dataset(_hf(n, tag), num_shards=min(shards, n)).map(edit_in_place)
    if kind == "global":
        _, seed, mapped, (_, n, shards, tag) = r
        ds = ri.to_iterable_dataset(_hf(n, tag), num_shards=min(shards, n))
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


def _epoch(out, e) -> collections.Counter:
    return collections.Counter(repr(x) for epoch, batch in out if epoch == e for x in batch)


@settings(max_examples=EXAMPLES)
@given(recipe=recipes(), data=st.data())
def _prop(recipe, data):
    full, _ = _run(recipe, 2)
    STATS["pipelines"] += 1
    STATS["examples"] += sum(len(b) for _, b in full)
    epochs = [e for e in (0, 1) if any(x == e for x, _ in full)]
    if not epochs:
        return
    e = data.draw(st.sampled_from(epochs))
    k = data.draw(st.integers(1, sum(1 for x, _ in full if x == e)))
    head, state = _run(recipe, 2, stop=(e, k))
    tail, _ = _run(recipe, 2, state=state, start=e)
    assert head + tail == full, f"2 workers, resumed after batch {k} of epoch {e}"
    workers = data.draw(st.sampled_from([3, 1, 0]))
    tail, _ = _run(recipe, workers, state=state, start=e)
    assert _epoch(head, e) + _epoch(tail, e) == _epoch(full, e), (
        f"2 -> {workers} workers, resumed after batch {k} of epoch {e}: not every example exactly once")
    STATS["cuts"] += 2


def test_random_loader_pipelines_resume_exactly(capsys):
    STATS.clear()
    _prop()
    with capsys.disabled():
        print(f"\n[loader properties] {STATS['pipelines']} pipelines, {STATS['examples']} examples, "
              f"{STATS['cuts']} resumes")
    assert STATS["pipelines"] >= min(EXAMPLES, 5)
