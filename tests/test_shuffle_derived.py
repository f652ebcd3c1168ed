"""A worker's buffer of positions described by arithmetic (``nodes/worker_positions.Derived``).

While a pass of positions fills and mixes its buffer, a DataLoader worker's state says which
inputs it read (``inputs``, ``runs``) and where the shuffle's generator stood (``rng``), not
which example each slot holds: the main process then does no per-batch work for the buffer. A
load draws the same indices again to work the slots out. These tests hold that to the logged
form (the same entries at every cut), to exact resumes when the worker writes its base out often
or goes back to logging mid-pass, and to named errors for damaged derived buffers.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import resumable_iterable as ri  # noqa: E402
from resumable_iterable.nodes import worker_positions  # noqa: E402
from resumable_iterable.nodes.worker_positions import is_derived  # noqa: E402
from resumable_iterable.state import is_position  # noqa: E402
from test_shuffle_positions import (assert_resumes, loader, run_with_states, shuffled,  # noqa: E402
                                    worker_buffers)

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning"),
              pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]


def snapshot(state, w=0):
    return state["_snapshot"]["_worker_snapshots"][f"worker_{w}"]["dataset_state"]


def test_a_derived_buffer_works_out_to_the_slots_the_logged_form_holds(monkeypatch):
    make = lambda: loader(shuffled(n=30))  # noqa: E731
    _, derived = run_with_states(make)
    monkeypatch.setattr(worker_positions.Derived, "add", lambda self, p: False)  # log the slots instead
    _, logged = run_with_states(make)
    assert len(derived) == len(logged)
    seen = 0
    for a, b in zip(map(ri.loads_state, derived), map(ri.loads_state, logged)):
        seen += is_derived(snapshot(a)["state"]["buffer"])
        assert not is_derived(snapshot(b)["state"]["buffer"])
        assert worker_buffers(a) == worker_buffers(b)
    assert seen > len(derived) // 2


def test_the_main_process_receives_no_buffer_log_while_the_buffer_is_derived():
    dl = loader(shuffled(n=30))
    it = iter(dl)
    for _ in range(6):
        next(it)
    for w in (0, 1):
        snap = snapshot(dl.state_dict(), w)
        assert "buffers" not in snap
        buf = snap["state"]["buffer"]
        assert is_derived(buf) and buf["base"] == [] and buf["inputs"] > 7
        assert buf["runs"][0][0] == 0 and all(type(v) is int for v in buf["runs"][0][1])


def test_every_cut_resumes_exactly_when_the_worker_writes_its_base_out_often(monkeypatch):
    monkeypatch.setattr(worker_positions, "REBASE", 5)
    make = lambda: loader(shuffled(n=30))  # noqa: E731
    batches, states = run_with_states(make)
    bases = [snapshot(ri.loads_state(s))["state"]["buffer"] for s in states]
    assert any(is_derived(b) and b["base"] and all(map(is_position, b["base"])) for b in bases)
    assert_resumes(make, batches, states, range(len(states)))


def test_every_cut_resumes_exactly_when_the_worker_writes_its_base_out_at_a_jump(monkeypatch):
    monkeypatch.setattr(worker_positions, "MAX_RUNS", 2)  # the second shard's first row: written out
    make = lambda: loader(shuffled(n=30))  # noqa: E731
    batches, states = run_with_states(make)
    bases = [snapshot(ri.loads_state(s))["state"]["buffer"] for s in states]
    assert any(is_derived(b) and b["base"] for b in bases)  # a fresh pass starts from an empty base
    assert_resumes(make, batches, states, range(len(states)))


def test_a_pass_that_goes_back_to_logging_midway_resumes_exactly(monkeypatch):
    add = worker_positions.Derived.add

    def flaky(self, p):  # the 26th input has no position that runs on
        return False if self.inputs == 25 else add(self, p)

    monkeypatch.setattr(worker_positions.Derived, "add", flaky)
    make = lambda: loader(shuffled(n=30))  # noqa: E731
    batches, states = run_with_states(make)
    forms = [is_derived(snapshot(ri.loads_state(s))["state"]["buffer"]) for s in states]
    assert any(forms), "no state was derived before the jump"
    assert "buffers" in snapshot(ri.loads_state(states[-3]))  # logged from the jump on
    assert_resumes(make, batches, states, range(len(states)))


def test_a_resumed_pass_derives_its_buffer_from_the_positions_it_re_read():
    make = lambda: loader(shuffled(n=30))  # noqa: E731
    batches, states = run_with_states(make)
    again = make()
    again.load_state_dict(ri.loads_state(states[5]))
    it = iter(again)
    got = [next(it) for _ in range(3)]
    state = again.state_dict()
    buf = snapshot(state)["state"]["buffer"]
    assert is_derived(buf) and len(buf["base"]) == 7 and all(map(is_position, buf["base"]))
    assert got + list(it) == batches[5:]
    third = make()  # a state taken in the resumed pass resumes exactly too
    third.load_state_dict(ri.loads_state(ri.dumps_state(state)))
    assert list(third) == batches[8:]


@pytest.mark.parametrize("damage, message", [
    (lambda b: b.pop("runs"), r"a derived buffer holds"),
    (lambda b: b["runs"].insert(0, [0, [0, 0]]), r"buffer.runs\[1\] must be \[input, position\]"),
    (lambda b: b["runs"].__setitem__(0, [1, b["runs"][0][1]]), r"buffer.runs\[0\]"),
    (lambda b: b.__setitem__("runs", []), r"needs 'runs'"),
    (lambda b: b.__setitem__("base", [{}] * 8), r"more than buffer_size=7"),
    (lambda b: b.__setitem__("rng_pos", 5000), r"rng_pos"),
    (lambda b: b.__setitem__("inputs", -1), r"inputs"),
    (lambda b: b.__setitem__("inputs", 2**40), r"inputs"),  # refused, not drawn for hours
    (lambda b: b.__setitem__("rng", {"bit_generator": "MT19937"}), r"buffer.rng"),
    (lambda b: b["rng"].__setitem__(2, 7), r"buffer.rng"),
    (lambda b: b.__setitem__("inputs", b["inputs"] + 500), r"fewer rows|out of range|buffer\[\d+\]\.at"),
])
def test_a_damaged_derived_buffer_is_refused_with_what_is_wrong(damage, message):
    _, states = run_with_states(lambda: loader(shuffled(n=30)))
    state = ri.loads_state(states[4])
    buf = snapshot(state)["state"]["buffer"]
    assert is_derived(buf)
    damage(buf)
    again = loader(shuffled(n=30))
    with pytest.raises(ValueError, match=message):
        again.load_state_dict(copy.deepcopy(state))
        list(again)  # a generator's rows are counted when they are re-read


def test_inspect_and_check_read_a_derived_buffer(tmp_path, capsys):
    from resumable_iterable.cli import main

    _, states = run_with_states(lambda: loader(shuffled(n=30)))
    state = ri.loads_state(states[4])
    assert is_derived(snapshot(state)["state"]["buffer"])
    ri.save_state(state, tmp_path / "s.ri")
    assert main(["inspect", str(tmp_path / "s.ri")]) == 0
    assert capsys.readouterr().out.count("buffer 7/7, all as positions, re-read on resume") == 2
    snapshot(state)["state"]["buffer"]["runs"] = []
    ri.save_state(state, tmp_path / "bad.ri")
    assert main(["inspect", str(tmp_path / "bad.ri")]) != 0
    assert "needs 'runs'" in capsys.readouterr().err


def test_a_state_without_workers_never_derives():
    ds = shuffled(n=30)
    it = iter(ds)
    for _ in range(20):
        next(it)
    buf = ds.state_dict()["state"]["buffer"]
    assert isinstance(buf, list) and len([e for ch in buf for e in ch]) == 7
    assert not any(is_position(e) for ch in buf for e in ch)


def _random_pipeline(seed: int):
    """A pipeline whose shuffle a worker may derive: Arrow or generator sources, a concatenation,
    skip/take or column operations below it; random buffer size."""
    import random

    import numpy as np
    from datasets import Dataset

    r = random.Random(seed)
    kind = r.choice(["arrow", "generator", "concat", "take", "columns"])

    def table(n, offset=0):
        return Dataset.from_dict({"id": list(range(offset, offset + n)), "v": list(range(n))})

    if kind == "generator":
        per = {s: r.randint(0, 30) for s in range(6)}

        def gen(shards, per):
            for s in shards:
                for i in range(per[s]):
                    yield {"id": s * 1000 + i, "x": np.full(4096, i, dtype=np.float32)}

        ds = ri.IterableDataset.from_generator(gen, gen_kwargs={"shards": list(range(6)), "per": per})
    else:
        ds = ri.to_iterable_dataset(table(r.randint(20, 200)), num_shards=r.randint(1, 6))
        if kind == "concat":
            other = ri.to_iterable_dataset(table(r.randint(5, 100), offset=10_000), num_shards=r.randint(1, 4))
            ds = ri.concatenate_datasets([ds, other])
        elif kind == "take":
            ds = ds.skip(r.randint(0, 10)).take(r.randint(5, 150))
        elif kind == "columns":
            ds = ds.rename_column("v", "w").remove_columns(["w"])
    return ds.shuffle(seed=r.randint(0, 99), buffer_size=r.randint(1, 50))


def _ids(batch):
    return [int(ex["id"]) for ex in batch]


@pytest.mark.slow  # 3 pipelines here, 40 with `make soak` (about 20 s)
def test_random_pipelines_resume_exactly_at_random_cuts_with_any_worker_count(soak, monkeypatch):
    import json
    import random

    derived = 0
    for seed in range(40 if soak else 3):
        r = random.Random(seed)
        monkeypatch.setattr(worker_positions, "REBASE", r.choice([3, 7, 50, 1 << 16]))
        monkeypatch.setattr(worker_positions, "MAX_RUNS", r.choice([2, 5, 512]))
        bs, w = r.randint(1, 7), r.choice([1, 2, 3])

        def make(workers=w):
            return ri.StatefulDataLoader(_random_pipeline(seed), batch_size=bs, num_workers=workers, collate_fn=_ids)

        dl = make()
        batches, states = [], [json.dumps(dl.state_dict())]
        for b in dl:
            batches.append(b)
            states.append(json.dumps(dl.state_dict()))
        full = [k for b in batches for k in b]
        assert len(full) == len(set(full)), seed
        derived += sum('"derived"' in s for s in states)
        for cut in sorted(r.sample(range(len(states)), min(6, len(states)))):
            workers = r.choice([w, w, 0, 1, 2, 3])
            again = make(workers)
            again.load_state_dict(json.loads(states[cut]))
            head, tail = [k for b in batches[:cut] for k in b], [k for b in again for k in b]
            if workers == w:  # the same continuation
                assert tail == full[len(head):], (seed, cut)
            else:  # elastic: every example once
                assert sorted(head + tail) == sorted(full), (seed, cut, workers)
    assert derived  # some of those states described their buffer by arithmetic


def test_positions_that_jump_at_almost_every_input_are_logged_by_slot():
    """An interleave below switches input every few rows: runs would grow with every input and
    travel whole with every batch. Past ``JUMPY_RUNS`` jumps, more than one per ``JUMPY_RUNS``
    inputs, the pass logs its slots; positions that run on stay derived."""
    import numpy as np

    rng = np.random.default_rng(0).bit_generator.state
    jumpy = worker_positions.Derived([], rng, 0, 8, 1000)
    added = [jumpy.add([k % 2, 0, k // 2]) for k in range(200)]
    assert added.index(False) == worker_positions.JUMPY_RUNS and not jumpy.add([9, 0, 0])
    steady = worker_positions.Derived([], rng, 0, 8, 1000)
    assert all(steady.add([0, k // 100, k % 100]) for k in range(5000))  # a jump per shard of 100 rows


def test_an_interleave_below_goes_back_to_logging_slots_and_resumes_exactly():
    from test_shuffle_positions import interleaved

    make = lambda: loader(interleaved())  # noqa: E731
    batches, states = run_with_states(make)
    buffers = [snapshot(ri.loads_state(s))["state"]["buffer"] for s in states[2:]]
    assert buffers and not any(is_derived(b) for b in buffers[len(buffers) // 2:])
    assert all(is_position(e) for buf in worker_buffers(ri.loads_state(states[-3])) for e in buf)
    assert_resumes(make, batches, states, range(0, len(states), 3))


@pytest.mark.parametrize("batch_size", [3, 5])
def test_a_batched_map_above_keeps_the_buffer_derived_in_its_prev_and_every_cut_resumes(batch_size):
    """A batched map above the shuffle keeps a copy of its input's state from the start of its batch
    (``prev``). In a worker whose buffer is described by arithmetic, that copy describes it so too:
    it held the examples, which travelled with every state taken during the map's batch (a buffer
    per batch of the loader when the map's batches are as small as the loader's)."""
    def make():
        ds = shuffled(n=30).map(lambda b: {"id": b["id"], "x": b["x"]}, batched=True, batch_size=batch_size)
        return loader(ds)

    batches, states = run_with_states(make)
    prevs = [snapshot(ri.loads_state(s))["state"]["prev"] for s in states]
    prevs = [p for p in prevs if p is not None]
    assert prevs and all(isinstance(p["buffer"], (dict, list)) for p in prevs)
    assert sum(is_derived(p["buffer"]) for p in prevs) > len(prevs) // 2
    assert not any(isinstance(p["buffer"], list) and p["buffer"] and isinstance(p["buffer"][0], dict)
                   and "x" in p["buffer"][0] for p in prevs)  # never the examples themselves
    assert_resumes(make, batches, states, range(len(states)))
