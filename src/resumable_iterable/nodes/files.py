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
JSON, CSV and text files may be inside zip archives, an archive a shard whose members are read one
after another (``archives.py``), as HF's streaming readers read them.
A malformed JSON Lines file names its first bad line. Parquet, Arrow and JSON Lines files follow
the first file's columns (``_aligned``), as HF casts every file to the first one's features (JSON:
``schema_from``, the first file of the first split, for the files of every split). How
each format is opened and parsed is ``file_formats.py`` (JSON files: ``json_files.py``); this module
is the source node: shards, offsets, alignment, resumption. Reading Parquet and Arrow files at
random positions, for the global shuffle, is ``file_access.py``.

``reshard()`` (:meth:`FileSource.resharded`) makes each row group of Parquet files a shard of its
own, as HF's ``IterableDataset.reshard``: more DataLoader workers and ranks than files then all
read. A shard is then ``pieces[shard_id] = (file, row group, rows)``, and ``files`` also digests
the row groups' sizes (a file rewritten with other row groups holds other rows under a position).

A file that vanished, or that now has fewer rows than the state says were read, raises a
``ValueError`` naming the file instead of silently skipping data. The state also holds a digest
of the files' names in shard order (``files``, see :func:`names_digest`): a state loads only into
a source over the same names in the same order, since positions count files by their place (a
list given in another order, as ``glob.glob`` may give it on another machine, would re-read some
files and skip others). ``identity``, when given, is digested with the names: what else tells these
files' rows apart from those of files of the same names (HF ``save_to_disk`` folders all name their
files ``data-00000-of-0000N.arrow``; their ``_fingerprint`` is the identity).
"""

from __future__ import annotations

import bisect
import os
from typing import Any, Iterator

import pyarrow as pa

from .file_formats import (FORMATS, TEXT_SCHEMA, arrow_ipc_table, csv_file_table, csv_options, file_schema,
                           open_text, parquet_options, select_schema, text_options, text_rows)
from .json_files import json_options, json_table
from ..state import fingerprint as digest
from .file_access import RandomFileAccess
from .archives import (DAMAGED, ArchiveReading, archive_kind, archive_members, digest_name, member_path,
                       members_digest_names, split_member, zip_members)
from .checks import check_names
from .base import Node
from .source import SourceNode


def names_digest(paths: list[str]) -> str:
    """A short hash of the files' names in this order, each relative to the folder they all share,
    so that the same files moved to another folder or machine still match."""
    full = [os.path.abspath(p) for p in paths]
    try:
        root = os.path.commonpath([os.path.dirname(p) for p in full])
    except ValueError:  # paths on different drives share no folder
        return digest(full)
    # ``full`` is normalized: a path that starts with ``root`` and a separator is named by what
    # follows them, as ``os.path.relpath`` names it (which cost seconds for 100 000s of names)
    prefix = root if root.endswith(os.sep) else root + os.sep
    cut = len(prefix)
    if all(len(p) > cut and p.startswith(prefix) for p in full):
        return digest([p[cut:].replace(os.sep, "/") for p in full])
    return digest([os.path.relpath(p, root).replace(os.sep, "/") for p in full])


def dropped_field(source: pa.DataType, target: pa.DataType, path: str = "") -> str | None:
    """The first field of a struct in ``source`` that ``target`` lacks (a cast would drop it
    silently: ``{"b": 1}`` read as ``{"a": None}``), as a dotted path; HF refuses such a cast."""
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        for field in source:
            i = target.get_field_index(field.name)
            found = f"{path}.{field.name}" if i < 0 else dropped_field(field.type, target.field(i).type,
                                                                        f"{path}.{field.name}")
            if found:
                return found
    elif pa.types.is_list(source) or pa.types.is_large_list(source):
        if pa.types.is_list(target) or pa.types.is_large_list(target):
            return dropped_field(source.value_type, target.value_type, path + "[]")
    return None


class FileSource(ArchiveReading, RandomFileAccess, SourceNode):
    kind = "files"
    added_fields = frozenset(("files",))  # ``files``: absent from states of earlier releases

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True
    batch_rows = 1024

    def __init__(self, paths: list[str], format: str, shard_ids: list[int] | None = None,
                 reader_kwargs: dict | None = None, features: Any = None, schema_from: str | None = None,
                 identity: str | None = None):
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
        elif format == "json":
            self.reader_kwargs = json_options(self.reader_kwargs)
        elif format == "csv":
            csv_options(self.reader_kwargs)
        #: Parquet: the columns to read (``None``: all) and the rows to keep (a pyarrow expression)
        self.columns, self.filters, self._filter_columns = parquet_options(format, self.reader_kwargs)
        self._lengths: dict[int, int] = {}
        self._first: dict = {}  # "schema": the first file's (``_first_schema``), shared by the clones
        #: per data file, the members of a zip archive (``None``: a plain file); ``None``: no archive
        self.members = archive_members(paths, format)
        self.names_digest = names_digest([digest_name(p) for p in paths])  # before the fresh state, which holds it
        if self.members is not None:  # and the members of each archive, in their order
            self.names_digest = digest([self.names_digest, members_digest_names(self.members)])
        if identity is not None:  # what names the files' rows beyond their names (HF save_to_disk's fingerprint)
            self.names_digest = digest([self.names_digest, identity])
        #: JSON: where the features given hold HF's ``Json`` (``None``: found in the first file, as HF)
        self.json_paths: list | None = None
        #: another file whose columns these files follow (a zip: its first member), instead of the
        #: first of ``paths``: HF's json builder takes every split's from the first split's first file
        self.schema_from = None if schema_from is None else os.fspath(schema_from)
        #: ``None``: one file per shard; after ``resharded``: one Parquet row group per shard,
        #: ``(file, row group, rows)``
        self.pieces: list[tuple[int, int, int]] | None = None
        super().__init__(len(paths), shard_ids)
        self.set_features(features)  # media columns (Image, Audio...) are decoded as read, as HF does

    def params(self) -> dict:
        p = {**super().params(), "format": self.format}
        if self.pieces is not None:  # sorted before "shard_ids": a state of the files unsplit is refused naming it
            p["row_groups"] = "a shard each (reshard())"
        if self.columns is not None:
            p["columns"] = list(self.columns)
        if self.filters is not None:  # offsets count the rows kept
            p["filters"] = str(self.filters)
        if self.format == "text":  # what a row is: a state of lines does not fit paragraphs
            p.update(sample_by=self.reader_kwargs["sample_by"], keep_linebreaks=self.reader_kwargs["keep_linebreaks"])
        return p

    def _own_state(self) -> dict:
        return {**super()._own_state(), "files": self.names_digest}

    def _validate_own(self, state: dict, where: str) -> None:
        check_names(state, self.names_digest, where)  # before the offsets, which count its files
        super()._validate_own(state, where)

    def resharded(self) -> Node:
        """A copy, from the start, with one shard per row group of its Parquet files (of the files
        it reads, in their order; empty row groups left out); other formats, or files whose row
        groups are no more shards than the files, are returned as they are (HF's ``reshard``)."""
        if self.format != "parquet" or self.pieces is not None:
            return self.clone()
        pieces = []
        for f in self.shard_ids:
            md = self._parquet(f).metadata
            pieces += [(f, g, md.row_group(g).num_rows) for g in range(md.num_row_groups) if md.row_group(g).num_rows]
        if len(pieces) <= len(self.shard_ids):
            return self.clone()
        new = self._with_shards(list(range(len(pieces))))
        new.total_shards, new.pieces, new._lengths = len(pieces), pieces, {}
        new.names_digest = digest([self.names_digest, [[f, g, n] for f, g, n in pieces]])
        new._state_dict = {}
        new._state_dict = new._fresh_state()
        return new

    # ------------------------------------------------------------------ reading
    def shard_file(self, shard_id: int) -> str:
        """The data file shard ``shard_id`` reads (error notes name it)."""
        return self.paths[shard_id if self.pieces is None else self.pieces[shard_id][0]]

    def _where(self, shard_id: int, member: str | None = None) -> str:
        """The shard, for messages: its file (and row group, after ``resharded``; or archive member)."""
        if member is not None:
            return f"{split_member(member)[1]!r} in data file {self.paths[shard_id]!r} (shard {shard_id})"
        if self.pieces is None:
            return f"data file {self.paths[shard_id]!r} (shard {shard_id})"
        f, g, _ = self.pieces[shard_id]
        return f"data file {self.paths[f]!r} (row group {g}, shard {shard_id})"

    def _open_error(self, shard_id: int, e: Exception, member: str | None = None) -> ValueError:
        return ValueError(f"cannot read {self._where(shard_id, member)}: {e}")

    def _parquet(self, shard_id: int) -> Any:
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(self.shard_file(shard_id))
        except (OSError, pa.ArrowException) as e:
            raise self._open_error(shard_id, e) from None

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

    def _first_schema(self) -> pa.Schema | None:
        """The columns every file's rows follow: the first file's (``file_schema``), as in HF; ``None``
        for CSV, text, JSON documents and JSON read with pyarrow options given (each file as read)."""
        if self.format == "json" and set(self.reader_kwargs) - {"chunksize", "encoding", "encoding_errors"}:
            return None
        if "schema" not in self._first:  # read once per process, whatever the passes and clones
            first = self.schema_file()
            try:
                schema = None if first is None else file_schema(
                    first, self.format, self.reader_kwargs.get("chunksize"), self.json_paths,
                    self.reader_kwargs.get("encoding"), self.reader_kwargs.get("encoding_errors"))
            except DAMAGED as e:  # a member of the first archive
                raise self._open_error(0, OSError(f"the archive is damaged ({e})"), first) from None
            except (OSError, pa.ArrowException) as e:
                if self.schema_from is not None:
                    raise ValueError(f"cannot read {first!r}, the first data file of the first split, whose "
                                     f"columns every split follows: {e}") from None
                raise self._open_error(0, e) from None
            if self.columns is not None:
                schema = select_schema(schema, self.columns, first)
            self._first["schema"] = schema
        return self._first["schema"]

    def schema_file(self) -> str | None:
        """The file whose columns every file follows (HF's first table): ``schema_from`` (a zip's
        first member) when given, else the first data file, or the first member of the first
        archive holding some; ``None``: no file to read."""
        if self.schema_from is None:
            return super().schema_file()
        if archive_kind(self.schema_from) != "zip":
            return self.schema_from
        members = zip_members(self.schema_from)
        return member_path(self.schema_from, members[0]) if members else None

    def check_features(self, features: Any) -> None:
        """Refuse ``features`` (to cast the rows to) whose struct lacks a field the first file's rows
        have: the cast would drop it silently (``{"a": 0, "c": 1}`` read as ``{"a": 0}``), where HF's
        cast of the file's table refuses it ("Couldn't cast"). Fields of later files are checked
        against the first file's as they are read (``_aligned``)."""
        schema = self._first_schema()
        if schema is None or features is None:
            return
        from datasets import Features

        features = features if isinstance(features, Features) else Features(features)
        target = features.arrow_schema
        for field in schema:
            i = target.get_field_index(field.name)
            found = None if i < 0 else dropped_field(field.type, target.field(i).type, field.name)
            if found:
                where = self._where(0) if self.schema_from is None else f"data file {self.schema_file()!r}"
                raise ValueError(f"features: {where} has the field {found!r}, which the feature of column "
                                 f"{field.name!r} lacks ({features[field.name]}): casting would drop it, as HF "
                                 "refuses (Couldn't cast); add the field to the features")

    def json_features(self, given: Any = None) -> Any:
        """The HF features of a JSON source's rows, as HF finds them in the first chunk of the first
        file (``Json`` columns included, decoded as read). With features ``given`` (to cast the rows
        to), ``None``: their ``Json`` columns are those encoded as JSON text (decoded by the cast).
        ``None`` also for a JSON document, or JSON read with pyarrow's options."""
        from datasets import Features

        from .json_lines import hf_json, json_paths

        if given is not None:
            if hf_json() is not None:
                self.json_paths = json_paths(Features(given).arrow_schema)
            return None
        schema = self._first_schema()
        return None if schema is None else Features.from_arrow_schema(schema)

    def _aligned(self, shard_id: int, part: Any, member: str | None = None) -> Any:
        """A record batch or table of file ``shard_id`` with the first file's columns, as HF casts every
        file to the features of the first: in its order, a missing column as nulls, types cast (a column
        of nulls only in the first file takes each file's type); a column the first file lacks, or a
        value the cast cannot hold, is an error naming the file."""
        schema = self._first_schema()
        if schema is None or part.schema.equals(schema):
            return part
        extra = [n for n in part.schema.names if n not in schema.names]
        if extra:
            raise ValueError(f"{self._where(shard_id, member)} has column(s) {extra} that the "
                             f"first data file {self.schema_file()!r} has not (its columns: {schema.names})")
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
                dropped = dropped_field(column.type, field.type)
                if dropped:
                    raise ValueError(f"{self._where(shard_id, member)}: column {field.name!r} has field "
                                     f"{field.name + dropped!r} that the first data file {self.schema_file()!r} has "
                                     f"not (its type there: {field.type})")
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise ValueError(f"{self._where(shard_id, member)}: column {field.name!r} "
                                     f"is {column.type}, and cannot be cast to {field.type} as in the first data "
                                     f"file {self.schema_file()!r}: {e}") from None
            columns.append(column)
        return type(part).from_arrays(columns, schema=out)

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
        table = self._table(shard_id)
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

    def shard_label(self, sid: int) -> str:
        if self.pieces is None:
            return f"{self.kind} source shard {sid} (file {self.paths[sid]!r})"
        return f"{self.kind} source shard {sid} (file {self.shard_file(sid)!r}, row group {self.pieces[sid][1]})"

    def position(self) -> dict | None:
        """Where the last example came from, with its file: an error note names the file."""
        pos = super().position()
        if pos is not None:
            pos["file"] = self.shard_file(pos["shard"])
        return pos

    def position_of(self, prov: list) -> dict:
        pos = super().position_of(prov)
        pos["file"] = self.shard_file(pos["shard"])
        return pos

    def position_back(self, back: int) -> dict | None:
        pos = super().position_back(back)
        if pos is not None:
            pos["file"] = self.shard_file(pos["shard"])
        return pos
