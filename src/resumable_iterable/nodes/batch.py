"""``batch(batch_size, drop_last_batch)``: group examples into ``{column: [values]}`` dicts.

No state of its own: a batch is assembled inside one ``next()`` call, so between yields the
child's state already counts every example of the yielded batch.
"""

from __future__ import annotations

import itertools
from typing import Iterator

from .base import Node, as_int
from .map import rows_to_batch


class BatchNode(Node):
    kind = "batch"

    def __init__(self, child: Node, batch_size: int, drop_last_batch: bool = False):
        self.batch_size = as_int(batch_size, "batch_size", lo=1)
        self.drop_last_batch = bool(drop_last_batch)
        super().__init__([child])

    def params(self) -> dict:
        return {"batch_size": self.batch_size, "drop_last_batch": self.drop_last_batch}

    def _iter(self) -> Iterator[dict]:
        it = iter(self.children[0])
        size = self.batch_size
        while True:
            rows = list(itertools.islice(it, size))
            if not rows or (self.drop_last_batch and len(rows) < size):
                return
            yield rows_to_batch(rows)
