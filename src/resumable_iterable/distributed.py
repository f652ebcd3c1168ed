"""Splitting a pipeline among ranks (``split_dataset_by_node``) and DataLoader workers."""

from __future__ import annotations

import logging
import sys

from .nodes.base import Node
from .nodes.step import StepNode

logger = logging.getLogger("resumable_iterable")


def split_dataset_by_node(dataset, rank: int, world_size: int):
    """The part of ``dataset`` for ``rank`` out of ``world_size`` (as HF ``split_dataset_by_node``).

    If the number of shards is a multiple of ``world_size``, each rank reads a disjoint set of
    shards; otherwise every rank reads all shards and keeps one example in ``world_size``.
    """
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    if type(rank) is not int or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank!r}")
    return type(dataset)(dataset._node, features=dataset._features, column_names=dataset._column_names,
                         _split=(*dataset._split, ("rank", rank, world_size)), _epoch=dataset._epoch)


def _worker_info():
    if "torch" not in sys.modules:
        return None
    import torch.utils.data

    return torch.utils.data.get_worker_info()


_warned = set()


def split_for_process(node: Node, split: tuple) -> Node:
    """Apply the rank splits recorded on a dataset, then the DataLoader worker split."""
    for _, rank, world_size in split:
        if node.num_shards % world_size == 0:
            node = node.shard(world_size, rank, contiguous=False)
        else:
            node = StepNode(node.clone(), world_size, rank)
    info = _worker_info()
    if info is not None and info.num_workers > 1:
        n = node.num_shards
        if info.id >= n:
            key = (id(node), info.num_workers)
            if key not in _warned:
                _warned.add(key)
                logger.warning("too many dataloader workers: %d workers for %d shards; worker %d yields nothing",
                               info.num_workers, n, info.id)
            return _Empty(node)
        node = node.shard(min(info.num_workers, n), info.id, contiguous=False)
    return node


class _Empty(Node):
    kind = "empty"

    def __init__(self, child: Node):
        super().__init__([child])

    def _iter(self):
        return iter(())
