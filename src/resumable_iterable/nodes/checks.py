"""Checks of the values a node is built with and of the fields of a state it is asked to load:
each raises ``TypeError`` / ``ValueError`` with a message naming the field and what was given."""

from __future__ import annotations

import numbers
import operator
from typing import Any

import numpy as np

from ..state import MAX_EPOCH


def _given(value: Any) -> str:
    """How an unexpected value is shown in an error message: its type and its value."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def _bound(n: int) -> str:
    """``n`` as written in a message: ``2**63 - 1`` rather than its 19 digits."""
    for k in (63, 64):
        if n == 2**k - 1:
            return f"2**{k} - 1"
    return str(n)


def _expected_int(lo: int | None, hi: int | None, none_ok: bool) -> str:
    if hi is not None:
        text = f"an integer in [{_bound(lo) if lo is not None else '-inf'}, {_bound(hi)}]"
    elif lo == 0:
        text = "a non-negative integer"
    elif lo == 1:
        text = "a positive integer"
    elif lo is not None:
        text = f"an integer >= {lo}"
    else:
        text = "an integer"
    return text + (" or None" if none_ok else "")


def as_int(value: Any, name: str, lo: int | None = 0, hi: int | None = None, none_ok: bool = False) -> int | None:
    """A user's integer argument as a plain ``int`` (so that states hold plain ints), checked to
    be in ``[lo, hi]``. Any ``numbers.Integral`` is accepted - Python ints, numpy integers -
    except ``bool``, and a one-element integer tensor or array (:func:`_index`); ``None`` only
    with ``none_ok``. Raises ``ValueError`` naming ``name``,
    what was expected and what was given (type and value)."""
    if value is None and none_ok:
        return None
    expected = _expected_int(lo, hi, none_ok)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        v = _index(value)
        if v is None:
            raise ValueError(f"{name} must be {expected}, got {_given(value)}")
    else:
        v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} must be {expected}, got {v}")
    return v


def _index(value: Any) -> int | None:
    """``value`` as an ``int`` where it is an integer only by ``__index__`` - a one-element integer
    torch tensor or 0-d numpy array (an epoch kept in a tensor to broadcast it), which HF takes as
    the integer - else ``None``: booleans (of any library), floats, strings are not integers here."""
    if isinstance(value, (bool, str, bytes)) or "bool" in str(getattr(value, "dtype", "")):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def as_epoch(epoch: Any) -> int:
    """An epoch given by a user (``set_epoch``), as a plain ``int`` in [0, 2**63 - 1]."""
    return as_int(epoch, "epoch", hi=MAX_EPOCH)


def check_int(state: dict, key: str, where: str, lo: int = 0, hi: int | None = None, none_ok: bool = False) -> None:
    """A field of a loaded state: a plain JSON integer in ``[lo, hi]`` (no numpy integers, no bools)."""
    v = state[key]
    if v is None and none_ok:
        return
    if type(v) is not int:
        what = "an integer (a plain int)" + (" or null" if none_ok else "")
        raise ValueError(f"{where}: '{key}' must be {what}, got {_given(v)}")
    if v < lo or (hi is not None and v > hi):
        bound = f"[{lo}, {_bound(hi)}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{where}: '{key}' = {v} is out of range {bound}")


def check_epoch(state: dict, where: str, key: str = "epoch") -> None:
    """An epoch field of a loaded state: a plain integer in [0, 2**63 - 1]."""
    check_int(state, key, where, hi=MAX_EPOCH)


def check_bool(state: dict, key: str, where: str) -> None:
    if type(state[key]) is not bool:
        raise ValueError(f"{where}: '{key}' must be true or false, got {state[key]!r}")


def check_rng(value: Any, where: str, key: str = "rng") -> None:
    """A numpy ``bit_generator.state`` dict that a PCG64 generator accepts."""
    if not isinstance(value, dict) or value.get("bit_generator") != "PCG64":
        raise ValueError(f"{where}: '{key}' must be a numpy PCG64 generator state")
    # checked field by field before numpy sees it: numpy's own errors for odd values vary
    # (IndexError for a numpy scalar, silent truncation for some large integers)
    inner = value.get("state")
    ok = (set(value) == {"bit_generator", "state", "has_uint32", "uinteger"} and type(inner) is dict
          and set(inner) == {"state", "inc"}
          and all(type(inner[f]) is int and 0 <= inner[f] < 2**128 for f in ("state", "inc"))
          and type(value["has_uint32"]) is int and value["has_uint32"] in (0, 1)
          and type(value["uinteger"]) is int and 0 <= value["uinteger"] < 2**32)
    if not ok:
        raise ValueError(f"{where}: '{key}' is not a valid PCG64 generator state "
                         "({'state': {'state', 'inc'}, 'has_uint32', 'uinteger'} with integers in range)")
    try:
        np.random.Generator(np.random.PCG64()).bit_generator.state = value
    except (TypeError, ValueError, KeyError, OverflowError, IndexError) as e:
        raise ValueError(f"{where}: '{key}' is not a valid generator state: {e}") from None


def check_examples(value: Any, where: str, key: str) -> None:
    if not isinstance(value, list):
        raise ValueError(f"{where}: '{key}' must be a list of examples, got {type(value).__name__}")


def check_names(state: dict, names: str, where: str) -> None:
    """Refuse a state whose ``files`` (a ``files.names_digest``, absent from states of earlier
    releases) is not ``names``: its positions count rows or files of other files."""
    if "files" in state and state["files"] != names:
        raise ValueError(f"{where}: the data files are not those the state was saved with (other names, or "
                         f"another order, or another save_to_disk folder's: 'files' is {state['files']!r} in the state, "
                         f"{names!r} here); resuming "
                         "would read other rows than the saved run. Pass the same files in the same order "
                         "(load_dataset and folders sort them by path)")
