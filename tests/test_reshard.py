"""``reshard()``: Parquet files read one row group per shard, as HF's ``IterableDataset.reshard``,
so that more DataLoader workers and ranks than files all read - and every resume stays exact."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_iterable as ri
from harness import assert_loader_resumes_exactly, assert_resumes_exactly, json_roundtrip

ROWS = 120


@pytest.fixture
def files(tmp_path):
    """Two Parquet files of 70 and 50 rows, in row groups of 16 and 11 rows (the last ones shorter)."""
    paths = []
    for f, (n, group) in enumerate([(70, 16), (50, 11)]):
        start = 0 if f == 0 else 70
        table = pa.table({"id": np.arange(start, start + n), "text": [f"row {i}" for i in range(start, start + n)]})
        path = tmp_path / f"part-{f}.parquet"
        pq.write_table(table, path, row_group_size=group)
        paths.append(str(path))
    return paths


def ids(rows):
    return [r["id"] for r in rows]


def test_one_shard_per_row_group_in_the_same_order_as_hf(files):
    import datasets

    ours, theirs = ri.IterableDataset.from_parquet(files), datasets.load_dataset(
        "parquet", data_files=files, split="train", streaming=True)
    assert (ours.num_shards, ours.reshard().num_shards) == (2, 5 + 5) == (theirs.num_shards,
                                                                         theirs.reshard().num_shards)
    assert ids(ours.reshard()) == ids(theirs.reshard()) == list(range(ROWS))
    # sharded by row group, as HF's: shard k of 10 is row group k
    assert ids(ours.reshard().shard(10, 7)) == ids(theirs.reshard().shard(10, 7)) == list(range(70 + 22, 70 + 33))


@pytest.mark.parametrize("shape", ["plain", "shuffle", "global_shuffle", "map_filter_batch", "interleave"])
def test_every_cut_point_resumes_exactly(files, shape):
    builds = {
        "plain": lambda: ri.IterableDataset.from_parquet(files).reshard(),
        "shuffle": lambda: ri.IterableDataset.from_parquet(files).reshard().shuffle(seed=4, buffer_size=9),
        "global_shuffle": lambda: ri.IterableDataset.from_parquet(files).reshard().shuffle(seed=4, buffer_size=None),
        "map_filter_batch": lambda: ri.IterableDataset.from_parquet(files).reshard().map(
            lambda ex: {"y": ex["id"] * 2}).filter(lambda ex: ex["id"] % 3 != 0).batch(5),
        "interleave": lambda: ri.interleave_datasets(
            [ri.IterableDataset.from_parquet(files[:1]).reshard(), ri.IterableDataset.from_parquet(files[1:])],
            probabilities=[0.6, 0.4], seed=1, stopping_strategy="all_exhausted"),
    }
    full = assert_resumes_exactly(builds[shape], max_cuts=40)
    if shape in ("plain", "shuffle", "global_shuffle"):
        assert sorted(ids(full)) == list(range(ROWS))


@pytest.mark.parametrize("workers", [3, 4])
def test_more_workers_than_files_all_read_and_resume_exactly(files, workers):
    """Without reshard() 2 files feed only 2 workers; with it every worker reads row groups."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    build = lambda: ri.IterableDataset.from_parquet(files).reshard().shuffle(seed=2, buffer_size=8)  # noqa: E731
    full = assert_loader_resumes_exactly(build, workers=workers, batch_size=4, item=lambda b: b["id"].tolist(),
                                         cuts=lambda n: [1, workers, n // 2, n - 1])
    assert sorted(i for b in full for i in b) == list(range(ROWS))
    seen = Counter()
    loader = StatefulDataLoader(build(), batch_size=4, num_workers=workers)
    for j, b in enumerate(loader):  # batches come from the workers in turn: every worker yields
        seen[j % workers] += len(b["id"])
    assert len(seen) == workers and sum(seen.values()) == ROWS


def test_elastic_resume_of_resharded_files(files):
    """Saved with 3 workers, resumed with 2 (our loader, which resumes with another worker count):
    every row once."""
    from resumable_iterable import StatefulDataLoader

    build = lambda: ri.IterableDataset.from_parquet(files).reshard()  # noqa: E731
    head, loader = [], StatefulDataLoader(build(), batch_size=4, num_workers=3)
    for b in loader:
        head += b["id"].tolist()
        if len(head) >= 28:
            state = json_roundtrip(loader.state_dict())
            break
    resumed = StatefulDataLoader(build(), batch_size=4, num_workers=2)
    resumed.load_state_dict(state)
    tail = [i for b in resumed for i in b["id"].tolist()]
    assert sorted(head + tail) == list(range(ROWS))


def test_a_state_of_the_unsplit_files_is_refused_and_the_other_way_round(files):
    plain, split = ri.IterableDataset.from_parquet(files), ri.IterableDataset.from_parquet(files).reshard()
    for saved, other in [(plain, split), (split, plain)]:
        it = iter(saved)
        next(it)
        with pytest.raises(ValueError, match="parameter 'row_groups'"):
            other.load_state_dict(json.loads(json.dumps(saved.state_dict())))


def test_a_file_rewritten_with_other_row_groups_is_refused(files):
    """The same rows in other row groups: a position (row group k, row r) would name other rows."""
    ds = ri.IterableDataset.from_parquet(files).reshard()
    it = iter(ds)
    for _ in range(20):
        next(it)
    state = json_roundtrip(ds.state_dict())
    pq.write_table(pq.read_table(files[1]), files[1], row_group_size=10)  # 50 rows: 5 groups of 10, as 5 of 11 were
    rebuilt = ri.IterableDataset.from_parquet(files).reshard()
    assert rebuilt.num_shards == 10
    with pytest.raises(ValueError, match="not those the state was saved with"):
        rebuilt.load_state_dict(state)
    # the dataset built before the rewrite names the changed row group instead of reading other rows
    resumed = ri.IterableDataset.from_parquet(files)
    stale = resumed.reshard()
    pq.write_table(pq.read_table(files[0]), files[0], row_group_size=35)
    with pytest.raises(ValueError, match="no longer has the row group of 16 rows"):
        list(stale)


def test_sources_that_cannot_be_split_keep_their_shards(files, tmp_path):
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(10)))
    assert ri.IterableDataset.from_json([str(jsonl)]).reshard().num_shards == 1
    assert ri.IterableDataset.from_list([{"id": i} for i in range(10)], num_shards=2).reshard().num_shards == 2
    side = ri.concatenate_datasets([ri.IterableDataset.from_parquet(files),
                                    ri.IterableDataset.from_parquet(files).rename_columns({"id": "j", "text": "t"})],
                                   axis=1)
    assert side.reshard().num_shards == 1 and [r["id"] for r in side.reshard()] == list(range(ROWS))
    one_group = tmp_path / "one.parquet"
    pq.write_table(pa.table({"id": np.arange(5)}), one_group)
    assert ri.IterableDataset.from_parquet([str(one_group)]).reshard().num_shards == 1


def test_an_error_note_names_the_file_of_a_row_group_shard(files):
    def boom(ex):
        if ex["id"] == 75:  # the second file, its first row group
            raise KeyError("nope")
        return ex

    for build in (lambda: ri.IterableDataset.from_parquet(files).reshard().map(boom).batch(4),
                  lambda: ri.IterableDataset.from_parquet(files).reshard().shuffle(seed=1, buffer_size=None).map(boom)):
        with pytest.raises(KeyError) as info:
            list(build())
        assert "part-1.parquet" in "".join(getattr(info.value, "__notes__", [])) + str(info.value)


def test_reshard_reaches_the_files_below_other_nodes(files):
    ds = ri.concatenate_datasets([ri.IterableDataset.from_parquet(files).map(lambda ex: {"k": 1}),
                                  ri.IterableDataset.from_parquet(files[1:])]).take(200)
    assert (ds.num_shards, ds.reshard().num_shards) == (3, 15)
    assert ids(ds.reshard()) == ids(ds)
