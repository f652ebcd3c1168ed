"""``skip(n)`` and ``take(n)``.

State: ``{"node", "skipped"|"taken", "children"}`` - a count, updated before each yield. ``take``
never pulls an example beyond the *n*-th from its child, so the child's state stays exact.

**Splitting** (as HF ``datasets``, whose ``split_when_sharding`` this follows): ``n`` counts the
examples of the whole dataset, not of each part. When the pipeline is split by shard (DataLoader
workers, ``split_dataset_by_node`` with a shard count divisible by the world size, or
``shard()``), part ``i`` of ``k`` skips / takes :func:`split_count` ``(n, k, i)`` examples of its
own shards, so the parts together skip / take ``n``. When ranks split the examples one in
``world_size`` instead (``StepNode``), every rank reads the same ``n`` skipped / taken examples
and keeps its share of them.

A ``skip`` / ``take`` made *after* ``split_dataset_by_node`` applies to that rank's part:
``per_rank`` counts the rank splits it sits inside, and :meth:`CountNode.enter_rank_split` turns
its ``n`` into the matching count of the whole before each of those splits is applied.

**Shard order**: ``shuffle`` does not reorder the shards below a skip / take (HF's
``block_sources_order_when_shuffling``); otherwise the examples skipped or taken would change
with the seed. The shuffle buffer above still mixes the order of the examples.
"""

from __future__ import annotations

from typing import Iterator

from .base import Node
from .checks import as_int, check_int


def _check_count(name: str, n: int) -> int:
    return as_int(n, f"{name}(n)")


def split_count(n: int, parts: int, index: int) -> int:
    """Part ``index`` of ``n`` split into ``parts`` near-equal counts, the larger ones first."""
    div, mod = divmod(n, parts)
    return div + (1 if index < mod else 0)


class CountNode(Node):
    """Shared structure of :class:`SkipNode` and :class:`TakeNode`: a count ``n`` split with the shards."""

    def __init__(self, child: Node, n: int, per_rank: int = 0):
        self.n = _check_count(self.kind, n)
        if type(per_rank) is not int or per_rank < 0:
            raise ValueError(f"per_rank must be a non-negative integer, got {per_rank!r}")
        self.per_rank = per_rank
        super().__init__([child])

    def params(self) -> dict:
        # `per_rank` only when set: the fingerprints of pipelines without it stay as they were
        return {"n": self.n, "per_rank": self.per_rank} if self.per_rank else {"n": self.n}

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        new = super().shard(num_shards, index, contiguous)
        new.n = split_count(self.n, num_shards, index)  # the state fields do not depend on n
        return new

    def enter_rank_split(self, world_size: int) -> None:
        """Called on a private copy just before a rank split is applied above this node. If this
        node was made after that split (``per_rank > 0``), its ``n`` counts the examples of one
        rank's part: make it count the whole (``n * world_size``), which the split then divides
        back into ``n`` for every rank - by shard, or keeping one example in ``world_size``."""
        if self.per_rank:
            self.per_rank -= 1
            self.n *= world_size
            self.forget_fingerprint()

    def shuffle_shards(self, seed: int | None) -> None:
        pass  # a shard order drawn by a shuffle above would change which examples are skipped / taken

    def dealt_shards(self, seed: int) -> Node:
        return self.clone()  # as HF: skip / take fix the shard order, dealing included

    def deals_by_epoch(self) -> bool:
        return False

    def expect_shuffled_shards(self) -> None:
        pass  # nor does a shuffle above set the shard order of the sources below

    def replay_problem(self) -> str | None:
        return None  # the examples pass through unchanged (capabilities: see ``Node``)

    def position_back(self, back: int) -> dict | None:
        """The input's: the examples pass through in order; ``None`` past the first one yielded (a
        ``skip`` does not yield what it skipped; a node above counts on into what came before)."""
        n = self.examples_yielded()
        return None if n is None or back >= n else self.children[0].position_back(back)


class SkipNode(CountNode):
    kind = "skip"

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def _own_state(self) -> dict:
        return {"skipped": 0}

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "skipped", where, hi=self.n)

    def examples_yielded(self) -> int | None:
        n = self.children[0].examples_yielded()
        return None if n is None else max(0, n - self._state_dict["skipped"])

    def row_local_problem(self) -> str | None:
        return ("a skip node: skipping depends on the order; select rows on the HF Dataset (Dataset.select) "
                "or skip after the shuffle")

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        it = iter(self.children[0])
        if st["skipped"] < self.n:
            for _ in it:  # counted as received (``next()`` would return through a check point for a Ctrl-C)
                st["skipped"] += 1
                if st["skipped"] >= self.n:
                    break
            else:
                return
        yield from it


class TakeNode(CountNode):
    kind = "take"

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def _own_state(self) -> dict:
        return {"taken": 0}

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "taken", where, hi=self.n)

    def examples_yielded(self) -> int:
        return self._state_dict["taken"]

    def row_local_problem(self) -> str | None:
        return ("a take node: taking depends on the order; select rows on the HF Dataset (Dataset.select) "
                "or take after the shuffle")

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        if st["taken"] >= self.n:
            return
        for ex in self.children[0]:
            st["taken"] += 1
            yield ex
            if st["taken"] >= self.n:
                return

