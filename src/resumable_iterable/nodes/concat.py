"""``concatenate_datasets``: one input after another (``axis=0``) or side by side (``axis=1``).

* ``axis=0`` - state ``{"node", "shard_seed", "index", "first_kinds", "children"}``: ``index`` is the position,
  in the input order, of the input being read; the inputs before it are finished, the ones after
  untouched. ``shard_seed`` is ``None`` (the inputs in the order given) or the seed a ``shuffle``
  above chose for this epoch: the inputs are then read in a permutation drawn from it
  (recomputed from the seed, never stored), and each input gets its own seed derived from it
  for its own shards. HF shuffles the shards of all inputs together; here the inputs are
  permuted, then the shards within each. ``first_kinds``: per input, null until its first example
  of the pass passed the check of the inputs whose features are unknown, then the kinds of that
  example's columns (``nodes/column_types.py``); ``"held"`` while the example that failed the check
  is held (the last one of ``held``), to be checked again first. Absent from states of earlier
  releases: rebuilt when the pass starts (:meth:`ConcatNode._first_kinds`).

  Column order, as HF's cast to the merged features: an input whose rows list the merged columns
  (or the fields of a struct) in another order, or lack a struct field (``column_shapes``, see
  ``nodes/column_order.py``) has each row put in the merged shape as it is yielded; the other
  inputs are read with ``yield from`` as before. A Ctrl-C landing while a row is put in shape
  hands that row back to this node (``held``, as :meth:`Node.hold`: the input's state already
  counts it), so a state taken then yields it first; held rows are put in shape as they are
  yielded again.

  Shards, as in HF: the concatenation has the shards of all its inputs (their sum), so
  DataLoader workers and ranks split a concatenation of single-shard datasets among them. A
  part (:meth:`ConcatNode.shard`) is a concatenation of one-shard copies of the inputs: the
  shards of the group, in the order of the inputs. Dealt by epoch (:meth:`ConcatNode.dealt_shards`,
  under a shuffle), the shards of all inputs are listed in one drawn order first, as HF's.
* ``axis=1`` - each output row merges the next row of every input (column names must not
  clash). As in HF, it goes on until every input is exhausted; the columns of an exhausted
  input are then ``None``. State ``{"node", "exhausted", "columns", "pending", "children"}`` -
  the columns seen from each input, so a resumed run fills the same ``None`` columns, and
  ``pending``: empty between yields; when an input raised (or a Ctrl-C landed) part-way through
  a row, the parts of that row already read, which the exception put there on its way out (so a
  state taken then completes it; a state is never taken in the middle of a row otherwise).
  As in HF, a ``shuffle`` above does not reorder the inputs' shards, and the node counts as a
  single shard (DataLoader workers and ranks do not split its inputs by shard): either would
  pair rows of different positions unless every input had the very same shard sizes.

Where an example came from (the provenances a replay-mode shuffle records and re-reads by, the
count-back of an error's note): ``nodes/concat_positions.py``, a mixin of the node.
"""

from __future__ import annotations

import copy
import functools
from typing import Iterator

from ..state import ExampleList, copy_example
from .base import HELD, Node
from .checks import check_examples, check_int
from .column_order import any_template, in_nested, in_shape, put_in_order, templates
from .column_types import HELD_FIRST, NOTE, FirstRowCheck, check_first_kinds
from .concat_positions import ConcatPositions
from .seeds import rng_from_seed


@functools.lru_cache(maxsize=64)
def input_order(n: int, seed: int | None) -> tuple[int, ...]:
    """The order in which ``n`` concatenated inputs are read for shard seed ``seed``."""
    if seed is None or n < 2:
        return tuple(range(n))
    return tuple(int(i) for i in rng_from_seed(seed, 0xC07CA7).permutation(n))


def input_seed(seed: int, i: int) -> int:
    """The shard seed handed to input ``i`` of a concatenation shuffled with ``seed``."""
    return int(rng_from_seed(seed, 0xC07CA7, i + 1).integers(2**63))


def _with_seed(state):
    """An ``axis=0`` state written before the input order existed (no ``shard_seed``): its run read
    the inputs in the order given, which ``shard_seed = None`` continues."""
    if isinstance(state, dict) and "index" in state and "shard_seed" not in state:
        return {**state, "shard_seed": None}
    return state


class ConcatNode(ConcatPositions, Node):
    kind = "concat"
    added_fields = frozenset(("first_kinds",))  # ``first_kinds`` (axis=0): absent from states of earlier releases

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    #: (``axis=0``) the check of the first rows of inputs whose features are unknown (``nodes/column_types.py``)
    first_rows: FirstRowCheck | None = None

    def __init__(self, children: list[Node], axis: int = 0, column_shapes: list | None = None,
                 first_rows: FirstRowCheck | None = None):
        """``column_shapes`` (``axis=0``): per input, ``None`` or the shape (column order, struct fields)
        its rows are put in (``nodes/column_order.py``); ``first_rows`` (``axis=0``): the check of the
        first example of each input whose features are unknown (``nodes/column_types.py``). Neither
        is part of :meth:`params`, so of the fingerprint."""
        if not children:
            raise ValueError("concatenate_datasets needs at least one dataset")
        if axis not in (0, 1):
            raise ValueError(f"axis must be 0 or 1, got {axis!r}")
        self.axis = axis
        self.templates = templates(column_shapes, len(children)) if axis == 0 else None
        self.first_rows = first_rows if axis == 0 else None
        super().__init__(children)

    def params(self) -> dict:
        return {"axis": self.axis}

    def _own_state(self) -> dict:
        if self.axis == 0:
            return {"shard_seed": None, "index": 0, "first_kinds": [None] * len(self.children)}
        n = len(self.children)
        return {"exhausted": [False] * n, "columns": [None] * n, "pending": ExampleList([None] * n)}

    def reset(self) -> None:
        # the input order is configuration set by an ancestor shuffle: a reset (e.g. by `repeat`) keeps it
        seed = self._state_dict.get("shard_seed")
        super().reset()
        if self.axis == 0:
            self._state_dict["shard_seed"] = seed

    def shuffle_shards(self, seed: int | None) -> None:
        if self.axis == 1:
            return  # keeps the inputs aligned row by row (see the module doc)
        self._state_dict["shard_seed"] = seed
        for i, c in enumerate(self.children):
            c.shuffle_shards(None if seed is None else input_seed(seed, i))

    def dealt_shards(self, seed: int) -> Node:
        """The shards of all inputs listed in one order drawn from ``seed``, as HF deals them: a
        concatenation of one-shard copies of the inputs (the same examples), so that a worker or rank
        gets shards of other inputs every epoch, also when every input has a single shard."""
        if self.axis == 1:
            return self.clone()  # keeps the inputs aligned row by row
        pieces = self._pieces()
        return self._of_pieces([pieces[j] for j in rng_from_seed(seed, 0xC07CA7).permutation(len(pieces))])

    def resharded(self) -> Node:
        if self.axis == 1:
            return self.clone()  # keeps the inputs aligned row by row, as HF's
        return super().resharded()

    def _pieces(self) -> list[tuple[int, Node, int]]:
        """Every shard of the inputs, as ``(input position, input, shard position)``, one input after another."""
        return [(i, c, k) for i, c in enumerate(self.children) for k in range(c.num_shards)]

    def _of_pieces(self, pieces) -> Node:
        """A concatenation of one-shard copies of the inputs: ``pieces``, in that order (each put in its
        input's column order)."""
        new = copy.copy(self)
        new.forget_fingerprint()
        new.children = [c.shard(c.num_shards, k, contiguous=False) for _, c, k in pieces]
        if self.templates is not None:
            new.templates = [self.templates[i] for i, _, _ in pieces]
            if all(t is None for t in new.templates):
                new.templates = None
        if self.first_rows is not None:
            new.first_rows = self.first_rows.picked([i for i, _, _ in pieces])
        new._state_dict = new._fresh_state()
        return new

    def expect_shuffled_shards(self) -> None:
        if self.axis == 0:  # axis=1 does not pass the shard order on (shuffle_shards above)
            super().expect_shuffled_shards()

    @property
    def num_shards(self) -> int:
        # axis=1 is one shard, as in HF: splitting its inputs by shard among DataLoader workers or
        # ranks would pair rows of different positions unless every input had the same shard sizes
        return 1 if self.axis == 1 else sum(c.num_shards for c in self.children)

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        """Shard group ``index`` of ``num_shards`` of the inputs' shards listed one input after
        another (contiguous groups, or every ``num_shards``-th shard): a concatenation of one-shard
        copies of the inputs, as HF's."""
        if self.axis == 1:
            return super().shard(num_shards, index, contiguous)
        pieces = self._pieces()
        total = len(pieces)
        if not (type(num_shards) is int and 1 <= num_shards <= total and type(index) is int and 0 <= index < num_shards):
            raise ValueError(f"cannot take shard group {index!r} of {num_shards!r} from a concatenation of {total} shard(s)")
        if contiguous:
            div, mod = divmod(total, num_shards)
            start = div * index + min(index, mod)
            chosen = range(start, start + div + (1 if index < mod else 0))
        else:
            chosen = range(index, total, num_shards)
        return self._of_pieces([pieces[j] for j in chosen])

    def order(self) -> tuple[int, ...]:
        """The inputs (``axis=0``) in the order this pass reads them."""
        return input_order(len(self.children), self._state_dict["shard_seed"])

    def current_input(self) -> int:
        """The input being read (``axis=0``): the one at position ``index`` of :meth:`order`."""
        return self.order()[self._state_dict["index"]]

    def validate(self, state, path: str = "state") -> None:
        super().validate(_with_seed(state) if self.axis == 0 else state, path)

    def load(self, state: dict) -> None:
        super().load(_with_seed(state) if self.axis == 0 else state)

    def _validate_own(self, state: dict, where: str) -> None:
        n = len(self.children)
        if self.axis == 0:
            check_int(state, "shard_seed", where, hi=2**64 - 1, none_ok=True)
            check_int(state, "index", where, hi=n)
            if "first_kinds" in state:
                check_first_kinds(state["first_kinds"], n, where)
            return
        ex, cols = state["exhausted"], state["columns"]
        if not isinstance(ex, list) or len(ex) != n or not all(type(b) is bool for b in ex):
            raise ValueError(f"{where}: 'exhausted' must be a list of {n} booleans")
        if not isinstance(cols, list) or len(cols) != n or not all(
                c is None or (isinstance(c, list) and all(isinstance(x, str) for x in c)) for c in cols):
            raise ValueError(f"{where}: 'columns' must be a list of {n} column-name lists or nulls")
        pending = state["pending"]
        check_examples(pending, where, "pending")
        if len(pending) != n or not all(p is None or isinstance(p, dict) for p in pending):
            raise ValueError(f"{where}: 'pending' must hold {n} examples or nulls")

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        if self.axis == 0 and "first_kinds" not in state:  # an earlier release's: rebuilt when the pass starts
            self._state_dict["first_kinds"] = None
        if self.axis == 1:
            self._state_dict["pending"] = ExampleList(self._state_dict["pending"])

    def __iter__(self) -> Iterator[dict]:
        st = self._state_dict
        held = st.get(HELD)
        again = None
        if self.first_rows is not None and st["index"] < len(self.children):
            kinds = self._first_kinds()
            i = self.current_input()
            if held and kinds[i] == HELD_FIRST:  # a first example that failed the check is held: checked again
                again = (i, held[-1], kinds)
        if held and self.templates is not None:  # handed back in the input's order, or by an earlier release
            put_in_order(held, any_template(self.templates))
        if again is not None:
            return self._checked_again(again, super().__iter__())
        return super().__iter__()

    def _checked_again(self, again: tuple, it: Iterator[dict]) -> Iterator[dict]:
        """``it``, once the held first example ``again`` names is checked again (raising at the first
        ``next()``, as the pass that failed did, not at ``iter()``)."""
        self.first_rows.check(*again)
        yield from it

    def _first_kinds(self) -> list:
        """The state's ``first_kinds``, rebuilt first for a state of an earlier release as its passes
        went: the inputs read before the one being read are not checked again, and the one being read
        has its held example checked if it may be its first (it counts one example, or cannot
        count them), else its next example only noted (its kinds recorded unchecked) if it yielded
        some, else checked."""
        st = self._state_dict
        kinds = st.get("first_kinds")  # absent from a node pickled by an earlier release
        if kinds is None:
            order, index = self.order(), st["index"]
            kinds = [None] * len(self.children)
            for k in range(index):
                kinds[order[k]] = "{}"
            if index < len(order):
                i = order[index]
                yielded = self.children[i].examples_yielded()
                if HELD in st and yielded in (1, None):
                    kinds[i] = HELD_FIRST
                elif HELD in st or yielded not in (0, None):
                    kinds[i] = NOTE
            st["first_kinds"] = kinds
        return kinds

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        if self.axis == 0:
            order = self.order()
            temps = self.templates
            box = ExampleList([None])  # the row a Ctrl-C landing in its reordering hands back
            kinds = None if self.first_rows is None else self._first_kinds()
            unchecked = None if kinds is None else self.first_rows.unchecked(kinds)
            while st["index"] < len(order):
                i = order[st["index"]]
                compiled = None if temps is None else temps[i]
                it = iter(self.children[i])
                if unchecked is not None and unchecked[i]:  # its first example (unknown features)
                    unchecked[i] = False
                    for ex in it:
                        try:
                            self.first_rows.check(i, ex, kinds)  # records its kinds if it passes
                            out = ex if compiled is None else in_shape(compiled, ex)
                        except BaseException:  # the input's state counts ex: held, to fail (or go on) again
                            box[0] = ex
                            st[HELD] = box
                            if kinds[i] is None:  # not checked yet (or failed): checked again first
                                kinds[i] = HELD_FIRST
                            raise
                        yield out
                        break
                if compiled is None:
                    yield from it
                else:
                    template, nested = compiled
                    for ex in it:
                        try:
                            out = template.copy()  # in_shape(compiled, ex), inlined
                            out.update(ex)
                            if nested:
                                out = in_nested(nested, out)
                        except BaseException:  # the input's state counts ex: handed back (stores only)
                            box[0] = ex
                            st[HELD] = box
                            raise
                        yield out
                st["index"] += 1
            return
        exhausted, columns, pending = st["exhausted"], st["columns"], st["pending"]
        n = len(self.children)
        # the row in progress lives in ``row``: each part is kept there as it is received (a ``for``
        # loop's, no check point for a Ctrl-C in between), and whatever exception leaves the row
        # unfinished (an input's error, a Ctrl-C landing anywhere in it) puts it into ``pending`` on
        # its way out (a store: the handler has no check point). So a row costs no store into the
        # state (a list subclass, whose subscripts miss CPython's fast paths) nor any emptying of
        # ``pending``, which is empty between yields. A row a state kept there is taken up first (a
        # state copy may share its parts) and ``pending`` emptied right before it is yielded.
        held = any(p is not None for p in pending)
        its = [iter(c) for c in self.children]
        while True:
            row = [None if p is None else copy_example(p) for p in pending] if held else [None] * n
            merged: dict = {}
            got = False
            try:
                for i, it in enumerate(its):
                    if exhausted[i]:
                        for c in columns[i] or ():
                            merged.setdefault(c, None)
                        continue
                    ex = row[i]
                    if ex is None:
                        for ex in it:
                            break
                        else:
                            exhausted[i] = True
                            for c in columns[i] or ():
                                merged.setdefault(c, None)
                            continue
                        row[i] = ex
                    if columns[i] is None:
                        cols = list(ex)
                        clash = [c for c in cols if any(c in (columns[j] or ()) for j in range(n) if j != i)]
                        if clash:  # ex stays in the row (``pending``): a state taken now raises this again
                            others = sorted({j for j in range(n) if j != i for c in clash if c in (columns[j] or ())})
                            raise ValueError(f"concatenate_datasets(axis=1): columns {clash} are duplicated: they "
                                             f"appear in several datasets (dataset {i}, and dataset(s) {others}); "
                                             "remove or rename them first")
                        columns[i] = cols
                    got = True
                    merged |= ex
            except BaseException:
                pending[:] = row
                raise
            if not got:
                return
            if held:  # from here to the yield nothing is called
                held = False
                pending[:] = [None] * n
            yield merged

    # ------------------------------------------------------------------ capabilities (see ``Node``)
    # positions and provenances (replay mode): ``nodes/concat_positions.py``
    def describe(self) -> str:
        return f"concatenate_datasets(axis={self.axis})"

    def replay_problem(self) -> str | None:
        return None

    def row_local_problem(self) -> str | None:
        return ("a concat node (concatenate_datasets, or load_dataset(split='train+test' | 'all'), which concatenates "
                "the splits): shuffle each dataset (or split) with shuffle(buffer_size=None) before concatenating them")
