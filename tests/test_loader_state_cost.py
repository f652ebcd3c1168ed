"""The exact shuffle buffer under torchdata's ``StatefulDataLoader``, and states that later edits
of yielded examples cannot change.

* In a DataLoader worker a shuffle buffer's state is one value (``state.BufferLog``) that the
  DataLoader's pickler sends as the writes since the last one it sent, so the loader sends
  O(batch) per batch; the main process rebuilds the buffer from those.
* A state taken earlier never changes afterwards, even when a ``map`` after the shuffle edits the
  yielded examples in place (a list appended to, a numpy array incremented).
"""

from __future__ import annotations

import copy
import gc
import io
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader  # noqa: E402
from torchdata.stateful_dataloader.incremental_state import _IncrementalState  # noqa: E402

from fresh import run_fresh  # noqa: E402
import resumable_iterable as ri  # noqa: E402
import resumable_iterable.loader.session as ri_session  # noqa: E402
from resumable_iterable.state import (ExampleChunks, copy_example, inline_buffers,  # noqa: E402
                                      replay_journal)

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]


def rows(shards, n=12):
    for s in shards:
        for i in range(n):
            k = s * 100 + i
            yield {"id": k, "tags": [k], "x": np.full(4, k, dtype=np.int64)}


def edit_in_place(ex):
    ex["tags"].append(-1)
    ex["x"] += 1
    return ex


def build(buffer_size=7, buffer_state="examples"):
    return (ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0, 1, 2, 3]})
            .shuffle(seed=5, buffer_size=buffer_size, buffer_state=buffer_state)
            .map(edit_in_place))


def key(ex) -> tuple:
    return ex["id"], tuple(ex["tags"]), tuple(np.asarray(ex["x"]).ravel().tolist())


# ---------------------------------------------------------------------- in memory


def test_a_taken_state_never_changes_when_a_later_map_edits_examples_in_place():
    ds = build()
    it = iter(ds)
    taken = []
    for _ in range(48):
        state = ds.state_dict()
        taken.append((state, ri.dumps_state(state)))  # its content at capture
        ex = next(it)
        assert ex["tags"][-1] == -1 and ex["x"][0] == ex["id"] + 1  # the map saw its own copy
    for state, text in taken:
        assert ri.dumps_state(state) == text
    full = [key(e) for e in build()]
    assert [key(e) for e in build()][:5] == full[:5]
    for k in (0, 3, 7, 20, 47):  # resuming from any of them gives the exact tail
        again = build()
        again.load_state_dict(taken[k][0])
        assert [key(e) for e in again] == full[k:]


def test_a_loaded_state_is_not_changed_by_the_pipeline_that_loaded_it():
    ds = build()
    it = iter(ds)
    for _ in range(10):
        next(it)
    state = ds.state_dict()
    text = ri.dumps_state(state)
    other = build()
    other.load_state_dict(state)
    list(other)
    assert ri.dumps_state(state) == text


def test_examples_are_copied_only_when_a_state_may_share_them():
    made = {}

    def remember(ex):  # returns None: the example yielded is then this very dict (a map's output is a new one)
        made[ex["id"]] = ex

    ds = (ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0]})
          .map(remember).shuffle(seed=1, buffer_size=4))
    it = iter(ds)
    first = [next(it) for _ in range(3)]  # no state taken: the buffer hands out its own examples
    assert all(e is made[e["id"]] for e in first)
    ds.state_dict()
    later = [next(it) for _ in range(6)]
    buffered_at_capture = later[:1]  # the next one out was in the buffer when the state was taken
    assert all(e is not made[e["id"]] and key(e) == key(made[e["id"]]) for e in buffered_at_capture)
    assert any(e is made[e["id"]] for e in later)  # examples that entered afterwards are not copied


def test_copy_example_copies_containers_and_arrays_and_shares_immutables():
    arr = np.arange(3)
    obj = np.empty(2, dtype=object)
    obj[:] = [[1], [2]]
    ex = {"s": "a", "b": b"x", "t": (1, "y"), "l": [1, [2]], "d": {"a": [1]}, "x": arr, "o": obj,
          "n": np.int32(3), "tl": ([1],)}
    c = copy_example(ex)
    assert c is not ex and c["s"] is ex["s"] and c["b"] is ex["b"] and c["t"] is ex["t"]
    assert c["l"] == ex["l"] and c["l"] is not ex["l"] and c["l"][1] is not ex["l"][1]
    assert c["d"] is not ex["d"] and c["d"]["a"] is not ex["d"]["a"]
    assert c["x"] is not arr and np.array_equal(c["x"], arr)
    assert c["o"] is not obj and c["o"][0] is not obj[0] and c["o"][0] == [1]
    assert c["tl"] == ex["tl"] and c["tl"][0] is not ex["tl"][0]
    c["x"] += 1
    c["l"][1].append(3)
    assert arr.tolist() == [0, 1, 2] and ex["l"] == [1, [2]]


def test_copy_example_of_flat_lists_shares_their_immutable_items_and_copies_the_rest():
    # flat lists of immutable values (token ids, floats, strings, None) are copied at once; a list
    # holding any mutable item (even last) still copies that item
    ids = list(range(1000, 3048))
    mixed = [1, 2.5, "a", None, True, b"x", 3 + 1j]
    late = [1, 2, 3, [4]]
    c = copy_example({"input_ids": ids, "m": mixed, "late": late, "np": [np.int64(1), 2]})
    assert c["input_ids"] == ids and c["input_ids"] is not ids and all(a is b for a, b in zip(c["input_ids"], ids))
    assert c["m"] == mixed and c["m"] is not mixed
    assert c["late"] == late and c["late"][3] is not late[3]
    assert c["np"] == [1, 2] and c["np"] is not None
    c["input_ids"].append(0)
    c["late"][3].append(5)
    assert len(ids) == 2048 and late == [1, 2, 3, [4]]
    assert copy_example([]) == [] and copy_example([[]]) == [[]]


# ---------------------------------------------------------------------- buffer logs


def drive(buf: ExampleChunks, steps: int, recording: bool, every: int, seed: int = 0, size: int = 50):
    """Write ``steps`` examples into ``buf`` as the shuffle loop does (filling, then random slots),
    taking a log every ``every`` steps: yields ``(log, the live buffer at that moment)``."""
    live: list = [ex for ch in buf for ex in ch]
    rng = np.random.default_rng(seed)
    for step in range(steps):
        if len(live) < size:
            i = len(live)
            live.append({"v": step, "tags": [step]})
            if not buf or len(buf[-1]) == 64:
                buf.append([])
                buf.owned.append(1)
            buf[-1].append(live[i])
        else:
            i = int(rng.integers(size))
            live[i] = {"v": step, "tags": [step]}
            buf[i >> 6][i & 63] = live[i]
        if recording:
            buf.pending[i] = live[i]
        if step % every == every - 1:
            yield buf.log(), [copy.deepcopy(e) for e in live]


@pytest.mark.parametrize("recording", [True, False])
def test_buffer_logs_give_the_buffer_and_never_change(recording):
    buf = ExampleChunks()
    buf.recording = recording  # False: a loop started before the process took its first log
    taken = []
    for log, live in drive(buf, 400, recording, 7):
        assert log.entries() == live
        if recording:
            assert buf.log() is log  # nothing written since: the same value, which the loader does not send
        taken.append((log, live))
        for ex in live:  # the consumer edits what it was handed: the logs hold their own copies
            ex["tags"].append(-1)
    for log, live in taken:
        assert log.entries() == [dict(e, tags=e["tags"][:-1]) for e in live]
        assert pickle.loads(pickle.dumps(log)) == log.entries() and copy.deepcopy(log) == log.entries()


def send(log) -> list:
    """A buffer log through the pickler the DataLoader uses, read back as the main process reads it."""
    return pickle.loads(ForkingPickler.dumps(log))


def test_the_main_process_rebuilds_each_buffer_from_the_writes_since_the_last_message():
    buf = ExampleChunks()
    buf.recording = True
    sizes = []
    for log, live in drive(buf, 600, True, 5):
        data = ForkingPickler.dumps(log)
        sizes.append(len(data))
        assert pickle.loads(data) == live
    row = len(pickle.dumps([3, {"v": 100, "tags": [100]}]))
    assert max(sizes[20:]) < 5 * row + 400  # the 5 writes since the previous message, not the 50 slots


@pytest.mark.parametrize("first_large", [True, False])
def test_small_and_large_examples_in_one_log_each_arrive_whole(first_large):
    import resumable_iterable.integrations.torch.arena as ri_arena

    def ex(k, large):
        return {"id": k, "x": np.full(8_192 if large else 4, k, dtype=np.float32), "nested": {"y": [k]}}

    buf = ExampleChunks()
    buf.recording = True
    kinds = [first_large, not first_large, True, False, False, True]
    for i, large in enumerate(kinds):
        if not buf or len(buf[-1]) == 64:
            buf.append([])
            buf.owned.append(1)
        buf[-1].append(ex(i, large))
        buf.pending[i] = buf[-1][-1]
    log = buf.log()
    assert [type(r) is ri_arena.Record for r in log.refs] == kinds  # large ones as records, in shared memory
    got = send(log)
    assert [(e["id"], e["x"].shape, e["nested"]) for e in got] == [(i, (8_192 if k else 4,), {"y": [i]})
                                                                   for i, k in enumerate(kinds)]
    assert all(np.all(e["x"] == e["id"]) for e in got)


def test_an_older_log_sent_after_a_newer_one_is_sent_whole_and_the_next_one_too():
    buf = ExampleChunks()
    buf.recording = True
    logs = list(drive(buf, 200, True, 4))
    assert send(logs[10][0]) == logs[10][1]
    assert send(logs[20][0]) == logs[20][1]
    assert send(logs[15][0]) == logs[15][1]  # older than the last one sent: the whole buffer
    assert send(logs[30][0]) == logs[30][1]  # cannot build on 15 with 16-20 sent already: whole again
    assert send(logs[31][0]) == logs[31][1]  # back to writes since the last message
    assert send(logs[31][0]) == logs[31][1]  # the same log again


def test_logs_taken_but_never_sent_are_not_kept_without_bound(monkeypatch):
    from resumable_iterable.state_logs import BufferTracker

    monkeypatch.setattr(BufferTracker, "MAX_UNSENT", 8)
    buf = ExampleChunks()
    buf.recording = True
    logs = list(drive(buf, 400, True, 3))
    assert send(logs[0][0]) == logs[0][1]
    assert len(buf.tracker.unsent) <= 8
    assert send(logs[-1][0]) == logs[-1][1]  # the logs between were dropped unsent: the whole buffer
    assert send(logs[-1][0]) == logs[-1][1]


def test_a_lost_message_is_named_not_papered_over():
    buf = ExampleChunks()
    buf.recording = True
    logs = list(drive(buf, 200, True, 4))
    send(logs[10][0])
    ForkingPickler.dumps(logs[11][0])  # pickled, never read by this process
    lost = ForkingPickler.dumps(logs[12][0])
    with pytest.raises(RuntimeError, match="out of sequence"):
        pickle.loads(lost)


def test_the_main_process_forgets_buffers_the_worker_no_longer_has():
    import resumable_iterable.integrations.torch.buffers as ri_torch

    def fresh_buffer():
        buf = ExampleChunks()
        buf.recording = True
        return buf

    first = fresh_buffer()
    for log, live in drive(first, 80, True, 8):
        assert send(log) == live
    uid = first.tracker.uid
    assert any(k[2] == uid for k in ri_torch._logs)
    del first, log
    gc.collect()
    second = fresh_buffer()
    for log, live in drive(second, 80, True, 8):
        assert send(log) == live
    assert not any(k[2] == uid for k in ri_torch._logs)


@pytest.mark.parametrize("journal, message", [
    ("x", "must be an object"),
    ({"log": {}, "size": -1}, "non-negative"),
    ({"log": {"a": []}, "size": 0}, "decimal"),
    ({"log": {"1": [0]}, "size": 1}, "pairs"),
    ({"log": {"1": [-1, {}]}, "size": 1}, "slot"),
    ({"log": {"1": [0, {"a": 1}]}, "size": 2}, "no example for slot 1"),
])
def test_a_malformed_journal_is_refused(journal, message):
    with pytest.raises(ValueError, match=message):
        replay_journal(journal, "j")


def test_inline_buffers_refuses_unknown_or_unused_buffers():
    env = {"state": {"node": "shuffle", "buffer": "0"}, "buffers": {"0/size": 0, "1/size": 0}}
    with pytest.raises(ValueError, match="no node refers"):
        inline_buffers(env)
    with pytest.raises(ValueError, match="no node refers"):
        inline_buffers({"state": {"node": "shuffle", "buffer": "0"}, "buffers": {"0": [], "1": []}})
    with pytest.raises(ValueError, match="must be a list"):
        inline_buffers({"state": {"node": "shuffle", "buffer": "0"}, "buffers": {"0": {"a": 1}}})
    with pytest.raises(ValueError, match="both whole and as journals"):
        inline_buffers({"state": {"node": "shuffle", "buffer": "0"}, "buffers": {"0": [], "0/size": 0}})
    whole = {"state": {"node": "shuffle", "buffer": "0"}, "buffers": {"0": [{"a": 1}, {"a": 3}]}}
    assert inline_buffers(whole) == {"state": {"node": "shuffle", "buffer": [{"a": 1}, {"a": 3}]}}
    with pytest.raises(ValueError, match="not a buffer"):
        inline_buffers({"state": {"node": "shuffle", "buffer": "2"}, "buffers": {"0/size": 0}})
    with pytest.raises(ValueError, match="neither"):
        inline_buffers({"state": {"node": "shuffle", "buffer": "0"}, "buffers": {"0/x": 0}})
    with pytest.raises(ValueError, match="'log' and 'size'"):
        inline_buffers({"state": {"node": "shuffle", "buffer": "0"}, "buffers": {"0/3": [0, {}]}})
    # the journal a version 0.2 worker state holds
    two = {"state": {"node": "shuffle", "buffer": "0"},
           "buffers": {"0/size": 2, "0/3": [0, {"a": 1}, 1, {"a": 2}], "0/5": [1, {"a": 3}]}}
    assert inline_buffers(two) == {"state": {"node": "shuffle", "buffer": [{"a": 1}, {"a": 3}]}}


def worker_deltas(monkeypatch, ds, batches, batch_size):
    """Bytes the loader would send per batch from a worker iterating ``ds`` (the worker's
    ``state_dict()`` diffed by torchdata, pickled as the DataLoader pickles it)."""
    monkeypatch.setattr(ri_session, "current_worker", lambda: (0, 1))
    it = iter(ds)
    inc = _IncrementalState(ds.state_dict())
    sizes = []
    for _ in range(batches):
        for _ in range(batch_size):
            next(it)
        sizes.append(len(ForkingPickler.dumps(inc.generate_delta(ds.state_dict()))))
    return sizes


def test_bytes_sent_per_batch_grow_with_the_batch_not_with_the_buffer(monkeypatch):
    from data import HF

    def per_batch(buffer_size):
        big = ri.to_iterable_dataset(HF.select(list(range(60)) * 40), num_shards=4)
        sizes = worker_deltas(monkeypatch, big.shuffle(seed=1, buffer_size=buffer_size), 150, 4)
        return sum(sizes[100:]) / 50  # after the buffer filled

    small, large = per_batch(50), per_batch(800)
    row = len(pickle.dumps({"id": 10, "text": "t10"}))
    assert small < 12 * 4 * row and large < 12 * 4 * row  # O(batch): a few rows per example
    assert large < 3 * small and large < 800 * row / 10  # not O(buffer)


def test_a_replay_buffer_sends_the_positions_of_new_examples_only(monkeypatch):
    from data import HF

    def per_batch(buffer_size):
        big = ri.to_iterable_dataset(HF.select(list(range(60)) * 40), num_shards=4)
        shuffled = big.shuffle(seed=1, buffer_size=buffer_size, buffer_state="replay")
        sizes = worker_deltas(monkeypatch, shuffled, 150, 4)
        return sum(sizes[100:]) / 50

    small, large = per_batch(50), per_batch(800)
    assert large < 2 * small  # the positions of the examples that entered, not of the whole buffer


# ---------------------------------------------------------------------- through StatefulDataLoader


def collate_keys(batch):
    return [key(e) for e in batch]


@pytest.mark.parametrize("workers, mode", [(0, "examples"), (2, "examples"), (2, "replay")])
def test_loader_resumes_exactly_from_every_state_despite_in_place_edits(workers, mode):
    def loader():
        return ri.StatefulDataLoader(build(buffer_state=mode), batch_size=4, num_workers=workers,
                                     collate_fn=collate_keys)

    dl = loader()
    batches, states = [], [ri.dumps_state(dl.state_dict())]
    live_states = []
    for b in dl:
        batches.append(b)
        live_states.append((dl.state_dict(), ri.dumps_state(dl.state_dict())))
        states.append(live_states[-1][1])
    for state, text in live_states:  # taken states never change afterwards
        assert ri.dumps_state(state) == text
    flat = [k for b in batches for k in b]
    assert sorted(k[0] for k in flat) == sorted(r["id"] for r in rows([0, 1, 2, 3]))
    for cut in range(0, len(batches) + 1, 3):
        again = loader()
        again.load_state_dict(ri.loads_state(states[cut]))
        assert [k for b in again for k in b] == [k for b in batches[cut:] for k in b], cut


def test_loader_resumes_exactly_with_three_buffers_in_each_worker():
    """Two shuffled inputs (one stored, one replayed) interleaved and shuffled again: each worker
    sends three buffer logs, each built on its own previous one in the main process."""
    def make():
        a = ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0, 1, 2, 3]}).shuffle(seed=1, buffer_size=5)
        b = (ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [4, 5, 6, 7]})
             .shuffle(seed=2, buffer_size=4, buffer_state="replay"))
        mix = ri.interleave_datasets([a, b], seed=3, probabilities=[0.5, 0.5])
        return ri.StatefulDataLoader(mix.shuffle(seed=4, buffer_size=6), batch_size=3, num_workers=2,
                                     collate_fn=collate_keys)

    dl = make()
    batches, states = [], [ri.dumps_state(dl.state_dict())]
    for b in dl:
        batches.append(b)
        states.append(ri.dumps_state(dl.state_dict()))
    worker = ri.loads_state(states[5])["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    assert sorted(worker["buffers"]) == ["0", "1", "2"]
    for cut in (0, 1, 5, 9, len(batches) // 2, len(batches) - 1):
        again = make()
        again.load_state_dict(ri.loads_state(states[cut]))
        assert [k for b in again for k in b] == [k for b in batches[cut:] for k in b], cut


def test_loader_state_with_a_buffer_loads_with_torch_weights_only():
    from data import src

    for workers in (0, 2):
        dl = ri.StatefulDataLoader(src(4).shuffle(seed=1, buffer_size=10), batch_size=4, num_workers=workers)
        it = iter(dl)
        head = [next(it)["id"].tolist() for _ in range(3)]
        f = io.BytesIO()
        torch.save(dl.state_dict(), f)
        f.seek(0)
        state = torch.load(f, weights_only=True)
        again = ri.StatefulDataLoader(src(4).shuffle(seed=1, buffer_size=10), batch_size=4, num_workers=workers)
        again.load_state_dict(state)
        full = [b["id"].tolist() for b in ri.StatefulDataLoader(src(4).shuffle(seed=1, buffer_size=10),
                                                                batch_size=4, num_workers=workers)]
        assert head + [b["id"].tolist() for b in again] == full, workers


def test_torchdata_loader_sends_large_arrays_through_shared_memory_and_resumes():
    def big_rows(shards):
        for s in shards:
            for i in range(40):  # enough for the workers to reuse their shared-memory blocks
                yield {"id": s * 100 + i, "x": np.full(40_000, s * 100 + i, dtype=np.float32)}

    def make():
        ds = ri.IterableDataset.from_generator(big_rows, gen_kwargs={"shards": [0, 1, 2, 3]})
        return TorchdataLoader(ds.shuffle(seed=2, buffer_size=6), batch_size=3, num_workers=2)

    full = [b["id"].tolist() for b in make()]
    dl = make()
    it = iter(dl)
    head = [next(it)["id"].tolist() for _ in range(25)]
    state = dl.state_dict()
    text = ri.dumps_state(state)
    again = make()
    again.load_state_dict(ri.loads_state(text))
    assert head + [b["id"].tolist() for b in again] == full


@pytest.mark.parametrize("positions", [False, True])
def test_inspect_reads_the_buffers_of_worker_states(tmp_path, capsys, positions):
    import json

    from data import src

    from resumable_iterable.cli import main

    dl = ri.StatefulDataLoader(src(4).shuffle(seed=1, buffer_size=10, worker_positions=positions).batch(2),
                               batch_size=None, num_workers=2)
    it = iter(dl)
    for _ in range(6):
        next(it)
    state = dl.state_dict()
    worker = state["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    if positions:  # rows of a table: a buffer of positions, described by arithmetic
        assert worker["state"]["children"][0]["buffer"]["__ri__"] == "derived" and "buffers" not in worker
    else:  # the log of the stored examples
        assert type(worker["buffers"]["0"]) is list and worker["state"]["children"][0]["buffer"] == "0"
    path = tmp_path / "loader.json"
    path.write_text(ri.dumps_state(state))
    assert main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    fills = [s["tree"]["children"][0]["buffer"]["fill"] for s in report["states"]]
    assert fills == [10, 10]


def test_main_process_forgets_the_blocks_of_workers_that_exited():
    import resumable_iterable.integrations.torch.buffers as ri_torch

    def big_rows(shards):
        for s in shards:
            for i in range(12):
                yield {"id": s * 100 + i, "x": np.full(40_000, i, dtype=np.float32)}

    def epoch():
        ds = ri.IterableDataset.from_generator(big_rows, gen_kwargs={"shards": [0, 1]})
        return [b["id"].tolist() for b in TorchdataLoader(ds.shuffle(seed=2, buffer_size=5, worker_positions=False), batch_size=2,
                                                          num_workers=2)]

    import os

    epoch()
    first = {k[0] for k in ri_torch._received} - {os.getpid()}  # (other tests send to themselves)
    assert first  # the buffers went through shared memory
    epoch()  # new workers hand over new blocks: those of the exited ones are dropped
    assert not first & {k[0] for k in ri_torch._received}


def test_every_buffer_layout_loads_and_resumes_exactly(monkeypatch):
    """The in-process layout (chunks), the flat list written before chunking, a worker's layout
    and the journal of a version 0.2 worker all describe the same buffer."""
    def make():
        return (ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0, 1, 2, 3]})
                .shuffle(seed=4, buffer_size=9))

    full = [key(e) for e in make()]
    ds = make()
    it = iter(ds)
    for _ in range(17):
        next(it)
    chunked = ri.loads_state(ri.dumps_state(ds.state_dict()))
    flat = copy.deepcopy(chunked)
    flat["state"]["buffer"] = [ex for ch in flat["state"]["buffer"] for ex in ch]
    monkeypatch.setattr(ri_session, "current_worker", lambda: (0, 1))  # the only worker of 1
    in_worker = make()
    it = iter(in_worker)
    for _ in range(17):
        next(it)
    worker = ri.loads_state(ri.dumps_state(in_worker.state_dict()))
    monkeypatch.undo()
    assert type(worker["buffers"]["0"]) is list and worker["state"]["buffer"] == "0"
    assert [key(e) for e in inline_buffers(worker)["state"]["buffer"]] == [key(e) for e in flat["state"]["buffer"]]
    journal = copy.deepcopy(worker)
    examples = journal["buffers"].pop("0")
    journal["buffers"].update({"0/size": len(examples), "0/7": [3, examples[3]],
                               "0/2": [x for i, ex in enumerate(examples) for x in (i, ex if i != 3 else None)]})
    for state in (chunked, flat, worker, journal):
        again = make()
        again.load_state_dict(state)
        assert [key(e) for e in again] == full[17:]


# ---------------------------------------------------------------------- the worker's shared-memory arena


class _OnlyWorker:
    id, num_workers, seed, dataset = 0, 1, 0, None


def big(shards, n=60, size=8_192):
    for s in shards:
        for i in range(n):
            k = s * 1000 + i
            yield {"id": k, "x": np.full(size, k, dtype=np.float32)}  # 32 KB: through shared memory


def as_worker_sends(monkeypatch, ds, batch_size, every):
    """Iterate ``ds`` as the only DataLoader worker would, passing each state's delta through the
    pickler the DataLoader uses and applying it in "the main process" (this one) as torchdata
    does; ``every(step, main_state)`` sees the main process's view of the worker state."""
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: _OnlyWorker())
    inc = _IncrementalState(ds.state_dict())
    main = _IncrementalState(inc.get_state())
    it = iter(ds)
    step = 0
    while True:
        got = [ex for _, ex in zip(range(batch_size), it)]
        if not got:
            return
        delta = pickle.loads(ForkingPickler.dumps(inc.generate_delta(ds.state_dict())))
        main.apply_delta(delta)
        every(step, main.get_state())
        step += 1


def test_the_main_process_reads_each_large_example_from_shared_memory_and_extents_are_reused(monkeypatch):
    import resumable_iterable.integrations.torch.arena as ri_arena
    import resumable_iterable.integrations.torch.buffers as ri_torch

    def make():
        return ri.IterableDataset.from_generator(big, gen_kwargs={"shards": [0, 1, 2, 3]}).shuffle(seed=3, buffer_size=20, worker_positions=False)

    full = [ex["id"] for ex in make()]
    seen = []

    def check(step, state):
        buffer = inline_buffers(state)["state"]["buffer"]
        assert all(ex["x"][0] == ex["id"] and ex["x"].shape == (8_192,) for ex in buffer), step
        assert all(isinstance(ex["x"].base, ri_torch._Owner) or isinstance(getattr(ex["x"].base, "base", None), ri_torch._Owner)
                   for ex in buffer)  # a view of the worker's shared memory, not a copy through the pipe
        if step % 7 == 0:
            again = make()
            again.load_state_dict(state)
            assert [ex["id"] for ex in again] == full[4 * (step + 1):], step
            del again, buffer
            gc.collect()  # a pipeline holds reference cycles: let go of the arrays it read
        seen.append(step)

    monkeypatch.setattr(ri_arena, "arena", ri_arena.Arena())
    as_worker_sends(monkeypatch, make(), 4, check)
    assert len(seen) == 60
    # 240 examples went through extents; a buffer of 20 needs about 60 at a time
    carved = sum(b.extents for b in ri_arena.arena.blocks)
    assert carved <= 100, carved  # without reuse: 240


def test_a_state_the_user_keeps_keeps_its_examples_while_the_worker_goes_on(monkeypatch):
    def make():
        return ri.IterableDataset.from_generator(big, gen_kwargs={"shards": [0, 1]}).shuffle(seed=4, buffer_size=12, worker_positions=False)

    kept: dict = {}

    def keep(step, state):
        if step in (2, 9):
            buffer = inline_buffers(state)["state"]["buffer"]
            kept[step] = (state, [(ex["id"], ex["x"].copy()) for ex in buffer])

    as_worker_sends(monkeypatch, make(), 3, keep)
    for step, (state, content) in kept.items():  # extents it names were not reused for others
        buffer = inline_buffers(state)["state"]["buffer"]
        assert [ex["id"] for ex in buffer] == [k for k, _ in content]
        assert all(np.array_equal(ex["x"], x) for ex, (_, x) in zip(buffer, content)), step


def test_a_worker_state_with_large_arrays_reads_the_same_in_the_worker_itself(monkeypatch):
    """JSON, pickle and deepcopy of a state taken in a worker give the examples, not the worker's
    records of them."""
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: _OnlyWorker())
    ds = ri.IterableDataset.from_generator(big, gen_kwargs={"shards": [0, 1]}).shuffle(seed=5, buffer_size=10, worker_positions=False)
    it = iter(ds)
    ds.state_dict()
    for _ in range(25):
        next(it)
    state = ds.state_dict()
    log = state["buffers"]["0"]
    assert type(log).__name__ == "BufferLog" and any(type(r).__name__ == "Record" for r in log.refs)  # in the worker
    views = [inline_buffers(ri.loads_state(ri.dumps_state(state))),
             inline_buffers(pickle.loads(pickle.dumps(state))), inline_buffers(copy.deepcopy(state))]
    first = [(ex["id"], ex["x"].tolist()) for ex in views[0]["state"]["buffer"]]
    assert len(first) == 10 and all(x[0] == k for k, x in first)
    for v in views[1:]:
        assert [(ex["id"], ex["x"].tolist()) for ex in v["state"]["buffer"]] == first
    monkeypatch.undo()
    full = [ex["id"] for ex in ri.IterableDataset.from_generator(big, gen_kwargs={"shards": [0, 1]})
            .shuffle(seed=5, buffer_size=10, worker_positions=False)]
    again = ri.IterableDataset.from_generator(big, gen_kwargs={"shards": [0, 1]}).shuffle(seed=5, buffer_size=10, worker_positions=False)
    again.load_state_dict(views[0])
    assert [ex["id"] for ex in again] == full[25:]


def test_extents_are_filled_without_faulting_them_in_ahead_when_the_kernel_cannot(monkeypatch):
    import resumable_iterable.integrations.torch.arena as ri_arena

    calls = []

    def refuse(addr, length, advice):
        calls.append(advice)
        return -1  # EINVAL on a kernel older than 5.14

    monkeypatch.setattr(ri_arena, "populate_with", [refuse])
    monkeypatch.setattr(ri_arena, "arena", ri_arena.Arena())  # new extents: the populate path runs
    ids = []
    as_worker_sends(monkeypatch, ri.IterableDataset.from_generator(big, gen_kwargs={"shards": [0]})
                    .shuffle(seed=6, buffer_size=8, worker_positions=False), 4,
                    lambda step, st: ids.append(sorted(ex["id"] for ex in inline_buffers(st)["state"]["buffer"])))
    assert calls == [ri_arena.MADV_POPULATE_WRITE] and ri_arena.populate_with == [None]
    assert ids and all(len(b) <= 8 for b in ids)


@pytest.mark.parametrize("worker_positions", [False, True])
def test_persistent_workers_send_large_arrays_over_epochs_and_resume_exactly(worker_positions):
    """Persistent workers keep their arena (or their positions) across epochs; a state taken in
    the second epoch resumes exactly."""
    def make():
        ds = ri.IterableDataset.from_generator(big, gen_kwargs={"shards": [0, 1, 2, 3], "n": 24})
        return ri.StatefulDataLoader(ds.shuffle(seed=7, buffer_size=10, worker_positions=worker_positions), batch_size=4,
                                     num_workers=2, persistent_workers=True)

    dl = make()
    first = [b["id"].tolist() for b in dl]
    dl.dataset.set_epoch(1)
    it = iter(dl)
    head = [next(it)["id"].tolist() for _ in range(9)]
    state = ri.loads_state(ri.dumps_state(dl.state_dict()))
    tail = [b["id"].tolist() for b in it]
    assert sorted(k for b in head + tail for k in b) == sorted(k for b in first for k in b)
    again = make()
    again.dataset.set_epoch(1)
    again.load_state_dict(state)
    assert [b["id"].tolist() for b in again] == tail


def test_a_record_dying_inside_a_locked_section_gives_its_extent_back_without_a_deadlock():
    """The cyclic garbage collector may free a discarded pipeline (and the records its buffer
    log holds) while the arena's lock is held in the same thread, e.g. during an allocation
    in ``take``: giving the extent back must not wait for that lock."""
    code = (
        "import numpy as np, torch\n"
        "import resumable_iterable.integrations.torch.arena as b\n"
        "rec = b.record_of({'x': np.ones(8192, dtype=np.float32)})\n"
        "with b.lock:\n"
        "    del rec\n"
        "print(sum(len(v) for v in b.arena.free.values()))\n"
    )
    assert run_fresh(code, timeout=30) == "1"  # never sent: free at once


# ---------------------------------------------------------------------- the final permutation


def stored_big(n_shards=4, n=20, size=8_192):
    """Large examples made by a ``map`` (so a worker's buffer stores them: no positions)."""
    ds = ri.IterableDataset.from_generator(big, gen_kwargs={"shards": list(range(n_shards)), "n": n, "size": size})
    return ds.map(lambda ex: {"id": ex["id"], "x": ex["x"] * 2})


@pytest.mark.parametrize("mode", ["examples", "replay"])
def test_the_final_permutation_moves_what_the_main_process_holds_instead_of_sending_the_buffer_again(monkeypatch, mode):
    """When the input ends the shuffle permutes its buffer before draining it. The main process
    already holds every buffered example (or position): the log after the permutation sends the
    new order and the writes not sent yet, and each example crosses once; it used to send the
    whole buffer again (every large example copied into shared memory a second time)."""
    import resumable_iterable.integrations.torch.arena as ri_arena
    import resumable_iterable.integrations.torch.buffers as ri_torch

    def make():
        return stored_big(2, 30).shuffle(seed=3, buffer_size=20, buffer_state=mode)

    full = [ex["id"] for ex in make()]
    packed = []
    record_of = ri_torch.record_of

    def counting(example):
        packed.append(example["id"])
        return record_of(example)

    monkeypatch.setattr(ri_torch, "record_of", counting)
    monkeypatch.setattr(ri_arena, "arena", ri_arena.Arena())
    sizes, steps = [], []

    def check(step, state):
        inner = inline_buffers(state)["state"]
        shuffle = inner if inner.get("node") == "shuffle" else inner["children"][0]
        buffer = shuffle["buffer"]
        if mode == "examples":
            assert all(np.all(ex["x"] == 2 * ex["id"]) for ex in buffer), step
        steps.append(step)
        if step % 3 == 0 or shuffle["draining"]:
            again = make()
            again.load_state_dict(ri.loads_state(ri.dumps_state(state)))
            assert [ex["id"] for ex in again] == full[3 * (step + 1):], step
            del again, buffer
            gc.collect()

    as_worker_sends(monkeypatch, make(), 3, check)
    assert len(steps) == 20
    if mode == "examples":
        assert len(packed) > 40 and len(set(packed)) == len(packed)  # each example copied into shared memory once
    # small rows travel in the message: the one after the permutation is as small as the others
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: _OnlyWorker())
    ds = (ri.IterableDataset.from_generator(small_rows, gen_kwargs={"shards": [0, 1], "n": 40}).map(lambda ex: ex)
          .shuffle(seed=3, buffer_size=40, buffer_state=mode))
    inc = _IncrementalState(ds.state_dict())
    it = iter(ds)
    sent = []
    while [ex for _, ex in zip(range(3), it)]:
        sent.append(len(ForkingPickler.dumps(inc.generate_delta(ds.state_dict()))))
    assert len(sent) == 27 and max(sent[2:]) < 1.5 * max(sent[2:13]), sent  # not the 40 rows again


def small_rows(shards, n=15):
    for s in shards:
        for i in range(n):
            yield {"id": s * 100 + i, "text": f"row {s}-{i}", "ids": [s, i, True, 2**70]}


@pytest.mark.parametrize("kind, mode, size", [("large", "examples", 7), ("small", "examples", 7),
                                              ("small", "replay", 7), ("small", "examples", 40)])
def test_loader_resumes_exactly_from_every_state_across_the_final_permutation(kind, mode, size):
    """Every cut point through ri.StatefulDataLoader with 2 workers, the state through JSON text:
    the cuts before, at and after each worker's final permutation (with writes not yet sent when
    it happens, or with no log taken since the buffer began to fill: a buffer larger than a
    worker's input) all resume exactly."""
    import json

    def make():
        if kind == "large":
            ds = stored_big(4, 10, 4_096)
        else:
            ds = ri.IterableDataset.from_generator(small_rows, gen_kwargs={"shards": [0, 1, 2, 3]}).map(lambda ex: ex)
        ds = ds.shuffle(seed=8, buffer_size=size, buffer_state=mode)
        return ri.StatefulDataLoader(ds, batch_size=3, num_workers=2, collate_fn=lambda b: [
            (e["id"], float(e["x"].sum()) if kind == "large" else (e["text"], e["ids"])) for e in b])

    dumps, loads = ((ri.dumps_state, ri.loads_state) if kind == "large" else (json.dumps, json.loads))
    dl = make()
    batches, states = [], [dumps(dl.state_dict())]
    for b in dl:
        batches.append(b)
        states.append(dumps(dl.state_dict()))
    ids = [k[0] for b in batches for k in b]
    assert len(ids) == 40 if kind == "large" else len(ids) == 60
    assert len(set(ids)) == len(ids)
    for cut in range(len(batches) + 1):
        again = make()
        again.load_state_dict(loads(states[cut]))
        assert [k for b in again for k in b] == [k for b in batches[cut:] for k in b], cut
