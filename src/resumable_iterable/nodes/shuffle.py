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

This module is the node: its parameters, state, validation, loading, shards and capabilities. Its
passes are mixins, one per kind of buffer: ``shuffle_examples.py`` the hot loop over stored
examples (``"examples"``, ``"drop"``, with decoding deferred past the buffer), ``shuffle_replay.py``
the ``"replay"`` loop over positions.
"""

from __future__ import annotations

from threading import get_ident
from typing import Iterator

from ..state import CHUNK, DroppedChunks, ExampleChunks, ExampleList, PositionList
from .base import Node
from .checks import as_int, check_bool, check_epoch, check_examples, check_int, check_rng
from .replay import require_replay_support
from .seeds import DrawnSeed, resolve_seed, rng_from_seed, split_seed
from .shuffle_examples import ExampleBuffer, flat_entries
from .shuffle_replay import ReplayBuffer
from .shuffle_trail import BLOCK, UNKNOWN_ROW, Trail
from .worker_positions import buffer_entries

__all__ = ["BLOCK", "BUFFER_STATES", "ShuffleNode"]  # BLOCK: defined in shuffle_trail.py, also here


BUFFER_STATES = ("examples", "drop", "replay")


class ShuffleNode(ExampleBuffer, ReplayBuffer, DrawnSeed, Node):
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
            st["received"] = False  # an example received and not stored yet (a Ctrl-C): see shuffle_replay.py
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
            entries = flat_entries(buffer)
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

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        self._trail = None  # it holds the buffer replaced: not kept alive until the next pass
        st = self._state_dict
        if self.buffer_state == "replay":
            st["buffer"] = PositionList(st["buffer"])
            st["received"] = state.get("received", False)  # absent from states of earlier releases
        else:
            cls = ExampleChunks if self.buffer_state == "examples" else DroppedChunks
            flat = flat_entries(buffer_entries(st["buffer"], self.buffer_size, BLOCK, "state"))
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

    def position_back(self, back: int) -> dict | None:
        """Worked out from this pass's draws (a shuffle above asks it): :meth:`_traced_position`."""
        tr, st = self._trail, self._state_dict
        return None if tr is None else self._traced_position(
            tr, st["rng"], st["rng_pos"], st["draining"] and sum(map(len, st["buffer"])), back)

    def _traced_position(self, tr: Trail, rng: dict, rng_pos: int, left: int | bool, back: int = 0) -> dict | None:
        """Where the example this pass yielded (the state's generator fields then: ``rng``, ``rng_pos``;
        ``left``: the entries left in a draining buffer, else ``False``) was read: :meth:`Trail.position`,
        while ``tr`` is still this node's pass, run on its state in this thread; else ``None``."""
        st = self._state_dict
        if self._trail is not tr or st["buffer"] is not tr.buf or get_ident() != tr.thread:
            return None  # another pass runs, or runs on in another thread: its input's state is no fixed point
        return tr.position(st, self.buffer_size, self.children[0], rng, rng_pos, left, back)

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
