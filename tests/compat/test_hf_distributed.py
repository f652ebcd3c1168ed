"""HF ``datasets``' ``tests/test_distributed.py``, ported to ``resumable_iterable`` at the public-API level.

Upstream: https://github.com/huggingface/datasets, commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8,
file ``tests/test_distributed.py`` (and the script it launches, ``tests/distributed_scripts/run_torch_distributed.py``).
See ``docs/compat.md`` for how the port was done and why each expected failure fails.
"""

from __future__ import annotations

import pytest
from datasets import Dataset

import resumable_iterable as ri

pytestmark = pytest.mark.compat

def test_split_dataset_by_node_map_style():
    full_ds = Dataset.from_dict({"i": range(17)})
    full_size = len(full_ds)
    world_size = 3
    datasets_per_rank = [
        ri.split_dataset_by_node(full_ds, rank=rank, world_size=world_size) for rank in range(world_size)
    ]
    assert sum(len(ds) for ds in datasets_per_rank) == full_size
    assert len({tuple(x.values()) for ds in datasets_per_rank for x in ds}) == full_size


def test_split_dataset_by_node_iterable():
    def gen():
        return ({"i": i} for i in range(17))

    world_size = 3
    full_ds = ri.IterableDataset.from_generator(gen)
    full_size = len(list(full_ds))
    datasets_per_rank = [
        ri.split_dataset_by_node(full_ds, rank=rank, world_size=world_size) for rank in range(world_size)
    ]
    assert sum(len(list(ds)) for ds in datasets_per_rank) == full_size
    assert len({tuple(x.values()) for ds in datasets_per_rank for x in ds}) == full_size


@pytest.mark.parametrize("shards_per_node", [1, 2, 3])
def test_split_dataset_by_node_iterable_sharded(shards_per_node):
    def gen(shards):
        for shard in shards:
            yield from ({"i": i, "shard": shard} for i in range(17))

    world_size = 3
    num_shards = shards_per_node * world_size
    gen_kwargs = {"shards": [f"shard_{shard_idx}.txt" for shard_idx in range(num_shards)]}
    full_ds = ri.IterableDataset.from_generator(gen, gen_kwargs=gen_kwargs)
    full_size = len(list(full_ds))
    assert full_ds.num_shards == world_size * shards_per_node
    datasets_per_rank = [
        ri.split_dataset_by_node(full_ds, rank=rank, world_size=world_size) for rank in range(world_size)
    ]
    assert [ds.num_shards for ds in datasets_per_rank] == [shards_per_node] * world_size
    assert sum(len(list(ds)) for ds in datasets_per_rank) == full_size
    assert len({tuple(x.values()) for ds in datasets_per_rank for x in ds}) == full_size


def test_split_dataset_by_node_iterable_distributed():
    def gen():
        return ({"i": i} for i in range(100))

    world_size = 3
    num_workers = 3
    full_ds = ri.IterableDataset.from_generator(gen)
    full_size = len(list(full_ds))
    datasets_per_rank = [
        ri.split_dataset_by_node(full_ds, rank=rank, world_size=world_size) for rank in range(world_size)
    ]
    datasets_per_rank_per_worker = [
        ri.split_dataset_by_node(ds, rank=worker, world_size=num_workers)
        for ds in datasets_per_rank
        for worker in range(num_workers)
    ]
    assert sum(len(list(ds)) for ds in datasets_per_rank_per_worker) == full_size
    assert len({tuple(x.values()) for ds in datasets_per_rank_per_worker for x in ds}) == full_size


def test_distributed_shuffle_iterable():
    def gen():
        return ({"i": i} for i in range(17))

    world_size = 2
    full_ds = ri.IterableDataset.from_generator(gen)
    full_size = len(list(full_ds))

    ds_rank0 = ri.split_dataset_by_node(full_ds, rank=0, world_size=world_size).shuffle(seed=42)
    assert len(list(ds_rank0)) == 1 + full_size // world_size

    ds_rank0 = ri.split_dataset_by_node(full_ds.shuffle(seed=42), rank=0, world_size=world_size)
    assert len(list(ds_rank0)) == 1 + full_size // world_size


# upstream launches tests/distributed_scripts/run_torch_distributed.py with `torch.distributed.run`
# (integration tests). The script uses no collective: each rank reads RANK / WORLD_SIZE, splits the
# dataset with split_dataset_by_node, iterates it through a DataLoader and checks its local size.
# The port runs the script's body for every rank in this process.
NUM_SHARDS = 4
NUM_ITEMS_PER_SHARD = 3


def _gen(shards):
    for shard in shards:
        for i in range(NUM_ITEMS_PER_SHARD):
            yield {"i": i, "shard": shard}


def _run_rank(rank, world_size, streaming, num_workers):
    import torch.utils.data

    gen_kwargs = {"shards": [f"shard_{shard_idx}" for shard_idx in range(NUM_SHARDS)]}
    ds = ri.IterableDataset.from_generator(_gen, gen_kwargs=gen_kwargs)
    if not streaming:
        ds = Dataset.from_list(list(ds))
    ds = ri.split_dataset_by_node(ds, rank=rank, world_size=world_size)
    dataloader = torch.utils.data.DataLoader(ds, num_workers=num_workers)

    full_size = NUM_SHARDS * NUM_ITEMS_PER_SHARD
    expected_local_size = full_size // world_size
    expected_local_size += int(rank < (full_size % world_size))
    local_size = sum(1 for _ in dataloader)
    assert local_size == expected_local_size, f"rank {rank}: local_size {local_size} != {expected_local_size}"


@pytest.mark.parametrize("streaming", [False, True])
def test_torch_distributed_run(streaming):
    nproc_per_node = 2
    for rank in range(nproc_per_node):
        _run_rank(rank, nproc_per_node, streaming, num_workers=0)


@pytest.mark.parametrize(
    "nproc_per_node, num_workers",
    [
        (2, 2),  # each node has 2 shards and each worker has 1 shards
        (3, 2),  # each node uses all the shards but skips examples, and each worker has 2 shards
    ],
)
def test_torch_distributed_run_streaming_with_num_workers(nproc_per_node, num_workers):
    for rank in range(nproc_per_node):
        _run_rank(rank, nproc_per_node, True, num_workers=num_workers)
