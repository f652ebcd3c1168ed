"""The column types of combined inputs: helpers of ``interleave.py`` and ``concat.py`` (``axis=0``),
and of the facade (``combine.py``).

HF aligns the features of the inputs of ``interleave_datasets`` / ``concatenate_datasets`` when it
builds them (inferring unknown ones from their first examples) and refuses a column of two types
(:func:`aligned_features`). Building a pipeline here reads no example, so an input whose features
are unknown (a generator, a ``map``...) cannot be checked then: its rows were yielded among the
others' whatever they held (an ``int`` column next to strings, ``batch()``-ed lists next to
scalars), and a format above failed later with a raw pyarrow error (``cannot mix list and
non-list``). :class:`FirstRowCheck` checks, before it is yielded, the first example each such input
yields in a pass against the features of the known inputs and the first examples of the other
unknown ones, by *kind* (null, boolean, number, string, bytes, list of a kind, struct of fields:
:func:`value_kind`), and raises a ``ValueError`` naming both inputs, the column and the two kinds.
A number is a number (HF, which infers from five examples, may see ``int64`` in one input and
``double`` in another and refuse them; this check lets them through, as their rows combine fine);
values of other types (images, tensors, dates) are not checked.

Once per input and pass, never per row; nothing is kept in the state (the kinds seen in a pass are
a local of the pass). The node raises before recording anything for the example, and keeps it
(an interleave's ``peeked``, a concatenation's ``held``): a state taken after the error yields the
same example next, so it raises the same error again, and nothing yielded is lost or repeated.
A pass resumed from a state checks the examples the uninterrupted run would: only first examples.
An input the state read already is not checked again: its next example is only noted
(:meth:`FirstRowCheck.note`), so that the inputs read next are compared with it - but the example
an input holds is checked if it is that input's first (the check failed on it), which the input
tells where it counts its examples (``Node.examples_yielded``: sources of shards of known length
or read in their first shard, per-example maps, column operations, skip / take, concatenations).
Where an input cannot count them (a generator past its first shard, a filter, a batch), an
interleave does not check it again (a state taken after this error on such an input resumes past
the example), and a concatenation checks the next example of the input it was reading (a later
example of a different kind raises where the uninterrupted run yielded it). A state taken before
the error raises it again, as the uninterrupted run does.
"""

from __future__ import annotations

import decimal
from typing import Any

import numpy as np

#: a value or feature of a kind not checked (an image, a tensor, a date...)
UNCHECKED = None
_NUMBER = "number"


def is_null_feature(feature: Any) -> bool:
    """A feature that holds nothing yet: ``Value("null")``, or a list of it (a column of empty lists),
    which another dataset's type of the column replaces, as in HF."""
    from datasets import LargeList, List, Value

    if isinstance(feature, Value):
        return feature.dtype == "null"
    if isinstance(feature, (List, LargeList)):
        return is_null_feature(feature.feature)
    return False


def aligned_features(features: list, what: str, path: str = "", inputs: list | None = None) -> dict:
    """The union of ``features`` (dicts of features, of inputs ``inputs``: by default their
    positions), in order of appearance: a column's type is the first one that is not null (HF's
    alignment); nested structs are merged field by field. Two other types of one column raise
    ``ValueError``, as HF's: the rows of one dataset would be yielded under the other's type (a float
    under ``int64``, truncated by every export)."""
    inputs = list(range(len(features))) if inputs is None else inputs
    merged: dict = {}
    first: dict = {}  # column -> the dataset its merged type comes from
    for i, f in zip(inputs, features):
        for k, v in f.items():
            if k not in merged or is_null_feature(merged[k]):
                merged[k], first[k] = v, i
            elif isinstance(v, dict) and isinstance(merged[k], dict):
                merged[k] = aligned_features([merged[k], v], what, f"{path}{k}.", [first[k], i])
            elif not is_null_feature(v) and v != merged[k]:
                raise ValueError(f"{what}: the features can't be aligned: column {path + k!r} is {v} in dataset {i} "
                                 f"and {merged[k]} in dataset {first[k]} (as HF, the types must match, or one be "
                                 "Value('null')); cast one of them first (cast_column)")
    return merged


def _dtype_kind(dtype: str) -> Any:
    if dtype == "null":
        return "null"
    if dtype == "bool":
        return "bool"
    if dtype.startswith(("int", "uint", "float", "decimal")):
        return _NUMBER
    if dtype in ("string", "large_string"):
        return "string"
    if dtype in ("binary", "large_binary"):
        return "binary"
    return UNCHECKED


def feature_kind(feature: Any) -> Any:
    """The kind of the values a feature describes (see :func:`value_kind`)."""
    from datasets import ClassLabel, LargeList, List, Value

    if isinstance(feature, dict):
        return {k: feature_kind(v) for k, v in feature.items()}
    if isinstance(feature, Value):
        return _dtype_kind(feature.dtype)
    if isinstance(feature, ClassLabel):
        return _NUMBER
    if isinstance(feature, (List, LargeList)):
        inner = feature_kind(feature.feature)
        return UNCHECKED if inner is UNCHECKED else ("list", inner)
    return UNCHECKED


def value_kind(value: Any) -> Any:
    """``"null"``, ``"bool"``, ``"number"``, ``"string"``, ``"binary"``, ``("list", kind)`` (the kind
    of its first value that is not null), a dict of the kinds of a struct's fields, or
    :data:`UNCHECKED`."""
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, float, np.integer, np.floating, decimal.Decimal)):
        return _NUMBER
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray)):
        return "binary"
    if isinstance(value, dict):
        return {k: value_kind(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        inner = next((k for k in map(value_kind, value) if k != "null"), "null")
        return UNCHECKED if inner is UNCHECKED else ("list", inner)
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iuf":
            inner = _NUMBER
        elif value.dtype.kind == "b":
            inner = "bool"
        elif value.dtype.kind == "U":
            inner = "string"
        else:
            return UNCHECKED
        for _ in range(value.ndim):
            inner = ("list", inner)
        return inner
    return UNCHECKED


def describe_kind(kind: Any, plural: bool = False) -> str:
    """``kind`` in words: ``"a list of numbers"``."""
    if isinstance(kind, dict):
        return f"{'structs' if plural else 'a struct'} of the fields {list(kind)}"
    if isinstance(kind, tuple):
        if kind[1] == "null":
            return "empty lists" if plural else "an empty list"
        return f"{'lists' if plural else 'a list'} of {describe_kind(kind[1], True)}"
    words = {"null": ("null", "nulls"), "bool": ("a boolean", "booleans"), _NUMBER: ("a number", "numbers"),
             "string": ("a string", "strings"), "binary": ("bytes", "bytes")}.get(kind, ("a value", "values"))
    return words[plural]


def _clash(a: Any, b: Any, path: str) -> tuple | None:
    """``(path, a, b)`` where kinds ``a`` and ``b`` differ (neither null nor unchecked), else ``None``."""
    if a is UNCHECKED or b is UNCHECKED or a == "null" or b == "null":
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k in b:
                found = _clash(a[k], b[k], f"{path}.{k}")
                if found:
                    return found
        return None
    if isinstance(a, tuple) and isinstance(b, tuple):
        return _clash(a[1], b[1], f"{path}[]")
    return None if a == b else (path, a, b)


class FirstRowCheck:
    """Checks the first example each input of unknown features yields in a pass (see the module doc).
    ``features``: per input, its features (a dict of features) or ``None`` (unknown)."""

    def __init__(self, what: str, features: list):
        self.what = what
        self.features = list(features)
        self.known = [(i, f, feature_kind(dict(f))) for i, f in enumerate(self.features) if f is not None]

    def unchecked(self) -> list[bool]:
        """A pass's list of the inputs still to check (changed by :meth:`check`)."""
        return [f is None for f in self.features]

    def picked(self, inputs: list[int]) -> FirstRowCheck:
        """This check for a node whose inputs are inputs ``inputs`` of this one (the shards of a
        concatenation listed anew)."""
        return FirstRowCheck(self.what, [self.features[i] for i in inputs])

    def check(self, i: int, example: Any, seen: dict) -> None:
        """Raise ``ValueError`` if ``example``, the first input ``i`` yields in this pass, has a column
        of another kind than a known input's features or the first example of another input
        (``seen``: input -> kinds, of this pass; ``example``'s are added)."""
        if not isinstance(example, dict):
            return
        kinds = {c: value_kind(v) for c, v in example.items()}
        for j, feats, known in self.known:
            for c, k in kinds.items():
                if c in known:
                    found = _clash(k, known[c], c)
                    if found:
                        self._raise(i, found, f"{feats[c]} in the features of dataset {j}")
        for j, other in seen.items():
            for c, k in kinds.items():
                if c in other:
                    found = _clash(k, other[c], c)
                    if found:
                        self._raise(i, found, f"{describe_kind(found[2])} in the first example of dataset {j}")
        seen[i] = kinds

    def note(self, i: int, example: Any, seen: dict) -> None:
        """Add the kinds of ``example``, one input ``i`` yields after its first one, to ``seen``
        unchecked: a pass resumed after that input's first example compares the others with it, as
        the pass that read the first one did."""
        if isinstance(example, dict) and i not in seen:
            seen[i] = {c: value_kind(v) for c, v in example.items()}

    def _raise(self, i: int, found: tuple, other: str) -> None:
        path, kind, _ = found
        raise ValueError(f"{self.what}: the columns can't be aligned: column {path!r} holds {describe_kind(kind)} in "
                         f"the first example of dataset {i} (whose features are unknown), and is {other}. HF "
                         "refuses to combine them (it infers the features first); make the column one type in every "
                         "dataset (map or cast_column), or declare the features (features=, or resolve_features())")
