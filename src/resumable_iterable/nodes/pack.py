"""``pack(seq_len, ...)``: token lists of successive examples packed into fixed-length chunks, the
way language models are pre-trained.

Two modes:

* ``"concat"`` (default) - documents are concatenated (each followed by ``separator``, e.g. an EOS
  id, when given) and cut every ``seq_len`` tokens; a document may span several chunks. Every
  chunk has exactly ``seq_len`` tokens except, at the end, the last one (dropped with
  ``drop_last=True``).
* ``"greedy"`` - documents are not split: a chunk takes whole documents, in order, while they
  fit in ``seq_len``; the document that does not fit starts the next chunk. Chunks are therefore
  up to ``seq_len`` long. A document longer than ``seq_len`` on its own is cut into ``seq_len``
  pieces (no token is ever dropped). ``drop_last=True`` drops the final chunk.

Only the packed ``columns`` are kept (they must hold equally long token lists in each example;
e.g. ``("input_ids", "labels")``). ``separator`` is one id appended after every document in
every packed column, or a dict giving one per column. Options add ``position_ids`` (positions restart at every
document, for document-masked attention) and ``document_lengths`` (the lengths of the document
pieces in the chunk, e.g. for ``cu_seqlens``).

State: ``{"node", "carry", "docs", "start", "retry", "children"}``

* ``carry`` - per packed column, the tokens read but not yet yielded in a chunk (from ``start`` on):
  the partial sequence, or in greedy mode the pending documents. Held as lists copied shallowly
  (their items are ints), so ``state_dict()`` costs one C-level list copy per column.
* ``docs`` - where each document in ``carry`` starts (an index into ``carry``; the first may be
  negative: that document began in a chunk already yielded). Positions and document lengths
  are derived from it, so nothing is stored per token besides the tokens. Kept only when
  ``position_ids`` or ``document_lengths`` is asked for (empty otherwise).
* ``start`` - how many tokens at the front of ``carry`` were already yielded; the lists are
  compacted when the next document is appended, so cutting a long document costs no quadratic copying.
* ``retry`` - empty, or the example whose tokens could not be taken (a missing column, no token
  list): a state taken after the error packs it first, instead of losing it (a state of an earlier
  release has no ``retry``).
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable, Iterator

from ..state import ExampleList
from .base import Node, check_retry, retry_first
from .checks import as_int

MODES = ("concat", "greedy")


def _integer(name: str, value: Any, lo: int | None = None) -> int:
    # any integer a script holds: numpy integers, one-element integer tensors / 0-d arrays
    return as_int(value, f"pack: {name}", lo=lo)


class PackNode(Node):
    kind = "pack"
    added_fields = frozenset(("retry",))  # ``retry``: absent from states of earlier releases

    def __init__(self, child: Node, seq_len: int, columns: Any = ("input_ids",), separator: Any = None,
                 drop_last: bool = False, mode: str = "concat", position_ids: bool = False,
                 document_lengths: bool = False):
        seq_len = _integer("seq_len", seq_len, lo=1)
        columns = [columns] if isinstance(columns, str) else list(columns)
        if not columns or not all(isinstance(c, str) for c in columns) or len(set(columns)) != len(columns):
            raise ValueError(f"pack: columns must be distinct column names, got {columns!r}")
        added = [c for c, on in (("position_ids", position_ids), ("document_lengths", document_lengths)) if on]
        if set(added) & set(columns):
            raise ValueError(f"pack: column(s) {sorted(set(added) & set(columns))} cannot be packed when "
                             f"{' and '.join(f'{c}=True' for c in added)} adds a column of that name")
        if mode not in MODES:
            raise ValueError(f"pack: unknown mode {mode!r}; expected one of {MODES}")
        if separator is not None and not isinstance(separator, dict):
            separator = {c: separator for c in columns}
        if separator is not None:
            if sorted(separator) != sorted(columns):
                raise ValueError(f"pack: separator must give one value for each packed column {columns}, "
                                 f"got {sorted(separator)}")
            separator = {c: _integer("separator", separator[c]) for c in columns}
        self.seq_len = seq_len
        self.columns = columns
        self.separator = separator
        self.drop_last = bool(drop_last)
        self.mode = mode
        self.position_ids = bool(position_ids)
        self.document_lengths = bool(document_lengths)
        super().__init__([child])

    def params(self) -> dict:
        return {"seq_len": self.seq_len, "columns": self.columns, "mode": self.mode, "drop_last": self.drop_last,
                "separator": self.separator, "position_ids": self.position_ids,
                "document_lengths": self.document_lengths}

    def _own_state(self) -> dict:
        return {"carry": {c: ExampleList() for c in self.columns}, "docs": ExampleList(), "start": 0,
                "retry": ExampleList()}

    def _load_own(self, state: dict) -> None:
        st = self._state_dict
        st["carry"] = {c: ExampleList(state["carry"][c]) for c in self.columns}
        st["docs"] = ExampleList(state["docs"])
        st["start"] = state["start"]
        st["retry"] = ExampleList(state.get("retry", ()))

    def _validate_own(self, state: dict, where: str) -> None:
        check_retry(state, where)
        carry, docs, start = state["carry"], state["docs"], state["start"]
        if not isinstance(carry, dict) or sorted(carry) != sorted(self.columns):
            raise ValueError(f"{where}: 'carry' must hold the packed columns {self.columns}")
        lengths = {len(v) if isinstance(v, list) else None for v in carry.values()}
        if len(lengths) != 1 or None in lengths:
            raise ValueError(f"{where}: 'carry' must hold one list of tokens per packed column, all of one length")
        n = lengths.pop()
        if type(start) is not int or not 0 <= start <= n:
            raise ValueError(f"{where}: 'start' must be an integer in [0, {n}], got {start!r}")
        if (not isinstance(docs, list) or not all(type(d) is int for d in docs) or docs != sorted(docs)
                or any(d > n for d in docs)  # an empty document (no separator) starts at the end
                or ((self.position_ids or self.document_lengths) and n > start and (not docs or docs[0] > start))):
            raise ValueError(f"{where}: 'docs' must be the increasing start positions of the carried documents")

    # ------------------------------------------------------------------ iteration
    def _tokens(self, ex: dict) -> tuple[list, int]:
        cols = []
        n = None
        for c in self.columns:
            v = _token_list(ex, c)
            if n is None:
                n = len(v)
            elif len(v) != n:
                raise ValueError(f"pack: columns {self.columns} must hold token lists of equal length in each "
                                 f"example, got {n} and {len(v)} ({c!r})")
            cols.append(v)
        return cols, n + (self.separator is not None)

    def _chunk(self, a: int, b: int) -> dict:
        st = self._state_dict
        carry = st["carry"]
        out = {c: carry[c][a:b] for c in self.columns}
        if self.position_ids or self.document_lengths:
            docs = st["docs"]
            # the documents overlapping [a, b): their start, clipped to the chunk
            k = bisect.bisect_right(docs, a) - 1
            bounds = [docs[k]] + [d for d in docs[k + 1:] if d < b]
            if self.position_ids:
                pos: list = []
                for s, e in zip(bounds, bounds[1:] + [b]):
                    pos.extend(range(max(s, a) - s, e - s))
                out["position_ids"] = pos
            if self.document_lengths:  # an empty document (no separator) has no piece in the chunk
                out["document_lengths"] = [n for n in (e - max(s, a) for s, e in zip(bounds, bounds[1:] + [b])) if n]
        return out

    def _compact(self) -> None:
        """Drop the already-yielded front of the carry: new lists, recorded in one go (a Ctrl-C
        landing part-way leaves the carry as it was)."""
        st = self._state_dict
        start = st["start"]
        carry = st["carry"]
        docs = st["docs"]
        if self.position_ids or self.document_lengths:
            k = bisect.bisect_right(docs, start) - 1  # the first document still carried
            docs = ExampleList([d - start for d in docs[max(k, 0):]])
        new = {c: ExampleList(carry[c][start:]) for c in self.columns}
        st["carry"], st["docs"], st["start"] = new, docs, 0

    def _append(self, cols: list) -> None:
        """Add one document to the carry (the caller undoes it if this is cut short)."""
        st = self._state_dict
        carry = st["carry"]
        if self.position_ids or self.document_lengths:  # document starts are only needed for these
            st["docs"].append(len(carry[self.columns[0]]))
        sep = self.separator
        for c, v in zip(self.columns, cols):
            lst = carry[c]
            lst += v
            if sep is not None:
                lst.append(sep[c])

    def _full_chunks(self) -> Iterator[dict]:
        """The chunks the carry already fills (also what a state taken mid-document still owes)."""
        st = self._state_dict
        size = self.seq_len
        tokens = st["carry"][self.columns[0]]
        # greedy: a document longer than a chunk on its own is cut; a chunk filled exactly is done
        while len(tokens) - st["start"] >= size:
            a = st["start"]
            chunk = self._chunk(a, a + size)
            st["start"] = a + size  # nothing called from here to the yield (no check point for a Ctrl-C)
            yield chunk

    def _iter(self) -> Iterator[dict]:
        """A document is taken in inside ``try``: if that raises (a column that holds no token list, a
        Ctrl-C landing there - the input has counted it read already) the carry is put back as it
        was and the example kept in ``retry``. A chunk is made before ``start`` records it, and
        nothing is called from there to its ``yield``."""
        st = self._state_dict
        size = self.seq_len
        greedy = self.mode == "greedy"
        yield from self._full_chunks()
        first = self.columns[0]
        if not greedy and len(self.columns) == 1 and not (self.position_ids or self.document_lengths):
            yield from self._iter_one_column()
            return
        inputs = retry_first(st, self.children[0]) if st["retry"] else self.children[0]
        for ex in inputs:
            end = None
            try:
                cols, n = self._tokens(ex)
                if st["start"]:
                    self._compact()
                carry = st["carry"]
                end, ndocs = len(carry[first]), len(st["docs"])
                chunk = None
                if greedy and end and end + n > size:  # the document does not fit: close the chunk first
                    chunk = self._chunk(0, end)
                self._append(cols)
            except BaseException:
                if end is not None:  # put the carry back as it was
                    for c in self.columns:
                        del st["carry"][c][end:]
                    del st["docs"][ndocs:]
                st["retry"] = ExampleList([ex])  # a state taken now packs it first
                raise
            if chunk is not None:
                st["start"] = end
                yield chunk
            if len(carry[first]) - st["start"] >= size:
                yield from self._full_chunks()
        a, b = st["start"], len(st["carry"][first])
        if b > a:
            chunk = None if self.drop_last else self._chunk(a, b)
            st["start"] = b
            if chunk is not None:
                yield chunk

    def _iter_one_column(self) -> Iterator[dict]:
        """``concat`` mode for one column without positions (the common case), inlined: the same
        state updates as :meth:`_iter`, without a call per document. The document's tokens are
        taken in with ``+=`` (no call: no check point for a Ctrl-C), the separator too."""
        st = self._state_dict
        size = self.seq_len
        col = self.columns[0]
        tokens = st["carry"][col]
        sep = None if self.separator is None else [self.separator[col]]
        for ex in retry_first(st, self.children[0]) if st["retry"] else self.children[0]:
            try:
                v = ex.get(col)
                if type(v) is not list:  # an array, another sequence, or missing (named by _token_list)
                    v = _token_list(ex, col)
                start = st["start"]
                if start:
                    del tokens[:start]
                    st["start"] = start = 0
            except BaseException:
                st["retry"] = ExampleList([ex])  # a state taken now packs it first
                raise
            tokens += v
            if sep is not None:
                tokens += sep
            while len(tokens) - start >= size:
                st["start"] = start + size
                yield {col: tokens[start:start + size]}
                start = st["start"]
        a, b = st["start"], len(tokens)
        if b > a:
            st["start"] = b
            if not self.drop_last:
                yield {col: tokens[a:b]}


def _token_list(ex: dict, column: str) -> list:
    """The tokens of ``column`` in ``ex`` as a list (from a list, a numpy array or any sequence)."""
    try:
        v = ex[column]
    except KeyError:
        raise KeyError(f"pack: column {column!r} is not in the example (its columns: {sorted(ex)})") from None
    if type(v) is not list:
        given = v
        if hasattr(v, "tolist"):  # a numpy array or torch tensor (a scalar gives a number: refused below)
            v = v.tolist()
        elif isinstance(v, Iterable) and not isinstance(v, (str, bytes, bytearray, dict)):
            v = list(v)
        if type(v) is not list:  # a string would be packed as characters, a number or None cannot be
            raise TypeError(f"pack: column {column!r} must hold a list of token ids in each example, got "
                            f"{type(given).__name__} {given!r:.60}")
    return v
