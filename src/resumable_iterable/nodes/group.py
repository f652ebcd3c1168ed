"""``batch(by_column=...)``: one batch ``{column: [values]}`` per run of successive examples whose
values in the key column(s) are equal (HF ``datasets`` semantics: runs, not a global group-by,
and no size limit on a run).

A run is known to end only when the first example of the next run arrives, so that example
has already left the child when the batch is yielded. It is kept in the node's state:

State: ``{"node", "rows", "retry", "children"}``

* ``rows`` - the examples of the run being gathered (read from the child, not yet yielded).
  Before a batch is yielded, ``rows`` is replaced by the example that ended the run, so a state
  taken while the consumer holds the batch resumes with that example: nothing lost, nothing
  repeated. A state copy shares the rows it holds, so rows held across a yield (or loaded) are
  copied before they go into a batch: the user's functions may edit a batch in place.
* ``retry`` - empty, or the example whose key could not be taken (a missing column): a state taken
  after the error takes it in first, instead of losing it (a state of an earlier release has none).
"""

from __future__ import annotations

from typing import Iterator

from ..state import ExampleList, copy_example
from .base import Node, check_retry, retry_first
from .checks import check_examples
from .rows import rows_to_batch


class GroupNode(Node):
    kind = "group"
    added_fields = frozenset(("retry",))  # ``retry``: absent from states of earlier releases

    def __init__(self, child: Node, columns: str | list[str], drop_last_batch: bool = False):
        columns = [columns] if isinstance(columns, str) else list(columns)
        if not columns or not all(isinstance(c, str) for c in columns):
            raise TypeError(f"by_column must be a column name or a non-empty list of names, got {columns!r}")
        self.columns = columns
        self.drop_last_batch = bool(drop_last_batch)
        super().__init__([child])

    def params(self) -> dict:
        return {"columns": self.columns, "drop_last_batch": self.drop_last_batch}

    def _own_state(self) -> dict:
        return {"rows": ExampleList(), "retry": ExampleList()}

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        self._state_dict["rows"] = ExampleList(self._state_dict["rows"])
        self._state_dict["retry"] = ExampleList(state.get("retry", ()))

    def _validate_own(self, state: dict, where: str) -> None:
        check_retry(state, where)
        check_examples(state["rows"], where, "rows")
        if not all(isinstance(ex, dict) for ex in state["rows"]):
            raise ValueError(f"{where}: every gathered example in 'rows' must be an object")

    def _key(self, ex: dict) -> tuple:
        try:
            return tuple(ex[c] for c in self.columns)
        except KeyError as e:
            raise KeyError(f"batch(by_column={self.columns}): column {e.args[0]!r} is not in the example "
                           f"(its columns: {sorted(ex)})") from None

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        rows = st["rows"]
        if rows:  # held in a state: a copy of that state may share them
            rows[:] = [copy_example(r) for r in rows]
        key = self._key(rows[0]) if rows else None
        for ex in retry_first(st, self.children[0]):
            # the batch a new run ends and the run it starts are made inside ``try`` (a Ctrl-C landing
            # there keeps ``ex`` in ``retry``); from their recording to the yield nothing is called
            try:
                k = self._key(ex)
                batch = None
                if rows and k != key:
                    batch = rows_to_batch(rows)
                    run = ExampleList([ex])  # the example that ended the run is kept
            except BaseException:
                st["retry"] = ExampleList([ex])  # a state taken now takes it in first
                raise
            if batch is not None:
                st["rows"] = rows = run
                key = k
                yield batch
                rows[0] = copy_example(ex)  # a state taken during the yield shares ``ex``
                continue
            if not rows:
                key = k
            rows.append(ex)
        if rows:
            batch = None if self.drop_last_batch else rows_to_batch(rows)
            empty = ExampleList()
            st["rows"] = empty
            if batch is not None:
                yield batch
