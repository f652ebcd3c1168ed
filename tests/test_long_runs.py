"""Days-long runs stay flat: nothing grows with the examples, batches, epochs, checkpoints or
resumes of a run where it should not.

What is counted, never timed: the JSON length of ``state_dict()`` (of the dataset, and of
torchdata's ``StatefulDataLoader`` holding its workers' snapshots), the open file descriptors
and threads of the main process and of each DataLoader worker, the worker processes alive, the
files left in a folder of saved states, and the pipeline objects left for the cyclic garbage
collector. Each family compares two points of one run (an early epoch with a late one, 1 k
examples with 20 k) on small data, so that a per-epoch or per-example leak shows as a difference.

* one process: every node kind over many epochs and deep into one long pass;
* a pass left part-way (a loop that breaks off, a state loaded over it, a persistent worker's pass
  reset between epochs) frees its shuffle buffer at once, without waiting for the cyclic garbage
  collector (a regression: it did not), and reading a JSON document file leaves no cycle either;
* file sources (Parquet, JSON lines, JSON, CSV, text, imagefolder, a zip archive) across passes
  left part-way and resumes;
* save_state / load_state cycles (JSON and binary state files) and load_state_dict repeated;
* torchdata's loader with 2 persistent workers over many epochs, one test per family;
* elastic resumes again and again (another worker count each time) in one epoch;
* what dropped loaders leave: their workers' shuffle buffers kept in the main process, and (with
  torch's ``file_system`` sharing strategy) their shared-memory files in ``/dev/shm``;
* saves and loads of states (and saves the system refuses), formatted passes (numpy, torch,
  pandas over ``Json``), zip listings and compressed archive members, errors caught by the loop
  (under an ``async`` map or a ``prefetch``, in a DataLoader worker) and the command line refusing
  a path leave nothing to the cyclic collector (``test_resource_hygiene.py``: a resumed
  ``transformers.Trainer``).

``pytest --soak -m slow`` runs the loader families over many more epochs.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import json
import os
import threading
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_iterable as ri

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")

TABLE = pa.table({"id": np.arange(400), "input_ids": [[i % 50] * (i % 5 + 1) for i in range(400)]})
#: rows that all print as JSON of one length
EVEN = pa.table({"id": np.arange(100, 500), "input_ids": [[i % 10] * 3 for i in range(400)]})


def src(num_shards: int = 4, table: pa.Table = TABLE) -> ri.IterableDataset:
    return ri.IterableDataset.from_arrow_table(table, num_shards=num_shards)


def gen(shards):
    for s in shards:
        for i in range(60):
            yield {"id": s * 1000 + i}


async def add_one(ex):
    return {"y": ex["id"] + 1}


#: one pipeline per node kind (and each stopping strategy of interleave_datasets)
KINDS = {
    "source": lambda: src(),
    "generator": lambda: ri.IterableDataset.from_generator(gen, gen_kwargs={"shards": [0, 1, 2]}),
    "map": lambda: src().map(lambda ex: {"y": ex["id"] * 2}),
    "map_async": lambda: src().map(add_one),
    "map_batched": lambda: src().map(lambda b: {"y": b["id"]}, batched=True, batch_size=7),
    "filter": lambda: src().filter(lambda ex: ex["id"] % 3 != 0),
    "filter_batched": lambda: src().filter(lambda b: [i % 3 != 0 for i in b["id"]], batched=True, batch_size=7),
    "shuffle_examples": lambda: src().shuffle(seed=1, buffer_size=30),
    # (rows of one JSON length: a seedless pass draws another order each run, so the buffered rows -
    # and with rows of several lengths, the state's length - differ between runs by more than DIGITS)
    "shuffle_no_seed": lambda: src(table=EVEN).shuffle(buffer_size=30),
    "shuffle_replay": lambda: src().shuffle(seed=1, buffer_size=30, buffer_state="replay"),
    "shuffle_drop": lambda: src().shuffle(seed=1, buffer_size=30, buffer_state="drop"),
    "global_shuffle": lambda: src().shuffle(seed=1, buffer_size=None),
    "batch": lambda: src().batch(7),
    "pack": lambda: src().select_columns(["input_ids"]).pack(16),
    "take_skip": lambda: src().skip(3).take(300),
    "repeat": lambda: src().take(100).repeat(3),
    "prefetch": lambda: src().prefetch(5),
    "concatenate": lambda: ri.concatenate_datasets([src(), src(2)]),
    "concatenate_axis1": lambda: ri.concatenate_datasets([src().select_columns(["id"]),
                                                          src().select_columns(["input_ids"])], axis=1),
    **{f"interleave_{s}": (lambda s: lambda: ri.interleave_datasets(
        [src(), src(2)], probabilities=[0.3, 0.7], seed=3, stopping_strategy=s))(s)
       for s in ("first_exhausted", "all_exhausted", "all_exhausted_without_replacement")},
    "interleave_no_seed": lambda: ri.interleave_datasets([src(), src(2)], probabilities=[0.3, 0.7],
                                                         stopping_strategy="all_exhausted"),
    "interleave_round_robin": lambda: ri.interleave_datasets([src(), src(2)], stopping_strategy="all_exhausted"),
    "mixed": lambda: ri.interleave_datasets([src().map(lambda ex: {"y": 1}).filter(lambda ex: ex["id"] % 5 != 1),
                                             src(2)], probabilities=[0.6, 0.4], seed=7)
    .shuffle(seed=2, buffer_size=40).batch(8),
}

#: tolerance for a state's JSON length between two points: seeds, generator states and counters
#: print with a few more or fewer digits; anything kept per epoch or per example would exceed it
DIGITS = 64


def state_len(state: dict) -> int:
    return len(json.dumps(state))


def fds(pid: int | None = None) -> tuple[int, int]:
    """Open file descriptors of a process: ``(files, pipes and sockets, torch shared-memory
    segments)``. The last are counted apart: with torch imported each dataset's epoch slot lives
    in a shared segment of 512 slots, so building datasets opens one more now and then (one per
    512 datasets, closed with the last of them); they get a tolerance of one."""
    d = f"/proc/{pid or os.getpid()}/fd"
    shm = other = 0
    for f in os.listdir(d):
        try:
            target = os.readlink(f"{d}/{f}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith("/dev/shm/torch_"):
            shm += 1
        else:
            other += 1
    return other, shm


def same_fds(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """``b``, counted later than ``a``, holds no more descriptors (segments: at most one more)."""
    return b[0] <= a[0] and b[1] <= a[1] + 1


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/<pid>/fd")


# ----------------------------------------------------------------------------- one process


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_state_size_flat_across_epochs(kind):
    """The state taken part-way through epoch 2 and epoch 30 is the same size, as is the state
    after each epoch ends: nothing accumulates per epoch (seeds drawn, positions, caches)."""
    ds = KINDS[kind]()
    sizes = {}
    for epoch in range(31):
        ds.set_epoch(epoch)
        for k, _ in enumerate(ds):
            if k == 5 and epoch in (2, 30):
                sizes[epoch, "mid"] = state_len(ds.state_dict())
        if epoch in (2, 30):
            sizes[epoch, "end"] = state_len(ds.state_dict())
    for where in ("mid", "end"):
        assert sizes[30, where] <= sizes[2, where] + DIGITS, (kind, sizes)


LONG = pa.table({"id": np.arange(24_000), "input_ids": [[i % 50] * (i % 3 + 1) for i in range(24_000)]})

LONG_KINDS = {
    "shuffle_examples": lambda: src(8, LONG).shuffle(seed=1, buffer_size=100),
    "shuffle_replay": lambda: src(8, LONG).shuffle(seed=1, buffer_size=100, buffer_state="replay"),
    "global_shuffle": lambda: src(8, LONG).shuffle(seed=1, buffer_size=None),
    "interleave_all_exhausted": lambda: ri.interleave_datasets([src(8, LONG), src(3, LONG)], probabilities=[0.3, 0.7],
                                                               seed=3, stopping_strategy="all_exhausted"),
    "interleave_without_replacement": lambda: ri.interleave_datasets(
        [src(8, LONG), src(3, LONG)], stopping_strategy="all_exhausted_without_replacement"),
    "concatenate": lambda: ri.concatenate_datasets([src(8, LONG), src(3, LONG)]),
    "map_batched_filter": lambda: src(8, LONG).map(lambda b: b, batched=True, batch_size=33).filter(
        lambda ex: ex["id"] % 7 != 0),
    "pack": lambda: src(8, LONG).select_columns(["input_ids"]).pack(16),
    "batch": lambda: src(8, LONG).batch(7),
    "repeat_forever_shuffled": lambda: src(4, LONG).take(300).shuffle(seed=2, buffer_size=50).repeat(None),
    "prefetch": lambda: src(8, LONG).prefetch(8),
}


@pytest.mark.parametrize("kind", sorted(LONG_KINDS))
def test_state_size_flat_in_a_long_pass(kind):
    """The state after 1 k examples and after 12 k of one pass (of 24 k rows; batches and packs:
    after 150 and 2.5 k): the same size."""
    ds = LONG_KINDS[kind]()
    it = iter(ds)
    sizes = []
    read = 0
    for point in ((150, 2500) if kind in ("batch", "pack") else (1000, 12_000)):
        while read < point:
            next(it)
            read += 1
        sizes.append(state_len(ds.state_dict()))
    assert sizes[1] <= sizes[0] + DIGITS, (kind, sizes)


def generator_of_arrays(shards):
    for s in shards:
        for i in range(80):
            yield {"id": s * 1000 + i, "x": np.full(64, i, dtype=np.float32)}


@contextlib.contextmanager
def cyclic_garbage():
    """What the body leaves to the cyclic garbage collector: a list filled when the body ends (the
    collector is off meanwhile, so nothing is freed behind the test's back). Clear it after use."""
    found: list = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


@pytest.mark.parametrize("buffer_state", ["examples", "drop", "replay"])
@pytest.mark.parametrize("how", ["left", "loaded_over", "finished"])
def test_a_pass_frees_its_shuffle_buffer_without_the_cyclic_collector(buffer_state, how):
    """A pass that is left part-way (a training loop that breaks off every epoch, a DataLoader
    worker reset between epochs), replaced by a loaded state, or finished, leaves no reference
    cycle: its shuffle buffer - up to ``buffer_size`` examples - goes as soon as nothing uses it.
    Before, the buffer's trail (what an error note works the source row out from) held the node,
    which held the trail: every such pass kept its buffer until the cyclic garbage collector ran,
    which in a training process with a large heap of long-lived objects is rare, so the memory of
    a buffer of large examples piled up epoch after epoch."""
    def build():
        ds = ri.IterableDataset.from_generator(generator_of_arrays, gen_kwargs={"shards": [0, 1]})
        return ds.shuffle(seed=0, buffer_size=40, buffer_state=buffer_state)

    ds = build()
    it = iter(ds)
    next(it)
    state = ri.loads_state(ri.dumps_state(ds.state_dict()))  # the buffer holds numpy arrays
    del it
    with cyclic_garbage() as garbage:
        for epoch in range(6):
            ds.set_epoch(epoch)
            if how == "finished":
                for _ in ds:
                    pass
            else:
                it = iter(ds)
                for _ in range(5):
                    next(it)
                del it
                if how == "loaded_over":
                    ds.load_state_dict(state)
    left = [type(o).__name__ for o in garbage if type(o).__module__.startswith("resumable_iterable")]
    garbage.clear()
    assert left == [], f"passes left for the cyclic garbage collector: {sorted(set(left))}"


@pytest.mark.parametrize("buffer_state", ["examples", "drop"])
def test_a_shuffle_error_note_still_names_the_row(buffer_state):
    """The error note of a map after a shuffle still works out the source row from the pass's
    draws (the trail's resolver now holds the pass weakly)."""
    def fail(ex):
        if ex["id"] == 57:
            raise RuntimeError("boom")
        return ex

    ds = src().shuffle(seed=4, buffer_size=30, buffer_state=buffer_state).map(fail)
    with pytest.raises(RuntimeError) as info:
        for _ in ds:
            pass
    note = " ".join(getattr(info.value, "__notes__", []))
    assert "row 57" in note, note


def test_shuffle_resumes_exactly_at_every_cut_after_passes_left_part_way():
    """Every cut point, with passes left part-way before the run measured."""
    from harness import assert_resumes_exactly

    def build():
        ds = src().map(lambda ex: {"y": ex["id"] % 11}).shuffle(seed=5, buffer_size=25)
        for epoch in range(3):  # passes left part-way, as a loop that breaks off leaves them
            it = iter(ds)
            next(it)
            del it
        ds.set_epoch(3)
        return ds

    assert_resumes_exactly(build, max_cuts=60)


@pytest.mark.parametrize("kind", ["map_async", "prefetch", "shuffle_examples", "interleave_all_exhausted", "pack"])
def test_threads_and_fds_flat_across_passes_left_part_way(kind):
    """Passes left part-way and states loaded over them leave no thread (prefetch, async map's
    event loop) and no file descriptor behind."""
    ds = KINDS[kind]()
    counts = {}
    for epoch in range(60):
        ds.set_epoch(epoch)
        it = iter(ds)
        for _ in range(5):
            next(it)
        if epoch % 3 == 0:
            state = json.loads(json.dumps(ds.state_dict()))
            other = KINDS[kind]()
            other.load_state_dict(state)
            it2 = iter(other)
            next(it2)
            del it2, other
        del it
        if epoch in (10, 59):
            gc.collect()  # what earlier tests left to the collector (event loops...) goes before counting
            counts[epoch] = (threading.active_count(), fds())
    assert counts[59][0] == counts[10][0] and same_fds(counts[10][1], counts[59][1]), counts


# ----------------------------------------------------------------------------- files


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("long_run_files")
    for i in range(3):
        ids = list(range(i * 20, i * 20 + 20))
        pq.write_table(pa.table({"id": ids}), d / f"p{i}.parquet", row_group_size=5)
        (d / f"j{i}.jsonl").write_text("".join(json.dumps({"id": k}) + "\n" for k in ids))
        (d / f"a{i}.json").write_text(json.dumps([{"id": k} for k in ids]))
        (d / f"c{i}.csv").write_text("id\n" + "".join(f"{k}\n" for k in ids))
        (d / f"t{i}.txt").write_text("".join(f"line {k}\n" for k in ids))
    from PIL import Image

    for k in range(12):
        folder = d / "img" / ("cat" if k % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4), (k, 0, 0)).save(folder / f"{k}.png")
    with zipfile.ZipFile(d / "z.zip", "w") as z:
        for i in range(3):
            z.write(d / f"j{i}.jsonl", f"j{i}.jsonl")
    return d


def file_builds(d):
    def paths(pattern):
        return sorted(glob.glob(str(d / pattern)))

    return {
        "parquet": lambda: ri.IterableDataset.from_parquet(paths("p*.parquet")),
        "parquet_reshard": lambda: ri.IterableDataset.from_parquet(paths("p*.parquet")).reshard(),
        "parquet_global_shuffle": lambda: ri.IterableDataset.from_parquet(paths("p*.parquet")).shuffle(
            seed=1, buffer_size=None),
        "jsonl": lambda: ri.IterableDataset.from_json(paths("j*.jsonl")),
        "json": lambda: ri.IterableDataset.from_json(paths("a*.json")),
        "csv": lambda: ri.IterableDataset.from_csv(paths("c*.csv")),
        "text": lambda: ri.IterableDataset.from_text(paths("t*.txt")),
        "imagefolder": lambda: ri.load_dataset("imagefolder", data_dir=str(d / "img"), split="train"),
        "zip_jsonl": lambda: ri.load_dataset("json", data_files=str(d / "z.zip"), split="train"),
    }


FILE_KINDS = ["parquet", "parquet_reshard", "parquet_global_shuffle", "jsonl", "json", "csv", "text", "imagefolder",
              "zip_jsonl"]


@needs_proc
@pytest.mark.parametrize("kind", FILE_KINDS)
def test_file_sources_leave_no_open_file_across_passes_and_resumes(files, kind):
    """A file left open per pass would be "Too many open files" after a few thousand epochs of a
    small dataset: passes left part-way, passes to the end and resumed pipelines leave none."""
    build = file_builds(files)[kind]
    ds = build()
    counts = {}
    for epoch in range(80):
        ds.set_epoch(epoch)
        it = iter(ds)
        for _ in range(7):
            next(it)
        state = json.loads(json.dumps(ds.state_dict()))
        del it
        resumed = build()
        resumed.load_state_dict(state)
        it2 = iter(resumed)
        next(it2)
        del it2, resumed
        if epoch % 3 == 0:
            for _ in ds:
                pass
        if epoch in (10, 79):
            gc.collect()  # what earlier tests left to the collector goes before counting
            counts[epoch] = fds()
    assert same_fds(counts[10], counts[79]), counts


# ----------------------------------------------------------------------------- saved states


def test_save_and_load_cycles_stay_flat(tmp_path):
    """A checkpoint every few steps for a long run: each one a new pipeline loading the last
    state file (a binary one: the buffer holds numpy arrays), then load_state_dict repeated on one
    dataset. No file is left beside the states, no descriptor stays open, no pipeline object
    outlives its dataset."""
    from resumable_iterable.nodes.shuffle import ShuffleNode

    from datasets import Dataset

    rows = Dataset.from_dict({"id": list(range(300)), "emb": [np.full(600, i, dtype=np.float32) for i in range(300)]})

    def build():
        return ri.to_iterable_dataset(rows, num_shards=4).with_format("numpy").shuffle(seed=1, buffer_size=50)

    def live_shuffles():
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is ShuffleNode)

    ds = build()
    it = iter(ds)
    counts = {}
    for step in range(120):
        try:
            next(it)
        except StopIteration:
            it = iter(ds)
            next(it)
        path = tmp_path / f"state{step % 3}"
        ds.save_state(str(path))
        del it
        ds = build()
        ds.load_state(str(path))
        it = iter(ds)
        if step in (20, 119):
            counts[step] = (fds(), live_shuffles(), sorted(os.listdir(tmp_path)))
    assert same_fds(counts[20][0], counts[119][0]) and counts[119][1:] == counts[20][1:], counts
    assert counts[119][2] == ["state0", "state1", "state2"]

    state = ds.state_dict()
    other = build()
    for k in range(60):
        other.load_state_dict(state)
        if k in (5, 59):
            counts[k] = (fds(), live_shuffles())
    assert same_fds(counts[5][0], counts[59][0]) and counts[59][1] == counts[5][1], counts


# ----------------------------------------------------------------------------- DataLoader workers

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader  # noqa: E402


def ids(rows: list) -> list:
    return [int(r["id"]) if isinstance(r, dict) and "id" in r else 0 for r in rows]


LOADER_FAMILIES = {
    "shuffle_buffers": [lambda: src().map(lambda ex: {"y": 1}).shuffle(seed=1, buffer_size=30),
                        lambda: src().shuffle(seed=1, buffer_size=30),
                        lambda: src().shuffle(seed=1, buffer_size=30, buffer_state="replay")],
    "interleave": [lambda: ri.interleave_datasets([src(), src(2)], probabilities=[0.3, 0.7], seed=3,
                                                  stopping_strategy=s)
                   for s in ("first_exhausted", "all_exhausted", "all_exhausted_without_replacement")],
    "concatenate_and_global_shuffle": [lambda: ri.concatenate_datasets([src(), src(2)]),
                                       lambda: src().shuffle(seed=1, buffer_size=None)],
    "batched_and_packed": [lambda: src().map(lambda b: {"y": b["id"]}, batched=True, batch_size=7).filter(
                               lambda ex: ex["id"] % 3 != 0),
                           lambda: src().select_columns(["input_ids"]).pack(16).batch(3),
                           lambda: src().skip(3).take(300)],
    "prefetch": [lambda: src().map(lambda ex: {"y": 1}).prefetch(6)],
}


def measure_loader(build, epochs: int, points: tuple, loader_class=TorchdataLoader) -> dict:
    """Run ``epochs`` epochs of ``build()`` through ``loader_class`` with 2 persistent workers,
    ``state_dict()`` after every batch; at each epoch of ``points`` (after a gc in the main
    process) the figures that must not grow."""
    ds = build()
    loader = loader_class(ds, batch_size=8, num_workers=2, persistent_workers=True, collate_fn=ids)
    me = psutil.Process()
    out = {}
    try:
        for epoch in range(epochs):
            ds.set_epoch(epoch)
            mid = None
            for k, _ in enumerate(loader):
                state = loader.state_dict()
                if k == 3:
                    mid = state
            if epoch in points:
                gc.collect()
                workers = me.children()
                out[epoch] = {"state": state_len(mid), "end_state": state_len(state), "fds": fds(),
                              "threads": threading.active_count(), "workers": len(workers),
                              "worker_fds": sorted(fds(w.pid)[0] for w in workers),
                              "worker_threads": sorted(w.num_threads() for w in workers)}
    finally:
        del loader
    return out


def assert_flat(figures: dict, what: str) -> None:
    first, last = (figures[k] for k in sorted(figures)[::len(figures) - 1])
    for key in ("state", "end_state"):
        assert last[key] <= first[key] + 2 * DIGITS, (what, key, figures)
    assert same_fds(first["fds"], last["fds"]), (what, "fds", figures)
    for key in ("threads", "workers"):
        assert last[key] == first[key], (what, key, figures)
    for key in ("worker_fds", "worker_threads"):  # a thread pool (Arrow's, torch's) may start one more late
        assert all(b <= a + 1 for a, b in zip(first[key], last[key])), (what, key, figures)


@needs_proc
@pytest.mark.parametrize("family", sorted(LOADER_FAMILIES))
def test_persistent_workers_stay_flat_across_epochs(family):
    """torchdata's loader, 2 persistent workers, a state after every batch: after epoch 3 and
    epoch 24, the loader's state (the workers' snapshots) is the same size, and the main process
    and each worker hold as many descriptors and threads."""
    for i, build in enumerate(LOADER_FAMILIES[family]):
        assert_flat(measure_loader(build, 25, (3, 24)), f"{family}[{i}]")


@needs_proc
def test_file_sources_through_persistent_workers_leave_no_open_file(files):
    builds = file_builds(files)
    for kind in ("parquet", "jsonl", "csv", "text", "zip_jsonl"):
        assert_flat(measure_loader(builds[kind], 25, (3, 24)), kind)


@needs_proc
def test_our_loader_with_persistent_workers_stays_flat():
    assert_flat(measure_loader(LOADER_FAMILIES["shuffle_buffers"][0], 25, (3, 24), ri.StatefulDataLoader),
                "ri.StatefulDataLoader")


def test_loader_restarts_from_saved_states_stay_flat():
    """A crash-and-resume cycle again and again (a new loader with 2 workers loading the same
    mid-epoch state): no worker process, descriptor or thread is left behind by the loaders that
    ended."""
    def build():
        return src().map(lambda ex: {"y": 1}).shuffle(seed=1, buffer_size=30)

    loader = TorchdataLoader(build(), batch_size=8, num_workers=2, collate_fn=ids)
    it = iter(loader)
    for _ in range(4):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    del it, loader
    me = psutil.Process()
    counts = {}
    for r in range(12):
        loader = TorchdataLoader(build(), batch_size=8, num_workers=2, collate_fn=ids)
        loader.load_state_dict(state)
        it = iter(loader)
        for _ in range(3):
            next(it)
        assert state_len(loader.state_dict()) <= state_len(state) + 2 * DIGITS
        del it, loader
        if r in (2, 11):
            gc.collect()
            counts[r] = (fds(), threading.active_count(), len(me.children()))
    # (not equal: a loader's threads and pipes may still be closing at the first point)
    assert same_fds(counts[2][0], counts[11][0]) and counts[11][1] <= counts[2][1] and counts[11][2] == 0, counts


LOADERS_LEFT = {
    "workers": dict(batch_size=8, num_workers=2),
    "dataset_batches": dict(batch_size=None, num_workers=2),
    "persistent_workers": dict(batch_size=8, num_workers=2, persistent_workers=True),
    "no_workers": dict(batch_size=8, num_workers=0),
    "batch_states": dict(batch_size=8, num_workers=2),
}


@pytest.mark.parametrize("kind", sorted(LOADERS_LEFT))
def test_loaders_left_part_way_leave_nothing_to_the_cyclic_collector(kind):
    """``ri.StatefulDataLoader`` iterators left part-way (a loop that breaks off, an evaluation
    loader made anew each time, a state loaded) and loaders dropped go at once: their worker
    processes are shut down when the last reference goes, not when the cyclic garbage collector
    next runs (rarely, in a training process with a large heap). Before, each iterator referred to
    itself (the per-batch snapshot hook, a bound method kept on it), so every one left its worker
    processes running; and loading a state kept the shuffle buffer it held (a nested function of
    the loading that called itself) until that collector ran. When it ran, it held the loop 5 s per
    worker: it closed the queues to the workers before the iterator could tell them to stop, so
    torch waited for them and then killed them."""
    def build():
        ds = src().map(lambda ex: {"y": 1}).shuffle(seed=1, buffer_size=30)
        return ds.batch(8) if kind == "dataset_batches" else ds

    def make():
        loader = ri.StatefulDataLoader(build(), collate_fn=None if kind == "dataset_batches" else ids,
                                       **LOADERS_LEFT[kind])
        if kind == "batch_states":
            loader.keep_batch_states(4)
        return loader

    me = psutil.Process()
    before = {p.pid for p in me.children()}
    workers: list = []
    with cyclic_garbage() as garbage:
        loader = make()
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        del it
        for _ in range(3):
            resumed = make()
            resumed.load_state_dict(state)
            for _ in range(2):  # a new iterator replaces the one left part-way
                it = iter(resumed)
                next(it)
                next(it)
                workers += getattr(it, "_workers", [])
                del it
            del resumed
        del loader
        children = len({p.pid for p in me.children()} - before)
    left = sorted({type(o).__qualname__ if not hasattr(o, "__code__") else o.__qualname__ for o in garbage
                   if type(o).__module__.startswith(("resumable_iterable", "torchdata", "torch."))
                   or "resumable_iterable" in getattr(getattr(o, "__code__", None), "co_filename", "")})
    garbage.clear()
    assert children == 0, f"{children} worker processes of dropped loaders still run"
    # told to stop, they ended on their own (a worker torch has to kill, after waiting 5 s for it,
    # ends otherwise: with the cycle, the collector closed its queue before the stop was sent)
    assert [w.exitcode for w in workers] == [0] * len(workers)
    assert left == [], f"left for the cyclic garbage collector: {left}"


def test_elastic_resumes_again_and_again_keep_the_state_bounded():
    """One epoch resumed 14 times, each time with another worker count (0 to 4): the plan's
    state stays bounded (segments that are done are dropped), and every example is yielded once."""
    table = pa.table({"id": np.arange(3000)})

    def build():
        return ri.IterableDataset.from_arrow_table(table, num_shards=12).shuffle(seed=1, buffer_size=20)

    seen: list = []
    state = None
    sizes = {}
    counts = [2, 3, 1, 4, 2, 0, 3]
    for r in range(14):
        w = counts[r % len(counts)]
        loader = ri.StatefulDataLoader(build(), batch_size=4, num_workers=w, collate_fn=ids)
        if state is not None:
            loader.load_state_dict(state)
        it = iter(loader)
        for _ in range(10):
            seen += next(it)
        state = json.loads(json.dumps(loader.state_dict()))
        del it, loader
        sizes[r] = state_len(state)
    assert sizes[13] <= sizes[6] + 2 * DIGITS, sizes  # the same worker count (3) at both points
    loader = ri.StatefulDataLoader(build(), batch_size=4, num_workers=2, collate_fn=ids)
    loader.load_state_dict(state)
    for batch in loader:
        seen += batch
    assert sorted(seen) == list(range(3000))


# ----------------------------------------------------------------------------- long variants


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize("family", sorted(LOADER_FAMILIES))
def test_persistent_workers_soak(soak, family):
    """The loader families over many more epochs (``--soak``: 400)."""
    epochs = 400 if soak else 60
    for i, build in enumerate(LOADER_FAMILIES[family]):
        assert_flat(measure_loader(build, epochs, (5, epochs - 1)), f"{family}[{i}]")


@pytest.mark.parametrize("kind", ["json", "jsonl", "csv", "text", "parquet"])
def test_file_reads_leave_nothing_to_the_cyclic_collector(files, kind):
    """Reading a file leaves no reference cycle of the library's. Before, a JSON file holding one
    document (a list of objects) was first tried as JSON Lines, and the error kept from that try
    held the reading function's frame, which held the error: every read of such a file (each pass,
    each shard) left the frame - with the file's whole table in it - until the cyclic garbage
    collector ran, which a training process with a large heap of long-lived objects does rarely."""
    ds = file_builds(files)[kind]()
    for _ in ds:
        pass
    with cyclic_garbage() as garbage:
        for epoch in range(4):
            ds.set_epoch(epoch)
            it = iter(ds)
            next(it)
            del it
            for _ in ds:
                pass
    ours = [o for o in garbage
            if type(o).__module__.startswith("resumable_iterable")
            or (type(o).__name__ == "frame" and "resumable_iterable" in o.f_code.co_filename)]
    names = sorted({getattr(getattr(o, "f_code", None), "co_name", type(o).__name__) for o in ours})
    del ours
    garbage.clear()
    assert names == [], f"left for the cyclic garbage collector: {names}"


def count_nodes(rows: list) -> int:
    """collate_fn run in the DataLoader worker: the pipeline nodes the worker holds, garbage
    included (the worker's cyclic collector is off, so that a cycle shows however its heap grows)."""
    from resumable_iterable.nodes.base import Node

    gc.disable()
    return sum(1 for o in gc.get_objects() if isinstance(o, Node))


LEFT_PART_WAY = {
    "shuffle_examples": lambda: src().map(lambda ex: {"y": 1}).shuffle(seed=0, buffer_size=30),
    "shuffle_replay": lambda: src().shuffle(seed=0, buffer_size=30, buffer_state="replay"),
    "interleave_shuffle": lambda: ri.interleave_datasets([src(), src(2)], probabilities=[0.5, 0.5], seed=1).shuffle(
        seed=0, buffer_size=30),
    "prefetch": lambda: src().map(lambda ex: ex).prefetch(4),
}


@needs_proc
@pytest.mark.parametrize("kind", sorted(LEFT_PART_WAY))
def test_persistent_workers_left_part_way_each_epoch_free_their_passes(kind):
    """A training loop that breaks off every epoch (a step budget per epoch) through 2 persistent
    workers: each worker's pass is reset, and goes at once with everything it held. Before, a
    reset pass of a shuffle buffer of stored examples kept its buffer until the worker's cyclic
    collector ran - with a buffer of 100 examples of 1 MB, each worker grew from 0.9 to 2.2 GB
    over 16 epochs (this test then counted 3 times as many nodes after 10 epochs as after 2)."""
    ds = LEFT_PART_WAY[kind]()
    loader = TorchdataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True, collate_fn=count_nodes)
    held = []
    for epoch in range(10):
        ds.set_epoch(epoch)
        for i, count in enumerate(loader):
            held.append(count)
            if i == 5:
                break
    del loader
    assert max(held[-6:]) <= max(held[:12]), held


def big_array(ex: dict) -> dict:
    return {"id": ex["id"], "x": np.full(4096, ex["id"], dtype=np.float64)}  # 32 KB: through shared memory


@needs_proc
@pytest.mark.parametrize("persistent", [False, True])
def test_a_dropped_loader_leaves_no_worker_buffer_in_the_main_process(persistent):
    """A loader with workers and a shuffle buffer, dropped part-way (with the state taken from it):
    the main process keeps nothing its workers sent. Before, it kept each worker's last buffer - up
    to ``buffer_size`` examples per worker - and the shared-memory blocks they came in, until the
    workers of another loader sent a buffer (never, if none came): after a training loop, or an
    evaluation loader, the memory of ``num_workers * buffer_size`` examples stayed taken."""
    from resumable_iterable.integrations.torch import buffers

    def make():
        ds = src().map(big_array, remove_columns=["input_ids"]).shuffle(seed=0, buffer_size=30)
        return ri.StatefulDataLoader(ds, batch_size=4, num_workers=2, collate_fn=ids, persistent_workers=persistent)

    def segments() -> int:
        # (after a collection: a batch or state of torch's machinery caught in a reference cycle
        # at that moment may still map a block; the tables checked below are what held them for good)
        gc.collect()
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if "/dev/shm" in line or "torch_" in line)

    make()  # (the epoch slots' shared segment)
    before = segments()
    for _ in range(2):
        loader = make()
        it = iter(loader)
        for _ in range(10):
            next(it)
        state = loader.state_dict()
        pids = {w.pid for w in it._workers}
        assert any(k[0] in pids for k in buffers._logs) and any(k[0] in pids for k in buffers._received)
        del it, loader, state
        kept = [k for table in (buffers._logs, buffers._received) for k in table if k[0] in pids]
        assert kept == [], f"the main process still holds what dropped workers sent: {kept}"
    assert segments() <= before


def test_saves_and_loads_leave_nothing_to_the_cyclic_collector(tmp_path):
    """``save_state`` / ``load_state`` (JSON and binary state files), ``dumps_state`` /
    ``loads_state`` and a save refused for a value it cannot hold leave no reference cycle. Before,
    each encoding and each decoding did (the codec's fast path, a closure calling itself and its
    encoder's method): a run saving every few steps left two cycles per save to the collector."""
    ds = ri.IterableDataset.from_generator(generator_of_arrays, gen_kwargs={"shards": [0, 1]}).shuffle(
        seed=0, buffer_size=40)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    with cyclic_garbage() as garbage:
        for i in range(3):
            ri.save_state(state, tmp_path / "state.json")
            ri.load_state(tmp_path / "state.json")
            ri.save_state({"a": 1}, tmp_path / "small.json")
            ri.load_state(tmp_path / "small.json")
            ri.loads_state(ri.dumps_state(state))
            with pytest.raises(TypeError):
                ri.dumps_state({"a": [object()]})
    left = sorted({type(o).__qualname__ if not hasattr(o, "__code__") else o.__qualname__ for o in garbage
                   if type(o).__module__.startswith("resumable_iterable")
                   or "resumable_iterable" in getattr(getattr(o, "__code__", None), "co_filename", "")})
    garbage.clear()
    assert left == [], f"left for the cyclic garbage collector: {left}"


def json_rows():
    for i in range(20):
        yield {"id": i, "j": {"a": [i, "x"]}}


def test_formatted_passes_and_archive_listings_leave_nothing_to_the_cyclic_collector(tmp_path):
    """Passes formatted as torch tensors or numpy arrays (rows, batches), as pandas frames of
    ``Json`` values, and loads listing a zip archive's members leave no reference cycle. Before,
    each such pass (and each listing) made nested functions calling themselves - holding the
    formatter and the features, or the archive's member names - left to the cyclic collector."""
    from datasets import Features, Json, Value

    with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:
        for i in range(3):
            z.writestr(f"f{i}/x.jsonl", "\n".join(json.dumps({"id": k}) for k in range(5)))
    builds = [
        lambda: src(2).map(lambda ex: ex).with_format("torch"),
        lambda: src(2).with_format("numpy").batch(4),
        lambda: ri.IterableDataset.from_generator(
            json_rows, features=Features({"id": Value("int64"), "j": Json()})).with_format("pandas"),
        lambda: ri.load_dataset("json", data_files=str(tmp_path / "a.zip"), split="train"),
    ]
    for build in builds:
        for _ in build():  # (first use: imports, caches)
            pass
    with cyclic_garbage() as garbage:
        for build in builds:
            for _ in range(2):
                for _ in build():
                    pass
    left = sorted({type(o).__qualname__ if not hasattr(o, "__code__") else o.__qualname__ for o in garbage
                   if type(o).__module__.startswith("resumable_iterable")
                   or "resumable_iterable" in getattr(getattr(o, "__code__", None), "co_filename", "")})
    garbage.clear()
    assert left == [], f"left for the cyclic garbage collector: {left}"


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="lists /dev/shm")
def test_workers_that_end_leave_no_shared_memory_files_with_the_file_system_strategy():
    """With torch's ``file_system`` sharing strategy (the usual cure for "too many open files"),
    the shared-memory blocks of DataLoader workers that ended are removed from ``/dev/shm`` once
    the loader is dropped. Before, every worker that had sent a shuffle buffer of large values left
    its blocks there (32 MB and more each: a Python process frees nothing at exit, and a file is
    removed when the last process that maps it lets go of it) until the main process exited:
    without persistent workers, another ``num_workers`` blocks of RAM-backed ``/dev/shm`` per epoch."""
    import torch.multiprocessing

    old = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        for _ in range(2):
            ds = src().map(big_array, remove_columns=["input_ids"]).shuffle(seed=0, buffer_size=30)
            loader = ri.StatefulDataLoader(ds, batch_size=4, num_workers=2, collate_fn=ids)
            it = iter(loader)
            for _ in range(10):
                next(it)
            pids = [w.pid for w in it._workers]
            del it, loader, ds
            for pid in pids:
                with contextlib.suppress(psutil.NoSuchProcess):
                    psutil.Process(pid).wait(timeout=30)
            left = [n for n in os.listdir("/dev/shm") if any(n.startswith(f"torch_{pid}_") for pid in pids)]
            assert left == [], f"shared-memory files of ended workers: {left}"
    finally:
        torch.multiprocessing.set_sharing_strategy(old)


@needs_proc
def test_compressed_archive_members_leave_nothing_to_the_cyclic_collector(tmp_path):
    """Compressed files inside a zip archive (``zip://*.jsonl.gz::a.zip``, ``.bz2``, ``.xz``), read
    in passes left part-way and in whole passes: no reference cycle, no descriptor left open.
    Before, each member opened (each shard of each pass) replaced its decompressing file's
    ``close`` with a function calling the replaced one - a cycle that left the file objects (zip,
    member, decompressor and their buffers) to the cyclic collector."""
    import bz2
    import gzip
    import lzma

    text = "\n".join(json.dumps({"id": k, "t": "x" * 40}) for k in range(500)).encode()
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:
        for ext, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
            z.writestr(f"f.jsonl.{ext}", compress(text))
    ds = ri.load_dataset("json", data_files=f"zip://f.jsonl.*::{tmp_path / 'a.zip'}", split="train")
    assert ds.num_shards == 3
    for _ in ds:
        pass
    before = fds()
    with cyclic_garbage() as garbage:
        for _ in range(2):
            it = iter(ds)
            for _ in range(700):  # into the second member
                next(it)
            del it
            assert sum(1 for _ in ds) == 1500
    left = sorted({type(o).__qualname__ if not hasattr(o, "__code__") else o.__qualname__ for o in garbage
                   if type(o).__module__.startswith(("resumable_iterable", "gzip", "bz2", "lzma", "zipfile"))
                   or "resumable_iterable" in getattr(getattr(o, "__code__", None), "co_filename", "")})
    garbage.clear()
    assert left == [], f"left for the cyclic garbage collector: {left}"
    assert same_fds(before, fds())


def fails_at_37(ex: dict) -> dict:
    if ex["id"] == 37:
        raise RuntimeError("boom")
    return {"y": 1}


@pytest.mark.parametrize("persistent", [False, True])
def test_a_loader_dropped_after_a_worker_error_shuts_its_workers_down(persistent):
    """A ``map`` function raising in a DataLoader worker, the error caught by the training loop
    and the loader dropped (or a state taken first): the worker processes end at once, without
    the cyclic collector. Before, torch re-raised the worker's error from a frame that kept it, and
    its traceback held that frame and the iterator's: every loader dropped after such an error kept
    its workers running until the cyclic collector ran."""
    def once():
        ds = src().map(fails_at_37).shuffle(seed=0, buffer_size=20)
        loader = ri.StatefulDataLoader(ds, batch_size=4, num_workers=2, collate_fn=ids,
                                       persistent_workers=persistent)
        with pytest.raises(RuntimeError, match="boom"):
            for _ in loader:
                pass
        loader.state_dict()

    me = psutil.Process()
    before = {p.pid for p in me.children()}
    with cyclic_garbage() as garbage:
        for _ in range(2):
            once()
        children = len({p.pid for p in me.children()} - before)
    left = sorted({type(o).__qualname__ for o in garbage
                   if type(o).__module__.startswith(("resumable_iterable", "torchdata", "torch."))})
    garbage.clear()
    assert children == 0, f"{children} worker processes of dropped loaders still run"
    assert left == [], f"left for the cyclic garbage collector: {left}"


def test_the_command_line_refusing_a_file_leaves_nothing_to_the_cyclic_collector(tmp_path, capsys):
    """``resumable-iterable inspect`` (``cli.main``, callable from Python) refusing a path - a
    folder without a state, a damaged file - leaves no reference cycle. Before, the error was kept
    in ``main``'s frame after its handler, and its traceback held that frame: each refusal left
    the error, and the frames it was raised through, to the cyclic collector."""
    from resumable_iterable.cli import main

    (tmp_path / "bad.json").write_text('{"version": 1, "node": ')
    main(["inspect", str(tmp_path)])
    with cyclic_garbage() as garbage:
        for path in (tmp_path, tmp_path / "bad.json", tmp_path / "missing.json"):
            assert main(["inspect", str(path)]) == 1
    left = sorted({type(o).__qualname__ for o in garbage if type(o).__module__.startswith("resumable_iterable")}
                  | {o.f_code.co_name for o in garbage
                     if type(o).__name__ == "frame" and "resumable_iterable" in o.f_code.co_filename})
    garbage.clear()
    capsys.readouterr()
    assert left == [], f"left for the cyclic garbage collector: {left}"


async def add_one_fails_at_37(ex):
    if ex["id"] == 37:
        raise RuntimeError("boom")
    return {"y": ex["id"] + 1}


ERRORS_CAUGHT = {
    "async_map_raises": lambda: src().map(add_one_fails_at_37),
    "below_async_map": lambda: src().map(fails_at_37).map(add_one),
    "below_prefetch": lambda: src().map(fails_at_37).prefetch(3),
}


@pytest.mark.parametrize("kind", sorted(ERRORS_CAUGHT))
def test_errors_caught_by_the_loop_leave_nothing_to_the_cyclic_collector(kind):
    """A ``map`` function raising under an ``async`` map or a ``prefetch``, the error caught by the
    loop, a state taken and resumed, and the pipeline dropped: nothing is left for the cyclic
    collector. Before, the node that re-raised the error kept it in a local variable of its
    generator, whose frame the error's traceback holds: each such error left the whole pipeline
    (and an ``async`` map's event loop with its descriptors) to the cyclic collector."""
    def once():
        ds = ERRORS_CAUGHT[kind]()
        with pytest.raises(RuntimeError, match="boom"):
            for _ in ds:
                pass
        state = ds.state_dict()
        resumed = ERRORS_CAUGHT[kind]()
        resumed.load_state_dict(state)
        with pytest.raises(RuntimeError, match="boom"):  # the failing example is retried first
            next(iter(resumed))

    once()
    with cyclic_garbage() as garbage:
        for _ in range(2):
            once()
    left = sorted({type(o).__qualname__ for o in garbage if type(o).__module__.startswith("resumable_iterable")}
                  | {o.f_code.co_name for o in garbage
                     if type(o).__name__ == "frame" and "resumable_iterable" in o.f_code.co_filename})
    garbage.clear()
    assert left == [], f"left for the cyclic garbage collector: {left}"


def test_saves_that_fail_leave_nothing_to_the_cyclic_collector(tmp_path):
    """A ``save_state`` the system refuses (here: the path is a folder; a full disk goes the same
    way), the error caught and training going on: nothing is left for the cyclic collector. Before,
    the error renamed for the path asked for was kept in the writing function's frame, which its
    traceback holds: each failed save left the encoded state - views of the state's arrays, a
    shuffle buffer's examples - to the cyclic collector."""
    (tmp_path / "folder").mkdir()
    state = {"buffer": [np.zeros(20_000)]}
    with cyclic_garbage() as garbage:
        for _ in range(2):
            with pytest.raises(IsADirectoryError, match="folder"):
                ri.save_state(state, tmp_path / "folder")
    left = sorted({type(o).__qualname__ for o in garbage if type(o).__module__.startswith("resumable_iterable")}
                  | {o.f_code.co_name for o in garbage
                     if type(o).__name__ == "frame" and "resumable_iterable" in o.f_code.co_filename})
    garbage.clear()
    assert left == [], f"left for the cyclic garbage collector: {left}"
