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
    the list shallowly: a new list holding the same example objects.
  - ``"drop"`` (HF-compatible, lossy): nothing. A resumed pipeline refills the buffer from where
    the input stood, so the examples that were in the buffer are lost - as in HF ``datasets``.
  - ``"replay"`` (exact, small): see ``nodes/replay.py``.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ..state import DroppedList, ExampleList
from .base import Node, check_bool, check_examples, check_int, check_rng, rng_from_seed, rng_from_state

BLOCK = 1024
BUFFER_STATES = ("examples", "drop", "replay")


class ShuffleNode(Node):
    kind = "shuffle"

    def __init__(self, child: Node, seed: int | None = None, buffer_size: int = 1000, buffer_state: str = "examples"):
        if type(buffer_size) is not int or buffer_size < 1:
            raise ValueError(f"buffer_size must be a positive integer, got {buffer_size!r}")
        if buffer_state not in BUFFER_STATES:
            raise ValueError(f"unknown buffer_state {buffer_state!r}; expected one of {BUFFER_STATES}")
        if buffer_state == "replay":
            from .replay import require_replay_support

            require_replay_support(child)
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
        if type(seed) is not int or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        self.seed = seed
        self.buffer_size = buffer_size
        self.buffer_state = buffer_state
        self.epoch = 0
        super().__init__([child])

    def params(self) -> dict:
        return {"buffer_size": self.buffer_size, "buffer_state": self.buffer_state}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        super().set_epoch(epoch)

    def _own_state(self) -> dict:
        buffer = DroppedList() if self.buffer_state == "drop" else ExampleList()
        return {"seed": self.seed, "epoch": self.epoch,
                "rng": rng_from_seed(self.seed, self.epoch).bit_generator.state,
                "rng_pos": 0, "buffer": buffer, "draining": False}

    def _after_reset(self) -> None:
        shard_seed = int(rng_from_seed(self.seed, self.epoch, 1).integers(2**63))
        self.children[0].shuffle_shards(shard_seed)

    def shuffle_shards(self, seed: int | None) -> None:
        pass  # this node decides the shard order of its own inputs

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "seed", where, hi=2**64 - 1)
        check_int(state, "epoch", where)
        check_rng(state["rng"], where)
        check_int(state, "rng_pos", where, hi=BLOCK)
        check_examples(state["buffer"], where, "buffer")
        check_bool(state, "draining", where)
        if len(state["buffer"]) > self.buffer_size:
            raise ValueError(f"{where}: the buffer holds {len(state['buffer'])} examples, more than "
                             f"buffer_size={self.buffer_size}")
        if not all(isinstance(ex, dict) for ex in state["buffer"]):
            raise ValueError(f"{where}: every buffered example must be an object")

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        st = self._state_dict
        cls = DroppedList if self.buffer_state == "drop" else ExampleList
        st["buffer"] = cls(st["buffer"])
        self.seed, self.epoch = st["seed"], st["epoch"]

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        buf = st["buffer"]
        size = self.buffer_size
        if not st["draining"]:
            rng = rng_from_state(st["rng"])
            block = rng.integers(0, size, size=BLOCK).tolist()
            pos = st["rng_pos"]
            for ex in self.children[0]:
                if len(buf) < size:
                    buf.append(ex)
                    continue
                if pos == BLOCK:
                    st["rng"] = rng.bit_generator.state
                    block = rng.integers(0, size, size=BLOCK).tolist()
                    pos = 0
                i = block[pos]
                pos += 1
                st["rng_pos"] = pos
                out = buf[i]
                buf[i] = ex
                yield out
            order = rng_from_seed(st["seed"], st["epoch"], 2).permutation(len(buf)).tolist()
            buf[:] = [buf[i] for i in order]
            st["draining"] = True
        while buf:
            yield buf.pop()

    def position(self) -> dict | None:
        return None

    def buffered(self) -> int:
        return len(self._state_dict["buffer"])
