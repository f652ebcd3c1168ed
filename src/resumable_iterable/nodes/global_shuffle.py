"""Global shuffle of random-access sources: ``shuffle(seed, buffer_size=None)``.

Every example of the source is yielded exactly once per epoch, in a pseudorandom permutation of
the *whole* dataset chosen by ``(seed, epoch)``. The permutation is never materialised: position
``p`` of the shuffled order reads row ``perm(p)``, computed on the fly by
:class:`~.permutation.IndexPermutation`, so memory and state are O(1) in the dataset size.

How it is wired
---------------
``make_global_shuffle(child, seed)`` walks down from ``child`` to its source and **replaces the
source by a** :class:`PermutedSource` **reading it at random positions**. Between the shuffle
and the source only *row-local* nodes are allowed - nodes whose output for a row depends on
that row alone, so that shuffling their input permutes their output (each node kind says
whether it is, and if not why, through ``Node.row_local_problem``):

* ``select_columns`` / ``remove_columns`` / ``rename_column(s)``,
* ``map`` and ``filter`` with ``batched=False`` and ``with_indices=False``.

Anything else (batched ``map``/``filter``, ``with_indices``, ``skip``/``take``, ``repeat``,
``batch``, a shuffle buffer, ``interleave_datasets``, ``concatenate_datasets``) raises a
``ValueError`` naming the node; such nodes belong after the global shuffle. The source must
support random access (see *Source protocol*): a HF ``Dataset`` / ``pyarrow.Table`` source, or
Parquet / Arrow IPC files. Generator sources and JSON / CSV files are refused.

Source protocol
---------------
A source can be globally shuffled if it has these three methods (``ArrowSource`` and
``FileSource`` do):

* ``random_access_problem() -> str | None`` - why it cannot be read at random positions, or
  ``None`` if it can;
* ``row_count(shard_id) -> int`` - the rows of a shard;
* ``take_examples(shard_ids, rows, cache) -> list[dict]`` - the examples at ``rows[i]`` of shard
  ``shard_ids[i]`` (two int64 arrays), in that order. ``cache`` is a dict the caller keeps for
  the source (e.g. opened files). The rows come in the permuted order; a source may regroup them
  internally (``FileSource`` does one ``take`` per file) but returns them in the order asked.

The permuted order covers the rows of the source's shards (``source.shard_ids``) numbered in
shard order: ``ds.shard(n, i).shuffle(buffer_size=None)`` shuffles that part of the data.

State
-----
``{"node": "global_shuffle", "seed", "epoch", "children": [...]}`` and, at the bottom,
``{"node": "permuted", "pos"}``: how many positions of the permutation the reader has consumed;
over a file source also ``"files"``, its names digest (rows are numbered in file order, so the same
files in another order are refused, as by the file source itself).
The nodes in between keep their own (small) states. A state is therefore a few integers:
resuming computes the permutation at ``pos`` directly, re-reading nothing.

Workers and ranks
-----------------
The reader's ``num_shards`` is its number of positions (the rows), so any number of DataLoader
workers or ranks can split it. ``shard(n, i, contiguous=False)`` keeps the positions
``p = i, i + n, i + 2n, ...`` of the permutation; ``contiguous=True`` keeps a block of
consecutive positions. Shards nest (worker split of a rank split), each being an arithmetic
progression of positions ``start + step * j`` for ``j < count``. With ``n`` DataLoader workers
and ``batch_size=None`` the loader's round-robin over the workers yields exactly the order of
a single process.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

import numpy as np

from .base import Node
from .checks import check_epoch, check_int, check_names
from .seeds import DrawnSeed, resolve_seed
from .permutation import IndexPermutation
from .source import split_positions

BLOCK = 4096
"""Positions read per batched ``take``: large enough to amortise the vectorised permutation
and Arrow calls, small enough to keep the first example fast."""


# ---------------------------------------------------------------------- what may sit below
# Each node kind says itself whether it is row-local (``Node.row_local_problem``); the source
# must offer the protocol below.


def _source_problem(node: Node) -> str | None:
    check = getattr(node, "random_access_problem", None)
    if check is None or not hasattr(node, "take_examples") or not hasattr(node, "row_count"):
        if node.kind == "generator":
            return ("a generator source (from_generator), which can only be read in order: "
                    "use a shuffle buffer (shuffle(buffer_size=...))")
        return f"a {node.kind!r} source, which cannot be read at random positions"
    problem = check()
    return None if problem is None else f"a {node.kind!r} source: {problem}"


def _refuse(reason: str, at_source: bool = False) -> ValueError:
    where = "its source is" if at_source else "between the shuffle and its source there is"
    return ValueError(f"shuffle(buffer_size=None) (global shuffle) cannot be applied: {where} {reason}. A global "
                      f"shuffle reads a random-access source (HF Dataset, pyarrow Table, Parquet or Arrow files) at "
                      f"permuted positions; only select/remove/rename columns and per-example map/filter (without "
                      f"with_indices) may sit in between.")


def make_global_shuffle(child: Node, seed: int | None) -> GlobalShuffleNode:
    """The global shuffle of ``child`` (a fresh clone the caller gives away)."""
    return GlobalShuffleNode(child, seed)


# ---------------------------------------------------------------------- the reader


class _Rows:
    """Row numbering of a random-access source, shared by every copy of one reader.

    ``starts[k]`` is the first global row of ``source.shard_ids[k]`` (computed on first use: for
    files it reads metadata). ``cache`` is the dict handed to ``source.take_examples`` (open
    files); it is not pickled, so each DataLoader worker opens its own files.
    """

    def __init__(self, source: Node):
        self.source = source
        self._starts: np.ndarray | None = None
        self.shard_ids = np.asarray(source.shard_ids, dtype=np.int64)
        self.cache: dict = {}

    @property
    def starts(self) -> np.ndarray:
        if self._starts is None:
            lengths = [self.source.row_count(s) for s in self.source.shard_ids]
            self._starts = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64))).astype(np.int64)
        return self._starts

    @property
    def total(self) -> int:
        return int(self.starts[-1])

    def locate(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard ids, rows in those shards) of the global rows ``index`` (int64 array)."""
        starts = self.starts
        k = np.searchsorted(starts, index, side="right") - 1
        return self.shard_ids[k], index - starts[k]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "cache": {}}


class PermutedSource(Node):
    """Reads the rows of a random-access source in the order of a keyed permutation.

    It reads the positions ``start + step * j`` (``j < count``) of the permutation of all the
    source's rows; ``pos`` counts the positions consumed. The permutation key (seed, epoch) is
    set by the :class:`GlobalShuffleNode` above, which holds it in its state.
    """

    kind = "permuted"
    added_fields = frozenset(("files",))  # ``files``: over file sources; absent from states of earlier releases

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def __init__(self, source: Node):
        self._rows = _Rows(source)
        self._slice: tuple[int, int, int] | None = None  # (start, step, count); None: every position
        self._key = (0, 0)
        self._perm: IndexPermutation | None = None
        super().__init__()

    @property
    def source(self) -> Node:
        return self._rows.source

    # -- configuration
    def set_key(self, seed: int, epoch: int) -> None:
        if self._key != (seed, epoch):
            self._key = (seed, epoch)
            self._perm = None

    def permutation(self) -> IndexPermutation:
        if self._perm is None:
            self._perm = IndexPermutation(self._rows.total, *self._key)
        return self._perm

    @property
    def slice(self) -> tuple[int, int, int]:
        if self._slice is None:
            self._slice = (0, 1, self._rows.total)
        return self._slice

    # -- structure
    def params(self) -> dict:
        start, step, count = self.slice
        return {"source": self.source.shape(), "rows": self._rows.total, "start": start, "step": step,
                "count": count}

    @property
    def num_shards(self) -> int:
        return self.slice[2]

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        start, step, count = self.slice
        part = split_positions(count, num_shards, index, contiguous)  # positions of this slice it keeps
        new_slice = (start + step * part.start, step * part.step, len(part))
        new = copy.copy(self)
        new.forget_fingerprint()
        new._slice = new_slice
        new._state_dict = new._fresh_state()
        return new

    def shuffle_shards(self, seed: int | None) -> None:
        pass  # the permutation decides the order

    def read_lists_as_arrays(self) -> None:
        rows = copy.copy(self._rows)  # the row numbering, around a source of this reader's own: the
        rows.source = rows.source.clone()  # source is shared with the copies this one was made from
        rows.source.read_lists_as_arrays()
        self._rows = rows

    # -- state
    def _own_state(self) -> dict:
        names = getattr(self.source, "names_digest", None)  # a file source's: rows are numbered in file order
        return {"pos": 0} if names is None else {"pos": 0, "files": names}

    def _validate_own(self, state: dict, where: str) -> None:
        names = getattr(self.source, "names_digest", None)
        if names is not None:
            check_names(state, names, where)  # the same files in another order have the same rows
        check_int(state, "pos", where, hi=self.slice[2])

    # -- reading
    def _read(self, positions: np.ndarray) -> list[dict]:
        """The examples at ``positions`` of the permutation, in that order (one batched read)."""
        rows = self._rows
        index = self.permutation()(positions)
        examples = rows.source.take_examples(*rows.locate(index), rows.cache)
        if len(examples) != len(index):
            raise ValueError(f"{rows.source.kind} source returned {len(examples)} examples for "
                             f"{len(index)} positions")
        return examples

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        start, step, count = self.slice
        read = self._read
        pos = st["pos"]
        while pos < count:
            for ex in read(start + step * np.arange(pos, min(pos + BLOCK, count), dtype=np.int64)):
                pos += 1
                st["pos"] = pos
                yield ex

    def position(self) -> dict | None:
        pos = self._state_dict["pos"]
        if pos == 0:
            return None
        start, step, _ = self.slice
        shard, row = self._rows.locate(self.permutation().at(start + step * (pos - 1)))
        where = {"source": self.source.kind, "shard": int(shard), "row": int(row)}
        shard_file = getattr(self.source, "shard_file", None)  # a file source: the note names the file
        if shard_file is not None:
            where["file"] = shard_file(int(shard))
        return where


# ---------------------------------------------------------------------- the shuffle node


class GlobalShuffleNode(DrawnSeed, Node):
    """``shuffle(seed, buffer_size=None)``: see the module docstring."""

    kind = "global_shuffle"

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def __init__(self, child: Node, seed: int | None = None):
        self.seed_drawn = seed is None
        seed = resolve_seed(seed)
        self.seed = seed
        self.epoch = 0
        super().__init__([_install_reader(child)])
        self._push_key()

    def _reader(self) -> PermutedSource:
        node = self.children[0]
        while not isinstance(node, PermutedSource):
            node = node.children[0]
        return node

    def _push_key(self) -> None:
        self._reader().set_key(self.seed, self.epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._push_key()
        super().set_epoch(epoch)

    def shuffle_shards(self, seed: int | None) -> None:
        pass  # the order is decided here, not by a shuffle above

    def dealt_shards(self, seed: int) -> Node:
        return self.clone()  # each worker / rank already reads other rows every epoch (the permutation's)

    def deals_by_epoch(self) -> bool:
        return False

    def drawn_seed_problem(self, by_examples: bool) -> str | None:
        # each rank reads its positions of the permutation: all ranks must draw the same one
        return "shuffle(buffer_size=None) without a seed" if self.seed_drawn else None

    def adopt_seed(self, seed: int) -> None:
        super().adopt_seed(seed)
        self._push_key()  # the permutation the reader below draws

    def _own_state(self) -> dict:
        return {"seed": self.seed, "epoch": self.epoch}

    def _after_reset(self) -> None:
        self._push_key()

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "seed", where, hi=2**64 - 1)
        check_epoch(state, where)

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        self.seed, self.epoch = self._state_dict["seed"], self._state_dict["epoch"]
        self._push_key()

    def _iter(self) -> Iterator[Any]:
        return iter(self.children[0])

    def row_local_problem(self) -> str | None:
        return "another global shuffle (shuffle(buffer_size=None)): shuffle once"


def _install_reader(child: Node) -> Node:
    """Replace the source at the bottom of ``child``'s chain by a :class:`PermutedSource`."""
    path: list[Node] = []
    node = child
    while node.children:
        reason = node.row_local_problem()
        if reason is not None:
            raise _refuse(reason)
        path.append(node)
        node = node.children[0]
    problem = _source_problem(node)
    if problem is not None:
        raise _refuse(problem, at_source=True)
    reader = PermutedSource(node)
    if not path:
        return reader
    path[-1].children[0] = reader
    for n in reversed(path):  # the chain was a fresh clone: rebuild its (fresh) states around the reader
        n.forget_fingerprint()
        n._state_dict = n._fresh_state()
    return child
