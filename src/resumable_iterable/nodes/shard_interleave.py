"""Feeding a shuffle buffer from several shards at a time (``shuffle(max_buffer_input_shards=k)``).

The node splits the pipeline below it into ``k`` groups of shards and takes one example from
each group in turn, skipping groups that are exhausted, until every group is exhausted (HF
``datasets`` does the same: ``InterleavedShardsExamplesIterable``). Each shard is still read
exactly once, in order, and a shuffle buffer above mixes examples from ``k`` places of the
dataset at once instead of one.

With a ``take``/``skip`` below (they fix which examples are read, so the shard order must not
change under them) the buffer is fed one shard group at a time, as in HF.

The groups are made *after* the pipeline is split among ranks and DataLoader workers:
:meth:`shard` splits the pipeline template first and regroups what is left, so workers keep
as many shards to share as without this node.

State: ``{"node", "turn", "done", "children"}``

* ``turn`` - the group the next example is taken from (updated before each yield).
* ``done`` - one flag per group: exhausted.
"""

from __future__ import annotations

from typing import Iterator

from .base import Node
from .checks import as_int, check_bool, check_int
from .slicing import SkipNode, TakeNode


class ShardInterleaveNode(Node):
    kind = "shard_interleave"

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def __init__(self, child: Node, max_input_shards: int):
        # numpy integers and one-element tensors too
        max_input_shards = as_int(max_input_shards, "max_buffer_input_shards", lo=1)
        self.template = child
        self.max_input_shards = max_input_shards
        groups = max(1, min(max_input_shards, child.num_shards))
        if any(isinstance(n, (SkipNode, TakeNode)) for n in child.walk()):
            groups = 1  # as HF: a take/skip fixes the shard order, so the buffer is fed one shard at a time
        kids = [child] if groups == 1 else [child.shard(groups, i, contiguous=False) for i in range(groups)]
        super().__init__(kids)

    def params(self) -> dict:
        return {"max_input_shards": self.max_input_shards, "groups": len(self.children)}

    def _own_state(self) -> dict:
        return {"turn": 0, "done": [False] * len(self.children)}

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "turn", where, hi=len(self.children) - 1)
        done = state["done"]
        if not isinstance(done, list) or len(done) != len(self.children):
            raise ValueError(f"{where}: 'done' must be a list of {len(self.children)} flags")
        for i in range(len(done)):
            check_bool(done, i, where)

    def expect_shuffled_shards(self) -> None:
        self.template.expect_shuffled_shards()  # the groups made by a later shard() come from the template
        super().expect_shuffled_shards()

    @property
    def num_shards(self) -> int:
        return self.template.num_shards

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        return ShardInterleaveNode(self.template.shard(num_shards, index, contiguous), self.max_input_shards)

    def dealt_shards(self, seed: int) -> Node:
        return ShardInterleaveNode(self.template.dealt_shards(seed), self.max_input_shards)

    def resharded(self) -> Node:
        return ShardInterleaveNode(self.template.resharded(), self.max_input_shards)

    def clone(self) -> Node:
        return ShardInterleaveNode(self.template.clone(), self.max_input_shards)

    def walk_built(self):
        # each pass regroups shards of the template: its nodes (not the groups') keep the seeds drawn
        # when built, which a loaded state's "seeds" must reach
        yield self
        yield from self.template.walk_built()

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        done = st["done"]
        n = len(self.children)
        its = [iter(c) for c in self.children]
        while not all(done):
            i = st["turn"]
            st["turn"] = (i + 1) % n
            if done[i]:
                continue
            ex = next(its[i], _END)
            if ex is _END:
                done[i] = True
                continue
            yield ex

    def position(self) -> dict | None:
        return None


_END = object()
