"""Column operations: ``select_columns``, ``remove_columns``, ``rename_column(s)``.

Per-example transforms: the child's state is the whole story, but for ``retry``: empty, or the
example the node was making a row of when that raised (a missing column, or a Ctrl-C landing
there - the child has counted it read already), which a state taken then transforms first (absent
from states of earlier releases). As in HF ``datasets.IterableDataset``, ``remove_columns`` leaves alone an example that
lacks a column (rows read from JSON or a generator need not all have the same keys); a column
missing from an example raises, naming the column and the columns the example has: a ``KeyError``
for ``select_columns``, a ``ValueError`` for ``rename_column(s)`` (HF's exception types).
(When the dataset's columns are known, the facade refuses a missing column when the operation is
built.)
"""

from __future__ import annotations

from typing import Iterator

from ..state import ExampleList
from .base import Node, check_retry, retry_first

OPS = ("select", "remove", "rename")


def missing_column(op: str, col: str, names) -> Exception:
    """The error for column ``col`` missing from an example (or table) whose columns are ``names``:
    HF raises a ``KeyError`` for a selected column and a ``ValueError`` for a renamed one."""
    error = ValueError if op == "rename" else KeyError
    return error(f"{op}_columns: column {col!r} is not in the example (its columns: {sorted(names)})")


class ColumnsNode(Node):
    kind = "columns"
    added_fields = frozenset(("retry",))  # ``retry``: absent from states of earlier releases

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def __init__(self, child: Node, op: str, columns: list[str] | dict[str, str]):
        if op not in OPS:
            raise ValueError(f"unknown column operation {op!r}; expected one of {OPS}")
        if op == "rename":
            if not isinstance(columns, dict):
                raise TypeError(f"rename_columns expects a dict {{old_name: new_name}}, got {type(columns).__name__}")
            bad = [(k, v) for k, v in columns.items() if not (isinstance(k, str) and isinstance(v, str))]
            if bad:  # HF's IterableDataset raises ValueError here (the name is not a column)
                raise ValueError(f"rename_columns: column names must be strings, got {bad[0][0]!r} -> {bad[0][1]!r}")
            if len(set(columns.values())) != len(columns):
                raise ValueError(f"rename_columns maps several columns to one name: {columns}")
            self.columns = dict(columns)
            # new names that an example must not have already (unless renamed away by this operation)
            self.taken = [new for new in columns.values() if new not in columns]
        else:
            columns = [columns] if isinstance(columns, str) else list(columns)
            if not all(isinstance(c, str) for c in columns):
                raise TypeError(f"column names must be strings, got {columns!r}")
            # a name given twice is one column (HF's map-style ``Dataset`` too): twice, it made Arrow
            # tables with a column twice, or none (``drop_columns``). ``params`` keeps the names as
            # given, so the fingerprints of saved states stay the same
            self._given = columns
            self.columns = list(dict.fromkeys(columns))
        self.op = op
        super().__init__([child])

    def params(self) -> dict:
        return {"op": self.op, "columns": getattr(self, "_given", self.columns)}

    def _own_state(self) -> dict:
        return {"retry": ExampleList()}

    def _validate_own(self, state: dict, where: str) -> None:
        check_retry(state, where)

    def _load_own(self, state: dict) -> None:
        self._state_dict["retry"] = ExampleList(state.get("retry", ()))

    def check_rename(self, names) -> None:
        """``ValueError`` if renaming would give a column the name of another one that stays
        (which would drop that column's values), as HF refuses it."""
        clash = [new for new in self.taken if new in names]
        if clash:
            old = [k for k, v in self.columns.items() if v in clash]
            raise ValueError(f"rename_columns: cannot rename {old} to {clash}: column(s) {clash} already "
                             f"exist (columns: {sorted(names)}); remove them first")

    def _apply_one(self, ex: dict) -> dict:
        """The operation on one example (used to re-derive replayed examples; :meth:`_iter` inlines it)."""
        cols = self.columns
        if self.op == "remove":  # a column the example lacks: nothing to remove (as HF)
            drop = set(cols)
            return {c: v for c, v in ex.items() if c not in drop}
        missing = [c for c in cols if c not in ex]
        if missing:
            raise missing_column(self.op, missing[0], ex)
        if self.op == "select":
            return {c: ex[c] for c in cols}
        self.check_rename(ex)
        return {cols.get(c, c): v for c, v in ex.items()}

    def _iter(self) -> Iterator[dict]:
        # each row is made inside ``try``: if that raises (a missing column, a Ctrl-C landing there)
        # the example is kept in ``retry``, and nothing is called between the row and its ``yield``
        st = self._state_dict
        cols = self.columns
        inputs = retry_first(st, self.children[0]) if st["retry"] else self.children[0]
        if self.op == "select":
            for ex in inputs:
                try:
                    out = {c: ex[c] for c in cols}
                except BaseException as e:
                    st["retry"] = ExampleList([ex])
                    if isinstance(e, KeyError):
                        raise missing_column(self.op, e.args[0], ex) from None
                    raise
                yield out
        elif self.op == "remove":
            drop = set(cols)
            for ex in inputs:
                try:
                    out = {k: v for k, v in ex.items() if k not in drop}
                except BaseException:
                    st["retry"] = ExampleList([ex])
                    raise
                yield out
        else:
            taken = self.taken
            for ex in inputs:
                try:
                    for c in cols:
                        if c not in ex:
                            raise missing_column(self.op, c, ex)
                    for c in taken:
                        if c in ex:
                            self.check_rename(ex)
                    out = {cols.get(k, k): v for k, v in ex.items()}
                except BaseException:
                    st["retry"] = ExampleList([ex])
                    raise
                yield out

    # -- capabilities: media decoding deferred past a shuffle above passes through (see shuffle.py)
    def deferrable_decoder(self):
        decode = self.children[0].deferrable_decoder()
        if decode is None or self.op != "rename":
            return decode  # selected or remaining columns decode under their own names
        cols = self.columns
        back = {new: old for old, new in cols.items()}

        def decode_renamed(ex: dict) -> dict:
            out = decode({back.get(k, k): v for k, v in ex.items()})
            return {cols.get(k, k): v for k, v in out.items()}

        return decode_renamed

    def defer_decoding(self, deferred: bool) -> None:
        self.children[0].defer_decoding(deferred)

    def rename_map(self, names: list[str] | None) -> list[str] | None:
        """Column names after this operation, given the names before (``None`` if unknown)."""
        if names is None:
            return None
        if self.op == "select":
            return list(self.columns)
        if self.op == "remove":
            return [n for n in names if n not in self.columns]
        return [self.columns.get(n, n) for n in names]

    # -- capabilities (see ``Node``): a per-example transform of the columns
    def position_back(self, back: int) -> dict | None:
        # one row per input example, in order (an example held in ``retry`` is handed out before its row is made)
        return self.children[0].position_back(back)

    def examples_yielded(self) -> int | None:
        return self.children[0].examples_yielded()

    def replay_problem(self) -> str | None:
        return None

    def reread(self, provs: list[list], bar=None) -> list[dict]:
        return [self._apply_one(ex) for ex in self.children[0].reread(provs, bar)]

    def row_local_problem(self) -> str | None:
        return None
