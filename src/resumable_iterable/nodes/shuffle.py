"""``shuffle(seed, buffer_size)``: shard-order shuffle plus a shuffle buffer.

At the start of each epoch the node asks the sources below it to read their shards in an order
drawn from ``(seed, epoch)``, then mixes examples with a buffer of ``buffer_size`` examples:
once full, each incoming example replaces a buffered one picked at random, which is yielded.
When the input ends, the rest of the buffer is permuted once and yielded.

State: ``{"node", "seed", "epoch", "rng", "rng_pos", "buffer", "draining", "children"}``

* ``rng`` / ``rng_pos`` - random indices are drawn in blocks; ``rng`` is the generator state at
  the start of the current block and ``rng_pos`` how many indices of it were used, so the hot
  path only increments an integer.
* ``buffer`` - what the state keeps of the buffer depends on ``buffer_state``:

  - ``"examples"`` (default, exact): the buffered examples themselves. ``state_dict()`` copies
    the list shallowly: a new list holding the same example objects (in a DataLoader worker, a
    log of the buffer's writes instead - see ``state.ExampleChunks.log``). An example a taken
    state may share is yielded as a copy, so that a consumer editing it in place cannot change
    that state. In a DataLoader worker, a pass over examples read straight from sources may log
    *positions* instead (``{"__ri__": "position", "at": [...]}`` per slot, the provenance of
    ``"replay"`` mode; see ``worker_positions.py``): such a state's buffer holds those in place of the
    examples, re-read when it is iterated. While such a pass fills and mixes its buffer, the worker's
    state describes it by arithmetic instead, ``{"__ri__": "derived", ...}`` (which inputs were read
    and where the generator stood; a load draws the same indices again to work the slots out).
  - ``"drop"`` (HF-compatible, lossy): nothing. A resumed pipeline refills the buffer from where
    the input stood, so the examples that were in the buffer are lost - as in HF ``datasets``.
  - ``"replay"`` (exact, small): where each buffered example came from - a short list of
    integers per example (see ``nodes/replay.py``) - plus ``digest``, a checksum of those
    positions. The examples themselves live beside the state; a resumed pipeline re-reads
    them from the sources before yielding anything. ``last`` is where the last example yielded
    came from (a node above may still hold it after an error: a ``map`` retrying it). ``received``
    (absent from states of earlier releases: false) - an example was received and not stored yet
    (a Ctrl-C landed in between): a resume re-reads it first, where the nodes below (which still
    describe it) say it came from.

* ``retry`` - only right above a source that decodes media (an ``Image``/``Audio`` column of an
  Arrow table or data files, :meth:`Node.deferrable_decoder`; column operations in between pass
  it through), in ``"examples"`` and ``"drop"`` modes: the
  source then yields the files, the buffer holds them (several times smaller than decoded
  images: they cross to the main process and are saved as such) and each example is decoded as
  it leaves the buffer, as HF decodes after its shuffle. The examples are the same. ``retry``
  holds the example whose decoding raised (a resume decodes it again first); empty otherwise.
  ``None`` in a state saved before this field existed: that pass decodes in the source as then,
  and a buffered example still holding files (data files were not decoded then) as it leaves.

Where an example came from (``position``, for the note of an error raised on it above): in
``"replay"`` mode, ``last``; in the others nothing is recorded per example, but each pass keeps the
generator's state at each block of draws (``Trail``, ``shuffle_trail.py``; outside the state), from which a note works
out which input the example was and asks the input where that one was read (``Node.position_back``).
"""

from __future__ import annotations

from functools import partial
from itertools import chain
from threading import get_ident
from typing import Iterator
from zlib import crc32

from ..state import (CHUNK, CHUNK_BITS, DroppedChunks, ExampleChunks, ExampleList, PositionList, copy_example,
                     is_position, journaling, position_entry)
from .base import Node, add_context
from .checks import as_int, check_bool, check_epoch, check_examples, check_int, check_rng
from .shuffle_trail import UNKNOWN_ROW, Trail
from .seeds import DrawnSeed, resolve_seed, rng_from_seed, rng_from_state, split_seed
from .replay import DIGEST_MASK, buffer_digest, replay_buffer, require_replay_support, slot_hash
from .worker_positions import buffer_entries, pass_input, reread_positions, rereadable, stop_deriving

BLOCK = 1024


def _flatten(buffer: list) -> list | None:
    """The entries of a buffer given as chunks (lists) or flat (examples and positions, which are
    dicts); ``None`` if it mixes them."""
    if all(isinstance(x, dict) for x in buffer):
        return list(buffer)
    if all(isinstance(x, list) for x in buffer):
        return [ex for ch in buffer for ex in ch]
    return None


BUFFER_STATES = ("examples", "drop", "replay")


def _note_decoding_error(e: Exception, how: str) -> None:
    add_context(e, f"in shuffle: decoding a buffered example as it left the buffer{how}; the state keeps it, so "
                   "a state taken now decodes it again first")


class ShuffleNode(DrawnSeed, Node):
    kind = "shuffle"
    added_fields = frozenset(("received",))  # ``received`` (replay mode): absent from states of earlier releases
    _trail: Trail | None = None  # the other modes: what a pass leaves for ``position`` (``Trail``)

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def __init__(self, child: Node, seed: int | None = None, buffer_size: int = 1000, buffer_state: str = "examples",
                 worker_positions: bool = True):
        buffer_size = as_int(buffer_size, "buffer_size", lo=1)
        if buffer_state not in BUFFER_STATES:
            raise ValueError(f"unknown buffer_state {buffer_state!r}; expected one of {BUFFER_STATES}")
        if type(worker_positions) is not bool:
            raise TypeError(f"worker_positions must be True or False, got {worker_positions!r}")
        # not a parameter: either way the same examples come out, and each form of state loads in both
        self.worker_positions = worker_positions
        if buffer_state == "replay":
            require_replay_support(child)
        self._live = None  # replay mode: (provenance buffer, examples, slot hashes) beside the state
        self.seed_drawn = seed is None
        seed = resolve_seed(seed)
        self.seed = seed
        self.buffer_size = buffer_size
        self.buffer_state = buffer_state
        self.epoch = 0
        super().__init__([child])
        child.expect_shuffled_shards()  # the sources below read their shards in an order set here

    def params(self) -> dict:
        return {"buffer_size": self.buffer_size, "buffer_state": self.buffer_state}

    def __getstate__(self) -> dict:
        # the trail belongs to this instance's pass: copies (clone, shard, DataLoader workers) run their own
        state = dict(self.__dict__)
        state.pop("_trail", None)
        return state

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        super().set_epoch(epoch)

    def _own_state(self) -> dict:
        buffer = DroppedChunks() if self.buffer_state == "drop" else (
            ExampleChunks() if self.buffer_state == "examples" else PositionList())
        st = {"seed": self.seed, "epoch": self.epoch,
              "rng": rng_from_seed(self.seed, self.epoch).bit_generator.state,
              "rng_pos": 0, "buffer": buffer, "draining": False}
        if self.buffer_state == "replay":
            st["digest"] = 0
            st["last"] = None  # where the last example yielded came from: a node above may still hold it
            st["received"] = False  # an example received and not stored yet (a Ctrl-C): see _iter_replay
        elif self.children[0].deferrable_decoder() is not None:
            st["retry"] = ExampleList()  # decoding deferred past the buffer (see the module doc)
        return st

    def _after_reset(self) -> None:
        self._trail = None  # it holds the buffer replaced: not kept alive until the next pass
        shard_seed = int(rng_from_seed(self.seed, self.epoch, 1).integers(2**63))
        self.children[0].shuffle_shards(shard_seed)

    def shuffle_shards(self, seed: int | None) -> None:
        pass  # this node decides the shard order of its own inputs

    def expect_shuffled_shards(self) -> None:
        pass  # already done for its inputs when this node was built

    def deals_by_epoch(self) -> bool:
        return True  # the shards are dealt among workers / ranks in an order drawn by epoch, as in HF

    def drawn_seed_problem(self, by_examples: bool) -> str | None:
        return "shuffle() without a seed" if by_examples and self.seed_drawn else None

    def examples_held_by_value(self) -> int:
        buf = self._state_dict["buffer"]
        own = self.buffer_size if type(buf) is ExampleChunks and buf.derived is None else 0
        return own + super().examples_held_by_value()

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        # each DataLoader worker / rank gets its own buffer draws and shard order (HF issue 7567)
        new = super().shard(num_shards, index, contiguous)
        new.seed = split_seed(self.seed, num_shards, index)
        new._state_dict.update(new._own_state())
        return new

    def validate(self, state, path: str = "state") -> None:
        if isinstance(state, dict) and "retry" in self._state_dict and "retry" not in state:
            state = {**state, "retry": None}  # saved before decoding was deferred (see the module doc)
        super().validate(state, path)

    def _validate_own(self, state: dict, where: str) -> None:
        if state.get("retry") is not None:
            check_examples(state["retry"], where, "retry")
            if len(state["retry"]) > 1 or not all(isinstance(ex, dict) for ex in state["retry"]):
                raise ValueError(f"{where}: 'retry' must hold at most one example (an object)")
        check_int(state, "seed", where, hi=2**64 - 1)
        check_epoch(state, where)
        check_rng(state["rng"], where)
        check_int(state, "rng_pos", where, hi=BLOCK)
        check_bool(state, "draining", where)
        buffer = state["buffer"]
        if self.buffer_state == "examples" and state["draining"] is False:
            buffer = buffer_entries(buffer, self.buffer_size, BLOCK, where)
        check_examples(buffer, where, "buffer")
        if self.buffer_state == "examples":
            # chunks of examples, or (as written before chunking) a flat list of examples
            entries = _flatten(buffer)
            if entries is None:
                raise ValueError(f"{where}: 'buffer' must be a list of examples or of chunks (lists of examples)")
            n = len(entries)
            self._validate_entries(entries, where)
        else:
            n = len(buffer)
        if n > self.buffer_size:
            raise ValueError(f"{where}: the buffer holds {n} examples, more than "
                             f"buffer_size={self.buffer_size}")
        if self.buffer_state == "replay":
            self._validate_replay(state, where)
        elif self.buffer_state == "drop" and not all(isinstance(ex, dict) for ex in state["buffer"]):
            raise ValueError(f"{where}: every buffered example must be an object")

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

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        self._trail = None  # it holds the buffer replaced: not kept alive until the next pass
        st = self._state_dict
        if self.buffer_state == "replay":
            st["buffer"] = PositionList(st["buffer"])
            st["received"] = state.get("received", False)  # absent from states of earlier releases
        else:
            cls = ExampleChunks if self.buffer_state == "examples" else DroppedChunks
            flat = _flatten(buffer_entries(st["buffer"], self.buffer_size, BLOCK, "state"))
            st["buffer"] = cls(flat[k:k + CHUNK] for k in range(0, len(flat), CHUNK))
            st["buffer"].owned[:] = b"\x01" * len(st["buffer"])  # fresh chunks
            # its examples count as shared with the loaded state (``born`` starts at -1)
        if "retry" in st:
            retry = state.get("retry")
            st["retry"] = None if retry is None else ExampleList(retry)
        self.seed, self.epoch = st["seed"], st["epoch"]

    def _iter(self) -> Iterator[dict]:
        if self.buffer_state == "replay":
            return self._iter_replay()
        if "retry" not in self._state_dict:
            return self._iter_examples()
        self.children[0].defer_decoding(self._state_dict["retry"] is not None)
        return self._iter_decoded()

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
            trail.resolve = partial(self._traced_position, trail)
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

    def position(self) -> dict | None:
        """Where the last example yielded came from, for the note of an error raised on it above
        (``shuffle(...).map(f)``). ``"replay"``: its provenance is in the state (``last``). The other modes
        record nothing of the kind per slot (their loop stays as it is): where it was read is worked
        out from the pass's draws (:meth:`_traced_position`) only if a note is written, which
        ``"resolve"`` does (``rows_read``; ``batch()`` asks this of every batch): until then the position is
        ``{"unknown": why, "resolve": ..., "at": ...}``, and ``{"unknown": why}`` when it cannot be worked out. The
        examples' rows are no run of rows (a batch above takes them in a random order): ``"shuffled"``."""
        tr = self._trail  # (none in replay mode, nor once loaded or reset)
        if tr is not None:
            # the state's generator fields say which draw yielded it, read as they are (asked of every batch)
            st = self._state_dict
            return {"unknown": UNKNOWN_ROW, "resolve": tr.resolve,
                    "at": (st["rng"], st["rng_pos"], st["draining"] and sum(map(len, st["buffer"])))}
        if self.buffer_state != "replay":
            return {"unknown": UNKNOWN_ROW}
        last = self._state_dict["last"]
        pos = None if last is None else self.children[0].position_of(last)
        if pos is not None:
            pos["shuffled"] = True  # the rows of a batch above are no run of rows (``rows_read``)
        return pos

    def _traced_position(self, tr: Trail, rng: dict, rng_pos: int, left: int | bool) -> dict | None:
        """Where the example this pass yielded (the state's generator fields then: ``rng``, ``rng_pos``;
        ``left``: the entries left in a draining buffer, else ``False``) was read: :meth:`Trail.position`,
        while ``tr`` is still this node's pass, run on its state in this thread; else ``None``."""
        st = self._state_dict
        if self._trail is not tr or st["buffer"] is not tr.buf or get_ident() != tr.thread:
            return None  # another pass runs, or runs on in another thread: its input's state is no fixed point
        return tr.position(st, self.buffer_size, self.children[0], rng, rng_pos, left)

    # -- capabilities (see ``Node``): a nested replay-mode shuffle records what it yields
    def describe(self) -> str:
        return f"shuffle(buffer_state={self.buffer_state!r})"

    def replay_problem(self) -> str | None:
        if self.buffer_state != "replay":
            return "its buffered examples are stored, not where they came from; give it buffer_state='replay' too"
        return None

    def provenance_reader(self):
        return lambda: self._state_dict["last"]

    def row_local_problem(self) -> str | None:
        return "a shuffle buffer (shuffle(buffer_size=...)): the global shuffle replaces it"
