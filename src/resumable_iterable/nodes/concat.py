"""``concatenate_datasets``: one input after another (``axis=0``) or side by side (``axis=1``).

* ``axis=0`` - state ``{"node", "index", "children"}``: the input being read; the inputs before
  it are finished, the ones after untouched.
* ``axis=1`` - each output row merges the next row of every input (column names must not
  clash). As in HF, it goes on until every input is exhausted; the columns of an exhausted
  input are then ``None``. State ``{"node", "exhausted", "columns", "pending", "children"}`` -
  the columns seen from each input, so a resumed run fills the same ``None`` columns, and
  ``pending``: empty between yields; when an input raised part-way through a row, the parts of
  that row already read from the inputs before it (so a state taken then completes that row).
"""

from __future__ import annotations

from typing import Iterator

from ..state import ExampleList, copy_example
from .base import Node, check_examples, check_int


class ConcatNode(Node):
    kind = "concat"

    def __init__(self, children: list[Node], axis: int = 0):
        if not children:
            raise ValueError("concatenate_datasets needs at least one dataset")
        if axis not in (0, 1):
            raise ValueError(f"axis must be 0 or 1, got {axis!r}")
        self.axis = axis
        super().__init__(children)

    def params(self) -> dict:
        return {"axis": self.axis}

    def _own_state(self) -> dict:
        if self.axis == 0:
            return {"index": 0}
        n = len(self.children)
        return {"exhausted": [False] * n, "columns": [None] * n, "pending": ExampleList([None] * n)}

    def _validate_own(self, state: dict, where: str) -> None:
        n = len(self.children)
        if self.axis == 0:
            check_int(state, "index", where, hi=n)
            return
        ex, cols = state["exhausted"], state["columns"]
        if not isinstance(ex, list) or len(ex) != n or not all(type(b) is bool for b in ex):
            raise ValueError(f"{where}: 'exhausted' must be a list of {n} booleans")
        if not isinstance(cols, list) or len(cols) != n or not all(
                c is None or (isinstance(c, list) and all(isinstance(x, str) for x in c)) for c in cols):
            raise ValueError(f"{where}: 'columns' must be a list of {n} column-name lists or nulls")
        pending = state["pending"]
        check_examples(pending, where, "pending")
        if len(pending) != n or not all(p is None or isinstance(p, dict) for p in pending):
            raise ValueError(f"{where}: 'pending' must hold {n} examples or nulls")

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        if self.axis == 1:
            self._state_dict["pending"] = ExampleList(self._state_dict["pending"])

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        if self.axis == 0:
            while st["index"] < len(self.children):
                yield from self.children[st["index"]]
                st["index"] += 1
            return
        exhausted, columns, pending = st["exhausted"], st["columns"], st["pending"]
        n = len(self.children)
        row: list = [None] * n  # this row's part from each input
        held = None
        if any(p is not None for p in pending):  # parts kept in a state (a state copy may share them)
            held = [None if p is None else copy_example(p) for p in pending]
        its = [iter(c) for c in self.children]
        while True:
            merged: dict = {}
            got = False
            i = 0
            try:
                for i, it in enumerate(its):
                    if exhausted[i]:
                        for c in columns[i] or ():
                            merged.setdefault(c, None)
                        continue
                    if held is not None and held[i] is not None:
                        ex = held[i]
                    else:
                        ex = next(it, None)
                        if ex is None:
                            exhausted[i] = True
                            for c in columns[i] or ():
                                merged.setdefault(c, None)
                            continue
                    row[i] = ex
                    if columns[i] is None:
                        columns[i] = list(ex)
                        clash = [c for c in ex if any(c in (columns[j] or ()) for j in range(len(its)) if j != i)]
                        if clash:
                            raise ValueError(f"concatenate_datasets(axis=1): column(s) {clash} appear in several "
                                             "datasets")
                    got = True
                    merged.update(ex)
            except BaseException:
                # input i raised: keep the parts already read for this row from the inputs before it
                pending[:] = [None if exhausted[j] or j >= i else row[j] for j in range(n)]
                raise
            if held is not None:
                held = None
                pending[:] = [None] * n
            if not got:
                return
            yield merged

    def position(self) -> dict | None:
        if self.axis == 0 and self._state_dict["index"] < len(self.children):
            return self.children[self._state_dict["index"]].position()
        return None
