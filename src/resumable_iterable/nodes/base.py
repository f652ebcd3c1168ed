"""The node contract shared by every pipeline stage.

A pipeline is a tree of :class:`Node` objects. Each node:

* owns ``self._state_dict``, a plain dict it **mutates in place** while it yields. The dict
  holds ``"node"`` (the node's kind), the node's own fields and, for nodes with inputs,
  ``"children"``: the children's own state dicts *by reference*. The root's dict therefore
  always describes the whole tree, and nothing is copied per example.
* iterates (``__iter__``) by **continuing from its current state**: a fresh state starts at the
  beginning, a loaded state continues right after the last example yielded when it was taken.
  Hot paths update the state with an integer increment *before* yielding, so a state taken
  while the consumer holds example *k* already counts *k* as consumed.
* is reset (:meth:`reset`) and loaded (:meth:`load`) **in place**: dicts that a parent holds
  are never rebound, only updated.
* describes its structure (:meth:`params`, :meth:`shape`) for the pipeline fingerprint
  (:meth:`fingerprint`, computed once per node object),
  validates a foreign state before any of it is applied (:meth:`validate`), and can be split
  by shard (:meth:`shard`) for DataLoader workers and ranks.
* can be handed back what it yielded last (:meth:`hold`) when the consumer above could not take it
  (a Ctrl-C landing in a format, ``nodes/format.py``): its state then has ``held``, a field no
  other state has, and it yields those items again first.
* answers for its kind what the machinery above may do with it (replay, a global shuffle above,
  HF's Arrow path, deferred decoding...): the capabilities, whose defaults are
  ``nodes/capabilities.py``, a base of :class:`Node`.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Iterator

from ..state import ExampleList, copy_example, copy_state
from ..state import fingerprint as shape_fingerprint
from .capabilities import Capabilities
from .checks import check_examples

#: the state field of items handed back to a node (:meth:`Node.hold`), present only while it holds some
HELD = "held"
#: where a node caches its (shape, fingerprint) pair; only the methods below touch it
_FINGERPRINT_CACHE = "_ri_shape"


class Node(Capabilities):
    """Base class of every pipeline node. Subclasses implement :meth:`_iter` and usually
    :meth:`_own_state`, :meth:`params`, :meth:`_validate_own`."""

    kind: ClassVar[str] = "node"
    #: own state fields added since states of this version were first written: a state without
    #: them (saved by an earlier release) loads with their fresh value
    added_fields: ClassVar[frozenset] = frozenset()

    def __init__(self, children: list[Node] | tuple = ()):
        self.children: list[Node] = list(children)
        self._state_dict: dict = self._fresh_state()

    # ------------------------------------------------------------------ to implement
    def _own_state(self) -> dict:
        """Fresh values of this node's own state fields (JSON-serialisable)."""
        return {}

    def params(self) -> dict:
        """Structural parameters that must match for a state to be loadable (JSON data)."""
        return {}

    def _iter(self) -> Iterator[Any]:
        raise NotImplementedError

    def _validate_own(self, state: dict, path: str) -> None:
        """Raise ``ValueError`` if this node's own fields in ``state`` cannot be loaded."""

    # ------------------------------------------------------------------ provided
    def __iter__(self) -> Iterator[Any]:
        if HELD in self._state_dict:
            return self._iter_held()
        return self._iter()

    def hold(self, items: list) -> None:
        """Keep ``items``, what this node yielded last (in order), to yield them again first: the
        consumer above did not take them (a Ctrl-C landed while ``with_format`` formatted them, see
        ``nodes/format.py``; asked of the root of the tree a state describes; a concatenation
        hands itself so the row a Ctrl-C interrupted it putting in order, ``nodes/concat.py``).
        The state holds them in ``held`` until they are yielded again; states without it are as
        before."""
        st = self._state_dict
        st[HELD] = ExampleList([*items, *st.get(HELD, ())])

    def _iter_held(self) -> Iterator[Any]:
        st = self._state_dict
        while True:
            held = st.get(HELD)
            if not held:
                st.pop(HELD, None)
                break
            out = copy_example(held[0])  # a state copy may share it
            last = len(held) == 1
            # from here to the yield nothing is called (no check point for a Ctrl-C)
            if last:
                del st[HELD]
            else:
                del held[0]
            yield out
        yield from self._iter()

    def _fresh_state(self) -> dict:
        st = {"node": self.kind, **self._own_state()}
        if self.children:
            st["children"] = [c._state_dict for c in self.children]
        return st

    def reset(self) -> None:
        """Return to the beginning, in place (children first)."""
        for c in self.children:
            c.reset()
        self._state_dict.pop(HELD, None)
        self._state_dict.update(self._own_state())
        self._after_reset()

    def _after_reset(self) -> None:
        pass

    def set_epoch(self, epoch: int) -> None:
        for c in self.children:
            c.set_epoch(epoch)

    def shape(self) -> dict:
        sh = {"node": self.kind, **self.params()}
        if self.children:
            sh["children"] = [c.shape() for c in self.children]
        return sh

    def fingerprinted_shape(self) -> tuple[dict, str]:
        """This pipeline's :meth:`shape` and its :meth:`fingerprint`, computed once per node object
        (``state_dict()`` reads them after every batch). The shape is shared: do not change it.

        A structural copy (:meth:`clone`) keeps the cache: its shape is the same. Whatever changes
        the structure of a node object (or of a ``copy.copy`` of one, as :meth:`shard` does) after
        its shape may have been read calls :meth:`forget_fingerprint`."""
        cached = self.__dict__.get(_FINGERPRINT_CACHE)
        if cached is None:
            shape = self.shape()
            cached = self.__dict__[_FINGERPRINT_CACHE] = (shape, shape_fingerprint(shape))
        return cached

    def fingerprint(self) -> str:
        """A short stable hash of :meth:`shape`: a state loads only into a pipeline with its fingerprint."""
        return self.fingerprinted_shape()[1]

    def forget_fingerprint(self) -> None:
        """Drop the cached shape of this node object: its structure changed."""
        self.__dict__.pop(_FINGERPRINT_CACHE, None)

    def state_dict(self, buffers: dict | None = None) -> dict:
        """A copy of this node's state tree (``state.copy_state``: nothing is encoded, buffered
        examples are not copied one by one); ``buffers`` collects shuffle-buffer logs instead
        (DataLoader workers, see ``copy_state``)."""
        return copy_state(self._state_dict, buffers)

    def load_state_dict(self, state: dict) -> None:
        self.validate(state)
        self.load(state)

    def load(self, state: dict) -> None:
        """Apply an already validated state in place."""
        self._load_own(state)
        held = state.get(HELD)
        if held:
            self._state_dict[HELD] = ExampleList(held)
        else:
            self._state_dict.pop(HELD, None)
        for c, s in zip(self.children, state.get("children", ())):
            c.load(s)

    def _load_own(self, state: dict) -> None:
        st = self._state_dict
        for k, v in state.items():
            if k != "children" and k != "node":
                st[k] = copy_state(v)

    def validate(self, state: Any, path: str = "state") -> None:
        where = f"{path} ({self.kind})"
        if not isinstance(state, dict):
            raise ValueError(f"{where}: expected an object, got {type(state).__name__}")
        if state.get("node") != self.kind:
            raise ValueError(f"{where}: the state describes a {state.get('node')!r} node here")
        expected, got = set(self._state_dict), set(state)
        expected.discard(HELD)
        if HELD in got:
            got.discard(HELD)
            held = state[HELD]
            if not isinstance(held, list) or not held or not all(isinstance(x, dict) for x in held):
                raise ValueError(f"{where}: 'held' must be a non-empty list of the examples (objects) yielded again "
                                 "first")
        if expected != got and not (got < expected and expected - got <= self.added_fields):
            parts = []
            if expected - got:
                parts.append(f"missing {sorted(expected - got)}")
            if got - expected:
                parts.append(f"unexpected {sorted(got - expected)}")
            raise ValueError(f"{where}: state fields do not match: {', '.join(parts)}")
        self._validate_own(state, where)
        if self.children:
            kids = state["children"]
            if not isinstance(kids, list) or len(kids) != len(self.children):
                raise ValueError(f"{where}: expected {len(self.children)} child states")
            for i, (c, s) in enumerate(zip(self.children, kids)):
                c.validate(s, f"{path}/{self.kind}[{i}]")

    def clone(self) -> Node:
        """A structural copy with fresh state; data (tables, functions) is shared."""
        new = copy.copy(self)
        new.children = [c.clone() for c in self.children]
        new._state_dict = new._fresh_state()
        return new

    @property
    def num_shards(self) -> int:
        return min(c.num_shards for c in self.children)

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        """A copy of this pipeline reading only shard group ``index`` of ``num_shards``."""
        new = copy.copy(self)
        new.forget_fingerprint()
        new.children = [c.shard(num_shards, index, contiguous) for c in self.children]
        new._state_dict = new._fresh_state()
        return new

    def resharded(self) -> Node:
        """A copy of this pipeline, from the start, whose sources are split into more shards where
        their data allows it (Parquet files: a shard per row group), as HF's ``reshard``; a source
        that cannot be split, or a node that keeps its inputs aligned (``axis=1``), is copied as it is."""
        new = copy.copy(self)
        new.forget_fingerprint()
        new.children = [c.resharded() for c in self.children]
        new._state_dict = new._fresh_state()
        return new

    def dealt_shards(self, seed: int) -> Node:
        """A copy of this pipeline whose shards are *listed* in an order drawn from ``seed``, so that a
        later :meth:`shard` deals other shards to each DataLoader worker / rank (HF shuffles the
        shards before dealing them, each epoch). It reaches the sources that :meth:`shuffle_shards`
        reaches; a node that keeps its inputs' order (``skip``/``take``, ``axis=1``) returns a clone.
        Only called where :meth:`deals_by_epoch` says so."""
        new = copy.copy(self)
        new.forget_fingerprint()
        new.children = [c.dealt_shards(seed) for c in self.children]
        new._state_dict = new._fresh_state()
        return new

    def deals_by_epoch(self) -> bool:
        """Whether a split deals this pipeline's shards in an order drawn by epoch (:meth:`dealt_shards`):
        when a ``shuffle`` is reached from here through nodes with one input; otherwise the shards
        are dealt in their natural order every epoch."""
        return len(self.children) == 1 and self.children[0].deals_by_epoch()

    def drawn_seed(self) -> int | None:
        """The seed this node drew at random when it was built without one (``None``: a seed was
        given, or the node draws nothing). A dataset's states record these (``"seeds"``), so that a
        pipeline rebuilt without a seed adopts them (:meth:`adopt_seed`) when it loads one, and
        its later epochs are drawn as the saved run's would have been."""
        return None

    def adopt_seed(self, seed: int) -> None:
        """Draw from ``seed`` from now on, in place of the seed drawn when built (only asked of a
        node whose :meth:`drawn_seed` is not ``None``)."""
        raise NotImplementedError(f"'{self.kind}' nodes draw no seed")

    def drawn_seed_problem(self, by_examples: bool) -> str | None:
        """What this node is (e.g. ``"shuffle() without a seed"``) if it drew its seed at random when it
        was built and ranks splitting the pipeline must share its draws: every rank is its own process
        and draws another seed. ``by_examples``: the ranks split by example (one stream, kept one
        example in ``world_size``), where every random draw must agree; by shard, only draws that
        choose which examples a rank reads must."""
        return None

    def shuffle_shards(self, seed: int | None) -> None:
        """Ask the sources below to read their shards in an order drawn from ``seed``."""
        for c in self.children:
            c.shuffle_shards(seed)

    def expect_shuffled_shards(self) -> None:
        """Called when a ``shuffle`` is built above this node: the sources that its
        :meth:`shuffle_shards` calls reach record that their shard order is set from above, so
        that validation refuses a state without a shard seed (and, elsewhere, one with a seed).
        A node that does not pass :meth:`shuffle_shards` on does not pass this on either."""
        for c in self.children:
            c.expect_shuffled_shards()

    def position(self) -> dict | None:
        """Where the last example this node yielded came from (source shard and row), if known."""
        return self.children[0].position() if len(self.children) == 1 else None

    def position_back(self, back: int) -> dict | None:
        """:meth:`position` of the example this node yielded ``back`` examples before its last one
        (``0``: the last one), if it can tell without reading anything: a shuffle buffer of stored
        examples works out how many inputs it read after the one it yields (``nodes/shuffle.py``)
        and asks this of its input. Default: ``None`` (unknown); a source reading its shards and a
        node yielding one example per input example, in order, say it."""
        return None

    def examples_yielded(self) -> int | None:
        """How many examples this node yielded since its start (as its state says), if it can tell
        without reading anything: what a node counting back over its inputs (:meth:`position_back` of
        a concatenation, a ``skip``, a ``repeat``) needs to know where one input's examples end.
        Default: ``None`` (unknown); a source reading shards of known length and the nodes yielding
        one example per input example say it."""
        return None

    def position_of(self, prov: Any) -> dict | None:
        """:meth:`position` of an example this node yielded at some point, given its (validated)
        provenance (see :meth:`provenance_reader`): a replay-mode shuffle names with it where the
        example it yielded last came from, for the note of an error raised on it above. ``None``:
        unknown. Default: an example passes through unchanged, so its provenance is the input's."""
        return self.children[0].position_of(prov) if len(self.children) == 1 else None

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def walk_built(self):
        """Depth first as :meth:`walk`, but through the nodes built once with the pipeline: a node
        that makes its children anew from its own copy of its input at every pass (``shard_interleave``)
        yields that copy's nodes, once. The ``"seeds"`` entry of a state numbers these."""
        yield self
        for c in self.children:
            yield from c.walk_built()

    def single_source(self) -> Node | None:
        """The source at the bottom of a chain of single-input nodes, or ``None`` (several inputs)."""
        return self.children[0].single_source() if len(self.children) == 1 else None


# ---------------------------------------------------------------------- helpers of node kinds


def check_retry(state: dict, where: str) -> None:
    """A node's ``retry``: at most the one example it raised on taking in (absent from a state of
    an earlier release)."""
    retry = state.get("retry", [])
    check_examples(retry, where, "retry")
    if len(retry) > 1 or not all(isinstance(ex, dict) for ex in retry):
        raise ValueError(f"{where}: 'retry' holds at most the one example (an object) the node raised on")


def retry_first(st: dict, child: Node) -> Iterator[dict]:
    """The example ``st["retry"]`` holds (the one the node raised on taking in, kept so that a state
    taken after the error does not lose it), then ``child``'s. ``retry`` is emptied as the example is
    handed out: the node takes it in before it yields anything, and puts it back if that raises again.
    It is handed out as a copy: a state taken (or loaded) may share the stored one, and the node puts
    it into a batch the user may edit in place."""
    while st["retry"]:
        ex = copy_example(st["retry"][0])
        st["retry"] = type(st["retry"])()
        yield ex
    yield from child


def add_context(exc: BaseException, message: str) -> None:
    """Attach context to an exception raised by user code without changing its type."""
    if hasattr(exc, "add_note"):
        exc.add_note(message)
    else:  # pragma: no cover - Python < 3.11
        exc.args = (*exc.args, message)
