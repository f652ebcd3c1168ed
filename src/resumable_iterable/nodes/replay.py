"""Replay mode of the shuffle buffer (``shuffle(..., buffer_state="replay")``): the generic part.

Instead of the buffered examples, the state keeps *where each of them came from* - its
**provenance**, a short list of integers - and a resumed pipeline re-reads the rows from the
sources and re-derives the examples through the nodes between the sources and the shuffle.

Each node kind describes and re-reads its own examples through the capability methods of
:class:`~.base.Node` (``replay_problem``, ``provenance_reader``, ``check_provenance``,
``reread``), overridden in its own module (for ``interleave`` and ``concat``, in the mixin next
to it: ``interleave_positions.py``, ``concat_positions.py``); this module holds what is common to
all of them - the support check, the integrity digest, the shared helpers for nodes with several
inputs, the progress bar of a re-read - and imports no node module.

Provenance encoding. Each node on the way from the source to the shuffle puts its own integers
in front of its child's list, so the list is read from the outside in:

==========================================  ===============================================
node                                        provenance of an example it yields
==========================================  ===============================================
source (arrow, files, generator)            ``[shard_id, row]`` - row within that shard
``map`` / ``filter`` with ``with_indices``  ``[index, *child]`` - the index the function got
``interleave_datasets``                     ``[input, *child]``
``concatenate_datasets(axis=0)``            ``[input, *child]``
``concatenate_datasets(axis=1)``            ``[child_0, child_1, ...]`` - one provenance per
                                            input; for an exhausted input ``[-1]`` (its
                                            columns are filled with None) or ``[]`` (it was
                                            exhausted before yielding anything: no columns)
per-example ``map``/``filter``, columns,    the child's, unchanged
``skip``, ``take``, ``repeat``, a nested
replay-mode ``shuffle``
==========================================  ===============================================

How a provenance is captured: right after the shuffle pulls an example, every node below it
still describes, in its state, the last example it yielded (a source's ``offset`` is one past
that row, a ``map``'s ``index`` one past its index), so most provenances are read from the
states. The two nodes that read ahead keep track themselves, only when a replay-mode shuffle
asks (``provenance_reader`` arms them; other pipelines pay nothing):

* ``interleave_datasets`` peeks one example ahead per input, so it keeps the provenance of the
  peeked example in its state (``peeked_pos``; null until read: the input's state describes that
  example until the input is read again);
* a nested replay-mode shuffle yields from its buffer, whose provenances it holds.

Re-reading (:func:`replay_buffer`, then each node's ``reread``) groups rows by source and shard
and reads each group with one ``read_rows`` call (an Arrow ``take`` for tables and files; a
generator shard is re-run up to its last needed row), then applies the nodes above in a batch per
node. Per-example nodes re-run their function on the replayed input with the original index; a
``filter`` re-checks its predicate, so a non-deterministic predicate or data that changed is
reported instead of silently yielding a row the filter had rejected.

What cannot be replayed is refused when ``shuffle()`` is called (:func:`require_replay_support`
asks every node below for its ``replay_problem``): batched ``map``/``filter`` (a batch's output
rows depend on the whole batch), ``batch``, ``pack``, ``prefetch``, the global shuffle, a
``shuffle`` that stores its buffer (``"examples"``/``"drop"``) below the replay-mode one, and
sources without random access.

Integrity: the state of a replay buffer carries a digest of its provenances (the sum of a CRC
per slot), checked on load, so an edited position is rejected instead of re-reading another row.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from ..progress import progress
from ..state_images import pil_image_class
from .base import Node

#: provenance integers are below this (they index rows and inputs)
MAX_INT = 2**63 - 1
DIGEST_MASK = 2**64 - 1

# ---------------------------------------------------------------------------- support check


def require_replay_support(child: Node) -> None:
    """Raise ``ValueError`` naming the first node under ``child`` whose examples cannot be replayed."""
    _support(child, "shuffle/" + child.kind)


def _support(node: Node, path: str) -> None:
    why = node.replay_problem()
    if why is not None:
        raise ValueError(
            f"shuffle(buffer_state='replay') cannot re-read its buffer through {node.describe()} at {path}: {why}. "
            "Use buffer_state='examples' (stores the examples, exact) or shuffle before this step of the pipeline."
        )
    kids = node.children
    for i, c in enumerate(kids):
        _support(c, f"{path}[{i}]/{c.kind}" if len(kids) > 1 else f"{path}/{c.kind}")


# ---------------------------------------------------------------------------- digest


def slot_hash(slot: int, prov: list) -> int:
    """A 32-bit checksum of one buffer slot (its index and provenance)."""
    return zlib.crc32(repr(prov).encode(), slot & 0xFFFFFFFF)


def buffer_digest(buffer: list) -> int:
    return sum(slot_hash(i, p) for i, p in enumerate(buffer)) & DIGEST_MASK


# ---------------------------------------------------------------------------- helpers for the nodes


def check_list(prov: Any, where: str) -> None:
    """Every provenance is a list (of integers, or of lists for ``concatenate(axis=1)``)."""
    if type(prov) is not list:
        raise ValueError(f"{where}: a position must be a list of integers, got {type(prov).__name__}")


def check_input_provenance(node: Node, prov: Any, where: str) -> None:
    """Check a provenance ``[input, *position in that input]`` (``interleave``, ``concatenate(axis=0)``)."""
    check_list(prov, where)
    n = len(node.children)
    if not prov or type(prov[0]) is not int or not 0 <= prov[0] < n:
        raise ValueError(f"{where}: a {node.kind} position starts with an input index in [0, {n}), got {prov!r}")
    node.children[prov[0]].check_provenance(prov[1:], f"{where}/{node.kind}[{prov[0]}]")


def reread_by_input(node: Node, provs: list[list], bar: Any) -> list[Any]:
    """Re-read examples at provenances ``[input, *position]``: one batch per input, in order."""
    out: list = [None] * len(provs)
    groups: dict[int, list[int]] = {}
    for j, p in enumerate(provs):
        groups.setdefault(p[0], []).append(j)
    kids = node.children
    for i, js in groups.items():
        for j, ex in zip(js, kids[i].reread([provs[j][1:] for j in js], bar)):
            out[j] = ex
    return out


# ---------------------------------------------------------------------------- re-reading


def replay_buffer(child: Node, buffer: list[list]) -> list[dict]:
    """Re-read every example of a replay-mode shuffle buffer (with a progress bar when large)."""
    with progress(len(buffer), "re-reading the shuffle buffer") as bar:
        return child.reread(list(buffer), bar)


# ---------------------------------------------------------------------------- comparing


def same_example(a: Any, b: Any) -> bool:
    """Equality of examples that treats NaN as equal to itself and compares numpy arrays and PIL
    images by value (an image read back from a saved state is a ``PngImageFile``, which PIL's
    ``==`` tells from the ``Image`` it was)."""
    image = pil_image_class()
    if image is not None and isinstance(a, image) and isinstance(b, image):
        return (a.mode, a.size, a.getpalette()) == (b.mode, b.size, b.getpalette()) and a.tobytes() == b.tobytes()
    if type(a) is not type(b):
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):  # a plain JSON round trip makes lists
            return len(a) == len(b) and all(same_example(x, y) for x, y in zip(a, b))
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
            return a == b
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_example(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_example(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare are different
        return False
