"""The part of ``FileSource`` (``files.py``) that reads its files at random positions, for the global
shuffle (``global_shuffle.py`` names the protocol: ``random_access_problem``, ``row_count``,
``take_examples``). Parquet and Arrow IPC files only: JSON, CSV and text files have no row count
without parsing each whole file. Uses the source's ``_table``, ``_parquet``, ``_row_groups``,
``_aligned``, ``_open_error``, ``_where``, ``shard_length`` and ``rows_of``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


class RandomFileAccess:
    def random_access_problem(self) -> str | None:
        """Why these files cannot be read at random positions (``None``: they can)."""
        if self.filters is not None:
            return ("Parquet files read with filters= have no row count and no random access without reading "
                    "each whole file; filter with .filter(...) after the global shuffle, or use a shuffle buffer")
        if self.format in ("parquet", "arrow"):
            return None
        return (f"{self.format} files have no row count and no random access without parsing each whole "
                f"file; convert them to Parquet or Arrow, or use a shuffle buffer (shuffle(buffer_size=...))")

    def row_count(self, shard_id: int) -> int:
        """Rows of a file: Parquet metadata, or the (memory-mapped) Arrow IPC file."""
        problem = self.random_access_problem()
        if problem is not None:
            raise ValueError(problem)
        if self.format == "parquet":
            return self.shard_length(shard_id)
        return self._aligned(shard_id, self._table(shard_id)).num_rows

    def random_access_table(self, shard_id: int) -> pa.Table:
        """A whole file as a table for random access: memory-mapped (Arrow IPC, no copy) or decoded into
        memory (Parquet: the decoded file is held while it is in the caller's cache)."""
        if self.format == "parquet" and self.pieces is not None:
            pf = self._parquet(shard_id)
            groups, _ = self._row_groups(shard_id, pf.metadata)
            try:
                return self._aligned(shard_id, pf.read_row_groups(groups, columns=self.columns))
            except (OSError, pa.ArrowException) as e:
                raise self._open_error(shard_id, e) from None
        if self.format == "parquet":
            import pyarrow.parquet as pq

            try:
                table = pq.read_table(self.paths[shard_id], memory_map=True, columns=self.columns)
            except (OSError, pa.ArrowException) as e:
                raise self._open_error(shard_id, e) from None
            return self._aligned(shard_id, table)
        return self._aligned(shard_id, self._table(shard_id))

    def take_examples(self, shard_ids: Any, rows: Any, cache: dict | None = None) -> list[dict]:
        """The examples at ``rows[i]`` of file ``shard_ids[i]`` (int64 arrays), in that order: one Arrow
        ``take`` per file. ``cache`` (kept by the caller) holds the opened files by shard id."""
        cache = {} if cache is None else cache
        shard_ids = np.asarray(shard_ids, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(shard_ids, kind="stable")
        sids, rws = shard_ids[order], rows[order]
        cuts = np.flatnonzero(np.diff(sids)) + 1
        parts = []
        for a, b in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(sids)])).tolist()):
            if a == b:
                continue
            sid = int(sids[a])
            table = cache.get(sid)
            if table is None:
                table = cache[sid] = self.random_access_table(sid)
            want = rws[a:b]
            if want.size and (want.min() < 0 or want.max() >= table.num_rows):
                raise ValueError(f"{self._where(sid)} has {table.num_rows} rows, fewer "
                                 f"than expected: the file changed while it was being read")
            parts.append(table.take(pa.array(want, type=pa.int64())))
        if not parts:
            return []
        taken = parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="default")
        examples = self.rows_of(taken)
        if len(parts) == 1 or bool(np.all(order[:-1] < order[1:])):
            return examples
        out: list = [None] * len(examples)
        for dst, ex in zip(order.tolist(), examples):
            out[dst] = ex
        return out
