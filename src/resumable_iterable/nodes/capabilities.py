"""What a node kind can do for the machinery above it, asked of the node itself, so that a new node
kind is one file: its name in messages (``describe``), replay below a replay-mode shuffle
(``replay_problem``, ``rereads_plainly``, ``provenance_reader``, ``check_provenance``, ``reread``;
see ``nodes/replay.py``), sitting below a global shuffle (``row_local_problem``,
``nodes/global_shuffle.py``), HF's Arrow path (``formats_as_arrow_rows``), media decoding deferred
past a shuffle (``deferrable_decoder``, ``defer_decoding``), large lists read as arrays
(``read_lists_as_arrays``) and the examples a copy of its state holds (``examples_held_by_value``).

The defaults here describe a node that supports none of it (examples pass through unchanged where
a default passes a request on); each node module overrides what its kind can do. A base of
:class:`~resumable_iterable.nodes.base.Node` (``self`` is the node: ``kind``, ``children``), whose
module holds the contract of state, iteration, loading and shards."""

from __future__ import annotations

from typing import Any


class Capabilities:
    """The capabilities of a :class:`~resumable_iterable.nodes.base.Node`, with their defaults."""

    def describe(self) -> str:
        """A short human name for messages: ``map(tokenize, batched=True)``, ``interleave_datasets(...)``."""
        return self.kind

    def replay_problem(self) -> str | None:
        """Why the examples this node yields cannot be re-derived from their provenance below a
        replay-mode shuffle (this node only; its inputs are asked in turn), or ``None`` if they can."""
        return f"'{self.kind}' nodes do not support replay"

    def rereads_plainly(self) -> bool:
        """Whether this node's examples can be re-derived from their provenance with nothing but
        the sources reading the same rows again: no function of the user's run again (``map``,
        ``filter``) and no tracking to arm before the first read. A default shuffle in a DataLoader
        worker logs examples as positions only when every node below says so (resuming a source
        relies on reading the same rows again anyway). Default: it supports replay."""
        return self.replay_problem() is None

    def provenance_reader(self) -> Any:
        """A function ``() -> list`` giving the provenance of the last example this node yielded, built when a
        replay-mode shuffle above starts iterating (nodes that read ahead arm their tracking here).
        Default: an example passes through unchanged, so its provenance is the input's."""
        return self.children[0].provenance_reader()

    def check_provenance(self, prov: Any, where: str) -> None:
        """Raise ``ValueError`` unless ``prov`` is a well-formed provenance of an example of this node."""
        if len(self.children) != 1:
            raise ValueError(f"{where}: '{self.kind}' nodes do not support replay")
        self.children[0].check_provenance(prov, where)

    def reread(self, provs: list[list], bar: Any = None) -> list[Any]:
        """Re-derive the examples this node yielded at (validated) provenances ``provs``, in that
        order, in one batch; ``bar`` counts the rows read from sources. Default: pass-through."""
        return self.children[0].reread(provs, bar) if provs else []

    def formats_as_arrow_rows(self) -> bool:
        """Whether HF keeps this node kind on its Arrow path: Arrow-backed rows reaching it leave it
        as they came, so HF formats them from Arrow, with its Arrow types (see
        ``arrow_batches.arrow_rooted``). Default: no (HF formats what a map yields as Python values)."""
        return False

    def row_local_problem(self) -> str | None:
        """Why this node may not sit between a global shuffle and its source (its output for a row
        must depend on that row alone), or ``None`` if it may."""
        return f"a {self.kind!r} node, which is not a per-example transform"

    def deferrable_decoder(self) -> Any:
        """For a source that decodes media (``Image``, ``Audio``...) as it reads, and the column
        operations above it: a function decoding one example yielded undecoded after
        :meth:`defer_decoding` (an example decoded already, e.g. from a state saved before
        decoding was deferred, is returned as it is); ``None`` for any other node. A shuffle right
        above buffers the files and decodes what it yields, as HF decodes after its shuffle."""
        return None

    def defer_decoding(self, deferred: bool) -> None:
        """Yield examples undecoded (``True``) or decoded (``False``) from now on; only called
        on a node whose :meth:`deferrable_decoder` is not ``None``."""
        raise NotImplementedError(f"'{self.kind}' nodes do not decode")

    def read_lists_as_arrays(self) -> None:
        """From now on, read large lists of numbers from Arrow as numpy arrays instead of Python lists
        (``rows.large_list_arrays``). Only asked of a live pipeline whose rows reach nothing but a
        numpy / torch formatter, which makes the same arrays and tensors of both, so no code of the
        user's sees the difference (a state's buffered rows hold the arrays). Default: pass it on."""
        for c in self.children:
            c.read_lists_as_arrays()

    def examples_held_by_value(self) -> int:
        """At most how many examples a copy of this node's state holds by value (a buffer of stored
        examples; not one a DataLoader worker describes by arithmetic, nor a replay buffer of
        positions): what a batched ``map`` above would keep at each of its batches if it kept a
        copy of its input's state, which it then avoids (see ``nodes/map.py``). Default: the
        inputs' (a few examples held elsewhere, e.g. peeked or partial rows, do not count)."""
        return sum(c.examples_held_by_value() for c in self.children)
