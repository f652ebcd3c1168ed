"""Source over data files, one file per shard: Parquet, Arrow IPC, JSON Lines, CSV.

Resuming seeks instead of re-reading where the format allows it:

* Parquet - the row groups before the saved offset are skipped using the file metadata;
  only the row group holding the offset is decoded.
* Arrow IPC (file or stream format) - memory-mapped, sliced at the offset without a copy.
* JSON Lines / CSV - parsed with pyarrow's readers and sliced at the offset (the file is parsed,
  but no Python objects are built for the rows before the offset).

A file that vanished, or that now has fewer rows than the state says were read, raises a
``ValueError`` naming the file instead of silently skipping data.
"""

from __future__ import annotations

import bisect
import os
from typing import Any, Iterator

import pyarrow as pa

from .source import SourceNode

FORMATS = ("parquet", "arrow", "json", "csv")
_EXT = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow",
        ".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv", ".tsv": "csv"}


def format_of(path: str) -> str | None:
    p = path.lower()
    for suffix in (".gz", ".bz2", ".zst", ".xz"):
        if p.endswith(suffix):
            p = p[: -len(suffix)]
    return _EXT.get(os.path.splitext(p)[1])


class FileSource(SourceNode):
    kind = "files"
    batch_rows = 1024

    def __init__(self, paths: list[str], format: str, shard_ids: list[int] | None = None,
                 reader_kwargs: dict | None = None):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        paths = [os.fspath(p) for p in paths]
        if not paths:
            raise ValueError("no data files given")
        if format not in FORMATS:
            raise ValueError(f"unknown file format {format!r}; expected one of {FORMATS}")
        self.paths = paths
        self.format = format
        self.reader_kwargs = dict(reader_kwargs or {})
        self._lengths: dict[int, int] = {}
        super().__init__(len(paths), shard_ids)

    def params(self) -> dict:
        return {**super().params(), "format": self.format}

    # ------------------------------------------------------------------ reading
    def _open_error(self, shard_id: int, e: Exception) -> ValueError:
        return ValueError(f"cannot read data file {self.paths[shard_id]!r} (shard {shard_id}): {e}")

    def shard_length(self, shard_id: int) -> int | None:
        if shard_id in self._lengths:
            return self._lengths[shard_id]
        if self.format == "parquet":
            import pyarrow.parquet as pq

            try:
                n = pq.ParquetFile(self.paths[shard_id]).metadata.num_rows
            except (OSError, pa.ArrowException) as e:
                raise self._open_error(shard_id, e) from None
            self._lengths[shard_id] = n
            return n
        return None

    def _table(self, shard_id: int) -> pa.Table:
        path = self.paths[shard_id]
        try:
            if self.format == "arrow":
                source = pa.memory_map(path, "r")
                try:
                    return pa.ipc.open_file(source).read_all()
                except pa.ArrowInvalid:
                    source.seek(0)
                    return pa.ipc.open_stream(source).read_all()
            if self.format == "json":
                import pyarrow.json as pj

                return pj.read_json(path, **self.reader_kwargs)
            import pyarrow.csv as pc

            kwargs = dict(self.reader_kwargs)
            if path.lower().endswith(".tsv") and "parse_options" not in kwargs:
                kwargs["parse_options"] = pc.ParseOptions(delimiter="\t")
            return pc.read_csv(path, **kwargs)
        except (OSError, pa.ArrowException) as e:
            raise self._open_error(shard_id, e) from None

    def _batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """Record batches of a shard starting at row ``offset``."""
        if self.format == "parquet":
            import pyarrow.parquet as pq

            try:
                pf = pq.ParquetFile(self.paths[shard_id])
            except (OSError, pa.ArrowException) as e:
                raise self._open_error(shard_id, e) from None
            md = pf.metadata
            self._lengths[shard_id] = md.num_rows
            self._check_offset(shard_id, offset, md.num_rows)
            starts = [0]
            for g in range(md.num_row_groups):
                starts.append(starts[-1] + md.row_group(g).num_rows)
            g = bisect.bisect_right(starts, offset) - 1
            if g >= md.num_row_groups:
                return
            skip = offset - starts[g]
            for batch in pf.iter_batches(batch_size=self.batch_rows, row_groups=list(range(g, md.num_row_groups))):
                if skip:
                    if skip >= batch.num_rows:
                        skip -= batch.num_rows
                        continue
                    batch = batch.slice(skip)
                    skip = 0
                yield batch
            return
        table = self._table(shard_id)
        self._lengths[shard_id] = table.num_rows
        self._check_offset(shard_id, offset, table.num_rows)
        yield from table.slice(offset).to_batches(max_chunksize=self.batch_rows)

    def _check_offset(self, shard_id: int, offset: int, rows: int) -> None:
        if offset > rows:
            raise ValueError(
                f"data file {self.paths[shard_id]!r} (shard {shard_id}) has {rows} rows but the state says "
                f"{offset} were already read: the file changed since the state was saved"
            )

    def _iter_shard(self, shard_id: int, st: dict) -> Iterator[dict]:
        for batch in self._batches(shard_id, st["offset"]):
            for row in batch.to_pylist():
                st["offset"] += 1
                yield row

    def read_rows(self, shard_id: int, rows: list[int]) -> list[dict]:
        if self.format == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(self.paths[shard_id])
        else:
            table = self._table(shard_id)
        return table.take(pa.array(rows, type=pa.int64())).to_pylist()

    @property
    def features(self) -> Any:
        return None
