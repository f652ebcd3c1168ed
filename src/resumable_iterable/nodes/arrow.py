"""Source over an in-memory / memory-mapped Arrow table: a HF map-style ``Dataset`` or a ``pyarrow.Table``.

The rows (after the dataset's indices mapping, if ``select``/``shuffle`` made one) are split
into ``num_shards`` contiguous shards exactly as ``datasets.Dataset.to_iterable_dataset`` does.
Reading converts Arrow slices of ``chunk_size`` rows to Python in bulk; resuming slices the
table at the saved offset, so the cost of a resume does not depend on the position.

A table built from files (``load_dataset("imagefolder")``: a row per image, or per metadata row)
is given ``names_digest``, the digest of those files' names in row order (``files.names_digest``):
the state holds it as ``files`` and a state of other files, or of the same files in another order,
is refused, as for file sources (its offsets would count other rows). Such a table is also given
``arrow_rows=False``: HF's imagefolder builder yields Python examples, not Arrow tables, so HF formats
its rows from Python values (``with_format("numpy")``: a label is a 0-d array, not a numpy scalar).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from .checks import check_names
from .source import SourceNode, split_positions


class ArrowSource(SourceNode):
    kind = "arrow"
    added_fields = frozenset(("files",))  # ``files``: of tables built from files; absent from earlier states

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return self.arrow_rows
    chunk_size = 512  # rows converted at a time: as fast as larger chunks, less memory in flight

    def __init__(self, table: pa.Table, num_shards: int = 1, indices: pa.Array | None = None,
                 features: Any = None, shard_ids: list[int] | None = None, names_digest: str | None = None,
                 arrow_rows: bool = True):
        if not isinstance(num_shards, int) or num_shards < 1:
            raise ValueError(f"num_shards must be a positive integer, got {num_shards!r}")
        self.table = table
        #: whether HF formats these rows from Arrow (a ``Dataset``, a table) or from Python values (a
        #: table standing for what a HF generator-based builder yields: ``imagefolder``)
        self.arrow_rows = arrow_rows
        self.indices = indices
        n = len(indices) if indices is not None else table.num_rows
        if num_shards > max(n, 1):
            raise ValueError(f"num_shards={num_shards} is larger than the number of rows ({n})")
        self.num_rows = n
        self.names_digest = names_digest  # before the fresh state, which holds it
        self.bounds = []
        for i in range(num_shards):
            pos = split_positions(n, num_shards, i, contiguous=True)
            self.bounds.append((pos[0], pos[-1] + 1) if pos else (0, 0))
        super().__init__(num_shards, shard_ids)
        self.set_features(features)

    @classmethod
    def from_hf(cls, dataset: Any, num_shards: int = 1) -> ArrowSource:
        table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
        indices = None
        if getattr(dataset, "_indices", None) is not None:
            idx = dataset._indices
            idx = idx.table if hasattr(idx, "table") else idx
            indices = idx.column(0).combine_chunks()
        return cls(table, num_shards=num_shards, indices=indices, features=dataset.features)

    def params(self) -> dict:
        return {**super().params(), "num_rows": self.num_rows, "columns": list(self.table.column_names)}

    def _own_state(self) -> dict:
        st = super()._own_state()
        return st if self.names_digest is None else {**st, "files": self.names_digest}

    def _validate_own(self, state: dict, where: str) -> None:
        if self.names_digest is not None:
            check_names(state, self.names_digest, where)  # before the offsets, which count its rows
        super()._validate_own(state, where)

    def shard_length(self, shard_id: int) -> int:
        a, b = self.bounds[shard_id]
        return b - a

    def _read(self, start: int, n: int) -> Iterable[dict]:
        if self.indices is None:
            return self.iter_rows(self.table.slice(start, n))
        return self.iter_rows(self.table.take(self.indices.slice(start, n)))

    def _iter(self) -> Iterator[dict]:
        # ``SourceNode._iter`` with the shard's rows read in the same loop (in place of ``_iter_shard``):
        # one generator resumed a row, not two. Each row is counted in ``offset`` as it is yielded.
        st = self._state_dict
        order = self.shard_order()
        chunk = self.chunk_size
        read = self._read
        while st["shard_pos"] < (len(order) if st["stop"] is None else st["stop"]):
            start, end = self.bounds[order[st["shard_pos"]]]
            offset = st["offset"]
            pos = start + offset
            while pos < end:
                n = min(chunk, end - pos)
                for row in read(pos, n):
                    offset += 1
                    st["offset"] = offset
                    yield row
                pos += n
            st["shard_pos"] += 1
            st["offset"] = 0

    def _take(self, idx: pa.Array) -> list[dict]:
        """The rows at positions ``idx`` of this source's row order (before the indices mapping)."""
        if self.indices is not None:
            idx = self.indices.take(idx)
        return self.rows_of(self.table.take(idx))

    def read_rows(self, shard_id: int, rows: list[int]) -> list[dict]:
        """Random access to rows of a shard (for replaying examples from their positions)."""
        start, _ = self.bounds[shard_id]
        return self._take(pa.array([start + r for r in rows], type=pa.int64()))

    # ------------------------------------------------------------------ random access (global shuffle)
    def random_access_problem(self) -> str | None:
        """Why this source cannot be read at random positions (``None``: it can)."""
        return None

    def row_count(self, shard_id: int) -> int:
        """Rows of a shard (known without reading)."""
        return self.shard_length(shard_id)

    def take_examples(self, shard_ids: Any, rows: Any, cache: dict | None = None) -> list[dict]:
        """The examples at ``rows[i]`` of shard ``shard_ids[i]`` (int64 arrays), in that order, with one
        Arrow ``take`` (see ``nodes/global_shuffle.py``). The rows are not sorted first: on in-memory
        and memory-mapped tables a sorted ``take`` measured no faster than an unsorted one."""
        firsts = np.fromiter((b[0] for b in self.bounds), dtype=np.int64, count=len(self.bounds))
        return self._take(pa.array(firsts[np.asarray(shard_ids, dtype=np.int64)] + np.asarray(rows, dtype=np.int64),
                                   type=pa.int64()))
