"""The columns every data file of ``FileSource`` (``files.py``) follows: the first file's (or
``schema_from``'s, HF's first table of the first split), read once per process. Each file's record
batches are made to follow them (``_aligned``: in the first file's order, a missing column as
nulls, types cast), as HF casts every file to the first one's features; a column or struct field
the first file lacks is an error naming the file, as are features that would drop a field
(``check_features``). ``json_features``: the HF features HF finds in a JSON source's first file.

A mixin of :class:`~resumable_iterable.nodes.files.FileSource` (``self`` is the source); it uses
the source's ``_where``, ``_open_error``, ``format``, ``reader_kwargs``, ``columns``,
``json_paths``, ``schema_from`` and ``_first``."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .archives import DAMAGED, archive_kind, member_path, zip_members
from .file_formats import file_schema, select_schema


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


class FirstFileColumns:
    """What makes every file of a :class:`~resumable_iterable.nodes.files.FileSource` follow the first
    file's columns (a mixin: ``self`` is the source)."""

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
            for name in self.json_text_columns if schema is not None else ():
                i = schema.get_field_index(name)
                if i >= 0 and pa.types.is_struct(schema.field(i).type):
                    schema = schema.set(i, schema.field(i).with_type(pa.string()))
            if schema is not None and self.json_given_columns is not None:
                # JSON with features given: HF casts every file to them, so a feature's column the first
                # file lacks (all of them for {} rows) is no other file's extra column: typed null here,
                # it takes each file's own type, and the cast to the features gives it theirs
                given = self.json_given_columns
                schema = pa.schema([schema.field(n) if n in schema.names else pa.field(n, pa.null()) for n in given]
                                   + [field for field in schema if field.name not in given], metadata=schema.metadata)
            self._first["schema"] = schema
        return self._first["schema"]

    def schema_file(self) -> str | None:
        """The file whose columns every file follows (HF's first table): ``schema_from`` (a zip's
        first member) when given, else the first data file (JSON: the first with a row, empty files
        and files of blank lines before it skipped, as HF takes its features from the first table
        read: an empty file gives none), or the first member of the first archive holding some;
        ``None``: no file to read."""
        if self.schema_from is None:
            first = super().schema_file()
            if self.format == "json" and first is not None:  # HF's first table: empty files give none
                from .json_files import blank_file

                encoding, errors = self.reader_kwargs.get("encoding"), self.reader_kwargs.get("encoding_errors")
                for i, path in enumerate(self.paths):
                    for candidate in ([member_path(path, m) for m in self.members[i]] if self.is_archive(i) else [path]):
                        if not blank_file(candidate, encoding, errors):
                            return candidate
            return first
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
        where = self._where(0) if self.schema_from is None else f"data file {self.schema_file()!r}"
        lacking = [name for name in schema.names if name not in features]
        if lacking:  # HF's cast of the file's table raises (JSON: ours dropped the column silently)
            raise cast_error(f"features: {where} has column(s) {lacking} that the features lack (their columns: "
                             f"{list(features)}): add them to the features, or leave them out with "
                             "remove_columns after reading", schema.names, list(features))
        target = features.arrow_schema
        for field in schema:
            i = target.get_field_index(field.name)
            found = None if i < 0 else dropped_field(field.type, target.field(i).type, field.name)
            if found:
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
            given = given if isinstance(given, Features) else Features(given)
            if hf_json() is not None:
                self.json_paths = json_paths(given.arrow_schema)
            self.json_given_columns = tuple(given)
            self.json_text_columns = tuple(name for name, feature in given.items()
                                           if getattr(feature, "dtype", None) == "string"
                                           and type(feature).__name__ == "Value")
            return None
        schema = self._first_schema()
        return None if schema is None else Features.from_arrow_schema(schema)

    def _aligned(self, shard_id: int, part: Any, member: str | None = None) -> Any:
        """A record batch or table of file ``shard_id`` with the first file's columns, as HF casts every
        file to the features of the first: in its order, a missing column as nulls, types cast (a column
        of nulls only in the first file takes each file's type); a column the first file lacks, or a
        value the cast cannot hold, is an error naming the file."""
        schema = self._first_schema()
        for name in self.json_text_columns:  # objects typed string by the features: their JSON text (HF)
            i = part.schema.get_field_index(name)
            if i >= 0 and pa.types.is_struct(part.schema.field(i).type):
                part = part.set_column(i, name, json_text(part.column(i)))
        if schema is None or part.schema.equals(schema):
            return columnless_rows_dropped(part)
        extra = [n for n in part.schema.names if n not in schema.names]
        if extra:
            raise cast_error(f"{self._where(shard_id, member)} has column(s) {extra} that the first data file "
                             f"{self.schema_file()!r} has not (its columns: {schema.names})",
                             part.schema.names, schema.names)
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
                    raise ColumnTypeError(f"{self._where(shard_id, member)}: column {field.name!r} has field "
                                          f"{field.name + dropped!r} that the first data file {self.schema_file()!r} "
                                          f"has not (its type there: {field.type})")
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    # a value the type cannot hold: ValueError (HF: ArrowInvalid); a type that does not
                    # cast to the other (a list to a number): also a TypeError, as HF's
                    error = ValueError if isinstance(e, pa.ArrowInvalid) else ColumnTypeError
                    raise error(f"{self._where(shard_id, member)}: column {field.name!r} "
                                f"is {column.type}, and cannot be cast to {field.type} as in the first data "
                                f"file {self.schema_file()!r}: {e}") from None
            columns.append(column)
        return columnless_rows_dropped(type(part).from_arrays(columns, schema=out))

    def columnless(self) -> bool:
        """Whether every file's rows have no column (the first file's: JSON Lines of ``{}`` only,
        Parquet's ``columns=[]``): then no file has rows, as in HF (see :func:`columnless_rows_dropped`)."""
        schema = self._first_schema()
        return schema is not None and len(schema) == 0


def json_text(column: Any) -> pa.Array:
    """A column of objects (a struct) as the JSON text of each (``None`` for a null), written as HF's
    json builder writes them when the features type such a column ``Value("string")`` (pandas'
    ``to_json``: ``{"x":1}``)."""
    import pandas as pd

    lines = pa.chunked_array(column.chunks if isinstance(column, pa.ChunkedArray) else [column]).to_pandas(
        types_mapper=pd.ArrowDtype).to_json(orient="records", lines=True)
    return pa.array((None if x.strip() == "null" else x.strip() for x in lines.split("\n") if x.strip()),
                    type=pa.string())


class ColumnTypeError(ValueError, TypeError):
    """A file's column whose type does not cast to the first file's (a list where the first file has
    numbers, a struct field it lacks): HF's cast raises ``TypeError`` ("Couldn't cast array of type
    ..."), ours raised ``ValueError``; this is both."""


def cast_error(message: str, columns: list[str], expected: list[str]) -> ValueError:
    """The error for a file whose columns do not fit the first file's: HF's ``CastError`` (a
    ``ValueError``), as HF's cast of that file's table raises, when ``datasets`` is installed."""
    try:
        cls = _file_cast_error()
    except ImportError:
        return ValueError(message)
    return cls(message, list(columns), list(expected))


def _file_cast_error() -> type:
    """``FileCastError``: HF's ``CastError`` built from its message alone, as DataLoader workers'
    errors are built again in the main process (HF's own needs keywords: a ``RuntimeError`` there).
    Made on first use, so that ``datasets`` is imported only when needed; pickled by its name, which
    the module's ``__getattr__`` gives."""
    cls = globals().get("FileCastError")
    if cls is None:
        from datasets.table import CastError

        class FileCastError(CastError):
            def __init__(self, message: str = "", table_column_names: Any = (), requested_column_names: Any = ()):
                super().__init__(message, table_column_names=list(table_column_names),
                                 requested_column_names=list(requested_column_names))

            def __reduce__(self) -> Any:
                return type(self), (*self.args[:1], self.table_column_names, self.requested_column_names)

        FileCastError.__module__, FileCastError.__qualname__ = __name__, "FileCastError"
        cls = globals()["FileCastError"] = FileCastError
    return cls


def __getattr__(name: str) -> Any:  # ``FileCastError`` is made on first use (pickles name it)
    if name == "FileCastError":
        return _file_cast_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def columnless_rows_dropped(part: Any) -> Any:
    """A table or record batch of a file as yielded: none of its rows when it has no column (HF's
    reader yields the rows of each table column by column, so a table of rows without columns, JSON
    Lines of ``{}`` only or Parquet's ``columns=[]``, yields nothing)."""
    return part.slice(0, 0) if part.num_columns == 0 and part.num_rows else part
