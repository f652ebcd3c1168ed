"""``batch(batch_size, drop_last_batch)``: group examples into ``{column: [values]}`` dicts.

State: ``{"node", "rows", "children"}`` - ``rows`` holds the examples read for a batch not yet
yielded. Between yields it is empty: a batch is assembled inside one ``next()`` call, so the
child's state already counts every example of the yielded batch. It only holds rows when the
input raised part-way through a batch (a ``map`` function or a generator that failed): a state
taken then keeps those rows, so the resumed pipeline completes the very same batch. Rows held in
a state (loaded, or kept after such an error) are copied when the batch is built, since a state
copy shares them and the user's functions may edit the yielded batch in place.

The batch size is not part of the pipeline's shape: a state saved with ``batch(B)`` loads into
the same pipeline built with ``batch(B')``. The next batch then starts right after the last
example of the last batch yielded (no example lost or repeated); only the grouping changes.

``IterableDataset.iter(batch_size)`` batches with a node outside the dataset's state, so it has no
``rows`` to keep: :class:`Rewind` puts the pipeline back where a batch began when it raises.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

from ..state import PRIVATE, ExampleList, copy_example
from .base import Node
from .checks import as_int, check_examples
from .map import MapNode
from .rows import rows_to_batch
from .shuffle import ShuffleNode


class BatchNode(Node):
    kind = "batch"
    #: where the first row of the last batch yielded came from, for error notes (not state)
    _first: dict | None = None

    def __init__(self, child: Node, batch_size: int, drop_last_batch: bool = False, after_format: bool = False):
        self.batch_size = as_int(batch_size, "batch_size", lo=1)
        self.drop_last_batch = bool(drop_last_batch)
        #: made by ``batch()`` after ``with_format`` (HF: a map given formatted batches, whose batches
        #: are formatted once more): how its batches are formatted, not part of the state
        self.after_format = bool(after_format)
        super().__init__([child])

    def params(self) -> dict:
        # batch_size is not part of the pipeline's shape: a state saved with batch size B loads into
        # the same pipeline with batch size B' (its rows in progress, if any, start the next batch)
        return {"drop_last_batch": self.drop_last_batch}

    def _own_state(self) -> dict:
        return {"rows": ExampleList()}

    def _validate_own(self, state: dict, where: str) -> None:
        rows = state["rows"]
        check_examples(rows, where, "rows")
        if not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{where}: 'rows' must hold the examples (objects) of a batch in progress")

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        self._state_dict["rows"] = ExampleList(self._state_dict["rows"])

    def _iter(self) -> Iterator[dict]:
        rows = self._state_dict["rows"]
        if rows:  # held in a state: a copy of that state may share them
            rows[:] = [copy_example(r) for r in rows]
        it = iter(self.children[0])
        size = self.batch_size
        islice = itertools.islice
        position = self.children[0].position
        while True:
            # read into the state itself: if the input raises part-way, the rows read so far stay
            # there (list.extend keeps what it appended before the error)
            if rows:
                self._first = None  # rows held in a state: where the first came from is not known here
            else:
                rows.extend(islice(it, 1))
                self._first = position()
            rows.extend(islice(it, max(size - len(rows), 0)))
            if len(rows) > size:  # a state saved with a larger batch size held more rows
                batch = rows_to_batch(rows[:size])
                del rows[:size]
                yield batch
                continue
            if len(rows) < size and (not rows or self.drop_last_batch):
                rows.clear()
                return
            batch = rows_to_batch(rows)
            del rows[:]  # not rows.clear(): a Ctrl-C is raised as a call returns, and would drop the batch
            yield batch

    def position(self) -> dict | None:
        """The last row of the last batch, with ``"first"``: where that batch's first row came from."""
        pos = self.children[0].position()
        first = self._first
        return pos if pos is None or first is None else {**pos, "first": first}

    # -- capabilities (see ``Node``)
    def replay_problem(self) -> str | None:
        return "a batch is made of many rows"

    def row_local_problem(self) -> str | None:
        return "a batch node: batch after the shuffle"


def _edits_possible_above_a_buffer(node: Node) -> bool:
    """Whether a user's function (``map``, ``filter``) runs above a node that keeps examples (a
    shuffle buffer) in ``node``'s tree, and so may edit a buffered example in place."""

    def keeps(n: Node) -> bool:
        return any(isinstance(d, ShuffleNode) for d in n.walk())

    return any(isinstance(n, MapNode) and keeps(n.children[0]) for n in node.walk())


class Rewind:
    """Reads a batch from the live pipeline ``node`` outside the dataset's state (``iter(batch_size)``,
    or a DataLoader that batches in the main process): if the pipeline raises part-way through the
    batch, ``node`` is put back where the batch began (its state copied before each batch), so that
    a state taken after the error reads those rows again instead of losing them. The end of the
    input is not an error: the rows read then are the last batch's (or dropped by the reader)."""

    def __init__(self, node: Node):
        self.node = node
        # the copy is only loaded back if this batch raises: unless a function may edit a buffered
        # example in place before that, its examples need not leave the buffer as copies (1.6x faster)
        self.how = None if _edits_possible_above_a_buffer(node) else PRIVATE

    def read(self, read_batch: Callable[[], Any], rewinds: Callable[[], bool] = lambda: True) -> Any:
        """``read_batch()``; if it raises (not ``StopIteration``) and ``rewinds()`` says so, the
        pipeline is put back first."""
        start = self.node.state_dict(self.how)
        try:
            return read_batch()
        except StopIteration:
            raise
        except BaseException:
            if rewinds():
                self.node.load(start)
            raise


def rewinding(batches: Iterator[Any], node: Node) -> Iterator[Any]:
    """``batches`` of ``IterableDataset.iter(batch_size)``, each read from the live pipeline ``node``
    inside one ``next()`` by a batch node that is not part of the dataset's state, under a
    :class:`Rewind` - inlined, so that a Ctrl-C landing as ``next()`` returns (a check point) is
    still inside the ``try`` that puts the pipeline back, and from there to the yield nothing is called."""
    how = Rewind(node).how
    read = batches.__next__
    while True:
        start = node.state_dict(how)
        try:
            batch = read()
        except StopIteration:
            return
        except BaseException:
            node.load(start)
            raise
        yield batch
