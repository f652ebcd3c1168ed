"""Where the examples of ``interleave_datasets`` came from: the part of ``interleave.py`` that
keeps track of positions, a mixin of :class:`~.interleave.InterleaveNode`.

Two users ask an interleave where an example came from, and neither costs its plain loop
anything per example:

* a replay-mode shuffle above (``nodes/replay.py``) arms the node (:meth:`provenance_reader`)
  before it reads: the node then runs :meth:`InterleavePositions.iter_traced`, the plain loop
  (``InterleaveNode._iter_plain``) that also records where each peeked example came from
  (``peeked_pos``) and where the last one yielded did (``last_pos``), and re-reads examples by
  those provenances (``[input, *position in it]``);
* the note of an error raised above (a ``map`` on the example, a shuffle buffer of stored
  examples counting back, ``nodes/shuffle_trail.py``) asks :meth:`~InterleavePositions.position`
  or :meth:`~InterleavePositions.position_back`: the input is read from the turns the state
  recorded (``cycle``, or the draws ``rng_pos`` of the block of :data:`BLOCK` draws that ``rng``
  starts, drawn again and cached outside the state, ``_drawn``), and that input counts back.

The node's state, its loops and its shards are told in ``interleave.py``; this mixin reads and
writes the state fields told there (``peeked``, ``peeked_pos``, ``last_pos``, ``cycle``, ``rng``,
``rng_pos``) and calls the node's public :meth:`~.interleave.InterleaveNode.first_rows_to_check`.
"""

from __future__ import annotations

from typing import Iterator

from ..state import copy_example
from .base import HELD
from .column_order import in_input_shapes, in_shape
from .replay import check_input_provenance, reread_by_input, same_example
from .seeds import rng_from_state

#: the draws of an interleave with ``probabilities`` come in blocks of this many inputs
BLOCK = 1000


class InterleavePositions:
    """Provenances (replay mode) and count-back (error notes) of an interleave (see the module doc).
    Its host, the node, has ``children``, ``probabilities``, ``stopping_strategy``, ``templates``,
    ``first_rows`` and the state told in ``interleave.py``."""

    #: below a replay-mode shuffle, the provenance readers of the inputs (set by
    #: :meth:`provenance_reader`); ``None`` elsewhere. Not copied by ``clone``/``shard``/pickle.
    _trace: list | None = None
    #: ``(rng, block)``: the block of draws a state's ``rng`` starts, as the loop (or :meth:`position`) last drew it
    _drawn: tuple | None = None

    def traced(self) -> bool:
        """Whether this node tracks the provenance of its examples (armed by a replay-mode shuffle above)."""
        return self._trace is not None

    def __getstate__(self) -> dict:
        # the arming belongs to this instance's iteration: copies (clone, shard, DataLoader
        # workers) are armed by their own shuffle when it iterates
        state = dict(self.__dict__)
        state.pop("_trace", None)
        state.pop("_drawn", None)
        return state

    def _draws(self, st: dict) -> Iterator[tuple]:
        """The turns, as ``(input, rng, after)``, none of them recorded: the loop records a turn
        (``cycle = after``, or ``rng, rng_pos = rng, after``) together with what it read for it,
        so that a Ctrl-C anywhere before leaves the turn to be drawn again."""
        n = len(self.children)
        if self.probabilities is None:
            i = st["cycle"]
            while True:
                after = (i + 1) % n
                yield i, None, after
                i = after
        start = st["rng"]
        rng = rng_from_state(start)
        block = self._block(rng).tolist()
        self._drawn = (start, block)  # for position()
        pos = st["rng_pos"]
        while True:
            if pos == BLOCK:  # recorded with the block's first turn
                start = rng.bit_generator.state
                block = self._block(rng).tolist()
                self._drawn = (start, block)
                pos = 0
            i = block[pos]
            pos += 1
            yield i, start, pos

    def iter_traced(self) -> Iterator[dict]:
        """The node's plain loop (``_iter_plain`` in ``interleave.py``) that also records where each
        yielded and peeked example came from (only below a replay-mode shuffle, which armed this
        node: see ``nodes/replay.py``).

        Where an example came from is read from its input's state, a call made after the example
        was received; so, as in the plain loop, an example read is stored first and its position
        (``peeked_pos``) may stay null: the example peeked from an input is always the last one
        that input yielded, whose state still describes it, and the position is read then
        (on resume too)."""
        provs = self._trace
        st = self._state_dict
        kids = self.children
        exhausted, peeked, ppos = st["exhausted"], st["peeked"], st["peeked_pos"]
        for i, pk in enumerate(peeked):  # a resumed state: its peeked examples must match their positions
            if pk is None:
                continue
            if ppos[i] is None:
                ppos[i] = provs[i]()  # not read yet: input i still describes it
            if not same_example(kids[i].reread([ppos[i]])[0], pk):
                raise ValueError(f"cannot resume {self.describe()}: the example peeked from input {i} differs from "
                                 f"the one at its recorded position {ppos[i]} (state edited, or data changed)")
        owned = peeked.owned
        stop = all if self.stopping_strategy != "first_exhausted" else any
        replace = self.stopping_strategy != "all_exhausted_without_replacement"
        its = [iter(c) for c in kids]
        temps = self.templates
        unchecked, kinds = self.first_rows_to_check()
        for i, rng, after in self._draws(st):
            if stop(exhausted):
                return
            ex = peeked[i]
            if ex is None:
                if exhausted[i]:
                    if not replace:  # skipped from now on: the turn is used up
                        if rng is None:
                            st["cycle"] = after
                        else:
                            st["rng"], st["rng_pos"] = rng, after
                        continue
                    kids[i].reset()  # an exhausted input starts again
                    its[i] = iter(kids[i])
                for ex in its[i]:
                    break
                else:
                    ex = None
                if ex is None:  # an empty input: the turn yields nothing
                    exhausted[i] = True
                    if rng is None:
                        st["cycle"] = after
                    else:
                        st["rng"], st["rng_pos"] = rng, after
                    continue
                peeked[i] = ex  # kept while this turn reads ahead (the turn is not recorded yet)
                owned[i] = 1
                ppos[i] = None
                if unchecked is not None and unchecked[i]:
                    self.first_rows.check(i, ex, kinds)
                    unchecked[i] = False
            elif not owned[i]:
                ex = copy_example(ex)
            if temps is not None and temps[i] is not None:
                ex = in_shape(temps[i], ex)
            pos = ppos[i]
            if pos is None:
                pos = ppos[i] = provs[i]()  # input i still describes it: nothing was read after it
            for nxt in its[i]:
                break
            else:
                nxt = None
            # from here to the yield nothing is called (no check point for a Ctrl-C)
            if nxt is None:
                exhausted[i] = True
                peeked[i] = None
            else:
                peeked[i] = nxt
                owned[i] = 1
            ppos[i] = None  # read when needed: input i describes nxt until it is read again
            if rng is None:
                st["cycle"] = after
            else:
                st["rng"], st["rng_pos"] = rng, after
            st["last_pos"] = [i, *pos]
            yield ex
            if peeked[i] is not None and ppos[i] is None:
                ppos[i] = provs[i]()  # recorded for the states taken from the next step on

    def _block(self, rng):
        """The next :data:`BLOCK` inputs drawn from ``rng`` (with ``probabilities``), an array."""
        return rng.choice(len(self.children), size=BLOCK, p=self.probabilities)

    def position(self) -> dict | None:
        """Where the last example yielded came from, for the note of an error raised on it above
        (``interleave_datasets([...]).map(f)``): ``{"interleave_input": i}`` with the input's source shard
        and row where that input can count back (:meth:`Node.position_back`: one example if the turn
        peeked the input's next one, none if it found the input exhausted), else the input alone. The
        input is read from the turn the state recorded with that example (``cycle``, or the draw
        ``rng_pos`` of the block ``rng`` starts, which the loop keeps as it draws it), so the loop pays
        nothing per example for it."""
        st = self._state_dict
        n = len(self.children)
        if self.probabilities is None:
            i = (st["cycle"] - 1) % n
        else:
            if not st["rng_pos"]:  # nothing drawn from this block yet
                return None
            drawn = self._drawn
            if drawn is None or drawn[0] is not st["rng"]:  # a state loaded since (each block's start is a new object)
                drawn = self._drawn = (st["rng"], self._block(rng_from_state(st["rng"])).tolist())
            i = drawn[1][st["rng_pos"] - 1]
        # right after the turn (nothing is drawn before the next example is asked for): input i read
        # its next example since (peeked), or found itself exhausted; rows handed back: not counted
        pos = None if HELD in st else self.children[i].position_back(0 if st["peeked"][i] is None else 1)
        if pos is None:
            return {"interleave_input": i}
        pos["interleave_input"] = i
        return pos

    def position_back(self, back: int) -> dict | None:
        """Where the example yielded ``back`` before the last one was read (a shuffle buffer above asks
        it, ``nodes/shuffle_trail.py``), with ``first_exhausted`` (every turn yields an example: the
        other strategies skip or restart inputs): the last ``back + 1`` turns (the cycle, or the draws
        of the current block) tell its input and how many examples that input yielded after it; the
        input counts back that many, and one more for the example it peeked since. ``None``
        otherwise, or past the current block of draws."""
        st = self._state_dict
        if self.stopping_strategy != "first_exhausted" or HELD in st:
            return None
        n, k = len(self.children), back + 1
        if self.probabilities is None:
            turns = [(st["cycle"] - k + m) % n for m in range(k)]
        else:
            pos = st["rng_pos"]
            if k > pos:
                return None
            drawn = self._drawn
            if drawn is None or drawn[0] is not st["rng"]:
                drawn = self._drawn = (st["rng"], self._block(rng_from_state(st["rng"])).tolist())
            turns = drawn[1][pos - k:pos]
        j = turns[0]
        after = turns.count(j) - 1 + (st["peeked"][j] is not None)
        pos = self.children[j].position_back(after)
        if pos is not None:
            pos["interleave_input"] = j
        return pos

    # ------------------------------------------------------------------ capabilities (see ``Node``)
    def rereads_plainly(self) -> bool:
        # the traced loop (armed before the first read) records where what it peeks came from; a
        # loaded state holding peeked examples must say it too (the traced loop's states do)
        # (a position left null by the traced loop, whose states have ``last_pos`` once it yielded, is read
        # from the input's state, which still describes that example)
        st = self._state_dict
        return st["last_pos"] is not None or all(pk is None or pp is not None
                                                 for pk, pp in zip(st["peeked"], st["peeked_pos"]))

    def provenance_reader(self):
        """Arms the traced loop (it records what it peeks); ``last_pos`` is ``[input, *position]``."""
        self._trace = [c.provenance_reader() for c in self.children]
        return lambda: self._state_dict["last_pos"]

    def position_of(self, prov) -> dict | None:
        """``[input, *position in it]``: which input, and where in it if it can tell."""
        pos = self.children[prov[0]].position_of(prov[1:])
        if pos is None:
            return {"interleave_input": prov[0]}
        pos["interleave_input"] = prov[0]
        return pos

    def check_provenance(self, prov, where: str) -> None:
        check_input_provenance(self, prov, where)

    def reread(self, provs: list[list], bar=None) -> list[dict]:
        return in_input_shapes(self.templates, provs, reread_by_input(self, provs, bar))
