"""``resumable-iterable inspect``: reports on states of real pipelines, and one-line errors on damaged files."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from datasets import Dataset

import resumable_iterable as ri
from resumable_iterable.cli import main

ROWS = 200


def hf(start=0, n=ROWS):
    return Dataset.from_dict({"id": list(range(start, start + n)), "text": [f"t{i}" for i in range(n)]})


def consume(ds, k):
    it = iter(ds)
    for _ in range(k):
        next(it)
    return ds


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def report_of(capsys, path):
    code, out, err = run(capsys, "inspect", str(path), "--json")
    assert code == 0 and err == ""
    return json.loads(out)


def nodes(tree):
    yield tree
    for c in tree["children"]:
        yield from nodes(c)


# --------------------------------------------------------------------------- real states


def test_shard_progress_matches_the_pipeline(tmp_path, capsys):
    ds = consume(ri.to_iterable_dataset(hf(), num_shards=4).map(lambda ex: {"n": 1}), 70)
    ds.save_state(tmp_path / "s.json")
    rep = report_of(capsys, tmp_path / "s.json")
    assert rep["kind"] == "pipeline state" and len(rep["states"]) == 1
    st = rep["states"][0]
    assert st["epoch"] == 0 and st["label"] == "pipeline"
    assert [n["node"] for n in nodes(st["tree"])] == ["map", "arrow"]
    src = st["tree"]["children"][0]["source"]
    # 4 contiguous shards of 50 rows, read in order: 70 examples = shard 0 done, 20 rows of shard 1
    assert [(s["shard"], s["status"], s["read"], s["rows"]) for s in src["shards"]] == [
        (0, "done", 50, 50), (1, "reading", 20, 50), (2, "pending", 0, 50), (3, "pending", 0, 50)]
    assert (src["rows_read"], src["rows_total"], src["order"]) == (70, 200, "natural")

    code, out, err = run(capsys, "inspect", str(tmp_path / "s.json"), "--width", "10")
    assert code == 0 and err == ""
    assert "shard 0  [##########]  50/50  done" in out
    assert "shard 1  [####------]  20/50  reading" in out
    assert "shard 2  [----------]  0/50  pending" in out
    assert "70/200 rows read (35%)" in out


def test_a_checkpoint_folder_is_inspected_through_its_data_state_file(tmp_path, capsys):
    """``inspect checkpoint-4/`` said only "Is a directory": a Trainer user had to know the callback's
    file name. A folder holding one data-state file (the callback's default name) is inspected
    through it; one with several (one per process) or none gets an error naming what is there."""
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    code, _, err = run(capsys, "inspect", str(folder))
    assert code == 1 and "without a data-state file (resumable_iterable_state.json" in err
    consume(ri.to_iterable_dataset(hf(), num_shards=4), 70).save_state(folder / "resumable_iterable_state.json")
    (folder / "trainer_state.json").write_text("{}")
    assert report_of(capsys, folder) == {**report_of(capsys, folder / "resumable_iterable_state.json"),
                                         "file": str(folder)}
    consume(ri.to_iterable_dataset(hf(), num_shards=4), 10).save_state(folder / "resumable_iterable_state.rank1.json")
    code, _, err = run(capsys, "inspect", str(folder))
    assert code == 1 and ("2 data-state files, one per process (resumable_iterable_state.json, "
                          "resumable_iterable_state.rank1.json): name the one") in err, err


def test_shuffle_interleave_batch_and_epoch(tmp_path, capsys):
    def build():
        a = ri.to_iterable_dataset(hf(), num_shards=4)
        b = ri.to_iterable_dataset(hf(1000, 50), num_shards=2)
        mix = ri.interleave_datasets([a, b], probabilities=[0.7, 0.3], seed=0)
        return mix.shuffle(seed=1, buffer_size=16).batch(4)

    ds = build()
    ds.set_epoch(3)
    consume(ds, 10)
    ds.save_state(tmp_path / "s.json")
    rep = report_of(capsys, tmp_path / "s.json")
    st = rep["states"][0]
    assert st["epoch"] == 3
    kinds = [n["node"] for n in nodes(st["tree"])]
    assert kinds == ["batch", "shuffle", "interleave", "arrow", "arrow"]
    shuffle = st["tree"]["children"][0]
    assert shuffle["buffer"] == {"fill": 16, "size": 16, "stored": "examples", "draining": False}
    sources = [n["source"] for n in nodes(st["tree"]) if "source" in n]
    # 40 examples left the buffer, 16 are in it, the interleave holds its peeked examples
    peeked = st["tree"]["children"][0]["children"][0]["peeked"]
    assert sum(s["rows_read"] for s in sources) == 40 + 16 + peeked
    assert all(s["order"] == "shuffled" for s in sources)
    code, out, _ = run(capsys, "inspect", str(tmp_path / "s.json"))
    assert "epoch 3" in out and "buffer 16/16, examples stored" in out


def test_what_a_map_holds_is_reported(tmp_path, capsys):
    """A batched map over a shuffle holds its batch's input rows; one over the source holds where
    its batch began; a per-example map that raised holds the example it raised on."""
    def shuffled_batches():
        return ri.to_iterable_dataset(hf(), num_shards=4).shuffle(seed=1, buffer_size=16).map(
            lambda b: b, batched=True, batch_size=4)

    def plain_batches():
        return ri.to_iterable_dataset(hf(), num_shards=4).map(lambda b: b, batched=True, batch_size=4)

    def failing():
        def f(ex):
            if ex["id"] == 5:
                raise RuntimeError("boom")
            return ex
        return ri.to_iterable_dataset(hf(), num_shards=1).map(f)

    ds = consume(shuffled_batches(), 2)
    ds.save_state(tmp_path / "rows.json")
    assert report_of(capsys, tmp_path / "rows.json")["states"][0]["tree"]["held"] == (
        "a batch in progress: its 4 input rows held")
    ds = consume(plain_batches(), 2)
    ds.save_state(tmp_path / "prev.json")
    assert "where it began held" in report_of(capsys, tmp_path / "prev.json")["states"][0]["tree"]["held"]
    ds = failing()
    with pytest.raises(RuntimeError):
        list(ds)
    ds.save_state(tmp_path / "retry.json")
    code, out, _ = run(capsys, "inspect", str(tmp_path / "retry.json"))
    assert code == 0 and "1 input example(s) held, processed first on resume" in out
    plain_batches().save_state(tmp_path / "none.json")  # before the first batch: nothing held
    assert "held" not in report_of(capsys, tmp_path / "none.json")["states"][0]["tree"]


def test_the_seeds_a_seedless_pipeline_drew_are_reported(tmp_path, capsys):
    consume(ri.to_iterable_dataset(hf(), num_shards=4).shuffle(buffer_size=8), 3).save_state(tmp_path / "s.json")
    consume(ri.to_iterable_dataset(hf(), num_shards=4).shuffle(seed=1, buffer_size=8), 3).save_state(tmp_path / "t.json")
    assert report_of(capsys, tmp_path / "s.json")["states"][0]["drawn_seeds"] == 1
    assert report_of(capsys, tmp_path / "t.json")["states"][0]["drawn_seeds"] == 0
    code, out, _ = run(capsys, "inspect", str(tmp_path / "s.json"))
    assert code == 0 and "1 seed(s) drawn when the pipeline was built without one" in out
    code, out, _ = run(capsys, "inspect", str(tmp_path / "t.json"))
    assert code == 0 and "seed(s) drawn" not in out


def test_dropped_buffer_and_sources_of_unknown_length(tmp_path, capsys):
    def gen(shard):
        for i in range(30):
            yield {"i": i, "shard": shard[0]}

    ds = ri.IterableDataset.from_generator(gen, gen_kwargs={"shard": [0, 1, 2]}).shuffle(
        seed=0, buffer_size=5, buffer_state="drop")
    consume(ds, 40)
    ds.save_state(tmp_path / "s.json")
    rep = report_of(capsys, tmp_path / "s.json")
    tree = rep["states"][0]["tree"]
    assert tree["buffer"]["stored"] == "nothing"
    src = tree["children"][0]["source"]
    assert src["rows_total"] is None and {s["rows"] for s in src["shards"]} == {None}
    assert [s["status"] for s in src["shards"]] == ["done", "reading", "pending"]
    code, out, _ = run(capsys, "inspect", str(tmp_path / "s.json"))
    assert "not stored (buffer_state='drop')" in out and "all rows  done" in out and "15 rows  reading" in out


@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")
def test_dataloader_state_with_workers(tmp_path, capsys):
    pytest.importorskip("torch")
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    dl = sdl.StatefulDataLoader(ri.to_iterable_dataset(hf(), num_shards=4).shuffle(seed=1, buffer_size=8),
                                batch_size=4, num_workers=2)
    for i, _ in enumerate(dl):
        if i == 6:
            break
    ri.save_state(dl.state_dict(), tmp_path / "loader.json")
    dl._iterator._shutdown_workers()  # now, rather than a join timeout in a later test
    capsys.readouterr()  # whatever torch/torchdata printed while iterating is not the CLI's output
    rep = report_of(capsys, tmp_path / "loader.json")
    assert [s["label"] for s in rep["states"]] == ["worker 0", "worker 1"]
    assert rep["loaders"][0]["num_workers"] == 2 and rep["loaders"][0]["batches_yielded"] == 7
    assert rep["loaders"][0]["next_worker"] == 1  # batches alternate between the workers: 7th came from 0
    per_worker = [[s["shard"] for s in st["tree"]["children"][0]["source"]["shards"]] for st in rep["states"]]
    assert sorted(per_worker[0] + per_worker[1]) == [0, 1, 2, 3]
    # the same file wrapped like the Trainer callback's data state
    doc = {"format": "resumable_iterable.trainer", "version": 1, "global_step": 7, "process_index": 0,
           "num_processes": 1, "loader": "StatefulDataLoader", "loader_state": ri.load_state(tmp_path / "loader.json")}
    ri.save_state(doc, tmp_path / "trainer.json")
    code, out, _ = run(capsys, "inspect", str(tmp_path / "trainer.json"))
    assert code == 0 and "Trainer checkpoint data state" in out and "global_step: 7" in out
    assert "2 worker(s), 7 batches yielded - next batch from worker 1" in out and "[worker 1]" in out


def test_a_loader_state_saved_as_plain_json_is_inspected_and_loaded(tmp_path, capsys):
    """A StatefulDataLoader state written with ``json.dump`` (as docs/cli.md says inspect reads):
    with 2 workers the default shuffle buffer is described by arithmetic, a dict tagged
    ``{"__ri__": "derived"}``, which inspect and ``ri.load_state`` took for an encoded value of an
    unknown kind and refused. At every cut, the file loads back as ``json.load`` reads it, inspect
    reports it, and a fresh loader resumed from what ``ri.load_state`` gave yields the exact tail."""
    pytest.importorskip("torch")
    sdl = pytest.importorskip("torchdata.stateful_dataloader")

    def loader():
        ds = ri.to_iterable_dataset(hf(n=12), num_shards=4).shuffle(seed=1, buffer_size=3)
        return sdl.StatefulDataLoader(ds, batch_size=2, num_workers=2)

    full = [b["id"].tolist() for b in loader()]
    saw_derived = False
    for k in range(len(full) + 1):
        dl = loader()
        it = iter(dl)
        head = [next(it)["id"].tolist() for _ in range(k)]
        path = tmp_path / f"loader{k}.json"
        with open(path, "w") as f:
            json.dump(dl.state_dict(), f)
        if dl._iterator is not None:
            dl._iterator._shutdown_workers()
        saw_derived |= '"derived"' in path.read_text()
        assert ri.load_state(path) == json.loads(path.read_text())
        capsys.readouterr()
        rep = report_of(capsys, path)
        assert [s["label"] for s in rep["states"]] == ["worker 0", "worker 1"] and rep["problems"] == []
        resumed = loader()
        resumed.load_state_dict(ri.load_state(path))
        assert head + [b["id"].tolist() for b in resumed] == full, f"cut {k}"
    assert saw_derived  # the case this test is about


def test_plain_json_states_keep_their_own_tagged_objects():
    """The state's own tagged objects (a buffer entry standing for a position, a derived buffer)
    come back from a plain JSON text as the dicts they are; an unknown kind is still refused."""
    state = {"format": "x", "buffer": [{"__ri__": "position", "at": [0, 3]}, 5],
             "derived": {"__ri__": "derived", "base": [{"__ri__": "position", "at": [1, 2]}], "runs": [[0, [0, 0]]]}}
    assert ri.loads_state(json.dumps(state)) == state
    assert ri.loads_state(ri.dumps_state(state)) == state  # the codec's own document: escaped, as before
    with pytest.raises(ValueError, match="unknown kind 'nonsense'"):
        ri.loads_state(json.dumps({"format": "x", "v": {"__ri__": "nonsense"}}))


@pytest.mark.parametrize("name", ["skip-take", "concat-axis-1"])
def test_no_problem_is_reported_under_nodes_that_keep_their_shard_order(tmp_path, capsys, name):
    """A shuffle does not reorder the shards below ``skip`` / ``take`` (as HF) nor below
    ``concatenate_datasets(axis=1)``: their sources save no shard seed. inspect took the shuffle
    above for one that sets their order and reported every such valid state as one that would
    not load ("'shard_seed' is null, but a shuffle above this source sets its shard order"),
    exit status 1. At every cut, the JSON state now inspects clean and resumes exactly."""
    def build():
        if name == "skip-take":
            return ri.to_iterable_dataset(hf(n=24), num_shards=4).skip(3).take(16).repeat(2).shuffle(seed=1, buffer_size=4)
        a, b = ri.to_iterable_dataset(hf(n=12), num_shards=3), ri.to_iterable_dataset(hf(n=12), num_shards=3)
        both = ri.concatenate_datasets([a.select_columns(["id"]), b.select_columns(["text"])], axis=1)
        return both.shuffle(seed=1, buffer_size=4)

    full = list(build())
    for k in range(len(full) + 1):
        ds = build()
        it = iter(ds)
        head = [next(it) for _ in range(k)]
        path = tmp_path / f"state{k}.json"
        path.write_text(json.dumps(ds.state_dict()))
        code, out, err = run(capsys, "inspect", str(path))
        assert (code, err) == (0, ""), f"cut {k}: {err}"
        resumed = build()
        resumed.load_state_dict(json.loads(path.read_text()))
        assert head + list(resumed) == full, f"cut {k}"


@pytest.mark.parametrize("main_snapshot", [5, "x", [1], 1.5])
def test_a_damaged_loader_snapshot_is_no_traceback(tmp_path, capsys, main_snapshot):
    """A (torchdata) loader state saved as plain JSON whose ``_main_snapshot`` was damaged into a
    value that is not an object ended inspect with a Python traceback (AttributeError: 'int'
    object has no attribute 'get'); the worker states in it are reported, the loader line shows
    what the file still says. Loading refuses it (the number of workers is lost): exit status 1, with
    that problem on stderr."""
    state = consume(ri.to_iterable_dataset(hf(), num_shards=2).shuffle(seed=1, buffer_size=4), 3).state_dict()
    doc = {"_snapshot": {"_main_snapshot": main_snapshot, "_snapshot_step": 3, "_last_yielded_worker_id": 0,
                         "_worker_snapshots": {"worker_0": {"dataset_state": state}}}}
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 1 and "3 batches yielded" in out and "[worker 0]" in out
    assert err.count("\n") == 1 and "'_snapshot._main_snapshot._num_workers' must be a positive number" in err


def test_rank_states_saved_as_a_plain_json_list_are_inspected_and_loaded(tmp_path, capsys):
    """A list of per-rank states written with ``json.dump`` (what ``redistribute_states`` takes and
    returns) was refused by inspect and ``ri.load_state`` ("state must be a JSON object, got
    list"), although a single state written so loads. At every cut, the list now loads as written,
    inspect labels its ranks, and each rank resumes exactly from what ``ri.load_state`` gave."""
    def build(rank):
        ds = ri.to_iterable_dataset(hf(n=20), num_shards=4).shuffle(seed=3, buffer_size=None)
        return ri.split_dataset_by_node(ds, rank=rank, world_size=2)

    fulls = [[x["id"] for x in build(r)] for r in range(2)]
    for k in range(len(fulls[0]) + 1):
        parts, heads = [build(r) for r in range(2)], []
        for ds in parts:
            it = iter(ds)
            heads.append([next(it)["id"] for _ in range(k)])
        path = tmp_path / f"ranks{k}.json"
        path.write_text(json.dumps([ds.state_dict() for ds in parts]))
        states = ri.load_state(path)
        assert states == json.loads(path.read_text())
        rep = report_of(capsys, path)
        assert [s["label"] for s in rep["states"]] == ["rank 0 of 2", "rank 1 of 2"] and rep["problems"] == []
        for r in range(2):
            resumed = build(r)
            resumed.load_state_dict(states[r])
            assert heads[r] + [x["id"] for x in resumed] == fulls[r], f"cut {k}, rank {r}"


def test_the_workers_of_a_list_of_rank_loader_states_have_labels_of_their_own(tmp_path, capsys):
    """A list of per-rank loader states (``ri.save_state([loader_rank0.state_dict(), ...])``, what
    ``redistribute_states`` takes) labelled the workers of every rank alike: "[worker 0]" twice,
    "[worker 1]" twice. Each label now names the rank and the worker."""
    pytest.importorskip("torch")
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    states = []
    for rank in range(2):
        part = ri.split_dataset_by_node(ri.to_iterable_dataset(hf(n=40), num_shards=4).shuffle(seed=1, buffer_size=4),
                                        rank=rank, world_size=2)
        dl = sdl.StatefulDataLoader(part, batch_size=2, num_workers=2)
        it = iter(dl)
        for _ in range(3):
            next(it)
        states.append(dl.state_dict())
        dl._iterator._shutdown_workers()
    ri.save_state(states, tmp_path / "ranks.json")
    capsys.readouterr()
    rep = report_of(capsys, tmp_path / "ranks.json")
    assert [s["label"] for s in rep["states"]] == [f"rank {r} of 2, DataLoader worker {w} of 2"
                                                   for r in range(2) for w in range(2)]


def test_a_global_shuffle_reports_how_far_its_permutation_was_read(tmp_path, capsys):
    """A global shuffle's report showed only ``pos=4`` under the permutation, no progress (the
    source below it is read at permuted rows, so it has no shard bars). It now shows the positions
    read of those this part yields, as a bar and in the JSON (``permutation``); at every cut of a
    rank's part it matches what was yielded, and the state resumes exactly."""
    def build():
        ds = ri.to_iterable_dataset(hf(n=30), num_shards=3).shuffle(seed=2, buffer_size=None)
        return ri.split_dataset_by_node(ds, rank=1, world_size=2)

    full = list(build())
    assert len(full) == 15
    for k in range(len(full) + 1):
        ds = consume(build(), k)
        path = tmp_path / f"state{k}.json"
        path.write_text(json.dumps(ds.state_dict()))
        rep = report_of(capsys, path)
        assert rep["states"][0]["tree"]["children"][0]["permutation"] == {"read": k, "total": 15}
        code, out, _ = run(capsys, "inspect", str(path))
        assert code == 0 and f"  {k}/15 positions of the permutation read ({100 * k / 15:.0f}%)" in out
        resumed = build()
        resumed.load_state_dict(json.loads(path.read_text()))
        assert list(resumed) == full[k:], f"cut {k}"


def test_a_single_process_loader_state_in_a_trainer_checkpoint_is_labelled_dataset(tmp_path, capsys):
    """With dataloader_num_workers=0 the Trainer's data state holds the loader's ``dataset_state``
    one level down: it is labelled ``dataset`` as at the top of a loader state (it was labelled with
    its whole path, which the line then repeated)."""
    ds = consume(ri.to_iterable_dataset(hf(), num_shards=4), 6)
    doc = {"format": "resumable_iterable.trainer", "version": 1, "global_step": 3, "process_index": 0,
           "num_processes": 1, "loader": "StatefulDataLoader",
           "loader_state": {"_num_yielded": 3, "dataset_state": ds.state_dict()}}
    ri.save_state(doc, tmp_path / "trainer.json")
    code, out, _ = run(capsys, "inspect", str(tmp_path / "trainer.json"))
    assert code == 0 and "single process, 3 batches yielded" in out
    assert "[dataset] at /loader_state/dataset_state  epoch 0" in out


class SeededCollator:
    """A collate function keeping a numpy generator of its own (as ``DataCollatorForLanguageModeling(seed=)``)."""

    def __init__(self):
        self.generator = np.random.default_rng(5)

    def __call__(self, rows):
        return {"id": [r["id"] for r in rows], "noise": self.generator.random(len(rows)).tolist()}


def test_which_generators_a_state_holds_is_reported_as_saved(tmp_path, capsys):
    """``save_worker_rng=True`` without workers saves only the collator's own generator: the report
    said the worker's torch/numpy/random generators were saved (it looked at ``"rng"`` alone)."""
    pytest.importorskip("torch")
    dl = ri.StatefulDataLoader(ri.to_iterable_dataset(hf(), num_shards=4), batch_size=4, num_workers=0,
                               collate_fn=SeededCollator(), save_worker_rng=True)
    it = iter(dl)
    for _ in range(3):
        next(it)
    ri.save_state(dl.state_dict(), tmp_path / "loader.json")
    code, out, _ = run(capsys, "inspect", str(tmp_path / "loader.json"))
    assert code == 0 and "the collator's own random generator is saved" in out
    assert "the worker's random generators" not in out
    (state,) = report_of(capsys, tmp_path / "loader.json")["states"]
    assert state["collator_rng"] is True and state["worker_rng"] is False


@pytest.mark.parametrize("module", ["resumable_iterable.cli", "resumable_iterable"])
def test_console_entry_point_in_a_subprocess(tmp_path, module):
    consume(ri.to_iterable_dataset(hf(), num_shards=2), 5).save_state(tmp_path / "s.json")
    out = subprocess.run([sys.executable, "-m", module, "inspect", str(tmp_path / "s.json"), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["states"][0]["tree"]["source"]["rows_read"] == 5


# --------------------------------------------------------------------------- damaged files


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.json"
    consume(ri.to_iterable_dataset(hf(), num_shards=2).shuffle(seed=0, buffer_size=4), 9).save_state(path)
    return path


def damage(tmp_path, good, how):
    text = good.read_text()
    path = tmp_path / f"bad-{how}.json"
    if how == "truncated":
        path.write_text(text[: len(text) // 2])
    elif how == "edited":
        path.write_text(text.replace('"offset": ', '"offset": 1', 1))
    elif how == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    elif how == "empty":
        path.write_text("")
    elif how == "no-state":
        path.write_text(json.dumps({"hello": [1, 2, 3]}))
    elif how == "version":
        doc = json.loads(text)
        doc.pop("checksum")
        doc["version"] = 99
        path.write_text(json.dumps(doc))
    elif how == "pipeline-edited":  # no checksum to catch it: the fingerprint does
        doc = json.loads(text)
        doc.pop("checksum")
        doc["pipeline"]["buffer_size"] = 5
        path.write_text(json.dumps(doc))
    elif how == "tree-mismatch":
        doc = json.loads(text)
        doc.pop("checksum")
        doc["state"]["children"][0]["node"] = "generator"
        path.write_text(json.dumps(doc))
    elif how == "position-type":  # the message named Python's comparison, not the field
        doc = json.loads(text)
        doc.pop("checksum")
        doc["state"]["children"][0]["stop"] = "x"
        path.write_text(json.dumps(doc))
    elif how == "missing":
        pass
    return path


@pytest.mark.parametrize("how,message", [
    ("missing", "cannot read"),
    ("truncated", "not valid JSON"),
    ("empty", "not valid JSON"),
    ("binary", "not UTF-8"),
    ("edited", "checksum does not match"),
    ("no-state", "no resumable_iterable state found"),
    ("version", "unsupported state version 99"),
    ("pipeline-edited", "fingerprint does not match its pipeline"),
    ("tree-mismatch", "'generator' node where the pipeline has 'arrow'"),
    ("position-type", "(arrow): 'stop' must be an integer (a plain int), got str 'x'"),
])
def test_damaged_files_give_one_line_errors(tmp_path, good, capsys, how, message):
    path = damage(tmp_path, good, how)
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 1 and out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("resumable-iterable: error: ") and message in err


def test_damaged_file_in_a_subprocess(tmp_path, good):
    path = damage(tmp_path, good, "truncated")
    out = subprocess.run([sys.executable, "-m", "resumable_iterable.cli", "inspect", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "not valid JSON" in out.stderr


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["inspect"])
    assert e.value.code == 2


def test_rank_states_and_elastic_plans(tmp_path, capsys):
    def build():
        return ri.to_iterable_dataset(hf(), num_shards=4).shuffle(seed=1, buffer_size=8)

    states = []
    for rank in range(2):
        ds = ri.split_dataset_by_node(build(), rank=rank, world_size=2)
        states.append(consume(ds, 10 + rank).state_dict())
    ri.save_state({"ranks": states}, tmp_path / "ranks.json")
    rep = report_of(capsys, tmp_path / "ranks.json")
    assert [s["label"] for s in rep["states"]] == ["rank 0 of 2", "rank 1 of 2"]
    read = [s["tree"]["children"][0]["source"]["rows_read"] for s in rep["states"]]
    assert read == [10 + 8, 11 + 8]  # yielded + buffered

    # the same progress moved to 3 ranks: the untouched shard of rank 0 becomes a fresh segment
    ri.save_state({"ranks": ri.redistribute_states(states, world_size=3)}, tmp_path / "plans.json")
    rep = report_of(capsys, tmp_path / "plans.json")
    segs = rep["states"]
    assert all(s["kind"] == "plan segment" for s in segs)
    assert {s["label"].split(":")[0] for s in segs} == {"rank 0 of 3", "rank 1 of 3", "rank 2 of 3"}
    fresh = [s for s in segs if "fresh_shards" in s]
    handed = [sh["shard"] for s in segs if "tree" in s
              for sh in s["tree"]["children"][0]["source"]["shards"] if sh["status"] == "handed off"]
    assert fresh and sorted(sh for s in fresh for sh in s["fresh_shards"]) == sorted(handed)
    code, out, _ = run(capsys, "inspect", str(tmp_path / "plans.json"))
    assert "(saved by rank 0 of 2)" in out and "fresh segment: reads shard(s)" in out


def test_a_running_carved_segment_shows_the_shards_before_it_as_handed_off(tmp_path, capsys):
    """Elastic resume carves the shards a saved rank had not touched into a fresh segment of another
    rank. Once that rank reads, its state starts at the cut: the shards before it are the donor's
    (handed off), not shards it read - they were shown as done and counted in its rows read."""
    def build():
        return ri.to_iterable_dataset(hf(), num_shards=4).shuffle(seed=1, buffer_size=8)

    states = [consume(ri.split_dataset_by_node(build(), rank=r, world_size=2), 10 + r).state_dict()
              for r in range(2)]
    plans = ri.redistribute_states(states, world_size=3)
    running = []
    for rank, plan in enumerate(plans):
        ds = ri.split_dataset_by_node(build(), rank=rank, world_size=3)
        ds.load_state_dict(plan)
        running.append(consume(ds, 5).state_dict())
    ri.save_state(running, tmp_path / "running.json")
    rep = report_of(capsys, tmp_path / "running.json")
    sources = {s["label"].split(":")[0]: s["tree"]["children"][0]["source"] for s in rep["states"]}
    carved = sources["rank 1 of 3"]  # the fresh segment of saved rank 0's untouched shards, now reading
    donor = sources["rank 0 of 3"]
    assert [sh["status"] for sh in carved["shards"]] == ["handed off", "reading"]
    assert [sh["status"] for sh in donor["shards"]] == ["reading", "handed off"]
    assert carved["rows_read"] == 5 + 8 and carved["rows_total"] == 50 and carved["done"] == 0
    assert donor["rows_read"] == 10 + 5 + 8 and donor["rows_total"] == 50
    # each shard of saved rank 0 is owned by exactly one of the two segments
    owned = [sh["shard"] for src in (carved, donor) for sh in src["shards"] if sh["status"] != "handed off"]
    assert sorted(owned) == sorted(sh["shard"] for sh in donor["shards"])


def test_a_binary_state_file_is_not_held_in_memory_whole(tmp_path, capsys):
    """inspect read the whole file into memory, then decoded its blobs into arrays: twice the file's
    size (20 GB for a 10 GB Trainer checkpoint's data state). The blobs are read into their arrays
    one by one now, as load_state does."""
    import tracemalloc

    import numpy as np

    ri.save_state({"format": "resumable_iterable.state_test", "buf": [np.zeros(1 << 20, np.float64) for _ in range(4)],
                   "state": consume(ri.to_iterable_dataset(hf(), num_shards=2), 5).state_dict()}, tmp_path / "big.ri")
    size = (tmp_path / "big.ri").stat().st_size
    tracemalloc.start()
    try:
        code, out, _ = run(capsys, "inspect", str(tmp_path / "big.ri"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0 and "5/200 rows read" in out
    assert size > 32 << 20 and peak < 1.5 * size


def test_console_script_entry_point_resolves(capsys):
    """``setup.cfg``'s ``resumable-iterable = module:function`` names the ``main`` of the ``cli`` package."""
    import configparser
    import importlib
    import os

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.cfg"))
    scripts = dict((k.strip(), v.strip()) for k, v in (line.split("=", 1) for line in
                   cfg["options.entry_points"]["console_scripts"].splitlines() if line.strip()))
    module, func = scripts["resumable-iterable"].split(":")
    assert getattr(importlib.import_module(module), func) is main
    with pytest.raises(SystemExit) as e:
        main(["inspect", "--help"])
    assert e.value.code == 0 and "--max-shards" in capsys.readouterr().out


def test_cli_modules_use_no_private_names_of_other_modules():
    """Each module of the ``cli`` package tells one story and uses only public names of the others."""
    import ast
    import pathlib

    import resumable_iterable.cli as cli

    found = []
    for path in pathlib.Path(cli.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found += [(path.name, node.module, a.name) for a in node.names if a.name.startswith("_")]
        assert len(path.read_text().splitlines()) < 300, path.name
    assert found == []
