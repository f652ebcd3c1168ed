"""Where the examples of ``concatenate_datasets`` came from: the part of ``concat.py`` that tells
positions, a mixin of :class:`~.concat.ConcatNode`.

Two users ask a concatenation where an example came from, and neither costs its loops anything
per example:

* a replay-mode shuffle above (``nodes/replay.py``) reads provenances from the state
  (:meth:`ConcatPositions.provenance_reader`) and re-reads examples by them
  (:meth:`ConcatPositions.reread`): ``[input, *position in it]`` with ``axis=0``, one entry per
  input with ``axis=1`` (``[]``: the input was exhausted before yielding anything; ``[-1]``:
  exhausted since, its columns filled with ``None``);
* the note of an error raised above (a ``map`` on the example, a shuffle buffer of stored
  examples counting back, ``nodes/shuffle_trail.py``) asks :meth:`~ConcatPositions.position` or
  :meth:`~ConcatPositions.position_back`: with ``axis=0`` the input being read counts back, then
  the inputs before it in the order read, each saying how many examples it yielded
  (:meth:`~ConcatPositions.examples_yielded`); with ``axis=1`` the inputs are read in step, so the
  first one not exhausted tells where the row's part was read.

The node's state, its loops and its shards are told in ``concat.py``; this mixin reads the state
fields told there (``index``, ``exhausted``, ``columns``, ``held``) and the node's public
:meth:`~.concat.ConcatNode.order` / :meth:`~.concat.ConcatNode.current_input`.
"""

from __future__ import annotations

from .base import HELD, Node
from .column_order import in_input_shapes
from .replay import check_input_provenance, check_list, reread_by_input


class ConcatPositions:
    """Provenances (replay mode) and count-back (error notes) of a concatenation (see the module
    doc). Its host, the node, has ``children``, ``axis``, ``templates``, ``order()``,
    ``current_input()`` and the state told in ``concat.py``."""

    def position(self) -> dict | None:
        """axis=0: the current input's. axis=1: where the row's part from the first input not
        exhausted was read (the inputs are read in step, none ahead: each describes its part)."""
        st = self._state_dict
        if self.axis == 0:
            return self.children[self.current_input()].position() if st["index"] < len(self.children) else None
        for child, exhausted in zip(self.children, st["exhausted"]):
            if not exhausted:
                pos = child.position()
                if pos is not None:
                    return pos
        return None

    # a provenance is [input, *position] (axis=0) or one per input (axis=1): see ``nodes/replay.py``
    def provenance_reader(self):
        fns = [c.provenance_reader() for c in self.children]
        if self.axis == 0:
            def current() -> list:
                i = self.current_input()
                return [i, *fns[i]()]

            return current
        st = self._state_dict

        def merged() -> list:
            ex, cols = st["exhausted"], st["columns"]
            return [([] if cols[j] is None else [-1]) if ex[j] else f() for j, f in enumerate(fns)]

        return merged

    def position_back(self, back: int) -> dict | None:
        """axis=0: counted back in the input being read, then in the inputs before it in the order read
        (each says how many examples it yielded: :meth:`Node.examples_yielded`); ``None`` past one that
        cannot tell, and for ``axis=1``, or while rows handed back are held (``held``: yielded again)."""
        st = self._state_dict
        if self.axis == 1 or HELD in st:
            return None
        order = self.order()
        k = min(st["index"], len(order) - 1)
        while k >= 0:
            child = self.children[order[k]]
            n = child.examples_yielded()
            if n is None:
                return None
            if back < n:
                return child.position_back(back)
            back -= n
            k -= 1
        return None

    def examples_yielded(self) -> int | None:
        st = self._state_dict
        if self.axis == 1 or HELD in st:
            return None
        order = self.order()
        total = 0
        for k in range(min(st["index"] + 1, len(order))):
            n = self.children[order[k]].examples_yielded()
            if n is None:
                return None
            total += n
        return total

    def position_of(self, prov) -> dict | None:
        """axis=0: ``[input, *position in it]``; axis=1: one entry per input (``[]`` or ``[-1]``: exhausted),
        the first input not exhausted says where the row's part was read, as :meth:`position`."""
        if self.axis == 0:
            return self.children[prov[0]].position_of(prov[1:])
        for child, p in zip(self.children, prov):
            if p and p != [-1]:
                pos = child.position_of(p)
                if pos is not None:
                    return pos
        return None

    def check_provenance(self, prov, where: str) -> None:
        if self.axis == 0:
            return check_input_provenance(self, prov, where)
        check_list(prov, where)
        n = len(self.children)
        if len(prov) != n:
            raise ValueError(f"{where}: a concatenate(axis=1) position has one entry per input ({n}), got {prov!r}")
        exhausted = [type(p) is list and (p == [] or (len(p) == 1 and type(p[0]) is int and p[0] == -1))
                     for p in prov]
        if all(exhausted):
            raise ValueError(f"{where}: a concatenate(axis=1) position names no input")
        for j, (c, p, done) in enumerate(zip(self.children, prov, exhausted)):
            if not done:
                c.check_provenance(p, f"{where}[{j}]")

    def reread(self, provs: list[list], bar=None) -> list[dict]:
        if self.axis == 0:
            return in_input_shapes(self.templates, provs, reread_by_input(self, provs, bar))
        n = len(self.children)
        columns = list(self._state_dict["columns"])
        per_child: list[dict] = []
        for j in range(n):
            js = [i for i, p in enumerate(provs) if p[j] != [] and p[j] != [-1]]
            exs = self.children[j].reread([provs[i][j] for i in js], bar)
            per_child.append(dict(zip(js, exs)))
            if columns[j] is None and any(p[j] == [-1] for p in provs):
                columns[j] = _first_columns(self.children[j])
        out = []
        for i, prov in enumerate(provs):
            merged: dict = {}
            for j in range(n):
                ex = per_child[j].get(i)
                if ex is not None:
                    merged.update(ex)
                elif prov[j] == [-1]:  # exhausted after yielding: its columns are None (as when it ran)
                    for c in columns[j]:
                        merged.setdefault(c, None)
            out.append(merged)
        return out


def _first_columns(child: Node) -> list[str]:
    """The columns of the first example ``child`` yields in a pass: what ``concatenate(axis=1)``
    fills with None once that input is exhausted. Needed when a replayed example was buffered in
    an earlier pass (a ``repeat`` or an interleave restarted the input since, and forgot them)."""
    fresh = child.clone()
    fresh.load(child.state_dict())  # the shard order chosen above lives in the state
    fresh.reset()
    first = next(iter(fresh), None)
    if first is None:
        raise ValueError("cannot re-derive a buffered concatenate(axis=1) row: the input that was exhausted "
                         "now yields nothing (did the data change?)")
    return list(first)
