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
it is kept in ``peeked`` (the traced loop does the same). An
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
The traced loop, the re-reading by those positions and the count-back of an error's note (which
input, and where in it, an example yielded came from) are in ``nodes/interleave_positions.py``,
a mixin of the node.
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
from .column_order import any_template, in_nested, put_in_order, templates
from .column_types import FirstRowCheck, check_first_kinds
from .interleave_positions import BLOCK, InterleavePositions
from .seeds import DrawnSeed, resolve_seed, rng_from_seed, rng_from_state, split_seed

STRATEGIES = ("first_exhausted", "all_exhausted", "all_exhausted_without_replacement")


class InterleaveNode(DrawnSeed, InterleavePositions, Node):
    kind = "interleave"
    added_fields = frozenset(("first_kinds",))  # ``first_kinds``: absent from states of earlier releases

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    #: the check of the first rows of inputs whose features are unknown (``nodes/column_types.py``)
    first_rows: FirstRowCheck | None = None

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
            if p is not None:  # null for a peeked example: its input's state describes it (the traced loop)
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
        if self.traced():
            return self.iter_traced()
        return self._iter_plain()

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
        unchecked, kinds = self.first_rows_to_check()
        # the turns are drawn here as in the traced loop's ``_draws`` (``interleave_positions.py``;
        # inlined: a generator's resume and a tuple a turn cost), and ``stop`` is asked again only
        # once an input was found exhausted
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

    def first_rows_to_check(self) -> tuple[list | None, list | None]:
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

    # ------------------------------------------------------------------ capabilities (see ``Node``)
    def describe(self) -> str:
        return f"interleave_datasets(stopping_strategy={self.stopping_strategy!r})"

    def replay_problem(self) -> str | None:
        return None

    def row_local_problem(self) -> str | None:
        return ("an interleave node (interleave_datasets): shuffle each dataset with shuffle(buffer_size=None) "
                "before interleaving them")
