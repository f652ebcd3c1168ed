"""``resumable-iterable inspect`` on the states a user has (a loader's, after a change of the number
of workers, a Trainer's output folder) and on such states damaged or edited by hand: the verdict
(exit status, problems) agrees with what loading does, and errors are one line naming the problem."""

from __future__ import annotations

import copy
import json

import pytest
from datasets import Dataset

import resumable_iterable as ri
from resumable_iterable.cli import main

torch = pytest.importorskip("torch")


def hf(n=16):
    return Dataset.from_dict({"id": list(range(n))})


def pipeline(n=16):
    return ri.to_iterable_dataset(hf(n), num_shards=4)


def loader(num_workers, n=16):
    return ri.StatefulDataLoader(pipeline(n), batch_size=2, num_workers=num_workers)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ids(batches):
    return [i for b in batches for i in b["id"].tolist()]


def stop(dl):
    if getattr(dl, "_iterator", None) is not None and hasattr(dl._iterator, "_shutdown_workers"):
        dl._iterator._shutdown_workers()


@pytest.fixture(scope="module")
def two_workers():
    """A ri.StatefulDataLoader state with 2 workers after 3 batches, as plain JSON data."""
    dl = loader(2)
    it = iter(dl)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(dl.state_dict()))
    stop(dl)
    return state


def _drop_worker_1(s):
    s["_snapshot"]["_worker_snapshots"].pop("worker_1")


def _no_dataset_state(s):
    s["_snapshot"]["_worker_snapshots"]["worker_1"]["dataset_state"] = None


def _three_workers(s):
    s["_snapshot"]["_main_snapshot"]["_num_workers"] = 3


def _workers_as_text(s):
    s["_snapshot"]["_main_snapshot"]["_num_workers"] = "2"


def _worker_1_twice(s):
    ws = s["_snapshot"]["_worker_snapshots"]
    ws["worker_0"] = copy.deepcopy(ws["worker_1"])


@pytest.mark.parametrize("edit,message", [
    (_drop_worker_1, "the loader had 2 worker(s) (_num_workers), but its '_worker_snapshots' are ['worker_0'], "
                     "not ['worker_0', 'worker_1']"),
    (_no_dataset_state, "worker 1's snapshot holds no dataset state"),
    (_three_workers, "the loader had 3 worker(s) (_num_workers), but its '_worker_snapshots' are "
                     "['worker_0', 'worker_1'], not ['worker_0', 'worker_1', 'worker_2']"),
    (_workers_as_text, "'_snapshot._main_snapshot._num_workers' must be a positive number of workers, got '2'"),
    (_worker_1_twice, "worker 0's snapshot holds the state of DataLoader worker 1 of 2, but the loader runs it in "
                      "DataLoader worker 0 of 2"),
])
def test_a_loader_state_edited_by_hand_is_reported_as_one_that_would_not_load(tmp_path, capsys, two_workers,
                                                                             edit, message):
    """A loader state whose worker snapshots no longer match its worker count, lost a worker's dataset
    state, or holds one worker's state twice (a copy-paste in an editor) was reported clean, exit
    status 0, though loading it refuses it (torchdata's loader with an AssertionError, or, for a
    lost dataset state, by silently starting that worker over). Each now gets a problem line."""
    state = copy.deepcopy(two_workers)
    edit(state)
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(state))
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 1 and "loader at /:" in out  # the report is still shown
    assert err.startswith(f"resumable-iterable: error: loader at /: {message}") and err.count("\n") == 1, err
    rep = json.loads(run(capsys, "inspect", str(path), "--json")[1])
    assert len(rep["problems"]) == 1 and message in rep["problems"][0]
    with pytest.raises((ValueError, TypeError)):  # what the verdict says: loading refuses it
        loader(2).load_state_dict(json.loads(path.read_text()))


def test_a_single_process_loader_state_holding_a_workers_state(tmp_path, capsys, two_workers):
    """The main-process loader state (``num_workers=0``) with a worker's dataset state pasted in
    is refused on load: inspect says so (it reported it clean)."""
    dl = loader(0)
    it = iter(dl)
    next(it)
    state = json.loads(json.dumps(dl.state_dict()))
    path = tmp_path / "main.json"
    path.write_text(json.dumps(state))
    assert run(capsys, "inspect", str(path))[:3:2] == (0, "")
    state["dataset_state"] = two_workers["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    path.write_text(json.dumps(state))
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 1 and "single process" in out
    assert ("loader at /: its dataset state holds the state of DataLoader worker 0 of 2, but the loader runs it "
            "in the main process") in err and err.count("\n") == 1
    with pytest.raises(ValueError):
        loader(0).load_state_dict(state)


def test_loader_states_inspect_clean_at_every_cut_before_and_after_a_worker_change(tmp_path, capsys):
    """At every cut of a 2-worker loader, and of a 3-worker loader resumed from one of its states
    (whose workers hold elastic plans), the JSON state inspects with no problem and a fresh loader
    resumed from it yields the exact tail: the loader-level checks never flag a real state."""
    def start(workers):
        """The loader, and what was yielded before it took over (a 3-worker one resumes the
        state a 2-worker one saved after 2 batches)."""
        if workers == 2:
            return loader(2), []
        first = loader(2)
        it = iter(first)
        done = ids([next(it) for _ in range(2)])
        saved = first.state_dict()
        stop(first)
        dl = loader(workers)
        dl.load_state_dict(saved)
        return dl, done

    for workers in (2, 3):
        dl, done = start(workers)
        reference = ids(dl)  # the uninterrupted rest
        for k in range(len(reference) // 2 + 1):
            dl, _ = start(workers)
            it = iter(dl)
            head = ids([next(it) for _ in range(k)])
            path = tmp_path / f"w{workers}-{k}.json"
            path.write_text(json.dumps(dl.state_dict()))
            stop(dl)
            code, out, err = run(capsys, "inspect", str(path), "--json")
            assert (code, err) == (0, ""), f"{workers} workers, cut {k}: {err}"
            resumed = loader(workers)
            resumed.load_state_dict(json.loads(path.read_text()))
            assert head + ids(resumed) == reference, f"{workers} workers, cut {k}"
        assert sorted(done + reference) == list(range(16))
