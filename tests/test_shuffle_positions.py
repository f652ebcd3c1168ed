"""A default shuffle in DataLoader workers logs large examples as positions.

In a worker, a shuffle buffer's state crosses to the main process after every batch. When the
examples below come straight from sources (no ``map``/``filter``: re-reading them runs nothing of
the user's) and the pass's first example is large (an array, image or file of 16 KB or more), the
worker logs where each buffered example came from instead of copying it; a resumed pipeline
re-reads those examples from the sources. These tests hold that to the state contract: every
cut resumes exactly, JSON/binary/pickle round trips included, with elastic resumes, in-place
edits after the shuffle, a drain, an interleave below, persistent workers and bad states.
"""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import resumable_iterable as ri  # noqa: E402
from resumable_iterable.nodes.shuffle import BLOCK  # noqa: E402
from resumable_iterable.nodes.worker_positions import derived_entries, is_derived  # noqa: E402
from resumable_iterable.state import is_position, position_entry  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning"),
              pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

LARGE = 4096  # float32: 16 KB, the size from which an example counts as large
SHARDS = [0, 1, 2, 3]


def rows(shards, n=12, width=LARGE):
    for s in shards:
        for i in range(n):
            k = s * 100 + i
            yield {"id": k, "x": np.full(width, k, dtype=np.float32)}


def shuffled(width=LARGE, n=12, **kw):
    return (ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": SHARDS, "n": n, "width": width})
            .shuffle(seed=3, buffer_size=7, **kw))


def checked(batch):
    """A batch as ids, each example checked to hold its own values (a re-read gone wrong shows)."""
    for ex in batch:
        assert ex["x"].dtype == np.float32 and (ex["x"] == ex["id"]).all(), ex["id"]
    return [ex["id"] for ex in batch]


def loader(ds, workers=2, **kw):
    return ri.StatefulDataLoader(ds, batch_size=4, num_workers=workers, collate_fn=checked, **kw)


def worker_buffers(state) -> list:
    """The shuffle buffers of each worker in a loader state (a derived buffer's entries worked out)."""
    snaps = state["_snapshot"]["_worker_snapshots"]
    out = []
    for w in sorted(snaps):
        ds = snaps[w]["dataset_state"]
        node, shape = ds["state"], ds["pipeline"]
        while "buffer" not in node:  # down to the shuffle
            node, shape = node["children"][0], shape["children"][0]
        buf = node["buffer"]
        out.append(derived_entries(buf, shape["buffer_size"], BLOCK) if is_derived(buf) else list(ds["buffers"][buf]))
    return out


def run_with_states(make):
    dl = make()
    batches, states = [], [ri.dumps_state(dl.state_dict())]
    for b in dl:
        batches.append(b)
        states.append(ri.dumps_state(dl.state_dict()))
    return batches, states


def assert_resumes(make, batches, states, cuts, decode=None):
    """A fresh ``make()`` loaded with the state after each cut yields exactly the uninterrupted tail."""
    for cut in cuts:
        again = make()
        again.load_state_dict((decode or ri.loads_state)(states[cut]))
        assert [k for b in again for k in b] == [k for b in batches[cut:] for k in b], cut


def test_workers_log_large_examples_as_positions_and_every_cut_resumes_exactly():
    batches, states = run_with_states(lambda: loader(shuffled()))
    assert sorted(k for b in batches for k in b) == sorted(s * 100 + i for s in SHARDS for i in range(12))
    held = worker_buffers(ri.loads_state(states[3]))
    assert all(held) and all(is_position(e) and len(e["at"]) == 2 for buf in held for e in buf)
    assert_resumes(lambda: loader(shuffled()), batches, states, range(len(states)))


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_a_state_of_positions_resumes_with_another_worker_count(workers):
    batches, states = run_with_states(lambda: loader(shuffled()))
    full = sorted(k for b in batches for k in b)
    for cut in (1, 4, len(batches) - 2):
        again = loader(shuffled(), workers=workers)
        again.load_state_dict(ri.loads_state(states[cut]))
        assert sorted([k for b in batches[:cut] for k in b] + [k for b in again for k in b]) == full, cut


def test_small_examples_mapped_examples_and_stored_ones_stay_examples():
    def mapped():
        return (ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": SHARDS}).map(lambda ex: ex)
                .shuffle(seed=3, buffer_size=7))

    for make in (lambda: shuffled(width=8), mapped, lambda: shuffled(worker_positions=False)):
        dl = loader(make())
        it = iter(dl)
        for _ in range(3):
            next(it)
        held = worker_buffers(dl.state_dict())
        assert all(held) and all(type(e) is dict and not is_position(e) for buf in held for e in buf)


def test_in_a_process_the_state_holds_the_examples():
    ds = shuffled()
    it = iter(ds)
    for _ in range(5):
        next(it)
    buf = [e for ch in ds.state_dict()["state"]["buffer"] for e in ch]
    assert len(buf) == 7 and not any(map(is_position, buf))


def test_an_in_place_edit_after_the_shuffle_cannot_change_a_state_of_positions():
    def edit(ex):
        ex["x"] += 1000  # in place, in the worker
        ex["x"] -= 1000
        ex["id"] = ex["id"]
        return ex

    def make():
        return loader(shuffled().map(edit))

    batches, states = run_with_states(make)
    assert_resumes(make, batches, states, (2, 5))


def test_states_of_positions_round_trip_through_files_pickle_and_torch_weights_only(tmp_path):
    batches, states = run_with_states(lambda: loader(shuffled()))
    state = ri.loads_state(states[4])
    path = tmp_path / "state.ri"
    ri.save_state(state, path)
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    for loaded in (ri.load_state(path), pickle.loads(pickle.dumps(state)), torch.load(buf, weights_only=True)):
        again = loader(shuffled())
        again.load_state_dict(loaded)
        assert [k for b in again for k in b] == [k for b in batches[4:] for k in b]


def test_a_state_taken_while_draining_resumes_exactly():
    batches, states = run_with_states(lambda: loader(shuffled()))
    n = len(batches)
    # the buffers are draining here (7 of 24 rows per worker)
    assert_resumes(lambda: loader(shuffled()), batches, states, (n - 3, n - 2, n - 1))


def interleaved(strategy="all_exhausted"):
    a = ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0, 1]})
    b = ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [2, 3], "n": 9})
    ds = ri.interleave_datasets([a, b], probabilities=[0.5, 0.5], seed=1, stopping_strategy=strategy)
    return ds.shuffle(seed=2, buffer_size=6)


@pytest.mark.parametrize("strategy", ["first_exhausted", "all_exhausted", "all_exhausted_without_replacement"])
def test_an_interleave_below_is_logged_as_positions(strategy):
    # it reads one example ahead per input: the pass arms its tracking before the first read, so
    # the state says where the peeked examples came from too, and the buffer holds [input, shard, row]
    batches, states = run_with_states(lambda: loader(interleaved(strategy)))
    held = worker_buffers(ri.loads_state(states[2]))
    assert all(held) and all(is_position(e) and len(e["at"]) == 3 for buf in held for e in buf)
    assert_resumes(lambda: loader(interleaved(strategy)), batches, states, range(len(states)))


def test_an_interleave_resumed_from_a_state_without_its_peeked_positions_stores_that_pass():
    # a state taken outside the workers holds the peeked examples, not where they came from: the
    # workers that continue it store the examples (exactly), and the next epoch logs positions again
    ds = interleaved()
    it = iter(ds)
    head = [next(it)["id"] for _ in range(9)]
    state = ri.loads_state(ri.dumps_state(ds.state_dict()))
    again = interleaved()
    again.load_state_dict(state)
    dl = loader(again)
    tail = [k for b in dl for k in b]
    assert head + tail == [ex["id"] for ex in interleaved()]
    again.set_epoch(1)
    dl = loader(again)
    it = iter(dl)
    next(it)
    assert all(is_position(e) for buf in worker_buffers(dl.state_dict()) for e in buf)


def test_a_worker_state_continued_in_a_process_then_in_workers_resumes_exactly():
    # the plain loop (no workers) drops the positions of what it peeks, which a later pass in
    # workers would otherwise take for those of the examples it peeked since
    full = sorted(k for b in loader(interleaved()) for k in b)
    dl = loader(interleaved())
    it = iter(dl)
    head = [k for _ in range(3) for k in next(it)]
    state = ri.loads_state(ri.dumps_state(dl.state_dict()))
    mid = loader(interleaved(), workers=0)
    mid.load_state_dict(state)
    it = iter(mid)
    head += [k for _ in range(3) for k in next(it)]
    state = ri.loads_state(ri.dumps_state(mid.state_dict()))
    last = loader(interleaved(), workers=2)
    last.load_state_dict(state)
    assert sorted(head + [k for b in last for k in b]) == full


def test_arrow_sources_are_re_read_by_position():
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_dict({"id": list(range(40)), "blob": [bytes([i]) * 20_000 for i in range(40)]})

    def make():
        ds = ri.to_iterable_dataset(table, num_shards=4).shuffle(seed=1, buffer_size=6)
        return ri.StatefulDataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda b: [
            ex["id"] for ex in b if ex["blob"] == bytes([ex["id"]]) * 20_000])

    batches, states = run_with_states(make)
    assert sorted(k for b in batches for k in b) == list(range(40))
    assert all(is_position(e) for buf in worker_buffers(ri.loads_state(states[2])) for e in buf)
    assert_resumes(make, batches, states, (1, 3, 6))


def test_a_state_of_stored_examples_resumes_in_a_pipeline_that_logs_positions():
    batches, states = run_with_states(lambda: loader(shuffled(worker_positions=False)))
    assert all(type(e) is dict and not is_position(e) for buf in worker_buffers(ri.loads_state(states[3])) for e in buf)
    again = loader(shuffled())
    again.load_state_dict(ri.loads_state(states[3]))
    assert [k for b in again for k in b] == [k for b in batches[3:] for k in b]
    back = loader(shuffled(worker_positions=False))  # and the other way round
    _, states2 = run_with_states(lambda: loader(shuffled()))
    back.load_state_dict(ri.loads_state(states2[3]))
    assert [k for b in back for k in b] == [k for b in batches[3:] for k in b]


def test_data_that_changed_since_the_state_was_saved_is_named():
    _, states = run_with_states(lambda: loader(shuffled()))
    fewer = (ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": SHARDS, "n": 2})
             .shuffle(seed=3, buffer_size=7))
    again = ri.StatefulDataLoader(fewer, batch_size=4, num_workers=0, collate_fn=checked)
    again.load_state_dict(ri.loads_state(states[3]))
    with pytest.raises(ValueError) as e:
        list(again)
    text = str(e.value) + "".join(getattr(e.value, "__notes__", []))
    assert "positions" in text and "fewer rows" in text


def test_a_bad_position_is_refused_with_where_it_is():
    _, states = run_with_states(lambda: loader(shuffled()))
    snap = lambda state: state["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]  # noqa: E731
    # the buffer as a log of slots (it drains at the end of the pass)
    state = next(s for s in map(ri.loads_state, states) if len(snap(s).get("buffers", {}).get("0", ())) > 2)
    snap(state)["buffers"]["0"][2] = position_entry([9, 0])  # a shard this worker does not read
    again = loader(shuffled())
    with pytest.raises(ValueError, match=r"buffer\[2\].*shard 9"):
        again.load_state_dict(state)
    # a derived buffer (while it fills and mixes): the slot holding that input is named
    state = ri.loads_state(states[3])
    assert is_derived(snap(state)["state"]["buffer"])
    snap(state)["state"]["buffer"]["runs"][0][1] = [9, 0]
    with pytest.raises(ValueError, match=r"buffer\[\d+\]\.at.*shard 9"):
        loader(shuffled()).load_state_dict(state)

    mapped = (ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": SHARDS}).map(lambda ex: ex)
              .shuffle(seed=3, buffer_size=7))
    own = mapped.state_dict()
    own["state"]["buffer"] = [[position_entry([0, 1])]]
    with pytest.raises(ValueError, match="cannot re-read its examples from their positions"):
        mapped.load_state_dict(own)


def test_worker_positions_must_be_a_bool():
    with pytest.raises(TypeError, match="worker_positions must be True or False, got 'never'"):
        shuffled(worker_positions="never")


def test_inspect_says_which_buffered_examples_are_positions(tmp_path, capsys):
    from resumable_iterable.cli import main

    _, states = run_with_states(lambda: loader(shuffled()))
    ri.save_state(ri.loads_state(states[3]), tmp_path / "s.ri")
    assert main(["inspect", str(tmp_path / "s.ri")]) == 0
    out = capsys.readouterr().out
    assert out.count("buffer 7/7, all as positions, re-read on resume") == 2


def test_concatenated_sources_and_column_operations_below_are_re_read_by_position():
    def make():
        a = ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [0, 1]})
        b = ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": [2, 3], "n": 9})
        ds = ri.concatenate_datasets([a, b]).rename_column("x", "pixels").rename_column("pixels", "x")
        return loader(ds.shuffle(seed=2, buffer_size=6))

    batches, states = run_with_states(make)
    held = worker_buffers(ri.loads_state(states[2]))
    assert all(held) and all(is_position(e) and len(e["at"]) == 3 for buf in held for e in buf)  # [input, shard, row]
    assert_resumes(make, batches, states, range(0, len(states), 2))


@pytest.fixture()
def parquet_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    for f in range(2):
        ids = list(range(f * 100, f * 100 + 40))
        table = pa.table({"id": ids, "blob": [bytes([i % 256]) * 20_000 for i in ids]})
        path = tmp_path / f"part-{f}.parquet"
        pq.write_table(table, path, row_group_size=8)  # 5 row groups per file
        paths.append(str(path))
    return paths


def test_parquet_files_re_read_only_the_row_groups_holding_the_buffered_rows(parquet_files, monkeypatch):
    import pyarrow.parquet as pq

    def make(workers=2):
        ds = ri.IterableDataset.from_parquet(parquet_files).shuffle(seed=4, buffer_size=6)
        return ri.StatefulDataLoader(ds, batch_size=4, num_workers=workers, collate_fn=lambda b: [
            ex["id"] for ex in b if ex["blob"] == bytes([ex["id"] % 256]) * 20_000])

    batches, states = run_with_states(make)
    assert sorted(k for b in batches for k in b) == [f * 100 + i for f in range(2) for i in range(40)]
    assert all(is_position(e) for buf in worker_buffers(ri.loads_state(states[3])) for e in buf)
    assert_resumes(make, batches, states, (1, 3, 7))

    read = []
    original = pq.ParquetFile.read_row_groups
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups",
                        lambda self, groups, *a, **k: read.append(list(groups)) or original(self, groups, *a, **k))
    again = make(workers=0)  # re-read in this process, where the spy sees it (an elastic resume)
    again.load_state_dict(ri.loads_state(states[3]))
    assert sorted(k for b in again for k in b) == sorted(k for b in batches[3:] for k in b)
    held = {(e["at"][0], e["at"][1] // 8) for buf in worker_buffers(ri.loads_state(states[3])) for e in buf}
    assert read and sum(len(g) for g in read) == len(held) < 10


def test_small_rows_of_a_table_are_logged_as_positions_and_survive_a_plain_json_round_trip():
    # re-reading rows of an Arrow table is a take: a few integers cross instead of each row
    import json

    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_dict({"id": list(range(60)), "text": [f"row {i}" for i in range(60)]})

    def make(workers=2):
        ds = ri.to_iterable_dataset(table, num_shards=4).shuffle(seed=2, buffer_size=5)
        return ri.StatefulDataLoader(ds, batch_size=4, num_workers=workers,
                                     collate_fn=lambda b: [ex["id"] for ex in b if ex["text"] == f"row {ex['id']}"])

    dl = make()
    batches, states = [], [json.dumps(dl.state_dict())]
    for b in dl:
        batches.append(b)
        states.append(json.dumps(dl.state_dict()))  # the plain JSON of the docs' training loop
    assert sorted(k for b in batches for k in b) == list(range(60))
    held = worker_buffers(json.loads(states[4]))
    assert all(held) and all(is_position(e) for buf in held for e in buf)
    assert_resumes(make, batches, states, range(len(states)), decode=json.loads)
    rest = make(workers=0)
    rest.load_state_dict(json.loads(states[5]))
    assert sorted([k for b in batches[:5] for k in b] + [k for b in rest for k in b]) == list(range(60))


def test_each_rank_resumes_exactly_with_positions_in_its_workers():
    # split_dataset_by_node below or above the shuffle, as users write it: 2 ranks x 2 workers
    def make(rank, split_first):
        ds = ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": list(range(8)), "n": 6})
        if split_first:
            return loader(ri.split_dataset_by_node(ds, rank=rank, world_size=2).shuffle(seed=3, buffer_size=5))
        return loader(ri.split_dataset_by_node(ds.shuffle(seed=3, buffer_size=5), rank=rank, world_size=2))

    for split_first in (True, False):
        seen = []
        for rank in (0, 1):
            batches, states = run_with_states(lambda: make(rank, split_first))
            seen += [k for b in batches for k in b]
            assert all(is_position(e) for buf in worker_buffers(ri.loads_state(states[2])) for e in buf)
            assert_resumes(lambda: make(rank, split_first), batches, states, (1, 3, len(batches) - 1))
        assert sorted(seen) == sorted(s * 100 + i for s in range(8) for i in range(6))


def test_interleaved_tables_in_workers_of_each_rank_resume_exactly_from_plain_json_at_every_cut():
    # the common mix: interleave_datasets of tokenized/text tables, shuffled, 2 ranks x 2 workers,
    # the state saved as plain JSON after every batch; the interleave's read-ahead is logged too
    import json

    datasets = pytest.importorskip("datasets")
    a = datasets.Dataset.from_dict({"id": list(range(40)), "text": [f"a{i}" for i in range(40)]})
    b = datasets.Dataset.from_dict({"id": list(range(1000, 1030)), "text": [f"b{i - 1000}" for i in range(1000, 1030)]})

    def make(rank):
        mix = ri.interleave_datasets([ri.to_iterable_dataset(a, num_shards=4), ri.to_iterable_dataset(b, num_shards=4)],
                                     probabilities=[0.6, 0.4], seed=1,
                                     stopping_strategy="all_exhausted_without_replacement")
        ds = ri.split_dataset_by_node(mix.shuffle(seed=2, buffer_size=6), rank=rank, world_size=2)
        return ri.StatefulDataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda bt: [ex["id"] for ex in bt])

    seen = []
    for rank in (0, 1):
        dl = make(rank)
        batches, states = [], [json.dumps(dl.state_dict())]
        for bt in dl:
            batches.append(bt)
            states.append(json.dumps(dl.state_dict()))
        seen += [k for bt in batches for k in bt]
        held = worker_buffers(json.loads(states[2]))
        assert all(held) and all(is_position(e) and len(e["at"]) == 3 for buf in held for e in buf)
        assert_resumes(lambda: make(rank), batches, states, range(len(states)), decode=json.loads)
    assert sorted(seen) == sorted(list(range(40)) + list(range(1000, 1030)))


def images(shards, n=10):
    from PIL import Image

    for s in shards:
        for i in range(n):
            k = s * 100 + i
            yield {"id": k, "image": Image.new("RGB", (80, 80), (k % 256, s * 40, i * 20))}  # 19 KB of pixels


@pytest.mark.parametrize("mixed", [False, True], ids=["one source", "interleaved"])
def test_pil_images_from_a_generator_are_logged_as_positions_and_resume_exactly(mixed):
    pytest.importorskip("PIL")

    def pixels(batch):
        for ex in batch:
            assert ex["image"].getpixel((5, 5)) == (ex["id"] % 256, ex["id"] // 100 * 40, ex["id"] % 100 * 20)
        return [ex["id"] for ex in batch]

    def make():
        if mixed:  # images from two generators, interleaved (their read-ahead is logged too)
            ds = ri.interleave_datasets(
                [ri.IterableDataset.from_generator(images, gen_kwargs={"shards": SHARDS[:2]}),
                 ri.IterableDataset.from_generator(images, gen_kwargs={"shards": SHARDS[2:]})],
                stopping_strategy="all_exhausted_without_replacement")
        else:
            ds = ri.IterableDataset.from_generator(images, gen_kwargs={"shards": SHARDS})
        return ri.StatefulDataLoader(ds.shuffle(seed=6, buffer_size=6), batch_size=4, num_workers=2, collate_fn=pixels)

    batches, states = run_with_states(make)
    assert sorted(k for b in batches for k in b) == sorted(s * 100 + i for s in SHARDS for i in range(10))
    held = worker_buffers(ri.loads_state(states[2]))
    assert all(held) and all(is_position(e) for buf in held for e in buf)
    assert_resumes(make, batches, states, range(len(states)))


def test_a_replay_shuffle_over_interleaved_images_resumes_from_a_saved_state():
    # the interleave checks its peeked image against the row re-read at its position: an image read
    # back from a saved state (PNG) is compared by its pixels, not by PIL's == (which tells the classes apart)
    pytest.importorskip("PIL")

    def build():
        mix = ri.interleave_datasets(
            [ri.IterableDataset.from_generator(images, gen_kwargs={"shards": SHARDS[:2]}),
             ri.IterableDataset.from_generator(images, gen_kwargs={"shards": SHARDS[2:]})])
        return mix.shuffle(seed=4, buffer_size=5, buffer_state="replay")

    def key(ex):
        return ex["id"], ex["image"].getpixel((5, 5))

    full = [key(ex) for ex in build()]
    for cut in (1, 7, 20):
        ds = build()
        it = iter(ds)
        head = [key(next(it)) for _ in range(cut)]
        again = build()
        again.load_state_dict(ri.loads_state(ri.dumps_state(ds.state_dict())))
        assert head + [key(ex) for ex in again] == full, cut
