"""Reading the shards of ``FileSource`` (``files.py``): record batches of a shard from a row
offset on, seeking where the format allows it (Parquet: the row groups before the offset skipped
by their metadata; Arrow IPC: memory-mapped and sliced; JSON, CSV: parsed whole and sliced; text:
a chunk at a time, the lines before the offset counted), Parquet's columns and filters, the
check that a file still holds the rows a state says were read, and re-reading given rows of a
shard (a replay-mode shuffle resuming).

A mixin of :class:`~resumable_iterable.nodes.files.FileSource` (``self`` is the source): how each
format is opened and parsed is ``file_formats.py`` (JSON: ``json_files.py``), the columns every
file follows ``file_columns.py``, the members of zip archives ``archives.py``."""

from __future__ import annotations

import bisect
from typing import Any, Iterator

import pyarrow as pa

from .file_formats import TEXT_SCHEMA, arrow_ipc_table, csv_file_table, text_rows
from .file_open import open_text
from .json_files import json_table


class ShardReading:
    """How a :class:`~resumable_iterable.nodes.files.FileSource` reads its shards (a mixin: ``self``
    is the source)."""

    def _parquet(self, shard_id: int) -> Any:
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(self.shard_file(shard_id))
        except (OSError, pa.ArrowException) as e:
            raise self._open_error(shard_id, e) from None
        if self.columns is not None:  # pyarrow reads the others and leaves a missing one out silently
            missing = [c for c in self.columns if pf.schema_arrow.get_field_index(c) < 0]
            if missing:  # HF: ArrowInvalid (No match for FieldRef)
                raise ValueError(f"columns={self.columns}: {self._where(shard_id)} has no column(s) {missing} "
                                 f"(its columns: {pf.schema_arrow.names})")
        return pf

    def _row_groups(self, shard_id: int, md: Any) -> tuple[list[int], list[int]]:
        """The row groups of a Parquet shard and the first row of each in the shard (plus the end),
        checked against the file's metadata (``md``)."""
        if self.pieces is None:
            groups = list(range(md.num_row_groups))
        else:
            _, g, rows = self.pieces[shard_id]
            if g >= md.num_row_groups or md.row_group(g).num_rows != rows:
                raise ValueError(f"{self._where(shard_id)} no longer has the row group of {rows} rows it had when the "
                                 "dataset was built: the file changed")
            groups = [g]
        starts = [0]
        for g in groups:
            starts.append(starts[-1] + md.row_group(g).num_rows)
        return groups, starts

    def shard_length(self, shard_id: int) -> int | None:
        if self.filters is not None:
            return None  # the rows kept are known once read
        if self.format == "parquet" and self.columnless():
            return 0  # columns=[]: rows of no column, which HF does not yield
        if self.pieces is not None:
            return self.pieces[shard_id][2]
        if shard_id in self._lengths:
            return self._lengths[shard_id]
        if self.format == "parquet":
            n = self._parquet(shard_id).metadata.num_rows
            self._lengths[shard_id] = n
            return n
        return None

    def _table(self, shard_id: int, member: str | None = None, carried: list | None = None) -> pa.Table:
        """A whole file as read (``member``: that member of an archive's shard; ``carried``: the JSON
        paths the archive's members before it found, see ``json_table``)."""
        path = member or self.shard_file(shard_id)
        if self.format == "text":
            return pa.Table.from_batches(list(self._text_batches(shard_id, 0)), schema=TEXT_SCHEMA)
        if self.format == "arrow":
            return self._arrow_table(shard_id, path)
        try:
            if self.format == "json":
                return json_table(path, self.reader_kwargs, self._first_schema(),
                                  lambda table: self._aligned(shard_id, table, member), carried)
            return csv_file_table(path, self.reader_kwargs)
        except (OSError, ValueError, pa.ArrowException) as e:  # ValueError: a JSON document pandas cannot read
            if self._where(shard_id, member) in str(e):  # already names the file (``_aligned``, a JSON chunk)
                raise
            raise self._open_error(shard_id, e, member) from None

    def _arrow_table(self, shard_id: int, path: str) -> pa.Table:
        """An Arrow IPC file (file or stream format), memory-mapped. Its data are checked once per process,
        as HF checks each record batch: offsets a damaged file holds would read past its buffers (a
        ``SystemError`` or worse). The error is pyarrow's ``ArrowInvalid`` (a ``ValueError``), as HF's."""
        try:
            table = arrow_ipc_table(path)
        except (OSError, pa.ArrowException) as e:
            raise self._open_error(shard_id, e) from None
        checked = self._first.setdefault("checked", set())
        if path not in checked:
            try:
                table.validate(full=True)
            except pa.ArrowInvalid as e:
                raise pa.ArrowInvalid(f"cannot read {self._where(shard_id)}: the file is damaged ({e})") from None
            checked.add(path)
        return table

    def _read_columns(self) -> list[str] | None:
        """The Parquet columns to read: those asked for, and those the filters need."""
        if self.columns is None or self.filters is None:
            return self.columns
        if self._filter_columns is None:  # a pyarrow expression: its columns are not listed
            return None
        return list(dict.fromkeys([*self.columns, *self._filter_columns]))

    def _kept(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Record batches as read, with the rows the filters keep and the columns asked for (in the
        first file's order, which ``_aligned`` gives every file)."""
        schema = self._first_schema() if self.columns is not None else None
        names = schema.names if schema is not None else None if self.columns is None else list(self.columns)
        for batch in batches:
            if self.filters is not None:
                batch = pa.Table.from_batches([batch]).filter(self.filters).combine_chunks()
                batch = batch.to_batches()[0] if batch.num_rows else None
                if batch is None:
                    continue
            if self.columns is not None and batch.schema.names != names:
                batch = batch.select(names)
            yield batch

    def _batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """Record batches of a shard starting at row ``offset``, with the first file's columns."""
        if self.is_archive(shard_id):
            yield from self.member_batches(shard_id, offset)
            return
        for batch in self._file_batches(shard_id, offset):
            yield self._aligned(shard_id, batch)

    def _file_batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """Record batches of a shard starting at row ``offset``, as the file holds them."""
        if self.format == "parquet" and self.columnless():  # columns=[]: no row yielded, as in HF
            self._lengths[shard_id] = 0
            self._check_offset(shard_id, offset, 0)
            return
        if self.format == "parquet":
            pf = self._parquet(shard_id)
            groups, starts = self._row_groups(shard_id, pf.metadata)
            self._lengths[shard_id] = starts[-1]
            self._check_offset(shard_id, offset, starts[-1])
            k = bisect.bisect_right(starts, offset) - 1
            if self.filters is not None:
                k = 0  # the offset counts rows kept: they are counted again from the start
            elif k >= len(groups):
                return
            skip = offset - starts[k]
            batches = self._kept(pf.iter_batches(batch_size=self.batch_rows, row_groups=groups[k:],
                                                 columns=self._read_columns()))
            while True:
                try:  # decoding errors (a file damaged in the middle) name the file, like open errors
                    batch = next(batches)
                except StopIteration:
                    break
                except (OSError, pa.ArrowException) as e:
                    raise self._open_error(shard_id, e) from None
                if skip:
                    if skip >= batch.num_rows:
                        skip -= batch.num_rows
                        continue
                    batch = batch.slice(skip)
                    skip = 0
                yield batch
            if skip:  # filters: fewer rows kept than the state says were read
                self._check_offset(shard_id, offset, offset - skip)
            return
        if self.format == "text":
            yield from self._text_batches(shard_id, offset)
            return
        table = self._aligned(shard_id, self._table(shard_id))  # the rows yielded (none without columns)
        self._lengths[shard_id] = table.num_rows
        self._check_offset(shard_id, offset, table.num_rows)
        yield from table.slice(offset).to_batches(max_chunksize=self.batch_rows)

    def _text_batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """The rows of a text file from row ``offset`` on, a chunk of the file at a time."""
        seen = yield from self._text_file_batches(shard_id, offset)
        self._lengths[shard_id] = seen
        self._check_offset(shard_id, offset, seen)

    def _text_file_batches(self, shard_id: int, offset: int, member: str | None = None) -> Iterator[pa.RecordBatch]:
        """The rows of a text file (or archive ``member``) from row ``offset`` on; returns its rows."""
        opts = self.reader_kwargs
        seen = 0
        try:
            with open_text(member or self.shard_file(shard_id), opts["encoding"], opts["encoding_errors"]) as f:
                for rows in text_rows(f, opts):
                    n = len(rows)
                    start, seen = max(0, offset - seen), seen + n
                    for k in range(start, n, self.batch_rows):
                        yield pa.RecordBatch.from_arrays([pa.array(rows[k:k + self.batch_rows], pa.string())],
                                                         names=["text"])
        except (OSError, UnicodeDecodeError) as e:
            raise self._open_error(shard_id, e, member) from None
        return seen

    def record_batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """Record batches of a shard from row ``offset`` on (read by the column-wise batch path)."""
        return self._batches(shard_id, offset)

    def _check_offset(self, shard_id: int, offset: int, rows: int) -> None:
        if offset > rows:
            raise ValueError(
                f"{self._where(shard_id)} has {rows} rows but the state says "
                f"{offset} were already read: the file changed since the state was saved"
            )

    def _iter_shard(self, shard_id: int, st: dict) -> Iterator[dict]:
        by_columns = self.decode_batch is not None or self.lists_as_arrays
        for batch in self._batches(shard_id, st["offset"]):
            for row in (self.iter_rows(batch) if by_columns else batch.to_pylist()):
                st["offset"] += 1
                yield row

    def read_rows(self, shard_id: int, rows: list[int]) -> list[dict]:
        if self.is_archive(shard_id):
            return self.archive_rows(shard_id, rows)
        if self.format != "parquet":
            return self.rows_of(self._aligned(shard_id, self._table(shard_id).take(pa.array(rows, type=pa.int64()))))
        if self.filters is not None:  # rows count the rows kept: read the shard, keep them, take
            table = pa.Table.from_batches(list(self._batches(shard_id, 0)), schema=self._first_schema())
            if rows and max(rows) >= table.num_rows:
                raise IndexError(f"a row is past the end of the shard ({table.num_rows} rows kept)")
            return self.rows_of(table.take(pa.array(rows, type=pa.int64())))
        # only the row groups holding the rows: a resume re-reads a few buffered rows of a file
        # that may hold gigabytes of images
        pf = self._parquet(shard_id)
        groups, starts = self._row_groups(shard_id, pf.metadata)
        ks = sorted({bisect.bisect_right(starts, r) - 1 for r in rows})  # positions in ``groups``
        if any(not 0 <= k < len(groups) for k in ks):
            raise IndexError(f"a row is past the end of the shard ({starts[-1]} rows)")
        table = pf.read_row_groups([groups[k] for k in ks], columns=self.columns)
        first, n = {}, 0  # position in ``groups`` -> its first row in ``table``
        for k in ks:
            first[k], n = n, n + starts[k + 1] - starts[k]
        local = [first[k] + r - starts[k] for r, k in ((r, bisect.bisect_right(starts, r) - 1) for r in rows)]
        return self.rows_of(self._aligned(shard_id, table.take(pa.array(local, type=pa.int64()))))
