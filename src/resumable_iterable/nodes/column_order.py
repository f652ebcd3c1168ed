"""The column order of combined inputs: helpers of ``concat.py`` (``axis=0``) and ``interleave.py``.

HF casts every row of ``interleave_datasets`` / ``concatenate_datasets`` to the merged features,
so each row comes out with the merged columns in their order (first appearance, input by input).
An input whose columns are all merged ones but listed in another order is told so by the facade
(``combine.py``): per input, ``None`` (its rows come in the merged order already: it has that
order, or a ``map`` before the node fills the columns it lacks in their places) or the column
order its rows are put in. The node puts each row of such an input in that order as it yields it
(:func:`in_order`: a copy of a template dict updated with the row, two C calls).

The order is no part of the node's shape nor of its state: the state describes the same
examples, so states saved before rows were reordered load, and states saved since load into a
pipeline built by an earlier release. Examples a state holds (peeked by an interleave, handed
back to a node) are kept as their input yielded them, and put in order when they are yielded.
"""

from __future__ import annotations

from typing import Any


def templates(orders: Any, n: int) -> list[dict | None] | None:
    """The templates of ``orders`` (one per input: ``None`` or a list of column names), each a dict of
    the columns (in order) to ``None``; ``None`` when no input is put in order (nothing to do)."""
    if orders is None:
        return None
    orders = list(orders)
    if len(orders) != n or not all(o is None or (isinstance(o, (list, tuple)) and all(isinstance(c, str) for c in o))
                                   for o in orders):
        raise ValueError(f"column orders: expected one list of column names (or None) per input ({n}), got {orders!r}")
    if all(o is None for o in orders):
        return None
    return [None if o is None else dict.fromkeys(o) for o in orders]


def in_order(template: dict, example: dict) -> dict:
    """``example`` (a new dict) with the columns of ``template`` first, in its order; as HF's cast, a
    column the example lacks is ``None``; one the template lacks (features that did not tell of it)
    comes after them. The hot loops inline it."""
    out = template.copy()
    out.update(example)
    return out


def any_template(temps: list[dict | None]) -> dict:
    """The order of the merged columns, from the templates of a node whose inputs share it."""
    return next(t for t in temps if t is not None)


def put_in_order(examples: list, template: dict) -> None:
    """Put examples a node's state holds to yield them again (``held``: see ``nodes/base.py``) in the
    order of ``template``, in place in the live list (a state copy has its own list; the example
    dicts, which it may share, are replaced, never edited). Idempotent: an example already in order
    is left as it is, one from a state of an earlier release is put in order."""
    for k, ex in enumerate(examples):
        if isinstance(ex, dict) and list(ex)[:len(template)] != list(template):
            examples[k] = in_order(template, ex)
