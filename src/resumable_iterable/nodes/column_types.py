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

Once per input and pass, never per row. The node raises before recording anything for the example,
and keeps it (an interleave's ``peeked``, a concatenation's ``held``): a state taken after the error
yields the same example next, so it raises the same error again, and nothing yielded is lost or
repeated. What a resumed pass needs to check exactly what the uninterrupted run would is in the
node's state, ``first_kinds``: per input, ``null`` while its first example of the pass has not
passed the check (its next example, or the one the node keeps, is checked), else the kinds of that
first example (JSON text, :func:`encoded`), which the inputs read later are compared with. It is
written once per input and pass, a store of a string that ``state_dict()`` copies by reference.
States of earlier releases have no ``first_kinds``: the node rebuilds it when its pass starts as
those releases' passes did (:func:`legacy_kinds`): an input the state read already is not checked
again, its next example is only noted (:data:`NOTE`: its kinds recorded, unchecked), but the
example an input holds is checked if that input counts its examples (``Node.examples_yielded``)
and says it is its first.
"""

from __future__ import annotations

import decimal
import json
from typing import Any

import numpy as np

#: a value or feature of a kind not checked (an image, a tensor, a date...)
UNCHECKED = None
_NUMBER = "number"
#: a ``first_kinds`` entry of a state of an earlier release (:func:`legacy_kinds`): the input's first
#: example was checked before the state was taken; the kinds of its next one are recorded unchecked
NOTE = ""
#: a ``first_kinds`` entry of a concatenation: the input's first example failed the check (or a Ctrl-C
#: cut it short) and is the last example the node holds (``held``): it is checked again first
HELD_FIRST = "held"


def encoded(kinds: dict) -> str:
    """``kinds`` (column -> kind) as a ``first_kinds`` entry: JSON text (a list kind as a JSON list)."""
    return json.dumps(kinds, separators=(",", ":"))


def _decoded_kind(kind: Any) -> Any:
    if isinstance(kind, list):
        return ("list", _decoded_kind(kind[1]))
    if isinstance(kind, dict):
        return {k: _decoded_kind(v) for k, v in kind.items()}
    return kind


def decoded(entry: str) -> dict:
    """The kinds of a ``first_kinds`` entry (:func:`encoded`)."""
    return {c: _decoded_kind(k) for c, k in json.loads(entry).items()}


def check_first_kinds(kinds: Any, n: int, where: str) -> None:
    """Raise ``ValueError`` unless ``kinds`` is a valid ``first_kinds`` field for ``n`` inputs."""
    def ok(entry: Any) -> bool:
        if entry is None or entry == NOTE or entry == HELD_FIRST:
            return True
        if not isinstance(entry, str):
            return False
        try:
            value = json.loads(entry)
        except ValueError:
            return False
        return isinstance(value, dict)

    if not isinstance(kinds, list) or len(kinds) != n or not all(map(ok, kinds)):
        raise ValueError(f"{where}: 'first_kinds' must be a list of {n} nulls or JSON objects (the kinds of the "
                         "columns of each input's first example)")


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

    def unchecked(self, kinds: list) -> list[bool]:
        """A pass's list of the inputs still to check (changed by :meth:`check`), from the state's
        ``first_kinds`` (see the module doc)."""
        return [f is None and (k is None or k == NOTE or k == HELD_FIRST) for f, k in zip(self.features, kinds)]

    def picked(self, inputs: list[int]) -> FirstRowCheck:
        """This check for a node whose inputs are inputs ``inputs`` of this one (the shards of a
        concatenation listed anew)."""
        return FirstRowCheck(self.what, [self.features[i] for i in inputs])

    def check(self, i: int, example: Any, kinds: list) -> None:
        """Raise ``ValueError`` if ``example``, the first input ``i`` yields in this pass, has a column
        of another kind than a known input's features or the first example of another input
        (``kinds``: the state's ``first_kinds``; ``example``'s are recorded there, in one store, if
        it passes). An input whose entry is :data:`NOTE` (a state of an earlier release) has its
        example's kinds recorded unchecked."""
        if not isinstance(example, dict):
            kinds[i] = "{}"
            return
        own = {c: value_kind(v) for c, v in example.items()}
        if kinds[i] != NOTE:
            for j, feats, known in self.known:
                for c, k in own.items():
                    if c in known:
                        found = _clash(k, known[c], c)
                        if found:
                            self._raise(i, found, f"{feats[c]} in the features of dataset {j}")
            for j, entry in enumerate(kinds):
                if j == i or not entry or entry[0] != "{":  # null, NOTE, HELD_FIRST: nothing recorded
                    continue
                other = decoded(entry)
                for c, k in own.items():
                    if c in other:
                        found = _clash(k, other[c], c)
                        if found:
                            self._raise(i, found, f"{describe_kind(found[2])} in the first example of dataset {j}")
        kinds[i] = encoded(own)

    def legacy_kinds(self, peeked: list, exhausted: list, first: list[bool]) -> list:
        """The ``first_kinds`` an interleave state of an earlier release stands for (its pass noted what it
        could not check): an input read before the state was taken (``peeked`` or ``exhausted``) is
        checked again only if the example it peeked is its first (``first``: the input counts its
        examples and says so), else that example's kinds are recorded (``{}`` when it peeked none)."""
        out: list = []
        for f, pk, ex, is_first in zip(self.features, peeked, exhausted, first):
            if f is not None or (pk is None and not ex) or (pk is not None and is_first):
                out.append(None)
            elif pk is None or not isinstance(pk, dict):
                out.append("{}")
            else:
                out.append(encoded({c: value_kind(v) for c, v in pk.items()}))
        return out

    def _raise(self, i: int, found: tuple, other: str) -> None:
        path, kind, _ = found
        raise ValueError(f"{self.what}: the columns can't be aligned: column {path!r} holds {describe_kind(kind)} in "
                         f"the first example of dataset {i} (whose features are unknown), and is {other}. HF "
                         "refuses to combine them (it infers the features first); make the column one type in every "
                         "dataset (map or cast_column), or declare the features (features=, or resolve_features())")
