"""Global shuffle (``shuffle(seed, buffer_size=None)``) of random-access sources: permutation
properties, distribution, exactness at every cut point, O(1) state and memory, sharding and
DataLoader workers, and the clear refusals."""

from __future__ import annotations

import json
import pickle
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_iterable as ri
from data import HF, HF_B, gen_src, hf_dataset, src
from harness import assert_resume_chain, assert_resumes_exactly, codec_roundtrip, take
from resumable_iterable.nodes.global_shuffle import GlobalShuffleNode, PermutedSource
from resumable_iterable.nodes.permutation import IndexPermutation
from resumable_iterable.nodes.source import SourceNode

N60 = list(range(60))  # the ids of data.HF


def gshuf(ds, seed=7):
    return ds.shuffle(seed=seed, buffer_size=None)


def ids(ds):
    return [ex["id"] for ex in ds]


# ---------------------------------------------------------------------- the permutation itself


@pytest.mark.parametrize("n", [*range(0, 40), 63, 64, 65, 97, 1000, 1024, 4097, 65_537])
def test_permutation_is_a_bijection(n):
    for seed, epoch in [(0, 0), (12345, 3)]:
        perm = IndexPermutation(n, seed, epoch)(np.arange(n))
        assert sorted(perm.tolist()) == list(range(n))


def test_scalar_path_matches_vectorised_path():
    # cycle walking finishes the last few values on Python integers: same function
    for n in (5, 97, 100_003):
        p = IndexPermutation(n, 99, 2)
        xs = np.arange(min(n, 300), dtype=np.uint64)
        assert [p._encrypt_int(int(x)) for x in xs] == p._encrypt(xs).tolist()
        assert [p.at(i) for i in range(min(n, 50))] == p(np.arange(min(n, 50))).tolist()


def test_permutation_depends_on_seed_and_epoch_only():
    n = 1000
    base = IndexPermutation(n, 1, 0)(np.arange(n)).tolist()
    assert IndexPermutation(n, 1, 0)(np.arange(n)).tolist() == base  # deterministic
    assert IndexPermutation(n, 2, 0)(np.arange(n)).tolist() != base
    assert IndexPermutation(n, 1, 1)(np.arange(n)).tolist() != base
    assert base != list(range(n))


def test_permutation_argument_errors():
    with pytest.raises(ValueError, match="seed"):
        IndexPermutation(10, -1)
    with pytest.raises(ValueError, match="epoch"):
        IndexPermutation(10, 1, -2)
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        IndexPermutation(10, 1)(np.array([10]))


# ---------------------------------------------------------------------- distribution sanity


def test_mean_displacement_and_correlations_match_a_uniform_permutation():
    n = 100_000
    pos = np.arange(n)
    uniform_mean = (n * n - 1) / (3 * n)  # E|pi(i) - i| for a uniform permutation, ~ n/3
    for seed in (0, 1, 2):
        perm = IndexPermutation(n, seed)(pos)
        # relative standard error of the mean displacement is ~0.7/sqrt(n) ~ 0.22%
        assert abs(np.abs(perm - pos).mean() / uniform_mean - 1) < 0.015
        # no correlation with the original order, nor between neighbouring positions (|r| ~ 1/sqrt(n))
        assert abs(np.corrcoef(perm, pos)[0, 1]) < 5 / np.sqrt(n)
        assert abs(np.corrcoef(perm[:-1], perm[1:])[0, 1]) < 5 / np.sqrt(n)


def _chi2(counts: np.ndarray) -> float:
    expected = counts.sum() / counts.size
    return float(((counts - expected) ** 2 / expected).sum())


def test_positions_are_uniform_over_seeds():
    # which example comes first (and which index lands at every position) is roughly uniform over seeds
    n, seeds = 10, 3000
    table = np.zeros((n, n))
    for s in range(seeds):
        perm = IndexPermutation(n, s)(np.arange(n))
        table[np.arange(n), perm] += 1
    # first position: chi-square with 9 degrees of freedom; 40 is p ~ 5e-6
    assert _chi2(table[0]) < 40, table[0]
    # the whole position x index table: (n-1)^2 = 81 degrees of freedom; 150 is p ~ 2e-6
    assert _chi2(table) < 150


def test_ordered_pairs_are_uniform_over_seeds():
    # not just the marginals: the first two positions together (20 ordered pairs of 5)
    n, seeds = 5, 4000
    counts: dict = {}
    for s in range(seeds):
        a, b = IndexPermutation(n, s, 7)(np.arange(2)).tolist()
        counts[(a, b)] = counts.get((a, b), 0) + 1
    assert len(counts) == 20
    assert _chi2(np.array(list(counts.values()), dtype=float)) < 60  # 19 dof, p ~ 4e-6


# ---------------------------------------------------------------------- the pipeline


def test_every_example_once_per_epoch_and_epochs_differ():
    ds = gshuf(src(4))
    orders = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        got = ids(ds)
        assert sorted(got) == N60
        orders.append(got)
    assert orders[0] != N60
    assert len({tuple(o) for o in orders}) == 3
    ds.set_epoch(0)
    assert ids(ds) == orders[0]  # an epoch always gives its own order


def test_seeds_differ_and_are_reproducible():
    a, b, c = ids(gshuf(src(4), 1)), ids(gshuf(src(4), 2)), ids(gshuf(src(4), 1))
    assert a == c and a != b


def test_the_permutation_spans_shards():
    # a true global shuffle: the first quarter of the order draws from every shard (a shard-order shuffle
    # with a small buffer could not), and the order is the same whatever the number of source shards
    first = ids(gshuf(src(4)))[:15]
    assert {i // 15 for i in first} == {0, 1, 2, 3}
    assert ids(gshuf(src(1))) == ids(gshuf(src(4))) == ids(gshuf(src(6)))


def test_row_local_nodes_below_equal_the_same_nodes_above():
    def below():
        return gshuf(src(4).map(lambda ex: {"y": ex["id"] * 2}).filter(lambda ex: ex["id"] % 3 != 0)
                     .rename_column("text", "t").select_columns(["id", "y", "t"]))

    def above():
        return (gshuf(src(4)).map(lambda ex: {"y": ex["id"] * 2}).filter(lambda ex: ex["id"] % 3 != 0)
                .rename_column("text", "t").select_columns(["id", "y", "t"]))

    got = list(below())
    assert got == list(above())
    assert sorted(ex["id"] for ex in got) == [i for i in N60 if i % 3 != 0]
    assert all(ex["y"] == 2 * ex["id"] and ex["t"] == f"t{ex['id']}" for ex in got)


def _epoch(ds, e):
    ds.set_epoch(e)
    return ds


PIPELINES = {
    "plain": lambda: gshuf(src(4)),
    "one_shard": lambda: gshuf(src(1)),
    "one_row": lambda: gshuf(ri.to_iterable_dataset(hf_dataset(1))),
    "prime_rows_cycle_walking": lambda: gshuf(ri.to_iterable_dataset(hf_dataset(53), num_shards=5)),
    "epoch_2": lambda: _epoch(gshuf(src(4)), 2),
    "hf_indices_mapping": lambda: gshuf(ri.to_iterable_dataset(HF.shuffle(seed=3).select(range(45)), num_shards=3)),
    "pyarrow_table": lambda: gshuf(ri.IterableDataset.from_arrow_table(pa.table({"id": N60}), num_shards=5)),
    "row_local_below": lambda: gshuf(src(4).map(lambda ex: {"y": -ex["id"]}).filter(lambda ex: ex["id"] % 4)
                                     .remove_columns("text")),
    "map_filter_batched_above": lambda: gshuf(src(4)).filter(lambda b: [i % 3 > 0 for i in b["id"]], batched=True,
                                                             batch_size=7).map(lambda b: {"n": [len(b["id"])] * len(b["id"])},
                                                                               batched=True, batch_size=5),
    "batch_above": lambda: gshuf(src(4)).batch(7),
    "skip_take_above": lambda: gshuf(src(4)).skip(5).take(40),
    "repeat_above": lambda: gshuf(src(3, HF_B)).repeat(2),
    "buffer_shuffle_above": lambda: gshuf(src(4)).shuffle(seed=3, buffer_size=8),
    "interleave_probabilities": lambda: ri.interleave_datasets(
        [gshuf(src(4), 1), gshuf(src(2, HF_B), 2)], probabilities=[0.6, 0.4], seed=5,
        stopping_strategy="all_exhausted"),
    "concat_of_shuffled": lambda: ri.concatenate_datasets([gshuf(src(2), 4), gshuf(src(2, HF_B), 5)]),
    "source_shard_before": lambda: gshuf(src(4).shard(2, 1)),
    "worker_shard_after": lambda: gshuf(src(4)).shard(3, 1, contiguous=False),
    "contiguous_shard_after": lambda: gshuf(src(4)).shard(4, 3),
    "nested_shards": lambda: gshuf(src(4)).shard(2, 1, contiguous=False).shard(3, 2, contiguous=False),
    "rank_split": lambda: ri.split_dataset_by_node(gshuf(src(4)), rank=1, world_size=3),
    "rank_split_uneven": lambda: ri.split_dataset_by_node(gshuf(src(4)), rank=5, world_size=7),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_resumes_exactly_at_every_cut_point(name):
    full = assert_resumes_exactly(PIPELINES[name])
    assert full, "the pipeline yields something"


def test_empty_dataset():
    ds = gshuf(ri.to_iterable_dataset(hf_dataset(0)))
    assert ids(ds) == [] and ds.num_shards == 0
    assert_resumes_exactly(lambda: gshuf(ri.to_iterable_dataset(hf_dataset(0))))


def test_resume_chain_and_codec_roundtrip():
    build = lambda: gshuf(src(4)).map(lambda ex: {"k": ex["id"] % 5})  # noqa: E731
    assert_resume_chain(build, [3, 0, 17, 1, 25])
    assert_resumes_exactly(build, roundtrip=codec_roundtrip, max_cuts=12)


def test_resumed_epoch_keeps_its_permutation():
    ds = _epoch(gshuf(src(4)), 5)
    full = ids(ds)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(21)]
    state = json.loads(json.dumps(ds.state_dict()))
    fresh = gshuf(src(4))  # built at epoch 0: the state carries epoch 5
    fresh.load_state_dict(state)
    assert head + ids(fresh) == full


# ---------------------------------------------------------------------- state


def test_state_is_a_few_integers():
    ds = gshuf(src(4), seed=2**64 - 1)
    it = iter(ds)
    take(it, 33)
    node_state = ds.state_dict()["state"]
    assert node_state == {"node": "global_shuffle", "seed": 2**64 - 1, "epoch": 0,
                          "children": [{"node": "permuted", "pos": 33}]}
    assert len(json.dumps(node_state)) < 200


def test_damaged_states_are_refused_before_anything_is_read():
    ds = gshuf(src(4))
    good = ds.state_dict()
    bad = json.loads(json.dumps(good))
    bad["state"]["children"][0]["pos"] = 61
    with pytest.raises(ValueError, match=r"'pos' = 61 is out of range \[0, 60\]"):
        gshuf(src(4)).load_state_dict(bad)
    bad = json.loads(json.dumps(good))
    bad["state"]["seed"] = -1
    with pytest.raises(ValueError, match="'seed'"):
        gshuf(src(4)).load_state_dict(bad)
    # another dataset size is another pipeline
    with pytest.raises(ValueError, match="different pipeline"):
        gshuf(ri.to_iterable_dataset(hf_dataset(61), num_shards=4)).load_state_dict(good)
    # a buffer shuffle's state does not load into a global shuffle
    with pytest.raises(ValueError, match="different pipeline"):
        gshuf(src(4)).load_state_dict(src(4).shuffle(seed=7, buffer_size=10).state_dict())


class VirtualSource(SourceNode):
    """A random-access source of ``rows`` rows ``{"id": i}`` that stores nothing (for memory tests)."""

    kind = "virtual"

    def __init__(self, rows: int, num_shards: int = 10, shard_ids=None):
        self.rows, self.per_shard = rows, -(-rows // num_shards)
        super().__init__(num_shards, shard_ids)

    def shard_length(self, shard_id):
        return max(0, min(self.per_shard, self.rows - shard_id * self.per_shard))

    def _iter_shard(self, shard_id, st):
        base = shard_id * self.per_shard
        while st["offset"] < self.shard_length(shard_id):
            st["offset"] += 1
            yield {"id": base + st["offset"] - 1}

    def random_access_problem(self):
        return None

    def row_count(self, shard_id):
        return self.shard_length(shard_id)

    def take_examples(self, shard_ids, rows, cache):
        return [{"id": i} for i in (shard_ids * self.per_shard + rows).tolist()]


def test_memory_and_state_stay_flat_for_10m_rows():
    n, k = 10_000_000, 100_000
    ds = ri.IterableDataset(VirtualSource(n)).shuffle(seed=11, buffer_size=None)
    got = np.empty(k, dtype=np.int64)  # allocated before measuring
    tracemalloc.start()
    try:
        it = iter(ds)
        for j in range(k):
            got[j] = next(it)["id"]
        _, peak = tracemalloc.get_traced_memory()
        state = ds.state_dict()
    finally:
        tracemalloc.stop()
    # one block of examples is alive at a time; a materialised permutation would take n * 8 = 80 MB
    assert peak < 4_000_000, peak
    assert len(np.unique(got)) == k and 0 <= got.min() and got.max() < n
    assert got.max() > 0.99 * n and got.min() < 0.01 * n  # drawn from the whole range
    assert state["state"]["children"][0]["pos"] == k
    assert len(json.dumps(state["state"])) < 200
    # resuming in the middle of 10M rows continues exactly, without re-reading anything
    resumed = ri.IterableDataset(VirtualSource(n)).shuffle(seed=11, buffer_size=None)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert [ex["id"] for ex in take(iter(resumed), 5)] == [ex["id"] for ex in take(it, 5)]


def test_block_of_the_permutation_uses_no_memory_of_size_n():
    tracemalloc.start()
    try:
        perm = IndexPermutation(10_000_000, 3)
        block = perm(np.arange(5_000_000, 5_004_096))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(set(block.tolist())) == 4096
    assert peak < 1_000_000, peak


# ---------------------------------------------------------------------- shards, workers, ranks


def test_num_shards_is_the_number_of_positions_and_shards_partition_the_order():
    ds = gshuf(src(4))
    full = ids(ds)
    assert ds.num_shards == 60
    for w in (1, 2, 3, 7, 60):
        parts = [ids(ds.shard(w, i, contiguous=False)) for i in range(w)]
        assert [p[j] for j in range(len(parts[0])) for p in parts if j < len(p)] == full  # round robin
        blocks = [ids(ds.shard(w, i)) for i in range(w)]
        assert sum(blocks, []) == full  # contiguous blocks
        assert ds.shard(w, 0, contiguous=False).num_shards == len(parts[0])
    nested = [ids(ds.shard(2, a, contiguous=False).shard(3, b, contiguous=False)) for a in range(2) for b in range(3)]
    assert sorted(sum(nested, [])) == N60
    with pytest.raises(ValueError, match="61"):
        ds.shard(61, 0)
    with pytest.raises(ValueError, match="index must be in"):
        ds._node.shard(3, 3)


def test_worker_states_resume_exactly_one_worker_each():
    # what an elastic resume replays: each old worker's state reloaded into its own sharded pipeline
    def worker(w):
        return gshuf(src(4)).map(lambda ex: {"sq": ex["id"] ** 2}).shard(2, w, contiguous=False)

    seen = []
    for w, cut in ((0, 11), (1, 4)):
        ds = worker(w)
        it = iter(ds)
        seen += [ex["id"] for ex in take(it, cut)]
        state = json.loads(json.dumps(ds.state_dict()))
        resumed = worker(w)
        resumed.load_state_dict(state)
        seen += ids(resumed)
    assert sorted(seen) == N60


@pytest.mark.torch
def test_torch_dataloader_two_workers_yields_every_example_once():
    torch = pytest.importorskip("torch")
    ds = gshuf(src(4)).map(lambda ex: {"y": ex["id"] + 1})
    expected = ids(ds)
    loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None)
    got = [int(ex["id"]) for ex in loader]
    assert sorted(got) == N60
    # each worker reads every other position: the loader's round robin restores the single-process order
    assert got == expected
    batched = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=8)
    got = [int(i) for b in batched for i in b["id"]]
    assert sorted(got) == N60


@pytest.mark.torch
def test_elastic_worker_count_change_yields_the_rest_once():
    # the torch integration's segment plan replays each old worker's state in its old sharded
    # pipeline: with an exact state and shard() that composes with the global shuffle
    pytest.importorskip("torchdata")
    build = lambda: gshuf(src(4)).map(lambda ex: {"y": 1})  # noqa: E731
    for old, new in ((2, 1), (0, 2)):
        loader = ri.StatefulDataLoader(build(), num_workers=old, batch_size=None)
        it = iter(loader)
        head = [int(next(it)["id"]) for _ in range(13)]
        state = loader.state_dict()
        del it, loader
        resumed = ri.StatefulDataLoader(build(), num_workers=new, batch_size=None)
        resumed.load_state_dict(state)
        assert sorted(head + [int(ex["id"]) for ex in resumed]) == N60, (old, new)


def test_rank_count_change_yields_the_rest_once():
    build = lambda: gshuf(src(4))  # noqa: E731
    seen, states = [], []
    for rank, cut in enumerate((5, 0, 19)):
        ds = ri.split_dataset_by_node(build(), rank, 3)
        it = iter(ds)
        seen += [ex["id"] for ex in take(it, cut)]
        states.append(json.loads(json.dumps(ds.state_dict())))
    for rank, state in enumerate(ri.redistribute_states(states, 2)):
        ds = ri.split_dataset_by_node(build(), rank, 2)
        ds.load_state_dict(state)
        seen += ids(ds)
    assert sorted(seen) == N60


def test_files_parquet_and_arrow(tmp_path):
    paths = {"parquet": [], "arrow": []}
    n = 0
    for i, rows in enumerate((23, 5, 31)):
        t = pa.table({"id": list(range(n, n + rows)), "text": [f"f{j}" for j in range(n, n + rows)]})
        n += rows
        p = tmp_path / f"part{i}.parquet"
        pq.write_table(t, p, row_group_size=4)
        paths["parquet"].append(str(p))
        a = tmp_path / f"part{i}.arrow"
        with pa.OSFile(str(a), "wb") as sink:
            writer = (pa.ipc.new_file if i % 2 else pa.ipc.new_stream)(sink, t.schema)
            for b in t.to_batches(max_chunksize=6):
                writer.write_batch(b)
            writer.close()
        paths["arrow"].append(str(a))
    orders = []
    for fmt, files in paths.items():
        build = lambda: gshuf(ri.IterableDataset.from_files(files, fmt).map(lambda ex: {"m": ex["id"] % 7}))  # noqa: E731
        full = assert_resumes_exactly(build, max_cuts=25)
        assert sorted(ex["id"] for ex in full) == list(range(n))
        assert all(ex["text"] == f"f{ex['id']}" for ex in full)
        orders.append([ex["id"] for ex in full])
    assert orders[0] == orders[1]  # same rows, same numbering: same permutation whatever the format


def test_vanished_file_is_named(tmp_path):
    paths = []
    for i in range(2):
        p = tmp_path / f"p{i}.parquet"
        pq.write_table(pa.table({"id": list(range(i * 10, i * 10 + 10))}), p)
        paths.append(str(p))
    ds = gshuf(ri.IterableDataset.from_parquet(paths))
    (tmp_path / "p1.parquet").unlink()
    with pytest.raises(ValueError, match="p1.parquet"):
        list(ds)


def test_opened_files_are_not_pickled(tmp_path):
    p = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": list(range(5000)), "text": ["x" * 200] * 5000}), p)
    ds = gshuf(ri.IterableDataset.from_parquet([str(p)]))
    it = iter(ds)
    take(it, 3)
    node = ds._session.active
    reader = next(n for n in node.walk() if isinstance(n, PermutedSource))
    assert reader._rows.cache  # the decoded file is held while reading
    blob = pickle.dumps(node)  # what a DataLoader worker receives
    assert len(blob) < 100_000  # ~1 MB of decoded text is not in it
    again = pickle.loads(blob)
    reader = next(n for n in again.walk() if isinstance(n, PermutedSource))
    assert reader._rows.cache == {}
    assert [ex["id"] for ex in again] == ids(ds)[3:]  # it resumes where it stood, reopening the file


# ---------------------------------------------------------------------- refusals


def test_sources_without_random_access_are_refused(tmp_path):
    with pytest.raises(ValueError, match="generator source"):
        gshuf(gen_src(3))
    j = tmp_path / "a.jsonl"
    j.write_text('{"id": 1}\n')
    with pytest.raises(ValueError, match="json files have no row count"):
        gshuf(ri.IterableDataset.from_json([str(j)]))
    c = tmp_path / "a.csv"
    c.write_text("id\n1\n")
    with pytest.raises(ValueError, match="csv files have no row count"):
        gshuf(ri.IterableDataset.from_csv([str(c)]))


REFUSED = {
    "batched map": (lambda: src().map(lambda b: b, batched=True), r"batched map\(.*<lambda>, batched=True\)"),
    "batched filter": (lambda: src().filter(lambda b: [True] * len(b["id"]), batched=True), "batched filter"),
    "map with_indices": (lambda: src().map(lambda ex, i: {"i": i}, with_indices=True), "with_indices=True"),
    "filter with_indices": (lambda: src().filter(lambda ex, i: True, with_indices=True), "with_indices=True"),
    "interleave": (lambda: ri.interleave_datasets([src(), src(2, HF_B)]), "interleave node"),
    "concat": (lambda: ri.concatenate_datasets([src(), src(2, HF_B)]), "concat node"),
    "buffer shuffle": (lambda: src().shuffle(seed=1, buffer_size=5), "shuffle buffer"),
    "global shuffle": (lambda: gshuf(src()), "another global shuffle"),
    "take": (lambda: src().take(5), "take node"),
    "skip": (lambda: src().skip(5), "skip node"),
    "repeat": (lambda: src().repeat(2), "repeat node"),
    "batch": (lambda: src().batch(2), "batch node"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_nodes_that_cannot_be_globally_shuffled_are_named(name):
    build, message = REFUSED[name]
    with pytest.raises(ValueError, match=message):
        gshuf(build())


def test_errors_in_a_map_below_name_the_source_row():
    def boom(ex):
        if ex["id"] == 42:
            raise RuntimeError("bad row")
        return {}

    ds = gshuf(src(4).map(boom))
    with pytest.raises(RuntimeError, match="bad row") as info:
        list(ds)
    # shard 2 of 4 holds ids 30..44: id 42 is its row 12
    assert "source arrow shard 2, row 12" in "".join(getattr(info.value, "__notes__", []))


def test_node_structure():
    node = gshuf(src(4).map(lambda ex: {}))._node
    assert isinstance(node, GlobalShuffleNode)
    reader = node.children[0].children[0]
    assert isinstance(reader, PermutedSource) and reader.source.kind == "arrow"
    assert node.shape()["children"][0]["children"][0]["rows"] == 60
