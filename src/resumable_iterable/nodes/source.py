"""Shared behaviour of data sources: a list of shards read one after another.

State: ``{"node", "shard_seed", "shard_pos", "offset", "stop"}``

* ``shard_seed`` - ``None`` (shards in their natural order) or the seed of the permutation an
  ancestor ``shuffle`` chose for this epoch; the order is recomputed from it, never stored.
  Which of the two a state must hold is known when the pipeline is built: a ``shuffle`` marks
  the sources whose shard order it sets (:meth:`SourceNode.expect_shuffled_shards`), and a
  state with a seed where none is set, or without one where a shuffle sets it, is refused.
* ``shard_pos`` - index, in that order, of the shard being read.
* ``offset`` - rows of that shard already yielded.
* ``stop`` - ``None`` (read to the last shard) or the position in that order where reading
  stops. Only elastic resume sets it (see ``loader/elastic.py``): it hands the untouched shards after
  ``stop`` to another worker. A reset (a new pass) clears it.

Progress is therefore known *per shard*: shards before ``shard_pos`` are done, the one at
``shard_pos`` is read up to ``offset``, the rest are untouched. Subclasses implement
:meth:`_iter_shard`, which must resume at ``state["offset"]`` and increment it before each
yield (or :meth:`_iter` itself, the same loop with the shard's rows read inline, one generator
resumed a row instead of two: ``ArrowSource``, ``GeneratorSource``), and :meth:`shard_length` where the length is known. A subclass with random access to
its rows also implements ``read_rows(shard_id, rows)``: a replay-mode shuffle above then keeps
``[shard, row]`` per buffered example and re-reads them with one call per shard (:meth:`reread`).
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Iterable, Iterator

import pyarrow as pa

from ..state import copy_example
from .base import Node
from .checks import as_int, check_int
from .seeds import rng_from_seed
from .replay import MAX_INT, check_list
from .rows import batch_to_rows, large_list_arrays


def split_positions(n: int, num_shards: int, index: int, contiguous: bool) -> range:
    """Which of ``n`` items go to group ``index`` of ``num_shards`` (HF's convention), as a range."""
    num_shards = as_int(num_shards, "num_shards", lo=1)
    index = as_int(index, "index", lo=None)
    if not 0 <= index < num_shards:
        raise ValueError(f"index must be in [0, {num_shards}), got {index}")
    if contiguous:
        div, mod = divmod(n, num_shards)
        start = div * index + min(index, mod)
        return range(start, start + div + (1 if index < mod else 0))
    return range(index, n, num_shards)


def _holds_files(feature: Any) -> bool:
    """Whether a feature that needs decoding holds files (media); HF 5.2's ``Json`` (JSON text) does not."""
    from datasets.features.features import _visit, require_decoding

    try:
        from datasets import Json, Value
    except ImportError:  # datasets < 5.2: no Json
        return require_decoding(feature)
    return require_decoding(_visit(feature, lambda f: Value("string") if isinstance(f, Json) else f))


def _encoded(value: Any) -> bool:
    """Whether a media value read from a state is still a file (decoded ones are objects)."""
    if isinstance(value, list):
        return any(_encoded(v) for v in value[:1])
    return isinstance(value, (dict, str))


@functools.lru_cache(maxsize=64)
def _permutation(n: int, seed: int) -> tuple[int, ...]:
    return tuple(int(i) for i in rng_from_seed(seed, 0x5A4D).permutation(n))


def shard_order(shard_ids: list[int], seed: int | None) -> list[int]:
    """The order in which shards ``shard_ids`` are read: as given, or permuted by ``seed``."""
    if seed is None:
        return shard_ids
    return [shard_ids[i] for i in _permutation(len(shard_ids), seed)]


class SourceNode(Node):
    kind = "source"
    #: set on the sources of a pipeline whose shard order a ``shuffle`` above sets (copied along
    #: by ``clone`` and ``shard``); their states must then hold a shard seed, the others none
    shards_shuffled = False
    #: HF ``features`` of the rows (``None``: unknown), their media columns (``Image``, ``Audio``,
    #: ``Video``...) and ``features.decode_batch`` when there are some
    features: Any = None
    decode_batch: Any = None
    media_columns: list = []
    #: rows read in order are yielded undecoded (set by a shuffle right above: ``defer_decoding``);
    #: random access (replay, global shuffle) always decodes
    deferred = False
    #: large lists of numbers are read as numpy arrays (``read_lists_as_arrays``; not a parameter)
    lists_as_arrays = False

    def __init__(self, total_shards: int, shard_ids: list[int] | None = None):
        self.total_shards = total_shards
        self.shard_ids = list(range(total_shards)) if shard_ids is None else list(shard_ids)
        super().__init__()

    # -- state
    def _own_state(self) -> dict:
        # the shard permutation seed is configuration set by an ancestor shuffle: a reset
        # (e.g. by `repeat`) keeps it
        seed = self._state_dict.get("shard_seed") if hasattr(self, "_state_dict") else None
        return {"shard_seed": seed, "shard_pos": 0, "offset": 0, "stop": None}

    def shuffle_shards(self, seed: int | None) -> None:
        self._state_dict["shard_seed"] = seed

    def expect_shuffled_shards(self) -> None:
        self.shards_shuffled = True

    def shard_order(self, seed: int | None = None, use_state: bool = True) -> list[int]:
        if use_state:
            seed = self._state_dict["shard_seed"]
        return shard_order(self.shard_ids, seed)

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "shard_seed", where, lo=0, hi=2**64 - 1, none_ok=True)
        if self.shards_shuffled and state["shard_seed"] is None:
            raise ValueError(f"{where}: 'shard_seed' is null, but a shuffle() above this source sets its shard "
                             "order: the state was not saved from this pipeline, or was edited")
        if not self.shards_shuffled and state["shard_seed"] is not None:
            raise ValueError(f"{where}: 'shard_seed' is {state['shard_seed']}, but no shuffle() above this source "
                             "sets its shard order (it must be null): the state was not saved from this pipeline, "
                             "or was edited")
        check_int(state, "shard_pos", where, hi=len(self.shard_ids))
        check_int(state, "offset", where, hi=2**63 - 1)  # rows of one shard: a sane bound for any source
        check_int(state, "stop", where, lo=state["shard_pos"], hi=len(self.shard_ids), none_ok=True)
        end = len(self.shard_ids) if state["stop"] is None else state["stop"]
        if state["shard_pos"] < end:
            sid = self.shard_order(state["shard_seed"], use_state=False)[state["shard_pos"]]
            length = self.shard_length(sid)
            if length is not None and state["offset"] > length:
                raise ValueError(f"{where}: 'offset' = {state['offset']} is past the end of shard {sid} "
                                 f"({length} rows)")
        elif state["offset"] != 0:
            raise ValueError(f"{where}: 'offset' must be 0 once every shard is read")

    def end(self) -> int:
        """Position in the shard order where this pass stops reading."""
        stop = self._state_dict["stop"]
        return len(self.shard_ids) if stop is None else stop

    # -- structure
    @property
    def num_shards(self) -> int:
        return len(self.shard_ids)

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> Node:
        return self._with_shards([self.shard_ids[p] for p in split_positions(len(self.shard_ids), num_shards, index,
                                                                             contiguous)])

    def dealt_shards(self, seed: int) -> Node:
        return self._with_shards(shard_order(self.shard_ids, seed))

    def resharded(self) -> Node:
        return self.clone()  # a source whose shards cannot be split (``FileSource`` can)

    def _with_shards(self, shard_ids: list[int]) -> Node:
        """A copy reading ``shard_ids``, in that order, from the start."""
        new = copy.copy(self)
        new.forget_fingerprint()
        new.shard_ids = shard_ids
        new._state_dict = {}
        new._state_dict = new._fresh_state()
        return new

    def clone(self) -> Node:
        new = copy.copy(self)
        new._state_dict = {}
        new._state_dict = new._fresh_state()
        return new

    def params(self) -> dict:
        return {"total_shards": self.total_shards, "shard_ids": list(self.shard_ids)}

    # -- media columns: decoded as they are read, as HF does, or after a shuffle right above
    def set_features(self, features: Any) -> None:
        """The HF ``features`` of the rows, which say the media columns to decode (not a parameter:
        the fingerprint and the state do not change)."""
        self.features = features
        self.media_columns, self.decode_batch = [], None
        if hasattr(features, "decode_batch"):  # HF Features (not None, not a plain dict)
            from datasets.features.features import require_decoding

            self.media_columns = [k for k, f in features.items() if require_decoding(f)]
            self.decode_batch = features.decode_batch if self.media_columns else None

    def with_features(self, features: Any) -> SourceNode:
        """The same rows and shards, decoded with other HF ``features`` (e.g. ``Image(decode=False)``)."""
        new = self.clone()
        new.set_features(features)
        return new

    def read_lists_as_arrays(self) -> None:
        self.lists_as_arrays = True

    def rows_of(self, part: Any, decode: bool = True) -> list[dict]:
        """The rows of an Arrow table or record batch, media decoded unless ``decode`` is false:
        column by column (one C-level ``to_pylist`` each, or numpy arrays for the large lists of
        numbers when :meth:`read_lists_as_arrays` was asked), then rows built column by column
        (faster than ``to_pylist``, which indexes ``pydict[column][row]`` for every cell)."""
        if self.lists_as_arrays:
            batch = {}
            for name, col in zip(part.column_names, part.columns):
                arrays = large_list_arrays(col)
                batch[name] = col.to_pylist() if arrays is None else arrays
        else:
            batch = part.to_pydict()
        if decode and self.decode_batch is not None:
            batch = self.decode_batch(batch)
        return batch_to_rows(batch, part.num_rows)

    def iter_rows(self, part: Any) -> Iterable[dict]:
        """The rows of ``part`` as :meth:`rows_of` gives them (undecoded when decoding is deferred),
        media decoded one row at a time as each row is taken, as HF decodes: a chunk of images is
        never in memory all at once, and a file that cannot be decoded raises at its own row, after
        the rows before it were yielded. Without media to decode, the list itself (no generator
        between the rows and the plain iteration path)."""
        if self.deferred or self.decode_batch is None:
            return self.rows_of(part, decode=not self.deferred)
        return map(self.decode_row, self.rows_of(part, decode=False))

    def deferrable_decoder(self) -> Any:
        """The decoder of media a shuffle right above may defer; ``None`` without media files (``Json``
        columns only: JSON text, decoded as read; a state's buffered rows are then always decoded)."""
        if self.decode_batch is None or not any(_holds_files(self.features[k]) for k in self.media_columns):
            return None
        return self.decode_row_if_encoded

    def defer_decoding(self, deferred: bool) -> None:
        self.deferred = bool(deferred)

    def decode_row(self, row: dict) -> dict:
        """A row read undecoded, decoded as :meth:`rows_of` decodes (a new dict, the same values)."""
        return {k: v[0] for k, v in self.decode_batch({k: [v] for k, v in row.items()}).items()}

    def decode_row_if_encoded(self, row: dict) -> dict:
        """:meth:`decode_row` for a row that may be decoded already (read from a state saved before
        decoding was deferred): its media columns hold files (``{"bytes", "path"}`` dicts, paths,
        lists of those) when encoded, decoded objects (a PIL image, a decoder) otherwise."""
        if not any(_encoded(row.get(k)) for k in self.media_columns):
            return row
        return self.decode_row(row)

    def shard_length(self, shard_id: int) -> int | None:
        """Rows in a shard, or ``None`` when unknown before reading it."""
        return None

    # -- iteration
    def _iter(self) -> Iterator[Any]:
        st = self._state_dict
        order = self.shard_order()
        while st["shard_pos"] < (len(order) if st["stop"] is None else st["stop"]):
            yield from self._iter_shard(order[st["shard_pos"]], st)
            done = self.shards_read(order, st["shard_pos"], st["shard_pos"] + 1)
            # stored with the position, no call between them: a Ctrl-C lands before or after both
            st["shard_pos"] += 1
            st["offset"] = 0
            if done:
                st.update(done)

    def _iter_shard(self, shard_id: int, st: dict) -> Iterator[Any]:
        raise NotImplementedError

    def shards_read(self, order: list[int], first: int, stop: int) -> dict | None:
        """Called as the shards at positions ``[first, stop)`` of ``order`` are read to their end, right
        before ``shard_pos`` moves past them (by :meth:`_iter`, or a node reading this source's rows
        itself): the fields of the state to store with the new position (``None``: none). A file source
        records their files' sizes (``files.py``). The caller stores them with the position, no call
        between, so that a Ctrl-C never separates them; this method itself stores nothing."""
        return None

    def position(self) -> dict | None:
        st = self._state_dict
        order = self.shard_order()
        if st["shard_pos"] >= len(order) or st["offset"] == 0:
            return None
        return {"source": self.kind, "shard": order[st["shard_pos"]], "row": st["offset"] - 1}

    def position_back(self, back: int) -> dict | None:
        """Counted back over the rows read: in the shard being read, then in the shards before it in
        the order read (their lengths known: :meth:`shard_length`; ``None`` past one that is not)."""
        st = self._state_dict
        order = self.shard_order()
        i, back = st["shard_pos"], back + 1 - st["offset"]  # rows to count back from the start of shard i
        if back <= 0:
            return {"source": self.kind, "shard": order[i], "row": -back}
        for shard, n in self._lengths_read(order, i):
            if n is None:
                return None
            if back <= n:
                return {"source": self.kind, "shard": shard, "row": n - back}
            back -= n
        return None

    def examples_yielded(self) -> int | None:
        """The rows read: of the shards before the one being read (their lengths known), and of it."""
        st = self._state_dict
        order = self.shard_order()
        total = st["offset"]
        for _, n in self._lengths_read(order, min(st["shard_pos"], len(order))):
            if n is None:
                return None
            total += n
        return total

    def _lengths_read(self, order: list, pos: int) -> Iterator[tuple[int, int | None]]:
        """``(shard, rows)`` for the shards at positions ``pos - 1`` down to ``0`` of ``order`` (read
        already), the last one read first, lazily; ``rows`` is ``None`` where not known (no
        :meth:`shard_length`, or a file gone since: this only serves an error's note), and the
        walk stops there."""
        for i in range(pos - 1, -1, -1):
            try:
                n = self.shard_length(order[i])
            except Exception:  # a file gone since: not known
                n = None
            yield order[i], n
            if n is None:
                return

    def position_of(self, prov: list) -> dict:
        """A provenance here is ``[shard, row]`` (:meth:`provenance_reader`)."""
        return {"source": self.kind, "shard": prov[0], "row": prov[1]}

    # -- capabilities (see ``Node``): replay reads rows back by position, in one call per shard
    def single_source(self) -> Node:
        return self

    def replay_problem(self) -> str | None:
        return None if callable(getattr(self, "read_rows", None)) else "this source has no random access to its rows"

    def provenance_reader(self):
        st = self._state_dict
        orders: dict = {}

        def prov() -> list:
            seed = st["shard_seed"]
            order = orders.get(seed)
            if order is None:
                order = orders[seed] = self.shard_order()
            return [order[st["shard_pos"]], st["offset"] - 1]

        return prov

    def check_provenance(self, prov: Any, where: str) -> None:
        check_list(prov, where)
        if len(prov) != 2 or not all(type(v) is int for v in prov):
            raise ValueError(f"{where}: a position in a source ({self.kind}) is [shard, row], got {prov!r}")
        sid, row = prov
        if sid not in self.shard_ids:
            raise ValueError(f"{where}: shard {sid} is not one of this {self.kind} source's shards")
        if not 0 <= row <= MAX_INT:
            raise ValueError(f"{where}: row {row} of shard {sid} is out of range")
        length = self.shard_length(sid)
        if length is not None and row >= length:
            raise ValueError(f"{where}: row {row} is past the end of shard {sid} ({length} rows)")

    def reread(self, provs: list[list], bar: Any = None) -> list[dict]:
        by_shard: dict[int, list[int]] = {}
        for p in provs:
            by_shard.setdefault(p[0], []).append(p[1])
        rows_of: dict[tuple[int, int], dict] = {}
        for sid, rows in by_shard.items():
            wanted = sorted(set(rows))
            try:
                got = self.read_rows(sid, wanted)
            except ValueError as e:
                raise ValueError(f"cannot re-read the shuffle buffer from {self.shard_label(sid)}: {e}") from None
            except (OSError, IndexError, pa.ArrowException, OverflowError) as e:
                raise ValueError(
                    f"cannot re-read rows {_rows_text(wanted)} of {self.shard_label(sid)} to refill the shuffle "
                    f"buffer of the state: {type(e).__name__}: {e} (did the data change since the state was saved?)"
                ) from None
            if len(got) != len(wanted):
                raise ValueError(f"{self.shard_label(sid)} returned {len(got)} rows for {len(wanted)} requested")
            for r, ex in zip(wanted, got):
                rows_of[sid, r] = ex
            if bar is not None:
                bar.update(len(wanted))
        # each buffered example gets its own dict: the pipeline may edit examples in place. A row
        # buffered more than once (a repeat, an interleave restarting an input) is read once, so
        # its later copies share nothing mutable with it: a map editing a nested value in place
        # (ex["ids"].append(...)) would otherwise edit them all
        out, seen = [], set()
        for p in provs:
            key = (p[0], p[1])
            out.append(copy_example(rows_of[key]) if key in seen else dict(rows_of[key]))
            seen.add(key)
        return out

    def shard_label(self, sid: int) -> str:
        """How messages name shard ``sid`` (a file source adds the file)."""
        return f"{self.kind} source shard {sid}"


def _rows_text(rows: list[int]) -> str:
    return ", ".join(map(str, rows[:5])) + (f", ... ({len(rows)} rows)" if len(rows) > 5 else "")
