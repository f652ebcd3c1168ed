"""The pass of a shuffle buffer in ``"replay"`` mode (``shuffle(buffer_state="replay")``,
``nodes/shuffle.py``): the state holds where each buffered example came from (a short provenance
per slot, ``nodes/replay.py``) with ``digest``, a checksum of those positions; the examples live
beside the state (``_live``) and are re-read from the sources after a load. ``last`` is where the
last example yielded came from, ``received`` an example received and not yet stored when a Ctrl-C
landed (re-read first on resume).

A mixin of :class:`~resumable_iterable.nodes.shuffle.ShuffleNode`, which owns the parameters, the
state schema (see its module doc), validation and loading; this module iterates that state and
checks its replay fields."""

from __future__ import annotations

from itertools import chain
from typing import Iterator
from zlib import crc32

from ..state import journaling
from .checks import check_bool, check_int
from .replay import DIGEST_MASK, buffer_digest, replay_buffer, slot_hash
from .seeds import rng_from_seed, rng_from_state
from .shuffle_trail import BLOCK


class ReplayBuffer:
    """The ``"replay"`` pass of :class:`~resumable_iterable.nodes.shuffle.ShuffleNode` (a mixin:
    ``self`` is the node)."""

    def _validate_replay(self, state: dict, where: str) -> None:
        check_int(state, "digest", where, hi=2**64 - 1)
        if "received" in state:
            check_bool(state, "received", where)
            if state["received"] and state["draining"]:
                raise ValueError(f"{where}: 'received' is set while the buffer drains (nothing is received then)")
        check = self.children[0].check_provenance
        for i, prov in enumerate(state["buffer"]):
            check(prov, f"{where}.buffer[{i}]")
        if state["last"] is not None:
            check(state["last"], f"{where}.last")
        if buffer_digest(state["buffer"]) != state["digest"]:
            raise ValueError(f"{where}: the buffered positions do not match their digest: the state was edited "
                             "or damaged")

    def _live_buffer(self) -> tuple[list, list, list]:
        """The examples of a replay-mode buffer, re-read from the sources after a load."""
        buf = self._state_dict["buffer"]
        live = self._live
        if live is None or live[0] is not buf:  # loaded, reset or cloned since: re-read
            examples = replay_buffer(self.children[0], buf) if buf else []
            live = self._live = (buf, examples, [slot_hash(i, p) for i, p in enumerate(buf)])
        return live

    def _iter_replay(self) -> Iterator[dict]:
        """``_iter_examples`` keeping the examples beside the state and their positions in it.
        ``last`` (in the state) is where the last example yielded came from, since a node above
        may still hold that example when a state is taken (a map retrying it after an error).

        A Ctrl-C (``KeyboardInterrupt``, raised as the next call returns) can land between receiving
        an example and storing where it came from, which takes calls (``provenance()``, its hash):
        ``received`` is set right as the example is received (a ``for`` loop's, no check point) and
        cleared together with its store, with nothing called from there to the ``yield``. A state
        whose ``received`` is set resumes by re-reading that example first: the nodes below still
        describe it (nothing was read after it), so its provenance is read from their states."""
        st = self._state_dict
        buf, exs, hs = self._live_buffer()
        size = self.buffer_size
        record = buf.recording = journaling()  # a DataLoader worker: record writes for logs
        pending = buf.pending
        if not st["draining"]:
            provenance = self.children[0].provenance_reader()
            start = st["rng"]
            rng = rng_from_state(start)
            block = rng.integers(0, size, size=BLOCK).tolist()
            pos = st["rng_pos"]
            digest = st["digest"]
            n = len(buf)
            source = self.children[0]
            if st["received"]:  # received before a Ctrl-C, not stored: read again, placed first
                source = chain((self._reread_received(provenance),), source)
            for ex in source:
                st["received"] = True  # nothing called since it was received
                p = provenance()  # read at once: the nodes below still describe this example
                if n < size:
                    h = slot_hash(n, p)
                    new = (digest + h) & DIGEST_MASK
                    # from here to the store of ``received`` nothing is called (no check point for a Ctrl-C)
                    buf[n:] = (p,)
                    exs[n:] = (ex,)
                    hs[n:] = (h,)
                    if record:
                        pending[n] = p
                    st["digest"] = digest = new
                    st["received"] = False
                    n += 1
                    continue
                if pos == BLOCK:  # the state takes the new block's start with its first draw
                    start = rng.bit_generator.state
                    block = rng.integers(0, size, size=BLOCK).tolist()
                    pos = 0
                i = block[pos]
                out = exs[i]
                h = crc32(repr(p).encode(), i & 0xFFFFFFFF)  # = slot_hash(i, p), inlined
                new = (digest - hs[i] + h) & DIGEST_MASK
                # from here to the yield nothing is called (no check point for a Ctrl-C)
                st["last"] = buf[i]
                buf[i] = p
                if record:
                    pending[i] = p
                exs[i] = ex
                hs[i] = h
                pos += 1
                st["rng"], st["rng_pos"] = start, pos
                st["digest"] = digest = new
                st["received"] = False
                yield out
            order = rng_from_seed(st["seed"], st["epoch"], 2).permutation(len(buf)).tolist()
            moved = [buf[i] for i in order]
            moved_exs = [exs[i] for i in order]
            moved_hs = [slot_hash(i, p) for i, p in enumerate(moved)]
            digest = sum(moved_hs) & DIGEST_MASK
            buf.reordered(order)
            # the permuted buffer and the flag together (nothing called between: a Ctrl-C in
            # between would permute the buffer twice on resume)
            buf[:] = moved
            exs[:] = moved_exs
            hs[:] = moved_hs
            st["digest"] = digest
            st["draining"] = True
        while buf:
            k = len(buf) - 1
            out = exs[k]
            last = buf[k]
            digest = (st["digest"] - hs[k]) & DIGEST_MASK
            # from taking it out to the yield nothing is called (no check point for a Ctrl-C)
            del buf[k]
            del exs[k]
            del hs[k]
            st["last"] = last
            st["digest"] = digest
            yield out

    def _reread_received(self, provenance) -> dict:
        """The example a Ctrl-C left ``received`` (not stored), read again at the position the
        nodes below still describe."""
        p = provenance()
        self.children[0].check_provenance(p, "state (shuffle).received")
        return self.children[0].reread([p])[0]
