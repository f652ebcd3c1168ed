"""Property test of the loader the way users run it: random pipelines (``from_dict`` /
``from_generator`` / Arrow / Parquet / JSON Lines sources with several shards, maps that edit their
input in place, batched ``map`` with ``remove_columns``, ``filter``, ``interleave_datasets`` with its
three stopping strategies, ``concatenate_datasets``, ``skip`` / ``take``, ``shuffle`` with and
without ``buffer_state="drop"``, ``select_columns`` + ``batch`` + ``with_format("numpy" | "torch")``)
read through torchdata's ``StatefulDataLoader`` or ours, with 0-3 workers, persistent workers or
not over three epochs (``set_epoch`` on the dataset, on our loader, or never), ``prefetch_factor``
1-4, ``snapshot_every_n_steps`` 1-2, one or two ranks (``split_dataset_by_node``, then maybe a
``skip`` / ``take`` / ``shuffle`` of the rank's part). Each run is cut at a drawn batch of a drawn
epoch (0: before its first batch), its state taken while the loop goes on and passed through
``json.dumps``/``loads`` or ``ri.save_state``/``ri.load_state``.

Checked (docs/torch.md): taking the state leaves the running loop as it was; with the same workers
the resumed run is the uninterrupted run, later epochs included; with another number of workers
(ours) the resumed epoch holds every example exactly once and the next epochs are the new worker
count's ordinary epochs; two ranks moved to one or three (``redistribute_states``) yield the rest
exactly once. ``buffer_state="drop"`` loses its buffer by design: only "nothing repeated within a rank" is checked
then (a ``take`` above it may then reach examples the uninterrupted run did not: each at most once; not at all under an
``all_exhausted`` interleave, which restarts an input the lost buffer made shorter sooner),
and with ``snapshot_every_n_steps=1`` only (torchdata replays the batches since its snapshot from a
state that lost examples: it may run out and raise ``StopIteration`` from ``iter(loader)``).

Bounded: 10 pipelines (about 30 s: every run starts worker processes); ``--soak`` runs 200 new ones.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import shutil
import tempfile

import numpy as np
import pyarrow.parquet as pq
import pytest
from datasets import Dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

import resumable_iterable as ri  # noqa: E402
from harness import normalize  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.torch,
              pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

EPOCHS = 3
STATS: collections.Counter = collections.Counter()


# --------------------------------------------------------------------------- sources and functions

def _gen(shards, n, tag):
    for s in shards:
        for i in range(n):
            yield {"id": tag * 1000 + s * 100 + i, "arr": np.full(2, i, dtype=np.int64), "d": {"k": [i]}}


def _rows(n, tag, shift=0):
    return {"id": [tag * 1000 + shift + i for i in range(n)], "arr": [[i, i] for i in range(n)],
            "d": [{"k": [i]} for i in range(n)]}


def mutate(ex):
    """Edits its input in place, as many user functions do."""
    if isinstance(ex["arr"], np.ndarray):
        ex["arr"] += 1
    else:
        ex["arr"].append(7)
    ex["d"]["k"].append(1)
    return ex


def batched_mutate(b):
    out = {"id": [i for i in b["id"] for _ in (0, 1)], "arr": [], "d": []}
    for a, d in zip(b["arr"], b["d"]):
        for j in (0, 1):
            out["arr"].append(list(np.asarray(a) + j))
            out["d"].append({"k": list(d["k"]) + [j]})
    b["id"].clear()  # mutates the batch it was given
    return out


def keep(ex):
    return ex["id"] % 3 != 1


def _source(kind, n, shards, tag):
    if kind == "dict":
        parts = [ri.IterableDataset.from_dict(_rows(n, tag, 100 * s)) for s in range(shards)]
        return parts[0] if shards == 1 else ri.concatenate_datasets(parts)
    if kind == "gen":
        return ri.IterableDataset.from_generator(_gen, gen_kwargs={"shards": list(range(shards)), "n": n, "tag": tag})
    if kind in ("parquet", "jsonl"):  # files written once per (n, shards, tag), one shard per file
        files = _files(kind, n, shards, tag)
        return ri.load_dataset(kind if kind == "parquet" else "json", data_files=files, split="train")
    return ri.to_iterable_dataset(Dataset.from_dict(_rows(n * shards, tag)), num_shards=shards)


FILES_DIR = tempfile.mkdtemp(prefix="ri_habits_")
atexit.register(shutil.rmtree, FILES_DIR, True)


def _files(kind, n, shards, tag):
    paths = []
    for s in range(shards):
        path = os.path.join(FILES_DIR, f"{kind}-{n}-{tag}-{s}.{kind}")
        if not os.path.exists(path):
            part = Dataset.from_dict(_rows(n, tag, 100 * s))
            if kind == "parquet":
                pq.write_table(part.data.table, path, row_group_size=2)
            else:
                part.to_json(path)
        paths.append(path)
    return paths


@st.composite
def recipes(draw, depth=0):
    if depth >= 1 or draw(st.integers(0, 2)) > 0:
        node = ("src", draw(st.sampled_from(["dict", "gen", "arrow", "parquet", "jsonl"])), draw(st.integers(1, 6)),
                draw(st.integers(1, 4)), draw(st.integers(0, 9)))
    else:
        kids = draw(st.lists(recipes(depth + 1), min_size=2, max_size=3))
        if draw(st.booleans()):
            node = ("interleave", kids, draw(st.sampled_from(
                ["first_exhausted", "all_exhausted", "all_exhausted_without_replacement"])),
                draw(st.booleans()), draw(st.integers(0, 99)))
        else:
            node = ("concat", kids)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["map", "bmap", "filter", "skip", "take", "shuffle", "drop"]))
        if op in ("skip", "take"):
            node = (op, draw(st.integers(0, 12)), node)
        elif op in ("shuffle", "drop"):
            node = (op, draw(st.integers(0, 99)), draw(st.sampled_from([1, 4, 100])), node)
        elif op == "bmap":
            node = (op, draw(st.integers(1, 4)), node)
        else:
            node = (op, node)
    if depth == 0 and draw(st.integers(0, 3)) == 0:
        node = ("format", draw(st.sampled_from(["numpy", "torch"])), draw(st.integers(1, 3)), node)
    return node


def build(r):
    kind = r[0]
    if kind == "src":
        return _source(*r[1:])
    if kind == "interleave":
        _, kids, strategy, probs, seed = r
        p = [(i + 1) / sum(range(1, len(kids) + 1)) for i in range(len(kids))] if probs else None
        return ri.interleave_datasets([build(k) for k in kids], probabilities=p, seed=seed,
                                      stopping_strategy=strategy)
    if kind == "concat":
        return ri.concatenate_datasets([build(k) for k in r[1]])
    child = build(r[-1])
    if kind == "map":
        return child.map(mutate)
    if kind == "bmap":
        return child.map(batched_mutate, batched=True, batch_size=r[1], remove_columns=["id", "arr", "d"])
    if kind == "filter":
        return child.filter(keep)
    if kind == "skip":
        return child.skip(r[1])
    if kind == "take":
        return child.take(r[1])
    if kind == "shuffle":
        return child.shuffle(seed=r[1], buffer_size=r[2])
    if kind == "drop":
        return child.shuffle(seed=r[1], buffer_size=r[2], buffer_state="drop")
    if kind == "format":
        return child.select_columns(["id", "arr"]).batch(r[2]).with_format(r[1])
    raise AssertionError(r)


def has(r, kind) -> bool:
    return isinstance(r, tuple) and (r[0] == kind or any(
        has(x, kind) for x in r[1:] if isinstance(x, tuple)) or any(
        has(k, kind) for x in r[1:] if isinstance(x, list) for k in x))


def ordered(x):
    if isinstance(x, dict):
        return tuple((k, ordered(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return tuple(ordered(v) for v in x)
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), tuple(x.shape), repr(x.tolist()))
    return repr(normalize(x))


def collate(batch):
    return [ordered(ex) for ex in batch]


def units(item):
    """What must come exactly once: a row, or the rows of a formatted batch."""
    if item and item[0] == "batch":
        return list(item[1])
    return list(item)


def _item_formatted(b):
    kind = type(b["id"]).__name__
    return ("batch", [repr((kind, i, ordered(a))) for i, a in zip(b["id"].tolist(), list(b["arr"]))])


# --------------------------------------------------------------------------- loader runs

def _roundtrip(state, how, tmp):
    if how == "json":
        try:
            return json.loads(json.dumps(state))
        except TypeError:  # numpy arrays in a stored buffer: the docs say to use ri.save_state
            pass
    path = os.path.join(tmp, "state.bin")
    ri.save_state(state, path)
    return ri.load_state(path)


def run(recipe, cfg, workers, state=None, start=0, stop=None, tmp=None, how="json", rank=0, world=None, full=None):
    from torchdata.stateful_dataloader import StatefulDataLoader as TD

    ds = build(recipe)
    split = world is not None or cfg["world"] > 1
    world = cfg["world"] if world is None else world
    if split:
        ds = ri.split_dataset_by_node(ds, rank=rank, world_size=world)
        if cfg["post"]:  # a take / skip / shuffle written after the split counts the rank's part
            op, n = cfg["post"]
            ds = ds.shuffle(seed=n, buffer_size=3) if op == "shuffle" else getattr(ds, op)(n)
    formatted = recipe[0] == "format"
    kw = dict(num_workers=workers, snapshot_every_n_steps=cfg["snap"])
    if workers:
        kw.update(persistent_workers=cfg["persistent"], prefetch_factor=cfg["prefetch"])
    if formatted:
        kw.update(batch_size=None)
    else:
        kw.update(batch_size=cfg["bs"], collate_fn=collate)
    cls = ri.StatefulDataLoader if cfg["ours"] or (state is not None and (workers != cfg["workers"] or world != cfg[
        "world"])) else TD
    loader = cls(ds, **kw)
    if state is not None:
        loader.load_state_dict(state)
    out, saved = [], None
    for epoch in range(start, EPOCHS):
        if cfg["setter"] == "loader" and isinstance(loader, ri.StatefulDataLoader):
            loader.set_epoch(epoch)
        elif cfg["setter"] != "none":
            ds.set_epoch(epoch)
        if stop == (epoch, 0):  # a checkpoint before the epoch's first batch
            saved = len(out), _roundtrip(loader.state_dict(), how, tmp)
        for k, b in enumerate(loader, 1):
            out.append((epoch, _item_formatted(b) if formatted else tuple(b)))
            if stop == (epoch, k):  # the loop goes on: taking the state must not disturb it
                saved = len(out), _roundtrip(loader.state_dict(), how, tmp)
    if stop is not None:
        n, state = saved
        assert out == full, "taking the loader's state disturbed the running loop"
        return out[:n], state
    return out, None


def _epoch(out, e):
    return collections.Counter(u for ep, item in out if ep == e for u in units(item))


def _oversamples(r) -> bool:
    """An ``all_exhausted`` interleave restarts its inputs: after a resume that lost a buffer, an
    input that became shorter is restarted sooner, so its examples may come more often."""
    return isinstance(r, tuple) and (r[0] == "interleave" and r[2] == "all_exhausted" or any(
        _oversamples(x) for x in r[1:] if isinstance(x, tuple)) or any(
        _oversamples(k) for x in r[1:] if isinstance(x, list) for k in x))


def check(recipe, cfg, data, tmp):
    workers = cfg["workers"]
    lossy = has(recipe, "drop")
    counted = not (lossy and _oversamples(recipe))  # repeats of a lossy resume are checked
    states, heads, fulls = [], [], []
    if lossy and cfg["snap"] > 1:
        # torchdata replays the batches since its last snapshot from a state that lost its buffer:
        # fewer examples than it replays, and StopIteration out of iter(loader) (torchdata's part)
        cfg = dict(cfg, snap=1)
    cut = None
    for rank in range(cfg["world"]):
        full, _ = run(recipe, cfg, workers, rank=rank)
        STATS["examples"] += sum(len(units(x)) for _, x in full)
        epochs = [e for e in range(EPOCHS) if any(x == e for x, _ in full)]
        if not epochs:
            continue
        if cut is None:  # the ranks of one job save at the same step
            e = data.draw(st.sampled_from(epochs))
            cut = e, data.draw(st.integers(0, sum(1 for x, _ in full if x == e)))
        e, k = cut
        if k > sum(1 for x, _ in full if x == e):
            continue
        how = data.draw(st.sampled_from(["json", "save_state"]))
        head, state = run(recipe, cfg, workers, stop=(e, k), tmp=tmp, how=how, rank=rank, full=full)
        states.append(state)
        heads.append(head)
        fulls.append(full)
        assert head == [x for x in full[:len(head)]], "the head differs from the uninterrupted run"
        tail, _ = run(recipe, cfg, workers, state=state, start=e, rank=rank)
        where = f"{cfg}, rank {rank}, resumed after batch {k} of epoch {e} ({how})"
        if lossy:
            got = _epoch(head, e) + _epoch(tail, e)
            assert not counted or not [u for u, c in got.items() if c > max(_epoch(full, e)[u], 1)], (
                f"{where}: repeated")
            assert [x for x in tail if x[0] > e] == [x for x in full if x[0] > e], f"{where}: later epochs"
        else:
            assert head + tail == full, f"{where}: the resumed run differs from the uninterrupted one"
        STATS["cuts"] += 1
        if cfg["snap"] != 1 or cfg["world"] > 1 and data.draw(st.booleans()):
            continue
        other = data.draw(st.sampled_from([w for w in (0, 1, 2, 3) if w != workers]))
        tail, _ = run(recipe, cfg, other, state=state, start=e, rank=rank)
        ofull, _ = run(recipe, cfg, other, rank=rank)
        where = f"{where}, elastic to {other} workers"
        got = _epoch(head, e) + _epoch(tail, e)
        if lossy:
            assert not counted or not [u for u, c in got.items() if c > max(_epoch(full, e)[u], 1)], (
                f"{where}: repeated")
        else:  # a state taken before the epoch's first batch may start it afresh with the new workers,
            # who share a take()/skip() otherwise (docs/torch.md)
            assert got == _epoch(full, e) or k == 0 and got == _epoch(ofull, e), (
                f"{where}: not every example exactly once")
        assert [x for x in tail if x[0] > e] == [x for x in ofull if x[0] > e], f"{where}: later epochs"
        STATS["elastic"] += 1
    if len(states) == cfg["world"] > 1 and cfg["snap"] == 1 and all(s is not None for s in states):
        check_ranks(recipe, cfg, data, states, heads, fulls, lossy, tmp, cut)


def check_ranks(recipe, cfg, data, states, heads, fulls, lossy, tmp, cut):
    """Another number of ranks: ``redistribute_states``; the resumed epoch holds what each rank had
    left, exactly once."""
    e = cut[0]  # the epoch the loop sets (a state taken before its first batch is the last one's)
    new_world = data.draw(st.sampled_from([1, 3]))
    workers = data.draw(st.sampled_from([0, 1, 2]))
    new = ri.redistribute_states(states, new_world)
    want = sum((_epoch(f, e) for f in fulls), collections.Counter())
    got = sum((_epoch(h, e) for h in heads), collections.Counter())
    for r, s in enumerate(new):
        tail, _ = run(recipe, cfg, workers, state=_roundtrip(s, "json", tmp), start=e, rank=r,
                      world=new_world)
        got += _epoch(tail, e)
    where = f"{cfg}: ranks {cfg['world']} -> {new_world} with {workers} workers in epoch {e}"
    if lossy:  # split by example, the ranks' streams part after a resume that lost the buffers: an
        return     # example may reach two ranks (docs/torch.md, "Several ranks")
    else:
        if got != want and cut[1] == 0:  # a state taken before the epoch's first batch: maybe a fresh epoch
            want = sum((_epoch(run(recipe, cfg, workers, start=e, rank=r, world=new_world)[0], e)
                        for r in range(new_world)), collections.Counter())
        assert got == want, f"{where}: not every example exactly once"
    STATS["ranks"] += 1


@st.composite
def configs(draw):
    workers = draw(st.sampled_from([0, 1, 2, 3]))
    return {"workers": workers, "ours": draw(st.booleans()), "persistent": draw(st.booleans()),
            "prefetch": draw(st.integers(1, 4)), "snap": draw(st.sampled_from([1, 1, 1, 2])),
            "world": draw(st.sampled_from([1, 1, 2])), "bs": draw(st.integers(1, 4)),
            "setter": draw(st.sampled_from(["ds", "ds", "loader", "none"])),
            "post": draw(st.sampled_from([None, None, ("skip", 2), ("take", 5), ("shuffle", 4)]))}


def _property(max_examples, tmp, soak):
    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=not soak, database=None)
    @given(recipe=recipes(), cfg=configs(), data=st.data())
    def prop(recipe, cfg, data):
        STATS["pipelines"] += 1
        check(recipe, cfg, data, tmp)

    prop()


def test_loader_habits_resume_exactly(tmp_path, soak, capsys):
    STATS.clear()
    _property(200 if soak else 10, str(tmp_path), soak)
    with capsys.disabled():
        print(f"\n[loader habits] {dict(STATS)}")
    assert STATS["pipelines"] >= 5
