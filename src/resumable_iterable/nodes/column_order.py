"""The column order of combined inputs: helpers of ``concat.py`` (``axis=0``) and ``interleave.py``.

HF casts every row of ``interleave_datasets`` / ``concatenate_datasets`` to the merged features,
so each row comes out with the merged columns in their order (first appearance, input by input),
and so does every struct in it: its fields in the merged struct's order, a field the input lacks
``None``. An input whose rows would differ so is told by the facade (``combine.py``): per input,
``None`` (its rows are in the merged order already: it has that order, or a ``map`` before the
node fills the columns it lacks in their places) or the *shape* its rows are put in: a dict of
the columns, in order, to ``None`` (a value left as it is), to the shape of a struct (a dict), or
to a one-element list holding the shape of the structs of a list. The node puts each row of such
an input in shape as it yields it (:func:`in_shape`: a template dict of the columns copied and
updated with the row, two C calls the hot loops inline, then the structs if the shape has any).
The inputs whose rows are in shape already are read as before (an interleave tests a local per
turn, a concatenation nothing per row).

The shape is no part of the node's shape nor of its state: the state describes the same
examples, so states saved before rows were reordered load, and states saved since load into a
pipeline built by an earlier release. Examples a state holds (peeked by an interleave, handed
back to a node) are kept as their input yielded them, and put in shape when they are yielded.
"""

from __future__ import annotations

from typing import Any


def _valid(shape: Any) -> bool:
    if not isinstance(shape, dict) or not all(isinstance(c, str) for c in shape):
        return False
    for sub in shape.values():
        if isinstance(sub, list):
            if len(sub) != 1 or not _valid(sub[0]):
                return False
        elif sub is not None and not _valid(sub):
            return False
    return True


def _compiled(shape: dict) -> tuple[dict, tuple]:
    """``(template, nested)``: the columns (in order) to ``None``, and ``(column, compiled, is_list)``
    for each struct (or list of structs) column."""
    nested = tuple((c, _compiled(sub[0] if isinstance(sub, list) else sub), isinstance(sub, list))
                   for c, sub in shape.items() if sub is not None)
    return dict.fromkeys(shape), nested


def templates(shapes: Any, n: int) -> list[tuple | None] | None:
    """The compiled ``shapes`` (one per input: ``None`` or a shape, see the module doc), each
    ``(template, nested)``; ``None`` when no input is put in shape (nothing to do)."""
    if shapes is None:
        return None
    shapes = list(shapes)
    if len(shapes) != n or not all(s is None or _valid(s) for s in shapes):
        raise ValueError(f"column shapes: expected one shape (a dict of columns) or None per input ({n}), got "
                         f"{shapes!r}")
    if all(s is None for s in shapes):
        return None
    return [None if s is None else _compiled(s) for s in shapes]


def in_nested(nested: tuple, row: dict) -> dict:
    """``row`` (a new dict the caller owns) with its struct columns put in shape: new dicts and
    lists, the row's own never edited (a state may share them)."""
    for c, sub, many in nested:
        v = row.get(c)
        if many:
            if isinstance(v, list):
                row[c] = [in_shape(sub, x) if isinstance(x, dict) else x for x in v]
        elif isinstance(v, dict):
            row[c] = in_shape(sub, v)
    return row


def in_shape(compiled: tuple, example: dict) -> dict:
    """``example`` (a new dict) with the columns of ``compiled`` first, in its order, and its structs
    in shape; as HF's cast, a column (or struct field) the example lacks is ``None``; one the shape
    lacks (features that did not tell of it) comes after them."""
    template, nested = compiled
    out = template.copy()
    out.update(example)
    return in_nested(nested, out) if nested else out


def any_template(temps: list[tuple | None]) -> tuple:
    """The merged shape, compiled, from those of a node whose inputs share it."""
    return next(t for t in temps if t is not None)


def put_in_order(examples: list, compiled: tuple) -> None:
    """Put examples a node's state holds to yield them again (``held``: see ``nodes/base.py``) in
    shape, in place in the live list (a state copy has its own list; the example dicts, which it
    may share, are replaced, never edited). Idempotent: an example already in shape comes out
    equal, one from a state of an earlier release is put in shape."""
    for k, ex in enumerate(examples):
        if isinstance(ex, dict):
            examples[k] = in_shape(compiled, ex)


def in_input_shapes(temps: list[tuple | None] | None, provs: list[list], examples: list) -> list:
    """``examples`` re-read at provenances ``[input, *position]`` (an interleave's, a concatenation's
    with ``axis=0``), each put in its input's shape (``temps``: per input, ``None`` or the compiled
    shape; ``None``: every input's rows are in shape already)."""
    if temps is None:
        return examples
    return [ex if temps[p[0]] is None else in_shape(temps[p[0]], ex) for p, ex in zip(provs, examples)]
