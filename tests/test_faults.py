"""Faults: killed DataLoader workers and processes, user functions that raise, data files that
vanished or shrank between save and resume. Each must fail loudly, and the last state saved
before the fault must still resume exactly."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from datasets import Dataset

import resumable_iterable as ri
from data import HF_B, gen_src, src
from harness import take

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]
TORCH = pytest.mark.torch

HERE = os.path.dirname(os.path.abspath(__file__))


def as_lists(batch):
    """collate_fn without tensors: a killed worker then leaves nothing half-sent in shared memory,
    so the failure torch reports is always the dead worker (not a broken pipe on a tensor fd)."""
    return [ex["id"] for ex in batch]


# ============================================================================ killed workers

# torch reports a dead worker from its SIGCHLD handler or, if the main process notices first, from
# the queue watchdog
WORKER_DIED = r"DataLoader worker \(pid\(?s?\)? \d+\) (is killed by signal: Killed|exited unexpectedly)"


def _killer_pipeline(flag_path: str, kill_at: int):
    def maybe_die(ex):
        if ex["id"] == kill_at and os.path.exists(flag_path) and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)  # inside the worker: a hard crash, no cleanup
        return {"y": ex["id"] * 2}

    a = src(4).map(maybe_die)
    b = src(2, HF_B)
    return ri.interleave_datasets([a, b], probabilities=[0.7, 0.3], seed=3,
                                  stopping_strategy="all_exhausted").shuffle(seed=5, buffer_size=6,
                                                                             buffer_state="replay")


def _loader(ds, **kw):
    return StatefulDataLoader(ds, batch_size=4, num_workers=2, collate_fn=as_lists, **kw)


@TORCH
def test_worker_killed_from_inside_fails_loudly_and_the_last_state_resumes_exactly(tmp_path):
    flag = str(tmp_path / "kill")
    full = [i for b in _loader(_killer_pipeline(flag, kill_at=-1)) for i in b]
    assert len(full) > 60
    open(flag, "w").close()
    loader = _loader(_killer_pipeline(flag, kill_at=41))
    seen, state = [], None
    with pytest.raises(RuntimeError, match=WORKER_DIED):
        for batch in loader:
            seen += batch
            state = json.loads(json.dumps(loader.state_dict()))  # what a trainer saves each step
    assert 41 not in seen and seen == full[:len(seen)] and len(seen) < len(full)
    os.unlink(flag)
    restarted = _loader(_killer_pipeline(flag, kill_at=41))
    restarted.load_state_dict(state)
    assert seen + [i for b in restarted for i in b] == full


@TORCH
def test_worker_killed_by_the_parent_fails_loudly_and_resumes_exactly():
    def build():
        return ri.interleave_datasets([src(4).map(lambda ex: {"y": 1}), gen_src(2, 20)],
                                      stopping_strategy="all_exhausted_without_replacement").shuffle(seed=2, buffer_size=5)

    full = [i for b in _loader(build()) for i in b]
    loader = _loader(build())
    it = iter(loader)
    seen = list(next(it)) + list(next(it))
    state = json.loads(json.dumps(loader.state_dict()))
    pid = it._workers[0].pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=WORKER_DIED) as info:
        for batch in it:  # the batches already queued may still arrive, then the death is reported
            assert len(seen) < len(full)
            seen += batch
            time.sleep(0.01)
    assert str(pid) in str(info.value)
    del info
    it._shutdown_workers()  # the surviving worker: now, not when the iterator is collected
    # restart from the last state the trainer had saved (after batch 2)
    restarted = _loader(build())
    restarted.load_state_dict(state)
    tail = [i for b in restarted for i in b]
    assert seen[:8] == full[:8] and full[:8] + tail == full


@TORCH
def test_plain_dataloader_worker_killed_fails_loudly():
    loader = torch.utils.data.DataLoader(src(4).shuffle(seed=1, buffer_size=3), batch_size=4, num_workers=2,
                                         collate_fn=as_lists)
    it = iter(loader)
    next(it)
    os.kill(it._workers[1].pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=WORKER_DIED):
        for _ in it:
            time.sleep(0.01)
    it._shutdown_workers()


_TRAINER = textwrap.dedent("""
    import json, os, signal, sys
    import pyarrow as pa
    import resumable_iterable as ri

    def gen(shard):
        for s in shard:
            for i in range(15):
                yield {{"id": 1000 + s * 100 + i}}

    def pipeline():
        table = pa.table({{"id": list(range(60)), "text": [f"t{{i}}" for i in range(60)]}})
        a = ri.IterableDataset.from_arrow_table(table, num_shards=4).map(lambda ex: {{"y": ex["id"] + 1}})
        b = ri.IterableDataset.from_generator(gen, gen_kwargs={{"shard": [0, 1, 2]}})
        return ri.interleave_datasets([a, b], probabilities=[0.5, 0.5], seed=1).shuffle(
            seed=9, buffer_size=7, buffer_state="replay")

    if __name__ == "__main__":
        out, kill_at = sys.argv[1], int(sys.argv[2])
        ds = pipeline()
        if os.path.exists(out + "/state.json"):
            ds.load_state(out + "/state.json")
        it = iter(ds)
        for step in range(10**6):
            batch = [ex["id"] for _, ex in zip(range(3), it)]
            if not batch:
                break
            with open(out + "/ids.jsonl", "a") as f:
                f.write(json.dumps(batch) + "\\n")
            ds.save_state(out + "/state.json")   # atomic: a temporary file, then a rename
            if step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
""")


def test_training_process_killed_resumes_exactly_from_its_state_file(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(_TRAINER.format())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    sys.path.insert(0, str(tmp_path))
    try:
        import trainer  # the same pipeline, run here uninterrupted for reference
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("trainer", None)
    full = [ex["id"] for ex in trainer.pipeline()]

    def run(kill_at):
        return subprocess.run([sys.executable, str(script), str(tmp_path), str(kill_at)], env=env, timeout=120,
                              capture_output=True, text=True)

    for kill_at in (4, 9):  # killed twice (SIGKILL: no cleanup), each time resumed from the state file
        r = run(kill_at)
        assert r.returncode == -signal.SIGKILL, r.stderr
    assert run(-1).returncode == 0
    got = [i for line in (tmp_path / "ids.jsonl").read_text().splitlines() for i in json.loads(line)]
    assert got == full and len(full) > 40


_KILLED_WITH_WORKERS = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import resumable_iterable as ri
    from resumable_iterable.integrations.torch import workers
    from torchdata.stateful_dataloader import StatefulDataLoader

    workers.ORPHAN_GRACE = 1.0  # (10 s by default)

    def gen(shards):
        for s in shards:
            for r in range(200):
                yield {"id": s * 200 + r, "x": np.full(512, r, dtype=np.float64)}

    if __name__ == "__main__":
        ds = ri.IterableDataset.from_generator(gen, gen_kwargs={"shards": list(range(8))}).shuffle(seed=0, buffer_size=200)
        make = ri.StatefulDataLoader if sys.argv[1] == "ri" else StatefulDataLoader
        it = iter(make(ds, batch_size=16, num_workers=2, multiprocessing_context=sys.argv[2]))
        for _ in range(3):
            next(it)
        print(" ".join(str(w.pid) for w in it._workers), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.parametrize("loader,context", [("ri", "fork"), ("torchdata", "fork"),
                                            pytest.param("ri", "forkserver", marks=pytest.mark.slow)])
def test_workers_do_not_outlive_a_killed_training_process(tmp_path, loader, context, soak):
    """Killed with SIGKILL (or by the out-of-memory killer), the main process cannot stop its
    DataLoader workers. Torch's loop in a worker notices, but the worker then hung at exit on a full
    pipe (the states and batches it had queued) and stayed, holding its memory, for ever. With
    ``forkserver`` torch's loop does not even notice (its parent is the fork server). That case
    starts a fork server (7-15 s): it runs with --soak (make soak)."""
    if context == "forkserver" and not soak:
        pytest.skip("forkserver: slow to start, runs with --soak (make soak)")
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_WITH_WORKERS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as o, open(err, "w") as e:  # files, not pipes: workers left behind would hold pipes open
        r = subprocess.run([sys.executable, str(script), loader, context], env=env, timeout=120, stdout=o, stderr=e)
    assert r.returncode == -signal.SIGKILL, err.read_text()
    pids = [int(p) for p in out.read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.2)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, f"DataLoader workers {alive} outlived their killed main process"


# ============================================================================ user code that raises


def _notes(info) -> str:
    return " ".join(getattr(info.value, "__notes__", []))


def test_filter_error_names_node_shard_and_example_and_state_before_resumes():
    def pred(ex):
        if ex["id"] == 44:
            raise ZeroDivisionError("bad predicate")
        return ex["id"] % 2 == 0

    ds = src(4).filter(pred)
    it = iter(ds)
    got = take(it, 10)
    state = json.loads(json.dumps(ds.state_dict()))
    with pytest.raises(ZeroDivisionError) as info:
        got += list(it)
    assert "filter(test_filter_error" in _notes(info) and "example #44" in _notes(info)
    assert "source arrow shard 2, row 14" in _notes(info)
    ok = src(4).filter(lambda ex: ex["id"] % 2 == 0)
    ok.load_state_dict(state)
    assert [e["id"] for e in got + list(ok)] == list(range(0, 60, 2))


def test_map_error_over_generator_and_parquet_sources_names_their_shard(tmp_path):
    def boom(ex):
        if ex["id"] in (105, 2007):
            raise ValueError("cannot tokenize")
        return {}

    with pytest.raises(ValueError, match="cannot tokenize") as info:
        list(gen_src(3).map(boom))
    assert "source generator shard 1, row 5" in _notes(info) and "example #15" in _notes(info)
    paths = []
    for s in range(3):
        p = tmp_path / f"p{s}.parquet"
        pq.write_table(pa.table({"id": list(range(s * 1000, s * 1000 + 10))}), p)
        paths.append(str(p))
    with pytest.raises(ValueError, match="cannot tokenize") as info:
        list(ri.IterableDataset.from_parquet(paths).map(boom))
    assert "source files shard 2, row 7" in _notes(info) and "example #27" in _notes(info)
    # a data file source's shards are its files: the note names the file, also for a batch and
    # under a global shuffle (which reads the files at permuted rows)
    assert f"row 7, file {paths[2]!r})" in _notes(info)
    with pytest.raises(ValueError, match="cannot tokenize") as info:
        list(ri.IterableDataset.from_parquet(paths).map(lambda b: [boom({"id": i}) for i in b["id"]] and {},
                                                        batched=True, batch_size=4))
    assert f"source files shard 2, rows 4..7, file {paths[2]!r})" in _notes(info), _notes(info)
    with pytest.raises(ValueError, match="cannot tokenize") as info:
        list(ri.IterableDataset.from_parquet(paths).shuffle(seed=1, buffer_size=None).map(boom))
    assert f"source files shard 2, row 7, file {paths[2]!r})" in _notes(info), _notes(info)


def test_a_batched_map_error_names_the_rows_of_the_failing_batch():
    def boom(batch):
        if 23 in batch["id"]:
            raise ValueError("bad batch")
        return batch

    hf = Dataset.from_dict({"id": list(range(50))})  # 3 shards: ids 0-16, 17-33, 34-49
    for size, rows in ((4, "rows 3..6"), (3, "rows 4..6")):
        with pytest.raises(ValueError, match="bad batch") as info:
            list(ri.to_iterable_dataset(hf, num_shards=3).map(boom, batched=True, batch_size=size))
        assert f"source arrow shard 1, {rows})" in _notes(info), (size, _notes(info))
    # the items are batches of ``batch()``: from the first row of the first to the last of the last
    with pytest.raises(ValueError, match="bad batch") as info:
        list(ri.to_iterable_dataset(hf, num_shards=3).batch(4).map(
            lambda b: boom({"id": [i for r in b["id"] for i in r]}) and b, batched=True, batch_size=2))
    assert "from source arrow shard 0, row 16 to source arrow shard 1, row 6" in _notes(info), _notes(info)
    # a per-example map over batch(): the one batch that failed, from its first row to its last (it named
    # the last row alone, though any row of the batch may be the bad one)
    with pytest.raises(ValueError, match="bad batch") as info:
        list(ri.to_iterable_dataset(hf, num_shards=3).batch(4).map(boom))
    assert "on example #5 (source arrow shard 1, rows 3..6)" in _notes(info), _notes(info)


def test_an_error_above_an_interleave_names_the_input_its_example_came_from():
    """``interleave_datasets([...]).map(f)``, the usual mix of corpora: an error of ``f`` named no
    input at all (the interleave gave no position), leaving the user to guess which dataset held
    the bad example. The note now names the input, in turn or drawn at random (past the first block
    of 1000 draws too), for a batch of rows, for an example retried from a state, and through a
    DataLoader worker."""
    def inputs():
        return [ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(base, base + 700))}), num_shards=2)
                for base in (0, 10_000, 20_000)]

    def note_and_input(ds):
        with pytest.raises(ValueError) as info:
            list(ds)
        return _notes(info), int(str(info.value).split()[-1]) // 10_000

    for probabilities in (None, [0.5, 0.2, 0.3]):
        for k in (0, 1, 2, 7, 1003, 1501):
            ds = ri.interleave_datasets(inputs(), probabilities=probabilities, seed=5,
                                        stopping_strategy="all_exhausted_without_replacement").map(_failing_at(k))
            notes, came_from = note_and_input(ds)
            assert f"on example #{k} from interleave_datasets input {came_from} (source arrow shard " in notes, (
                probabilities, k, notes)
    # a batch of rows from two inputs
    first = _failing_at(0)
    batched = ri.interleave_datasets(inputs()).map(lambda b: first({"id": b["id"][-1]}), batched=True, batch_size=4)
    with pytest.raises(ValueError) as info:
        list(batched)
    assert ("on the batch of examples #0..#3 (first row from interleave_datasets input 0: source arrow shard 0, row 0, "
            "last row from interleave_datasets input 0: source arrow shard 0, row 1)") in _notes(info), _notes(info)
    second = _failing_at(1)
    batches = ri.interleave_datasets(inputs()).batch(2).map(lambda b: second(b) or b, batched=True, batch_size=2)
    with pytest.raises(ValueError) as info:
        list(batches)  # the second batch of batches: rows 4..7, from inputs 1, 2, 0, 1
    assert ("on the batch of examples #2..#3 (first row from interleave_datasets input 1: source arrow shard 0, row 1, "
            "last row from interleave_datasets input 1: source arrow shard 0, row 2)") in _notes(info), _notes(info)
    # retried from a state, still broken: the state's turn names the input
    ds = ri.interleave_datasets(inputs(), probabilities=[0.5, 0.2, 0.3], seed=1).map(_failing_at(5))
    notes, came_from = note_and_input(ds)
    again = ri.interleave_datasets(inputs(), probabilities=[0.5, 0.2, 0.3], seed=1).map(_failing_at(0))
    again.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    notes, _ = note_and_input(again)
    assert f"example #5 (retried from the state) from interleave_datasets input {came_from} (source arrow" in notes, notes
    # through a DataLoader worker: torch re-raises the worker's traceback, the notes with it
    loader = StatefulDataLoader(ri.interleave_datasets(inputs(), probabilities=[0.5, 0.2, 0.3], seed=1).map(_failing_at(5)),
                                batch_size=2, num_workers=1, collate_fn=as_lists)
    it = iter(loader)
    try:
        with pytest.raises(ValueError) as info:
            list(it)
        text = str(info.value)
        del info
    finally:
        it._shutdown_workers()
    assert "in map(_failing_at.<locals>.f)" in text and "on example #5 from interleave_datasets input " in text


@pytest.mark.parametrize("probabilities", [None, [0.5, 0.2, 0.3]])
@pytest.mark.parametrize("strategy", ["first_exhausted", "all_exhausted", "all_exhausted_without_replacement"])
def test_an_error_right_above_an_interleave_names_the_source_shard_and_row(strategy, probabilities, soak):
    """``interleave_datasets([...]).map(f)`` (no shuffle): the note named the input alone, though the
    input can count back to the row (the example it peeked since, if any). Brute force: a failure
    injected at every example, the row named is the true one (through a map, a take, an input that
    ends and restarts); where the input cannot count (a filter), the input alone, never another row.
    Every fourth example and the last ones in CI; every example with --soak (make soak)."""
    def inputs():
        return [_rows(), _rows(100).map(lambda ex: {"y": 1}).take(60), _rows(200).filter(lambda ex: ex["id"] % 3 > 0)]

    def build(f):
        return ri.interleave_datasets(inputs(), probabilities=probabilities, seed=4,
                                      stopping_strategy=strategy).map(f)

    n = sum(1 for _ in build(lambda ex: {}))
    cuts = range(n) if soak else sorted({*range(0, n, 4), *range(n - 3, n)})
    for i, notes in _notes_of_failures(build, cuts):
        j = i // 100
        if j == 2:
            assert "(interleave_datasets input 2)" in notes and "source arrow" not in notes, (i, notes)
        else:
            assert f" from interleave_datasets input {j} ({_where_mod(i)})" in notes, (i, notes)



def test_an_error_above_a_concatenation_of_columns_names_the_row():
    """``concatenate_datasets([texts, labels], axis=1).map(f)``: the note named no row (the node
    gave no position), although its inputs are read in step, none ahead. It now names where the
    row's part from the first input not exhausted was read, for a batch its first and last row."""
    a = ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(10))}), num_shards=2)  # rows 0-4, 5-9
    b = ri.to_iterable_dataset(Dataset.from_dict({"j": list(range(100, 116))}), num_shards=2)  # 100-107, 108-115

    def boom(ex):
        if ex["j"] in (103, 112):
            raise ValueError("bad")
        return {}

    with pytest.raises(ValueError) as info:
        list(ri.concatenate_datasets([a, b], axis=1).map(boom))
    assert "on example #3 (source arrow shard 0, row 3)" in _notes(info), _notes(info)
    with pytest.raises(ValueError) as info:  # the first input is exhausted after 10 rows: the second's row
        list(ri.concatenate_datasets([a, b], axis=1).skip(4).map(lambda ex: boom(ex) if ex["j"] > 110 else {}))
    assert "on example #8 (source arrow shard 1, row 4)" in _notes(info), _notes(info)
    with pytest.raises(ValueError) as info:
        list(ri.concatenate_datasets([a, b], axis=1).batch(2).map(
            lambda bb: [boom({"j": j}) for r in bb["j"] for j in r] and bb, batched=True, batch_size=2))
    assert "on the batch of examples #0..#1 (source arrow shard 0, rows 0..3)" in _notes(info), _notes(info)

def _where(i: int) -> str:
    """Where row ``id`` ``i`` of ``_rows()`` is read: 4 shards of 25 rows."""
    return f"source arrow shard {i // 25}, row {i % 25}"


def _rows(offset: int = 0) -> ri.IterableDataset:
    return ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(offset, offset + 100))}), num_shards=4)


def _raising_on(bad: int):
    def f(ex):
        if ex["id"] == bad:
            raise ValueError(f"bad {bad}")
        return {}
    return f


def test_an_error_above_a_replay_shuffle_names_the_source_row_of_its_example():
    """``shuffle(...).map(f)``: the note of an error of ``f`` named no row (the shuffle gave no
    position), although a replay-mode buffer keeps where each example came from. It now names the
    source shard and row of the example it raised on - in a filter, a batched map (the first and the
    last row, never as a range: they are no run of rows), over ``batch()``, while the buffer fills,
    mixes or drains, after a resume, through an interleave, a concatenation or a map with indices
    below, for data files with the file, and through DataLoader workers."""
    def replay(ds):
        return ds.shuffle(seed=0, buffer_size=10, buffer_state="replay")

    order = [ex["id"] for ex in replay(_rows())]
    for bad in (order[0], order[40], 57, order[-5], order[-1]):  # mixing, draining (the last 10)
        for name, build in (
                ("map", lambda ds: ds.map(_raising_on(bad))),
                ("filter", lambda ds: ds.filter(lambda ex: _raising_on(bad)(ex) or True)),
                ("below", lambda ds: ds)):
            ds = replay(_rows()).map(_raising_on(bad)) if name != "below" else replay(
                _rows().map(lambda ex, i: {}, with_indices=True)).map(_raising_on(bad))
            if name == "filter":
                ds = build(replay(_rows()))
            with pytest.raises(ValueError, match=f"bad {bad}") as info:
                list(ds)
            k = order.index(bad)
            assert f"on example #{k} ({_where(bad)})" in _notes(info), (name, bad, _notes(info))
    # a batched map and a map over batch(): the ends of the failing batch
    with pytest.raises(ValueError) as info:
        list(replay(_rows()).map(lambda b: [_raising_on(57)({"id": i}) for i in b["id"]] and b, batched=True,
                                 batch_size=4))
    k = order.index(57) // 4 * 4
    assert (f"on the batch of examples #{k}..#{k + 3} (first row from {_where(order[k])}, last row from "
            f"{_where(order[k + 3])})") in _notes(info), _notes(info)
    with pytest.raises(ValueError) as info:
        list(replay(_rows()).batch(4).map(lambda b: [_raising_on(57)({"id": i}) for i in b["id"]] and b))
    assert (f"on example #{order.index(57) // 4} (first row from {_where(order[k])}, last row from "
            f"{_where(order[k + 3])})") in _notes(info), _notes(info)
    # resumed: the state's ``last`` names the example yielded last
    ds = replay(_rows()).map(_raising_on(-1))
    it = iter(ds)
    for _ in range(30):
        next(it)
    again = replay(_rows()).map(_raising_on(order[30]))
    again.load_state_dict(json.loads(json.dumps(ds.state_dict())))
    with pytest.raises(ValueError) as info:
        list(again)
    assert f"on example #30 ({_where(order[30])})" in _notes(info), _notes(info)
    # through an interleave and a concatenation: the row in the input it came from
    for mix in (lambda: ri.interleave_datasets([_rows(), _rows(1000)], probabilities=[0.5, 0.5], seed=2),
                lambda: ri.concatenate_datasets([_rows(1000), _rows()])):
        with pytest.raises(ValueError) as info:
            list(replay(mix()).map(_raising_on(57)))
        assert f"({_where(57)})" in _notes(info), _notes(info)
    labels = ri.to_iterable_dataset(Dataset.from_dict({"j": list(range(100))}), num_shards=4)
    with pytest.raises(ValueError) as info:
        list(replay(ri.concatenate_datasets([_rows(), labels], axis=1)).map(_raising_on(57)))
    assert f"({_where(57)})" in _notes(info), _notes(info)


def test_an_error_above_a_replay_shuffle_of_data_files_names_the_file(tmp_path):
    paths = []
    for s in range(3):
        p = tmp_path / f"p{s}.parquet"
        pq.write_table(pa.table({"id": list(range(s * 1000, s * 1000 + 10))}), p)
        paths.append(str(p))
    with pytest.raises(ValueError) as info:
        list(ri.IterableDataset.from_parquet(paths).shuffle(seed=1, buffer_size=4, buffer_state="replay")
             .map(_raising_on(2007)))
    assert f"(source files shard 2, row 7, file {paths[2]!r})" in _notes(info), _notes(info)


def _failing_at(k: int):
    """A function raising ``ValueError("bad <id>")`` on its ``k``-th call (from 0)."""
    calls = [0]

    def f(ex):
        calls[0] += 1
        if calls[0] == k + 1:
            raise ValueError(f"bad {ex['id']}")
        return {}
    return f


def _notes_of_failures(build, ks) -> list[tuple[int, str]]:
    """``(id, notes)`` of the example ``build(f)``'s ``f`` raised on, for ``f`` failing at each of ``ks``."""
    out = []
    for k in ks:
        with pytest.raises(ValueError) as info:
            list(build(_failing_at(k)))
        out.append((int(str(info.value).split()[-1]), _notes(info)))
    return out


UNKNOWN = ("(source row not known: it came out of a shuffle buffer, which keeps its examples without where they "
           "were read; shuffle(..., buffer_state='replay') keeps that too")


@pytest.mark.parametrize("buffer_state", ["examples", "drop"])
def test_an_error_above_a_shuffle_of_stored_examples_names_the_row_worked_out_from_its_draws(buffer_state):
    """A default (or ``"drop"``) buffer stores its examples without where they were read: the note
    named no row. Nothing is recorded per example now either (the loop is the library's hottest), but
    the pass keeps its generator's state at each block of draws: the draws tell which slot the
    example left and since when it was there, hence how many inputs were read after it, and a source
    (through a per-example ``map``, calls ahead included) counts back that many rows. Checked at every
    example (filling, mixing, draining), over several blocks of draws and shards, for a batched map and
    over ``batch()``; where it cannot be worked out (a filter below, an example a loaded state held),
    the note says why and how to have it named - never another row."""
    def shuffled(ds, size=10, seed=0):
        return ds.shuffle(seed=seed, buffer_size=size, buffer_state=buffer_state)

    def where_3000(i):
        return f"source arrow shard {i // 1000}, row {i % 1000}"

    async def ahead(ex):
        return {"y": 1}

    cases = [  # (build, cuts, where)
        (lambda f: shuffled(_rows()).map(f), range(100), _where),
        (lambda f: shuffled(_rows().map(lambda ex: {"y": 1}), size=7, seed=1).map(f), range(100), _where),
        (lambda f: shuffled(_rows().map(ahead)).map(f), range(0, 100, 9), _where),  # calls started ahead
        (lambda f: shuffled(_rows().map(lambda ex: {"a": 0}).rename_column("a", "b").select_columns(["id", "b"])
                            .remove_columns(["b"])).map(f), range(0, 100, 7), _where),
        (lambda f: shuffled(_rows(), size=1).map(f), (0, 1, 50, 99), _where),
        (lambda f: shuffled(_rows(), size=500).map(f), (0, 1, 50, 99), _where),  # never full
        # slots last drawn blocks of 1024 draws ago, rows counted back across shards
        (lambda f: shuffled(ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(3000))}), num_shards=3),
                            size=700, seed=2).map(f), (*range(0, 3000, 211), 2999), where_3000),
        (lambda f: shuffled(ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(3000))}), num_shards=3),
                            size=3, seed=3).map(f), (*range(0, 3000, 307), 2997, 2999), where_3000),
    ]
    for build, cuts, where in cases:
        for i, notes in _notes_of_failures(build, cuts):
            assert f"({where(i)})" in notes, (i, notes)
    # a batched map and a map over batch(): the first and last rows of the failing batch
    order = [ex["id"] for ex in shuffled(_rows())]
    k = order.index(57) // 4 * 4
    with pytest.raises(ValueError) as info:
        list(shuffled(_rows()).map(lambda b: [_raising_on(57)({"id": i}) for i in b["id"]] and b, batched=True,
                                   batch_size=4))
    assert (f"on the batch of examples #{k}..#{k + 3} (first row from {_where(order[k])}, last row from "
            f"{_where(order[k + 3])})") in _notes(info), _notes(info)
    with pytest.raises(ValueError) as info:
        list(shuffled(_rows()).batch(4).map(lambda b: [_raising_on(57)({"id": i}) for i in b["id"]] and b))
    assert f"(first row from {_where(order[k])}, last row from {_where(order[k + 3])})" in _notes(info), _notes(info)
    # not known: a filter below (no count of the rows it dropped), a pass a prefetch thread runs on
    # (its state is no fixed point), examples a loaded state held
    for build in (lambda f: shuffled(_rows().filter(lambda ex: ex["id"] % 3 > 0)).map(f),
                  lambda f: shuffled(_rows()).prefetch(4).map(f)):
        for i, notes in _notes_of_failures(build, (0, 30, 60)):
            assert UNKNOWN in notes, notes

    def resumed(f):
        first = shuffled(_rows(), size=20).map(_failing_at(-1))
        it = iter(first)
        for _ in range(30):
            next(it)
        ds = shuffled(_rows(), size=20).map(f)
        ds.load_state_dict(json.loads(json.dumps(first.state_dict())))
        return ds
    if buffer_state == "drop":  # the buffer is refilled: every row is known again (20 rows were lost)
        assert all(f"({_where(i)})" in n for i, n in _notes_of_failures(resumed, range(50)))
    else:  # the slots the state held are known once drawn again
        notes = _notes_of_failures(resumed, range(70))
        assert all(f"({_where(i)})" in n or UNKNOWN in n for i, n in notes), notes
        assert any(UNKNOWN in n for _, n in notes) and f"({_where(notes[-1][0])})" in notes[-1][1]
    # the global shuffle knows where each row is read
    with pytest.raises(ValueError) as info:
        list(_rows().shuffle(seed=0, buffer_size=None).map(_raising_on(57)))
    assert f"({_where(57)})" in _notes(info), _notes(info)


def _where_mod(i: int) -> str:
    """Where row ``id`` ``i`` of ``_rows(offset)`` is read, for any offset that is a multiple of 100."""
    return _where(i % 100)


@pytest.mark.parametrize("buffer_state", ["examples", "drop"])
def test_a_shuffle_of_stored_examples_counts_back_through_concatenations_skip_take_repeat_and_shuffles(buffer_state):
    """The note of an error above a default (or ``"drop"``) buffer said 'source row not known' when the
    buffer's input went through a concatenation, a skip / take, a repeat or another such shuffle: they
    could not count back over the examples they yielded. A concatenation counts back in the input
    being read and on in the inputs before it, skip / take and repeat (in its round) pass the count
    on, and a shuffle below works it out from its own draws. Brute force: a failure injected at
    every example (every few in the longer runs), the row named is the true one; unknown only where
    it cannot be known (a repeat's earlier round, before the pass)."""
    def shuffled(ds, size=10, seed=0):
        return ds.shuffle(seed=seed, buffer_size=size, buffer_state=buffer_state)

    def concat(*parts):
        return ri.concatenate_datasets(list(parts))

    always = [  # (build, cuts): every example's row named
        (lambda f: shuffled(concat(_rows(), _rows(100), _rows(200))).map(f), (*range(0, 300, 11), 298, 299)),
        (lambda f: shuffled(concat(_rows().map(lambda ex: {"y": 1}), _rows(100)), size=7, seed=1).map(f),
         range(90, 110)),  # across the end of the first input
        (lambda f: shuffled(concat(_rows(), _rows(100)), size=150, seed=2).map(f), range(0, 200, 13)),
        (lambda f: shuffled(_rows().skip(13)).map(f), range(0, 87, 6)),
        (lambda f: shuffled(_rows().take(61), size=5).map(f), range(0, 61, 5)),
        (lambda f: shuffled(concat(_rows().skip(30), _rows(100).take(40)).skip(3), seed=4).map(f), range(0, 107, 4)),
        (lambda f: shuffled(shuffled(_rows(), size=7, seed=1), size=5, seed=2).map(f), range(0, 100, 3)),
        (lambda f: shuffled(shuffled(concat(_rows(), _rows(100)), size=30, seed=3)).map(f), range(0, 200, 9)),
        (lambda f: shuffled(shuffled(_rows(), size=150, seed=3), size=4).map(f), range(0, 100, 7)),  # never mixes
        # an interleave (first_exhausted): its turns tell the input, which counts back (its peeked example too)
        (lambda f: shuffled(ri.interleave_datasets([_rows(), _rows(100).take(70), _rows(200)])).map(f), range(0, 210, 4)),
        (lambda f: shuffled(ri.interleave_datasets([_rows(), _rows(100)], probabilities=[0.3, 0.7], seed=5),
                            size=6).map(f), range(0, 140, 3)),
        (lambda f: shuffled(ri.interleave_datasets([concat(_rows(), _rows(300)), _rows(100).skip(5)]), size=20,
                            seed=6).map(f), range(0, 190, 7)),
        # a concatenation shuffled by a shuffle above: its inputs in a drawn order, their shards dealt
        (lambda f: shuffled(concat(_rows(), _rows(100))).map(f), range(0, 200, 17)),
    ]
    for build, cuts in always:
        for i, notes in _notes_of_failures(build, cuts):
            assert f"({_where_mod(i)})" in notes, (i, notes)
    # a repeat: named in the round being read; an example read in an earlier round (or drained once
    # the repeat ended and reset its input) is not known - never another row
    for build in (lambda f: shuffled(_rows().repeat(3)).map(f), lambda f: shuffled(_rows().skip(50).repeat(4)).map(f)):
        notes = _notes_of_failures(build, range(0, 200, 3))
        assert all(f"({_where_mod(i)})" in n or UNKNOWN in n for i, n in notes), notes
        assert sum(UNKNOWN in n for _, n in notes) <= len(notes) // 4, notes
    # an interleave that restarts its inputs: not known (never another row)
    for i, notes in _notes_of_failures(lambda f: shuffled(ri.interleave_datasets(
            [_rows(), _rows(100).take(30)], stopping_strategy="all_exhausted")).map(f), (0, 50, 100)):
        assert UNKNOWN in notes, (i, notes)
    # where the input cannot count back (a filter below the concatenation), the note says so
    for i, notes in _notes_of_failures(
            lambda f: shuffled(concat(_rows(), _rows(100).filter(lambda ex: ex["id"] % 3 > 0))).map(f), (0, 90, 150)):
        assert f"({_where_mod(i)})" in notes or (UNKNOWN in notes and i >= 100), (i, notes)


@TORCH
@pytest.mark.parametrize("loader", ["torchdata", "ours"])
@pytest.mark.parametrize("buffer_state", ["examples", "replay"])
def test_an_error_above_a_shuffle_in_a_worker_names_the_row(loader, buffer_state):
    cls = StatefulDataLoader if loader == "torchdata" else ri.StatefulDataLoader
    ds = _rows().shuffle(seed=0, buffer_size=10, buffer_state=buffer_state).map(_raising_on(57))
    it = iter(cls(ds, batch_size=4, num_workers=2, collate_fn=as_lists))
    try:
        with pytest.raises(ValueError, match="bad 57") as info:
            for _ in it:
                pass
        text = str(info.value) + _notes(info)
        del info
    finally:
        it._shutdown_workers()
    assert f"({_where(57)})" in text, text


@TORCH
def test_error_inside_a_worker_reaches_the_trainer_with_its_notes():
    def boom(ex):
        if ex["id"] == 33:
            raise RuntimeError("broken example")
        return {}

    loader = StatefulDataLoader(src(4).map(boom), batch_size=4, num_workers=2, collate_fn=as_lists)
    it = iter(loader)
    try:
        with pytest.raises(RuntimeError, match="broken example") as info:
            for _ in it:
                pass
        text = str(info.value)
        del info  # its traceback holds the iterator: let the workers go now, not at the next test
    finally:
        it._shutdown_workers()
    assert "map(test_error_inside_a_worker" in text and "shard 2, row 3" in text


def test_error_in_a_replay_pipeline_and_resume_from_the_state_before():
    def fn(ex):
        if ex["id"] % 20 == 7 and FAIL[0]:
            raise OSError("flaky storage")
        return {"y": ex["id"]}

    def build():
        return ri.interleave_datasets([src(3).map(fn), src(2, HF_B)]).shuffle(seed=1, buffer_size=5,
                                                                                buffer_state="replay")

    FAIL[0] = False
    full = [e["id"] for e in build()]
    FAIL[0] = True
    ds = build()
    it = iter(ds)
    got, state = [], None
    with pytest.raises(OSError, match="flaky storage") as info:
        for ex in it:
            got.append(ex["id"])
            state = ds.state_dict()
    assert "map(test_error_in_a_replay" in _notes(info) and "example #" in _notes(info)
    assert "source arrow shard" in _notes(info) and len(got) > 5
    FAIL[0] = False
    ds2 = build()
    ds2.load_state_dict(json.loads(json.dumps(state)))
    assert got + [e["id"] for e in ds2] == full


FAIL = [False]


# ============================================================================ data files that changed


def _files(tmp_path, fmt, n=(15, 12, 9)):
    paths = []
    for s, k in enumerate(n):
        t = pa.table({"id": list(range(s * 100, s * 100 + k)), "text": [f"r{s}-{j}" for j in range(k)]})
        p = tmp_path / f"part{s}.{fmt}"
        if fmt == "arrow":
            with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
                w.write_table(t)
        elif fmt == "csv":
            pcsv.write_csv(t, p)
        else:
            pq.write_table(t, p, row_group_size=4)
        paths.append(str(p))
    return paths


def _rewrite(path, fmt, k):
    t = pa.table({"id": list(range(k)), "text": ["x"] * k})
    if fmt == "arrow":
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
            w.write_table(t)
    elif fmt == "csv":
        pcsv.write_csv(t, path)
    else:
        pq.write_table(t, path)


OPEN = {"arrow": ri.IterableDataset.from_arrow, "csv": ri.IterableDataset.from_csv,
        "parquet": ri.IterableDataset.from_parquet}


@pytest.mark.parametrize("fmt", ["arrow", "csv"])
def test_truncated_or_vanished_arrow_and_csv_files(tmp_path, fmt):
    paths = _files(tmp_path, fmt)
    ds = OPEN[fmt](paths)
    take(iter(ds), 20)  # shard 0 done, shard 1 at row 5
    state = ds.state_dict()
    _rewrite(paths[1], fmt, 3)
    ds2 = OPEN[fmt](paths)
    ds2.load_state_dict(state)
    with pytest.raises(ValueError, match="has 3 rows but the state says 5 were already read"):
        list(ds2)
    ds3 = OPEN[fmt](paths)
    os.unlink(paths[1])  # after the dataset was built (building now names it: FileNotFoundError, as HF)
    ds3.load_state_dict(state)
    with pytest.raises(ValueError, match=f"cannot read data file .*part1.{fmt}.*shard 1"):
        list(ds3)
    with pytest.raises(FileNotFoundError, match=f"part1.{fmt}"):
        OPEN[fmt](paths)
    # a file that vanished before it was reached is not skipped either
    _rewrite(paths[1], fmt, 12)
    ds4 = OPEN[fmt](paths)
    os.unlink(paths[2])
    ds4.load_state_dict(state)
    with pytest.raises(ValueError, match=f"cannot read data file .*part2.{fmt}"):
        list(ds4)


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "csv"])
def test_replay_buffer_over_files_that_shrank_or_vanished(tmp_path, fmt):
    paths = _files(tmp_path, fmt)

    def build():
        return OPEN[fmt](paths).map(lambda ex: {"n": len(ex["text"])}).shuffle(seed=3, buffer_size=8,
                                                                                buffer_state="replay")

    full = [e["id"] for e in build()]
    ds = build()
    head = [e["id"] for e in take(iter(ds), 6)]
    state = json.loads(json.dumps(ds.state_dict()))
    buffered = {tuple(p) for p in next(n for n in _walk(state["state"]) if n["node"] == "shuffle")["buffer"]}
    assert any(s == 1 for s, _ in buffered)  # the buffer holds rows of shard 1
    ok = build()
    ok.load_state_dict(state)
    assert head + [e["id"] for e in ok] == full
    _rewrite(paths[1], fmt, 1)  # shard 1 keeps only its row 0
    ds2 = build()
    if fmt == "parquet":  # row counts are in the metadata: refused at load time
        with pytest.raises(ValueError, match="past the end of shard 1"):
            ds2.load_state_dict(state)
    else:  # shard 1 was read to its end: its file has another size now, refused at load time
        with pytest.raises(ValueError, match=f"part1.{fmt}'\\): rows were added to or removed from it"):
            ds2.load_state_dict(state)
        unchecked = copy.deepcopy(state)  # without the sizes (a state of an earlier release): named on reading
        for node in _walk(unchecked["state"]):
            node.pop("sizes", None)
        ds2.load_state_dict(unchecked)
        with pytest.raises(ValueError, match=f"cannot re-read .*shard 1 \\(file .*part1.{fmt}'\\)"):
            next(iter(ds2))
    ds3 = build()
    os.unlink(paths[1])  # after the dataset was built (building now names it: FileNotFoundError, as HF)
    with pytest.raises(ValueError, match=f"part1.{fmt}"):
        ds3.load_state_dict(state)
        next(iter(ds3))
    with pytest.raises(FileNotFoundError, match=f"part1.{fmt}"):
        build()


def _walk(st):
    yield st
    for c in st.get("children", ()):
        yield from _walk(c)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_file_cut_short_is_a_clear_error(tmp_path, fmt):
    """A partial copy (the end of the file missing) between save and resume: the first file is
    refused when the dataset is built (its columns are read then), another when it is read."""
    for k in (0, 1):
        (tmp_path / str(k)).mkdir()
        paths = _files(tmp_path / str(k), fmt)
        ds = OPEN[fmt](paths)
        take(iter(ds), 3)
        state = ds.state_dict()
        data = open(paths[k], "rb").read()
        with open(paths[k], "wb") as f:
            f.write(data[: len(data) // 2])
        with pytest.raises(ValueError, match=f"cannot read data file .*part{k}.{fmt}"):
            ds2 = OPEN[fmt](paths)
            ds2.load_state_dict(state)
            list(ds2)


def test_parquet_damaged_in_the_middle_is_a_clear_error(tmp_path):
    paths = _files(tmp_path, "parquet")
    ds = OPEN["parquet"](paths)
    take(iter(ds), 3)
    state = ds.state_dict()
    with open(paths[0], "r+b") as f:
        f.seek(4)
        f.write(b"garbage!" * 4)
    ds2 = OPEN["parquet"](paths)
    ds2.load_state_dict(state)
    with pytest.raises(ValueError, match="cannot read data file .*part0.parquet"):
        list(ds2)
