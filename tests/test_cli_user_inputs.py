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


def loader(num_workers, n=16, **kwargs):
    return ri.StatefulDataLoader(pipeline(n), batch_size=2, num_workers=num_workers, **kwargs)


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


def _worker_1_next_epoch(s):
    ds = s["_snapshot"]["_worker_snapshots"]["worker_1"]["dataset_state"]
    ds.pop("checksum", None)
    ds["epoch"] = 1


@pytest.mark.parametrize("edit,message", [
    (_worker_1_next_epoch, "its workers saved different epochs (0 by worker(s) [0], 1 by worker(s) [1])"),
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


def test_batches_yielded_and_next_worker_with_snapshots_every_few_steps(tmp_path, capsys):
    """With ``snapshot_every_n_steps=3`` the loader line gave the batch count of the last snapshot
    (``_snapshot_step``) as the batches yielded, and the worker due after it as the next: after 5
    batches it said "3 batches yielded - next batch from worker 1". At every cut it now gives the
    batches the loader yielded, says that the workers' states are those of the snapshot (the
    batches since are replayed on resume), names the worker that yields the next batch, and the
    state resumes exactly."""
    def worker_of(batch):  # 4 shards of 4 rows, dealt to the 2 workers in turn
        return (batch[0] // 4) % 2

    reference = [b["id"].tolist() for b in loader(2, snapshot_every_n_steps=3)]
    for k in range(len(reference) + 1):
        dl = loader(2, snapshot_every_n_steps=3)
        it = iter(dl)
        head = [next(it)["id"].tolist() for _ in range(k)]
        path = tmp_path / f"cut{k}.json"
        path.write_text(json.dumps(dl.state_dict()))
        stop(dl)
        code, out, err = run(capsys, "inspect", str(path), "--json")
        assert (code, err) == (0, ""), f"cut {k}: {err}"
        ld = json.loads(out)["loaders"][0]
        assert ld["batches_yielded"] == k, f"cut {k}"
        if k < len(reference):
            assert ld["next_worker"] == worker_of(reference[k]), f"cut {k}"
        since = k % 3
        assert ld.get("since_snapshot", 0) == since and ld.get("snapshot_step", k) == k - since
        text = run(capsys, "inspect", str(path))[1]
        assert f"{k} batches yielded" in text
        assert (f"snapshot after batch {k - since}: resuming replays the {since} batch(es) since" in text) == bool(since)
        resumed = loader(2, snapshot_every_n_steps=3)
        resumed.load_state_dict(json.loads(path.read_text()))
        assert head + [b["id"].tolist() for b in resumed] == reference, f"cut {k}"


# --------------------------------------------------------------------------- hand-edited node states


@pytest.fixture
def state_file(tmp_path):
    ds = pipeline().shuffle(seed=3, buffer_size=4).map(lambda ex: {"n": 1})
    it = iter(ds)
    for _ in range(5):
        next(it)
    doc = json.loads(json.dumps(ds.state_dict()))
    doc.pop("checksum", None)
    return doc


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["state"].__setitem__("children", None),
     "/:state (map): 'children' must be a list of child states, got NoneType None"),
    (lambda d: d["state"]["children"][0]["children"][0].__setitem__("shard_seed", "x"),
     "/:state/map[0]/shuffle[0] (arrow): 'shard_seed' must be an integer (a plain int) or null, got str 'x'"),
])
def test_malformed_node_fields_are_named(tmp_path, capsys, state_file, edit, message):
    """A node's ``children`` edited into null, or a source's ``shard_seed`` into text, ended inspect
    with Python's words and no place ("object of type 'NoneType' has no len()", "malformed source
    state: invalid literal for int() with base 10: 'x'"); the error now names the field and node."""
    edit(state_file)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(state_file))
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("resumable-iterable: error: ") and message in err, err
    ds = pipeline().shuffle(seed=3, buffer_size=4).map(lambda ex: {"n": 1})
    with pytest.raises(ValueError):  # loading refuses it too
        ds.load_state_dict(json.loads(path.read_text()))


# --------------------------------------------------------------------------- folders


def test_a_trainer_output_folder_names_its_latest_checkpoint(tmp_path, capsys):
    """``inspect output_dir`` (the Trainer's, holding checkpoint-N folders) said the folder had no
    data-state file, as for any folder: the error now names its checkpoints and the latest one."""
    state = json.dumps(ri.to_iterable_dataset(hf(), num_shards=2).state_dict())
    out_dir = tmp_path / "out"
    for step in (2, 10, 4):
        (out_dir / f"checkpoint-{step}").mkdir(parents=True)
        (out_dir / f"checkpoint-{step}" / "resumable_iterable_state.json").write_text(state)
    (out_dir / "checkpoint-12").mkdir()  # a checkpoint being written, without the data state yet
    (out_dir / "runs").mkdir()
    code, out, err = run(capsys, "inspect", str(out_dir))
    assert code == 1 and out == "" and err.count("\n") == 1
    assert ("is a Trainer output folder without a data-state file of its own; its checkpoints (checkpoint-2, "
            f"checkpoint-4, checkpoint-10) hold them: name one, such as the latest, {out_dir / 'checkpoint-10'}") in err
    assert run(capsys, "inspect", str(out_dir / "checkpoint-10"))[0] == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "inspect", str(empty))
    assert code == 1 and "is a folder without a data-state file" in err


def test_elastic_resume_refuses_a_worker_state_held_twice(tmp_path, capsys, two_workers):
    """A loader state whose worker 0 snapshot holds a copy of worker 1's state (edited by hand) was
    refused when loaded with the same number of workers, but loaded with another number (elastic
    resume) it was dealt as it stood: every example of worker 1's remainder came twice and worker
    0's remainder never. inspect reports it, and elastic resume now refuses it too."""
    state = copy.deepcopy(two_workers)
    _worker_1_twice(state)
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(state))
    assert run(capsys, "inspect", str(path))[0] == 1
    for workers in (1, 3):
        with pytest.raises(ValueError, match="worker 0 holds the state saved by DataLoader worker 1 of 2, not by "
                                             "DataLoader worker 0 of 2"):
            loader(workers).load_state_dict(json.loads(path.read_text()))
    for workers in (1, 3):  # the state as saved still resumes elastically, each example once
        dl = loader(workers)
        dl.load_state_dict(copy.deepcopy(two_workers))
        rest = ids(dl)
        assert len(rest) == len(set(rest)) == 16 - 6


def _trainer_file(step, version=1):
    ds = pipeline()
    it = iter(ds)
    next(it)
    return {"format": "resumable_iterable.trainer", "version": version, "global_step": step, "process_index": 0,
            "num_processes": 1, "loader": "StatefulDataLoader",
            "loader_state": {"_num_yielded": step, "dataset_state": ds.state_dict()}}


def test_a_trainer_data_state_the_callback_refuses_is_not_reported_clean(tmp_path, capsys):
    """The callback refuses a data-state file of another version, and one written at another step
    than its checkpoint's (a file copied from another checkpoint): inspect reported both clean, exit
    status 0. It now reports them, and still shows what they hold."""
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    ri.save_state(_trainer_file(4), folder / "resumable_iterable_state.json")
    for path in (folder, folder / "resumable_iterable_state.json"):
        assert run(capsys, "inspect", str(path))[::2] == (0, "")
    ri.save_state(_trainer_file(2), folder / "resumable_iterable_state.json")  # checkpoint-2's file
    for path in (folder, folder / "resumable_iterable_state.json"):
        code, out, err = run(capsys, "inspect", str(path))
        assert code == 1 and "global_step: 2" in out and err.count("\n") == 1
        assert (f"{path}: written at step 2, but it is in the folder of the checkpoint of step 4: the callback "
                "refuses it") in err
    ri.save_state(_trainer_file(2), tmp_path / "copy.json")  # outside a checkpoint folder: no step to match
    assert run(capsys, "inspect", str(tmp_path / "copy.json"))[::2] == (0, "")
    ri.save_state(_trainer_file(2, version=99), tmp_path / "v99.json")
    code, out, err = run(capsys, "inspect", str(tmp_path / "v99.json"))
    assert code == 1 and "[dataset]" in out and err.count("\n") == 1
    assert "a Trainer data state of version 99; the callback reads version 1 and refuses it" in err


def test_a_data_state_file_that_is_not_the_one_the_checkpoint_records(tmp_path, capsys):
    """On resume the callback takes only the data-state file whose digest the checkpoint's
    ``trainer_state.json`` records; one edited by hand (or another run's) is refused. inspect
    reported such a file clean; it now says the checkpoint does not record it."""
    from resumable_iterable.state_files import state_file_digest

    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    path = folder / "resumable_iterable_state.json"
    ri.save_state(_trainer_file(4), path)
    record = {"global_step": 4, "stateful_callbacks": {"ResumableDataCallback": {
        "args": {"filename": "resumable_iterable_state.json"},
        "attributes": {"data_state_sha256": state_file_digest(path)}}}}
    (folder / "trainer_state.json").write_text(json.dumps(record))
    for p in (folder, path):
        assert run(capsys, "inspect", str(p))[::2] == (0, "")
    doc = json.loads(path.read_text())
    doc.pop("checksum", None)
    doc["loader_state"]["_num_yielded"] = 3  # edited by hand: still a valid state
    path.write_text(json.dumps(doc, indent=1))
    for p in (folder, path):
        code, out, err = run(capsys, "inspect", str(p))
        assert code == 1 and "single process, 3 batches yielded" in out and err.count("\n") == 1
        assert (f"{p}: this file is not the one the checkpoint's trainer_state.json records (its digest differs): "
                "the callback refuses it on resume") in err
