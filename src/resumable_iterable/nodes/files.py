"""Source over data files, one file per shard: Parquet, Arrow IPC, JSON Lines, CSV, text.

Resuming seeks instead of re-reading where the format allows it:

* Parquet - the row groups before the saved offset are skipped using the file metadata;
  only the row group holding the offset is decoded.
* Arrow IPC (file or stream format) - memory-mapped, sliced at the offset without a copy.
* JSON Lines / CSV - parsed whole and sliced at the offset (no Python objects are built for the
  rows before the offset). CSV is read as HF's csv builder reads it (pandas' ``read_csv``: empty
  fields are nulls, dates stay strings; ``reader_kwargs`` are pandas' and HF's ``sep``,
  ``column_names``...), or with pyarrow's reader when pyarrow options (``read_options``,
  ``parse_options``, ``convert_options``) are given; JSON Lines with pyarrow's. A JSON file that is one
  document - a list of objects, or an object whose ``field`` (a reader option, as in HF) holds
  them - is read as HF's json builder reads it (pandas' ``read_json``).
* text - one ``{"text": ...}`` row per line (or paragraph, or file), as HF's ``text`` builder
  reads them (``reader_kwargs``: ``sample_by``, ``keep_linebreaks``, ``encoding``,
  ``encoding_errors``, ``chunksize``); read a chunk at a time, the lines before the offset
  counted, not converted. Only chosen explicitly (``load_dataset("text", ...)``, ``format="text"``):
  a ``.txt`` file in a dataset folder is not taken for data.

Text formats may be compressed (``.gz``, ``.bz2``, ``.xz``, ``.zst`` after the extension), as in HF.
A malformed JSON Lines file names its first bad line. Parquet, Arrow and JSON Lines files follow
the first file's columns (``_aligned``), as HF casts every file to the first one's features. How each
format is opened and parsed is
``file_formats.py``; this module is the source node: shards, offsets, alignment, resumption.

A file that vanished, or that now has fewer rows than the state says were read, raises a
``ValueError`` naming the file instead of silently skipping data. The state also holds a digest
of the files' names in shard order (``files``, see :func:`names_digest`): a state loads only into
a source over the same names in the same order, since positions count files by their place (a
list given in another order, as ``glob.glob`` may give it on another machine, would re-read some
files and skip others).
"""

from __future__ import annotations

import bisect
import os
from typing import Any, Iterator

import pyarrow as pa

from .file_formats import (FORMATS, PYARROW_CSV_OPTIONS, TEXT_SCHEMA, csv_table, file_schema, is_tsv, json_document,
                           json_lines, json_lines_problem, open_binary, open_text, text_options, text_rows)
from ..state import fingerprint as digest
from .checks import check_names
from .source import SourceNode


def names_digest(paths: list[str]) -> str:
    """A short hash of the files' names in this order, each relative to the folder they all share,
    so that the same files moved to another folder or machine still match."""
    full = [os.path.abspath(p) for p in paths]
    try:
        root = os.path.commonpath([os.path.dirname(p) for p in full])
    except ValueError:  # paths on different drives share no folder
        return digest(full)
    return digest([os.path.relpath(p, root).replace(os.sep, "/") for p in full])


class FileSource(SourceNode):
    kind = "files"
    added_fields = frozenset(("files",))  # ``files``: absent from states of earlier releases

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True
    batch_rows = 1024

    def __init__(self, paths: list[str], format: str, shard_ids: list[int] | None = None,
                 reader_kwargs: dict | None = None, features: Any = None):
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
        if format == "text":
            self.reader_kwargs = text_options(self.reader_kwargs)
        self._lengths: dict[int, int] = {}
        self._first: dict = {}  # "schema": the first file's (``_first_schema``), shared by the clones
        self.names_digest = names_digest(paths)  # before the fresh state, which holds it
        super().__init__(len(paths), shard_ids)
        self.set_features(features)  # media columns (Image, Audio...) are decoded as read, as HF does

    def params(self) -> dict:
        p = {**super().params(), "format": self.format}
        if self.format == "text":  # what a row is: a state of lines does not fit paragraphs
            p.update(sample_by=self.reader_kwargs["sample_by"], keep_linebreaks=self.reader_kwargs["keep_linebreaks"])
        return p

    def _own_state(self) -> dict:
        return {**super()._own_state(), "files": self.names_digest}

    def _validate_own(self, state: dict, where: str) -> None:
        check_names(state, self.names_digest, where)  # before the offsets, which count its files
        super()._validate_own(state, where)

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
        if self.format == "text":
            return pa.Table.from_batches(list(self._text_batches(shard_id, 0)), schema=TEXT_SCHEMA)
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

                kwargs = dict(self.reader_kwargs)
                field = kwargs.pop("field", None)
                if field is not None:
                    return json_document(path, field)
                if kwargs:  # pyarrow options given: JSON Lines it is
                    with open_binary(path) as f:
                        return pj.read_json(f, **kwargs)
                try:
                    return json_lines(path)
                except pa.ArrowInvalid as e:
                    lines_error = e
                try:
                    return json_document(path, None)  # one JSON document, as HF reads it
                except ValueError:
                    # neither: name the line that is no JSON object (pyarrow's "row" counts from the start of
                    # its block, not of the file)
                    raise ValueError(json_lines_problem(path, lines_error) or str(lines_error)) from None
            kwargs = dict(self.reader_kwargs)
            if not PYARROW_CSV_OPTIONS & set(kwargs):
                return csv_table(path, kwargs)  # as HF reads it
            import pyarrow.csv as pc

            if is_tsv(path) and "parse_options" not in kwargs:
                kwargs["parse_options"] = pc.ParseOptions(delimiter="\t")
            with open_binary(path) as f:
                return pc.read_csv(f, **kwargs)
        except (OSError, ValueError, pa.ArrowException) as e:  # ValueError: a JSON document pandas cannot read
            raise self._open_error(shard_id, e) from None

    def _first_schema(self) -> pa.Schema | None:
        """The columns every file's rows follow: the first file's (``file_schema``), as in HF; ``None``
        for CSV, text, JSON documents and JSON read with pyarrow options given (each file as read)."""
        if self.format == "json" and self.reader_kwargs:
            return None
        if "schema" not in self._first:  # read once per process, whatever the passes and clones
            try:
                self._first["schema"] = file_schema(self.paths[0], self.format)
            except (OSError, pa.ArrowException) as e:
                raise self._open_error(0, e) from None
        return self._first["schema"]

    def _aligned(self, shard_id: int, part: Any) -> Any:
        """A record batch or table of file ``shard_id`` with the first file's columns, as HF casts every
        file to the features of the first: in its order, a missing column as nulls, types cast (a column
        of nulls only in the first file takes each file's type); a column the first file lacks, or a
        value the cast cannot hold, is an error naming the file."""
        schema = self._first_schema()
        if schema is None or part.schema.equals(schema):
            return part
        extra = [n for n in part.schema.names if n not in schema.names]
        if extra:
            raise ValueError(f"data file {self.paths[shard_id]!r} (shard {shard_id}) has column(s) {extra} that the "
                             f"first data file {self.paths[0]!r} has not (its columns: {schema.names})")
        columns, out = [], schema
        for k, field in enumerate(schema):
            i = part.schema.get_field_index(field.name)
            if i < 0:
                columns.append(pa.nulls(part.num_rows, field.type))
                continue
            column = part.column(i)
            if pa.types.is_null(field.type):
                out = out.set(k, field.with_type(column.type))
            elif not column.type.equals(field.type):
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise ValueError(f"data file {self.paths[shard_id]!r} (shard {shard_id}): column {field.name!r} "
                                     f"is {column.type}, and cannot be cast to {field.type} as in the first data "
                                     f"file {self.paths[0]!r}: {e}") from None
            columns.append(column)
        return type(part).from_arrays(columns, schema=out)

    def _batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """Record batches of a shard starting at row ``offset``, with the first file's columns."""
        for batch in self._file_batches(shard_id, offset):
            yield self._aligned(shard_id, batch)

    def _file_batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """Record batches of a shard starting at row ``offset``, as the file holds them."""
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
            batches = pf.iter_batches(batch_size=self.batch_rows, row_groups=list(range(g, md.num_row_groups)))
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
            return
        if self.format == "text":
            yield from self._text_batches(shard_id, offset)
            return
        table = self._table(shard_id)
        self._lengths[shard_id] = table.num_rows
        self._check_offset(shard_id, offset, table.num_rows)
        yield from table.slice(offset).to_batches(max_chunksize=self.batch_rows)

    def _text_batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """The rows of a text file from row ``offset`` on, a chunk of the file at a time."""
        opts = self.reader_kwargs
        seen = 0
        try:
            with open_text(self.paths[shard_id], opts["encoding"], opts["encoding_errors"]) as f:
                for rows in text_rows(f, opts):
                    n = len(rows)
                    start, seen = max(0, offset - seen), seen + n
                    for k in range(start, n, self.batch_rows):
                        yield pa.RecordBatch.from_arrays([pa.array(rows[k:k + self.batch_rows], pa.string())],
                                                         names=["text"])
        except (OSError, UnicodeDecodeError) as e:
            raise self._open_error(shard_id, e) from None
        self._lengths[shard_id] = seen
        self._check_offset(shard_id, offset, seen)

    def record_batches(self, shard_id: int, offset: int) -> Iterator[pa.RecordBatch]:
        """Record batches of a shard from row ``offset`` on (read by the column-wise batch path)."""
        return self._batches(shard_id, offset)

    def _check_offset(self, shard_id: int, offset: int, rows: int) -> None:
        if offset > rows:
            raise ValueError(
                f"data file {self.paths[shard_id]!r} (shard {shard_id}) has {rows} rows but the state says "
                f"{offset} were already read: the file changed since the state was saved"
            )

    def _iter_shard(self, shard_id: int, st: dict) -> Iterator[dict]:
        by_columns = self.decode_batch is not None or self.lists_as_arrays
        for batch in self._batches(shard_id, st["offset"]):
            for row in (self.rows_of(batch, not self.deferred) if by_columns else batch.to_pylist()):
                st["offset"] += 1
                yield row

    def read_rows(self, shard_id: int, rows: list[int]) -> list[dict]:
        if self.format != "parquet":
            return self.rows_of(self._aligned(shard_id, self._table(shard_id).take(pa.array(rows, type=pa.int64()))))
        import pyarrow.parquet as pq

        # only the row groups holding the rows: a resume re-reads a few buffered rows of a file
        # that may hold gigabytes of images
        pf = pq.ParquetFile(self.paths[shard_id])
        md = pf.metadata
        starts = [0]
        for g in range(md.num_row_groups):
            starts.append(starts[-1] + md.row_group(g).num_rows)
        groups = sorted({bisect.bisect_right(starts, r) - 1 for r in rows})
        if any(not 0 <= g < md.num_row_groups for g in groups):
            raise IndexError(f"a row is past the end of the file ({md.num_rows} rows)")
        table = pf.read_row_groups(groups)
        first, n = {}, 0  # row group -> its first row in ``table``
        for g in groups:
            first[g], n = n, n + md.row_group(g).num_rows
        local = [first[g] + r - starts[g] for r, g in ((r, bisect.bisect_right(starts, r) - 1) for r in rows)]
        return self.rows_of(self._aligned(shard_id, table.take(pa.array(local, type=pa.int64()))))

    def shard_label(self, sid: int) -> str:
        return f"{self.kind} source shard {sid} (file {self.paths[sid]!r})"

    # ------------------------------------------------------------------ random access (global shuffle)
    def random_access_problem(self) -> str | None:
        """Why these files cannot be read at random positions (``None``: they can)."""
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
        return self._table(shard_id).num_rows

    def random_access_table(self, shard_id: int) -> pa.Table:
        """A whole file as a table for random access: memory-mapped (Arrow IPC, no copy) or decoded into
        memory (Parquet: the decoded file is held while it is in the caller's cache)."""
        if self.format == "parquet":
            import pyarrow.parquet as pq

            try:
                table = pq.read_table(self.paths[shard_id], memory_map=True)
            except (OSError, pa.ArrowException) as e:
                raise self._open_error(shard_id, e) from None
            return self._aligned(shard_id, table)
        return self._aligned(shard_id, self._table(shard_id))

    def take_examples(self, shard_ids: Any, rows: Any, cache: dict | None = None) -> list[dict]:
        """The examples at ``rows[i]`` of file ``shard_ids[i]`` (int64 arrays), in that order: one Arrow
        ``take`` per file. ``cache`` (kept by the caller) holds the opened files by shard id."""
        import numpy as np

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
                raise ValueError(f"data file {self.paths[sid]!r} (shard {sid}) has {table.num_rows} rows, fewer "
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
