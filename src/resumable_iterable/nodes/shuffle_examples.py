"""The pass of a shuffle buffer of stored examples (``shuffle(buffer_state="examples" | "drop")``,
``nodes/shuffle.py``): the hot loop that fills the buffer, then yields the example at each drawn
index as an input replaces it, then drains it in one permutation; the same loop with media decoding
deferred past the buffer (``retry``); and what that buffer's entries may be when a state is loaded
(examples, or in DataLoader workers the positions ``worker_positions.py`` logs in their place).

A mixin of :class:`~resumable_iterable.nodes.shuffle.ShuffleNode`, which owns the parameters, the
state schema (see its module doc), validation and loading; this module iterates that state and
checks the entries of a loaded buffer.
Example ``i`` of the buffer is ``buf[i >> CHUNK_BITS][i & (CHUNK - 1)]`` (``state.ExampleChunks``);
random indices are drawn in blocks of :data:`BLOCK` (``shuffle_trail.py``)."""

from __future__ import annotations

from typing import Iterator

from ..state import CHUNK, CHUNK_BITS, ExampleList, copy_example, is_position, journaling, position_entry
from .base import add_context
from .seeds import rng_from_seed, rng_from_state
from .shuffle_trail import BLOCK, Resolve, Trail
from .worker_positions import pass_input, reread_positions, rereadable, stop_deriving


def flat_entries(buffer: list) -> list | None:
    """The entries of a buffer given as chunks (lists) or flat (examples and positions, which are
    dicts); ``None`` if it mixes them."""
    if all(isinstance(x, dict) for x in buffer):
        return list(buffer)
    if all(isinstance(x, list) for x in buffer):
        return [ex for ch in buffer for ex in ch]
    return None


def _note_decoding_error(e: Exception, how: str) -> None:
    add_context(e, f"in shuffle: decoding a buffered example as it left the buffer{how}; the state keeps it, so "
                   "a state taken now decodes it again first")


class ExampleBuffer:
    """The ``"examples"`` / ``"drop"`` pass of :class:`~resumable_iterable.nodes.shuffle.ShuffleNode`
    (a mixin: ``self`` is the node)."""

    def _validate_entries(self, entries: list, where: str) -> None:
        """Buffered examples (objects) and, where this pipeline can re-read them, positions."""
        check = self.children[0].check_provenance
        can_reread = None
        for k, ex in enumerate(entries):
            if is_position(ex):
                if can_reread is None:
                    can_reread = self._rereadable()
                if not can_reread:
                    raise ValueError(f"{where}: buffer entry {k} is a position, but this pipeline cannot re-read its "
                                     "examples from their positions (only examples can be loaded here)")
                check(ex["at"], f"{where}.buffer[{k}].at")
            elif not isinstance(ex, dict):
                raise ValueError(f"{where}: every buffered example must be an object")

    def _iter_decoded(self) -> Iterator[dict]:
        """``_iter_examples`` over undecoded examples, each decoded as it leaves the buffer. If
        decoding raises (or a Ctrl-C lands in it), the example stays in ``retry``: a state taken then
        decodes it again first. The decoder leaves decoded examples as they are: after loading a state
        saved before decoding was deferred (``retry`` ``None``), the source decodes and the buffer may
        hold both kinds."""
        st = self._state_dict
        decode = self.children[0].deferrable_decoder()
        if st["retry"]:
            empty = ExampleList()
            try:
                out = decode(copy_example(st["retry"][0]))  # a state copy may share the stored one
            except BaseException as e:
                _note_decoding_error(e, " (retried from the state)")
                raise
            st["retry"] = empty
            yield out
        for ex in self._iter_examples():
            try:
                out = decode(ex)
            except BaseException as e:
                st["retry"] = ExampleList([ex])
                _note_decoding_error(e, "")
                raise
            yield out

    def _iter_examples(self) -> Iterator[dict]:
        """The buffer of examples (``"examples"`` and ``"drop"``), held in chunks: example ``i`` is
        ``buf[i >> CHUNK_BITS][i & mask]``; a chunk shared with a state copy is copied before it is
        written (see ``ExampleChunks``). Once full, each incoming example replaces the one at a
        random index, which is yielded; when the input ends, the rest is permuted once and popped.
        An example that entered before the last state copy may be shared with that state: it is
        yielded as a copy (``copy_example``), so that editing it in place cannot change the state.

        A Ctrl-C (``KeyboardInterrupt``) is raised as the next call returns, wherever the loop is: so
        the loop prepares each step before it reads (the draw, the chunk to write, the copy of the
        example leaving) and calls nothing between receiving an example (a ``for`` loop's, which has
        no check point) and storing it, nor between storing it and yielding the one it replaces.

        In a DataLoader worker, a pass may log its examples as positions (``worker_positions.py``):
        ``positions`` then holds each slot's position and the logs record those."""
        st = self._state_dict
        buf = st["buffer"]
        owned = buf.owned
        born = buf.start()
        record = buf.recording = journaling()  # a DataLoader worker: record writes for logs
        pending = buf.pending
        size = self.buffer_size
        mask = CHUNK - 1
        reread = reread_positions(self.children[0], buf)
        if not st["draining"]:
            start = st["rng"]
            rng = rng_from_state(start)
            block = rng.integers(0, size, size=BLOCK).tolist()
            pos = st["rng_pos"]
            n = len(born)
            trail = self._trail = Trail(buf, n, start, pos, size, BLOCK)  # for ``position`` (nothing per example)
            trail.resolve = Resolve(self._traced_position, trail)  # weakly: no cycle (see Resolve)
            source, provenance = pass_input(self.children[0], buf, reread, record and self._logs_positions(),
                                            (st["rng"], pos, size, BLOCK))
            source = iter(source)
            positions = buf.positions
            drv = buf.derived
            if drv is not None:
                record = buf.recording = False  # no log to take while the buffer is derived
            w = None
            while n < size:  # the buffer fills
                # prepare the step (calls allowed: nothing is held yet)
                tail = buf[-1] if buf and len(buf[-1]) < CHUNK else None  # the chunk to append to
                if tail is not None and not owned[-1]:
                    tail = buf[-1] = tail.copy()
                    owned[-1] = 1
                for ex in source:
                    break
                else:
                    break  # the input ended
                if provenance is not None:  # a DataLoader worker's pass (it takes no Ctrl-C)
                    p = provenance()  # read at once: the nodes below still describe this example
                    if drv is not None:
                        if drv.inputs >= drv.limit:
                            drv.rebase(st["rng"], st["rng_pos"])
                        if drv.add(p):
                            p = None  # counted: nothing to log for its slot
                        else:  # not a position that runs on: log the slots from now on
                            positions, record = stop_deriving(buf), True
                            drv = None
                    w = None if p is None else position_entry(p)  # unknown: logged by value
                if tail is not None:
                    tail.append(ex)  # stored: a Ctrl-C as append returns loses nothing
                else:
                    buf.append([ex])
                    owned.append(1)
                if record:
                    pending[n] = ex if w is None else w
                if positions is not None:
                    positions.append(w)
                born.append(buf.gen)
                n += 1
            trail.filled = n - trail.n0
            if n >= size:  # the buffer mixes (never more than full: validated)
                # the step is prepared before the read (calls allowed: nothing is held yet), here for
                # the first step and at the end of the loop for the next: a ``for`` loop reads faster
                if pos == BLOCK:  # the state takes the new block's start with its first draw
                    start = rng.bit_generator.state
                    trail.add(start)
                    block = rng.integers(0, size, size=BLOCK).tolist()
                    pos = 0
                i = block[pos]
                c = i >> CHUNK_BITS
                ch = buf[c]
                if not owned[c]:
                    ch = buf[c] = ch.copy()
                    owned[c] = 1
                j = i & mask
                out = ch[j]
                gen = buf.gen
                if born[i] != gen:
                    out = copy_example(out)
                logged = record or provenance is not None  # a DataLoader worker (it takes no Ctrl-C)
                for ex in source:
                    if logged:
                        if provenance is not None:
                            p = provenance()  # read at once: the nodes below still describe this example
                            if drv is not None:
                                if drv.inputs >= drv.limit:
                                    drv.rebase(st["rng"], st["rng_pos"])
                                if drv.add(p):
                                    p = None  # counted: nothing to log for its slot
                                else:  # not a position that runs on: log the slots from now on
                                    positions, record = stop_deriving(buf), True
                                    drv = None
                            w = None if p is None else position_entry(p)  # unknown: logged by value
                        # from the first store to the yield nothing is called (no check point for a Ctrl-C)
                        if record:
                            pending[i] = ex if w is None else w
                        if positions is not None:
                            positions[i] = w
                    ch[j] = ex
                    pos += 1
                    if pos == 1:  # the first draw of a block: the state takes the block's start with it
                        st["rng"] = start
                    st["rng_pos"] = pos
                    born[i] = gen
                    yield out
                    # prepare the next step, as above
                    if pos == BLOCK:
                        start = rng.bit_generator.state
                        trail.add(start)
                        block = rng.integers(0, size, size=BLOCK).tolist()
                        pos = 0
                    i = block[pos]
                    c = i >> CHUNK_BITS
                    ch = buf[c]
                    if not owned[c]:
                        ch = buf[c] = ch.copy()
                        owned[c] = 1
                    j = i & mask
                    out = ch[j]
                    gen = buf.gen
                    if born[i] != gen:
                        out = copy_example(out)
            if drv is not None:  # the buffer drains: its slots are logged from now on
                positions = stop_deriving(buf)
            flat = [ex for ch in buf for ex in ch]
            order = rng_from_seed(st["seed"], st["epoch"], 2).permutation(len(flat)).tolist()
            trail.steps = trail.steps_at(st["rng"], st["rng_pos"])
            trail.drain_len, trail.order = len(flat), order
            flat = [flat[i] for i in order]
            chunks = [flat[k:k + CHUNK] for k in range(0, len(flat), CHUNK)]
            moved = None if positions is None else [positions[i] for i in order]
            born[:] = [born[i] for i in order]
            buf.reordered(order)
            # the permuted buffer and the flag together (nothing called between: a Ctrl-C in
            # between would permute the buffer twice on resume)
            buf[:] = chunks
            st["draining"] = True
            if moved is not None:
                positions[:] = moved
            owned[:] = b"\x01" * len(buf)
        else:
            buf.positions = reread if record and self._logs_positions() else None
        positions = buf.positions
        while buf:
            k = len(buf) - 1
            ch = buf[k]
            if not owned[k]:
                ch = buf[k] = ch.copy()
                owned[k] = 1
            ex = ch[-1]
            if born[-1] != buf.gen:
                ex = copy_example(ex)
            # from taking it out to the yield nothing is called (no check point for a Ctrl-C)
            del ch[-1]
            if not ch:
                del buf[-1]
                del owned[-1]
            if positions is not None:
                del positions[-1]
            del born[-1]
            yield ex

    # -- examples logged as positions in DataLoader workers (see ``worker_positions.py``)
    def _rereadable(self) -> bool:
        return self.buffer_state == "examples" and rereadable(self.children[0])

    def _logs_positions(self) -> bool:
        return self.worker_positions and self._rereadable()
