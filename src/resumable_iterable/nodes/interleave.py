"""``interleave_datasets``: alternate between several inputs, in turn or at random.

Stopping strategies (as in HF ``datasets``):

* ``first_exhausted`` - stop as soon as one input is exhausted.
* ``all_exhausted`` - oversample: an exhausted input restarts from its beginning; stop once every
  input has been exhausted at least once.
* ``all_exhausted_without_replacement`` - an exhausted input is skipped from then on; stop once
  every input is exhausted, each example having been yielded exactly once.

To know that an input is exhausted right after its last example (HF's semantics), the node reads
one example ahead from the input it just used. **That peeked example belongs in the state**:
it is stored in ``peeked`` (copied shallowly, like a shuffle buffer), and the input's own state
already counts it as consumed. ``peeked`` is a :class:`~resumable_iterable.state.HeldExamples`
(one example or ``None`` per input): every state copy clears its ``owned`` flags, so a peeked
example that a state copy may share is yielded as a copy (the user's functions may edit the
yielded example in place; the state taken earlier must not change).

Column order, as HF's cast to the merged features: the rows of an input whose columns (or struct
fields) are listed in another order, or that lacks a struct field (``column_shapes``, see
``nodes/column_order.py``) are put in the merged shape as they are yielded, after the turn stored
its example in ``peeked`` and before it is recorded (a Ctrl-C landing in it leaves the turn to be
drawn again). ``peeked`` keeps examples as their input yielded them, as states of earlier
releases did.

If an input raises (a ``map`` function or a generator that failed), or a Ctrl-C lands anywhere in
a turn, a state taken after the error resumes with that very turn: the turn is recorded
(``cycle`` / ``rng_pos``) only together with what was read for it, and an example already read for
it is kept in ``peeked`` (the traced loop below does the same). An
input exhausted under ``all_exhausted`` is reset when it is drawn next, not when it ends.

State: ``{"node", "rng", "rng_pos", "cycle", "exhausted", "peeked", "peeked_pos", "last_pos", "first_kinds", "children"}``
- with ``probabilities``, input indices are drawn in blocks from ``rng`` (state at the block's
start; each epoch draws from ``(seed, epoch)``, epoch 0 from the seed alone, as HF) and ``rng_pos``
counts the ones used; without, ``cycle`` is the next input in turn.
``peeked_pos`` is only filled below a replay-mode shuffle (see ``nodes/replay.py``) or a shuffle
logging positions in a DataLoader worker (``nodes/worker_positions.py``), whose pass arms the
traced loop before it reads: where each peeked example came from (null until it is read: the
input's own state describes that example until the input is read again, and a Ctrl-C may land
between storing the example and reading its position); ``last_pos`` likewise records where the
last example yielded came from (``[input, *position]``), which a node above may still hold when a
state is taken (a ``map`` retrying it, a row of ``concatenate_datasets(axis=1)`` in progress after
an error). Elsewhere both stay null and the loop does no tracking (a pass of the plain loop clears
them, so that no stale position outlives its example). A worker shuffle logs positions below an
interleave only in a pass whose loaded state, if any, gives the position of every peeked example.
``first_kinds``: per input, null until its first example of the pass passed the check of the
inputs whose features are unknown, then the kinds of that example's columns (see
``nodes/column_types.py``; absent from states of earlier releases, rebuilt when the pass starts).
"""

from __future__ import annotations

import math
from typing import Iterator

from ..state import HeldExamples, copy_example
from .base import HELD, Node
from .checks import check_examples, check_int, check_rng
from .column_order import any_template, in_nested, in_shape, put_in_order, templates
from .column_types import FirstRowCheck, check_first_kinds
from .seeds import DrawnSeed, resolve_seed, rng_from_seed, rng_from_state, split_seed
from .replay import check_input_provenance, reread_by_input, same_example

STRATEGIES = ("first_exhausted", "all_exhausted", "all_exhausted_without_replacement")
BLOCK = 1000


class InterleaveNode(DrawnSeed, Node):
    kind = "interleave"
    added_fields = frozenset(("first_kinds",))  # ``first_kinds``: absent from states of earlier releases

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True
    #: below a replay-mode shuffle, the provenance readers of the inputs (set by
    #: :meth:`provenance_reader`); ``None`` elsewhere. Not copied by ``clone``/``shard``/pickle.
    _trace: list | None = None
    #: the check of the first rows of inputs whose features are unknown (``nodes/column_types.py``)
    first_rows: FirstRowCheck | None = None
    #: ``(rng, block)``: the block of draws a state's ``rng`` starts, as the loop (or :meth:`position`) last drew it
    _drawn: tuple | None = None

    def __init__(self, children: list[Node], probabilities: list[float] | None = None, seed: int | None = None,
                 stopping_strategy: str = "first_exhausted", column_shapes: list | None = None,
                 first_rows: FirstRowCheck | None = None):
        """``column_shapes``: per input, ``None`` or the shape (column order, struct fields) its rows
        are put in (``nodes/column_order.py``); ``first_rows``: the check of the first example of
        each input whose features are unknown (``nodes/column_types.py``). Neither is part of
        :meth:`params`, so of the fingerprint."""
        if not children:
            raise ValueError("interleave_datasets needs at least one dataset")
        if stopping_strategy not in STRATEGIES:
            raise ValueError(f"unknown stopping_strategy {stopping_strategy!r}; expected one of {STRATEGIES}")
        if probabilities is not None:
            try:
                if isinstance(probabilities, (str, bytes, dict)):
                    raise TypeError
                probabilities = [float(p) for p in probabilities]
            except (TypeError, ValueError):
                raise ValueError(f"probabilities must be a list of numbers, one per dataset, got "
                                 f"{probabilities!r:.100}") from None
            if len(probabilities) != len(children):
                raise ValueError(f"got {len(probabilities)} probabilities for {len(children)} datasets")
            if any(p < 0 or not math.isfinite(p) for p in probabilities) or not math.isclose(sum(probabilities), 1.0, rel_tol=1e-6):
                raise ValueError(f"probabilities must be non-negative and sum to 1, got {probabilities}")
            never = [i for i, p in enumerate(probabilities) if p == 0]
            if never and stopping_strategy != "first_exhausted":
                # an input never drawn is never exhausted: the interleave would never end (HF's
                # IterableDataset oversamples the others forever, or, without replacement, loops
                # without yielding); HF's map-style interleave refuses it so
                raise ValueError(f"interleave_datasets with stopping_strategy={stopping_strategy!r} cannot exhaust a "
                                 f"dataset that is never sampled: dataset(s) {never} have probability 0 (leave them "
                                 "out, or use stopping_strategy='first_exhausted')")
        self.seed_drawn = probabilities is not None and seed is None
        if self.seed_drawn:
            seed = resolve_seed(None)
        self.probabilities = probabilities
        self.seed = seed
        self.stopping_strategy = stopping_strategy
        self.epoch = 0
        self.templates = templates(column_shapes, len(children))
        self.first_rows = first_rows
        super().__init__(children)

    def params(self) -> dict:
        return {"probabilities": self.probabilities, "stopping_strategy": self.stopping_strategy}

    def drawn_seed_problem(self, by_examples: bool) -> str | None:
        return "interleave_datasets(probabilities=...) without a seed" if by_examples and self.seed_drawn else None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        super().set_epoch(epoch)

    def _rng(self):
        """The generator of this epoch's draws: ``(seed, epoch)``; epoch 0 draws from the seed alone,
        as HF's ``np.random.default_rng(seed)`` (so epoch 0 gives HF's order)."""
        return rng_from_seed(self.seed) if self.epoch == 0 else rng_from_seed(self.seed, self.epoch)

    def _own_state(self) -> dict:
        n = len(self.children)
        rng = self._rng().bit_generator.state if self.probabilities is not None else None
        return {"rng": rng, "rng_pos": 0, "cycle": 0, "exhausted": [False] * n, "peeked": HeldExamples([None] * n),
                "peeked_pos": [None] * n, "last_pos": None, "first_kinds": [None] * n}

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        # each DataLoader worker / rank draws its own sequence of inputs (HF issue 7567)
        new = super().shard(num_shards, index, contiguous)
        if self.probabilities is not None:
            new.seed = split_seed(self.seed, num_shards, index)
            new._state_dict.update(new._own_state())
        return new

    def _validate_own(self, state: dict, where: str) -> None:
        n = len(self.children)
        if self.probabilities is not None:
            check_rng(state["rng"], where)
        elif state["rng"] is not None:
            raise ValueError(f"{where}: 'rng' must be null without probabilities")
        check_int(state, "rng_pos", where, hi=BLOCK)
        check_int(state, "cycle", where, hi=n - 1)
        ex = state["exhausted"]
        if not isinstance(ex, list) or len(ex) != n or not all(type(b) is bool for b in ex):
            raise ValueError(f"{where}: 'exhausted' must be a list of {n} booleans")
        check_examples(state["peeked"], where, "peeked")
        if len(state["peeked"]) != n or not all(p is None or isinstance(p, dict) for p in state["peeked"]):
            raise ValueError(f"{where}: 'peeked' must hold {n} examples or nulls")
        pp = state["peeked_pos"]
        if not isinstance(pp, list) or len(pp) != n:
            raise ValueError(f"{where}: 'peeked_pos' must be a list of {n} positions or nulls")
        last = state["last_pos"]
        if last is not None:
            if not isinstance(last, list) or not last or type(last[0]) is not int or not 0 <= last[0] < n:
                raise ValueError(f"{where}: 'last_pos' must be null or [input, *position] with an input in [0, {n})")
            self.children[last[0]].check_provenance(last[1:], f"{where}.last_pos")
        if "first_kinds" in state:
            check_first_kinds(state["first_kinds"], n, where)
        for i, (p, pk) in enumerate(zip(pp, state["peeked"])):
            if p is not None:  # null for a peeked example: its input's state describes it (_iter_traced)
                if pk is None:
                    raise ValueError(f"{where}: 'peeked_pos' gives a position for input {i}, which has no peeked "
                                     "example")
                self.children[i].check_provenance(p, f"{where}.peeked_pos[{i}]")

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        self._state_dict["peeked"] = HeldExamples(self._state_dict["peeked"])  # not owned: the state shares them
        if "first_kinds" not in state:  # an earlier release's: rebuilt when the pass starts
            self._state_dict["first_kinds"] = None

    def __iter__(self) -> Iterator[dict]:
        held = self._state_dict.get(HELD)
        if held and self.templates is not None:  # handed back by a format above, maybe by an earlier release
            put_in_order(held, any_template(self.templates))
        return super().__iter__()

    def _iter(self) -> Iterator[dict]:
        if self._trace is not None:
            return self._iter_traced()
        return self._iter_plain()

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

    def _iter_plain(self) -> Iterator[dict]:
        """Each turn reads the input drawn and records the turn with what it read in one go: a
        Ctrl-C (``KeyboardInterrupt``, raised as the next call returns, wherever the loop is) before
        leaves the turn undrawn and an example read for it in ``peeked``. An example is received
        with a ``for`` loop (which has no check point, unlike ``next()`` returning), and from there
        to the ``yield`` nothing is called. An exhausted input that starts again
        (``all_exhausted``) is reset when it is drawn next, before anything is read for that turn
        (a reset cut short by a Ctrl-C is done again)."""
        st = self._state_dict
        kids = self.children
        exhausted, peeked = st["exhausted"], st["peeked"]
        if st["last_pos"] is not None or any(p is not None for p in st["peeked_pos"]):
            # a state of the traced loop (a DataLoader worker's): what this loop peeks goes unrecorded
            st["peeked_pos"][:] = [None] * len(kids)
            st["last_pos"] = None
        owned = peeked.owned  # cleared by every state copy: a peeked example it shares is yielded as a copy
        stop = all if self.stopping_strategy != "first_exhausted" else any
        replace = self.stopping_strategy != "all_exhausted_without_replacement"
        its = [iter(c) for c in kids]
        temps = self.templates
        unchecked, kinds = self._first_rows_to_check()
        # the turns are drawn here as in ``_draws`` (inlined: a generator's resume and a tuple a turn
        # cost), and ``stop`` is asked again only once an input was found exhausted
        n = len(kids)
        probs = self.probabilities
        if probs is not None:
            start = st["rng"]
            rng = rng_from_state(start)
            block = rng.choice(n, size=BLOCK, p=probs).tolist()
            pos = st["rng_pos"]
        else:
            cycle = st["cycle"]
        check = True
        while True:
            if probs is not None:  # the turn is drawn, not recorded
                if pos == BLOCK:  # recorded with the block's first turn
                    start = rng.bit_generator.state
                    block = rng.choice(n, size=BLOCK, p=probs).tolist()
                    pos = 0
                i = block[pos]
                after = pos + 1
            else:
                i = cycle
                after = (i + 1) % n
            if check:
                if stop(exhausted):
                    return
                check = False
            ex = peeked[i]
            if ex is None:
                if exhausted[i]:
                    if not replace:  # skipped from now on: the turn is used up
                        if probs is None:
                            st["cycle"] = cycle = after
                        else:
                            st["rng"], st["rng_pos"] = start, after
                            pos = after
                        continue
                    kids[i].reset()  # an exhausted input starts again
                    its[i] = iter(kids[i])
                for ex in its[i]:
                    break
                else:
                    ex = None
                if ex is None:  # an empty input: the turn yields nothing
                    exhausted[i] = True
                    check = True
                    if probs is None:
                        st["cycle"] = cycle = after
                    else:
                        st["rng"], st["rng_pos"] = start, after
                        pos = after
                    continue
                peeked[i] = ex  # kept while this turn reads ahead (the turn is not recorded yet)
                owned[i] = 1  # read now: no state copy has seen it
                if unchecked is not None and unchecked[i]:  # an input's first example (unknown features)
                    self.first_rows.check(i, ex, kinds)  # raises with the turn unrecorded, ex kept in peeked
                    unchecked[i] = False
            elif not owned[i]:  # a state copy may share it: yield a copy (peeked[i] keeps the original)
                ex = copy_example(ex)
            if temps is not None:  # put in the merged column order (peeked[i] keeps the input's)
                compiled = temps[i]
                if compiled is not None:
                    template, nested = compiled
                    out = template.copy()  # in_shape(compiled, ex), inlined
                    out.update(ex)
                    ex = in_nested(nested, out) if nested else out
            for nxt in its[i]:
                break
            else:
                nxt = None
            # from here to the yield nothing is called (no check point for a Ctrl-C)
            if nxt is None:
                exhausted[i] = True
                peeked[i] = None
                check = True
            else:
                peeked[i] = nxt
                owned[i] = 1
            if probs is None:
                st["cycle"] = cycle = after
            else:
                if after == 1:  # a block's first turn: the state takes the block's start with it
                    st["rng"] = start
                st["rng_pos"] = pos = after
            yield ex

    def _iter_traced(self) -> Iterator[dict]:
        """``_iter_plain`` that also records where each yielded and peeked example came from
        (only below a replay-mode shuffle, which armed this node: see ``nodes/replay.py``).

        Where an example came from is read from its input's state, a call made after the example
        was received; so, as in ``_iter_plain``, an example read is stored first and its position
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
        unchecked, kinds = self._first_rows_to_check()
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

    def _first_rows_to_check(self) -> tuple[list | None, list | None]:
        """A pass's ``(unchecked, first_kinds)`` for :class:`FirstRowCheck` (``None``: nothing to check).
        An input whose first example has not passed the check yet (``first_kinds``, see the module doc)
        is checked at its next read, or now if it holds a peeked example: the check failed on it (or
        a Ctrl-C cut its turn short), so the pass raises again as the uninterrupted run did."""
        if self.first_rows is None:
            return None, None
        st = self._state_dict
        peeked = st["peeked"]
        kinds = st.get("first_kinds")  # absent from a node pickled by an earlier release
        if kinds is None:  # a state of an earlier release
            first = [pk is not None and self.children[i].examples_yielded() == 1 for i, pk in enumerate(peeked)]
            kinds = st["first_kinds"] = self.first_rows.legacy_kinds(list(peeked), st["exhausted"], first)
        unchecked = self.first_rows.unchecked(kinds)
        for i, pk in enumerate(peeked):
            if unchecked[i] and pk is not None:  # its first example (the check failed on it)
                self.first_rows.check(i, pk, kinds)
                unchecked[i] = False
        return unchecked, kinds

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
    def describe(self) -> str:
        return f"interleave_datasets(stopping_strategy={self.stopping_strategy!r})"

    def replay_problem(self) -> str | None:
        return None

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
        out = reread_by_input(self, provs, bar)
        temps = self.templates
        if temps is not None:
            out = [ex if temps[p[0]] is None else in_shape(temps[p[0]], ex) for p, ex in zip(provs, out)]
        return out

    def row_local_problem(self) -> str | None:
        return ("an interleave node (interleave_datasets): shuffle each dataset with shuffle(buffer_size=None) "
                "before interleaving them")
