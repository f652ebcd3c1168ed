"""A default shuffle buffer in a DataLoader worker: examples logged as where they came from.

In a DataLoader worker, a shuffle buffer's state crosses to the main process after every batch
(``state_logs.py``). When the examples can be re-read from their positions with nothing but the
sources reading the same rows again, sending where each example came from costs a few integers
where the example costs a copy into shared memory and its bookkeeping (a 256 KB array) or its
pickling (a text row). So a pass of a default shuffle (``buffer_state="examples"``,
``worker_positions=True``) logs positions when

* every node below re-reads plainly (:meth:`Node.rereads_plainly`: no ``map``/``filter`` re-run,
  no ``interleave_datasets`` whose read-ahead must be tracked from the start) and nothing is
  decoded after the buffer (``Node.deferrable_decoder``), and
* the worker's packer would rather not copy the pass's first example (a large array, image or
  file: ``state_logs.prefers_positions``), or every source has random access
  (:func:`sources_random_access`: a resume then takes the buffered rows at once).

A slot is then logged as ``state.position_entry(provenance)`` (the provenance of ``replay.py``);
the main process holds those in the state in place of the examples, and the pipeline that
continues the state re-reads them before it yields anything (:func:`reread_positions`), in a
worker or in a process. Examples a loaded state held by value keep being logged by value. In a
process without workers the state holds the examples: nothing here runs.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator

from ..state import CHUNK, CHUNK_BITS, ExampleChunks, is_position, prefers_positions
from .base import Node, add_context
from .replay import replay_buffer

_END = object()


def rereadable(child: Node) -> bool:
    """Whether the examples ``child`` yields can be re-read from their positions with nothing but
    the sources reading the same rows again (no function of the user's re-run, nothing decoded
    after the buffer)."""
    return child.deferrable_decoder() is None and all(n.rereads_plainly() for n in child.walk())


def sources_random_access(child: Node) -> bool:
    """Whether every source below ``child`` reads rows by position without reading what comes
    before them (Arrow tables, Parquet and Arrow IPC files; not generators or text formats)."""
    for n in child.walk():
        if not n.children:
            check = getattr(n, "random_access_problem", None)
            if check is None or check() is not None:
                return False
    return True


def pass_input(child: Node, buf: ExampleChunks, reread: list | None, enabled: bool) -> tuple[Iterator, Any]:
    """The input of a shuffle pass over ``child`` and, when the pass logs positions, the function
    giving the position of the example just pulled (else ``None``); sets ``buf.positions``.
    ``enabled``: in a DataLoader worker, with positions allowed (see the module doc); ``reread``:
    the positions of the slots :func:`reread_positions` just re-read."""
    if not enabled:
        buf.positions = None
        return iter(child), None
    provenance = child.provenance_reader()
    it = iter(child)
    first = next(it, _END)
    if first is _END:
        buf.positions = reread
        return iter(()), None
    if not (prefers_positions(first) or sources_random_access(child)):
        buf.positions = None
        return itertools.chain((first,), it), None
    buf.positions = reread if reread is not None else [None] * sum(map(len, buf))
    return itertools.chain((first,), it), provenance


def reread_positions(child: Node, buf: ExampleChunks) -> list | None:
    """Re-read through ``child`` the examples a loaded state holds as positions, in place in
    ``buf``; the positions by slot (``None`` for the other slots), or ``None`` when it holds none."""
    flat = [ex for ch in buf for ex in ch]
    where = [k for k, ex in enumerate(flat) if is_position(ex)]
    if not where:
        return None
    try:
        got = replay_buffer(child, [flat[k]["at"] for k in where])
    except Exception as e:
        add_context(e, "in shuffle: re-reading the buffered examples the state holds as positions (a DataLoader "
                       "worker logs examples read straight from the sources as where they came from)")
        raise
    positions: list = [None] * len(flat)
    owned = buf.owned
    for k, ex in zip(where, got):
        c = k >> CHUNK_BITS
        if not owned[c]:  # shared with a state copy taken since the load
            buf[c] = buf[c].copy()
            owned[c] = 1
        buf[c][k & (CHUNK - 1)] = ex
        positions[k] = flat[k]
    return positions
