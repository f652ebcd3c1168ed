"""How each data file format is opened and parsed, as HF's packaged builders read them: the file
formats and their extensions, compressed files (``.gz``, ``.bz2``, ``.xz``, ``.zst`` after the
format's extension), the first file's schema (JSON Lines: HF 5.2's ``Json`` columns found as HF
finds them, ``json_lines.py``), reader options, text rows (HF's ``text`` builder), CSV (pandas, as
HF) and Arrow IPC files; JSON files are read in ``json_files.py``. The source node over these
files, its shards, offsets and resumption, is ``files.py``. A path may name a member of a zip
archive (``zip://<member>::<archive>``, see ``archives.py``), opened by ``open_binary`` and
``open_text``."""

from __future__ import annotations

import codecs
import os
from typing import Any, Iterator

import pyarrow as pa

from .archives import open_member, split_member
from .checks import as_int

FORMATS = ("parquet", "arrow", "json", "csv", "text")
TEXT_OPTIONS = {"sample_by": "line", "keep_linebreaks": False, "encoding": "utf-8", "encoding_errors": None,
                "chunksize": 10 << 20}
_EXT = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow",
        ".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv", ".tsv": "csv"}


_COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".xz": "xz"}


#: the file names HF's ``data_files`` globs leave out unless the pattern ends with that name (dataset metadata)
NOT_DATA = frozenset(("README.md", "config.json", "dataset_info.json", "dataset_infos.json", "dummy_data.zip",
                      "dataset_dict.json"))


def unrequested(path: str, pattern: str) -> bool:
    """Whether HF's glob resolution leaves ``path``, matched by glob ``pattern``, out: dataset metadata
    (``README.md``...) unless the pattern ends with that name; a hidden file or one in a hidden folder
    (``.x``) unless the pattern has as many hidden parts (``.*/*`` asks for the files of hidden
    folders); a file in a special folder (``__x``, as ``__pycache__``) unless the pattern's folders
    have as many such parts."""
    parts = [x for x in path.replace("\\", "/").split("/") if x]
    wanted = [x for x in pattern.replace("\\", "/").split("/") if x]
    if parts and parts[-1] in NOT_DATA and (not wanted or wanted[-1] != parts[-1]):
        return True

    def hidden(xs: list[str]) -> int:
        return sum(1 for x in xs if x.startswith(".") and set(x) != {"."})

    def special(xs: list[str]) -> int:
        return sum(1 for x in xs[:-1] if x.startswith("__"))

    return hidden(parts) != hidden(wanted) or special(parts) != special(wanted)


def resolve_data_files(paths: list[str]) -> list[str]:
    """Data files given to ``from_json`` / ``from_csv`` / ``from_text`` / ``from_parquet`` ... as HF's
    file readers resolve them: a path that exists is itself; a glob pattern (``*``, ``?``, ``[...]``,
    ``**``) its matching files, sorted, without those HF leaves out (:func:`unrequested`: dataset
    metadata as ``README.md``, hidden files and folders, ``__pycache__``...) unless the pattern names
    them. As in HF, a pattern that matches no other file adds none (with other patterns that do); a
    path that does not exist, or patterns that give no file at all, are a ``FileNotFoundError`` naming
    them when the dataset is built (HF: "Unable to find"; for globs HF fails later, or reads an empty
    dataset), not an error at the first read. URLs and archive members (``zip://...::...``) are kept
    as given."""
    import glob

    out: list[str] = []
    left_out: list[str] = []
    for p in paths:
        if os.path.exists(p) or "://" in p:
            out.append(p)
            continue
        if not any(ch in p for ch in "*?["):
            raise FileNotFoundError(f"Unable to find data file {p!r}")
        hits = [h for h in sorted(glob.glob(p, recursive=True, include_hidden=True)) if os.path.isfile(h)]
        kept = [h for h in hits if not unrequested(h, p)]
        left_out.extend(h for h in hits if h not in kept)
        out.extend(kept)
    if paths and not out:  # (no paths at all: the caller says "no data files given")
        why = (f" (it matches only files HF's globs leave out: {left_out[:3]} - dataset metadata, hidden files "
               "and folders, __pycache__...; name them in the pattern to read them)") if left_out else ""
        raise FileNotFoundError(f"Unable to find data files matching {paths[0] if len(paths) == 1 else paths!r}{why}")
    return out


def format_of(path: str) -> str | None:
    p = path.lower()
    for suffix in _COMPRESSIONS:
        if p.endswith(suffix):
            p = p[: -len(suffix)]
    return _EXT.get(os.path.splitext(p)[1])


def compression_of(path: str) -> str | None:
    """The compression a file's extension names (``.gz``, ``.bz2``, ``.zst``, ``.xz``), as HF infers it."""
    member = split_member(path)
    if member is not None:  # an archive member: its own name says
        path = member[1]
    return _COMPRESSIONS.get(os.path.splitext(path.lower())[1])


def open_binary(path: str) -> Any:
    """A file (or archive member) opened for reading bytes, decompressed as its extension says."""
    compression = compression_of(path)
    if split_member(path) is not None:
        return _decompressed(open_member(path), compression)
    if compression == "gzip":
        import gzip

        return gzip.open(path, "rb")
    if compression == "bz2":
        import bz2

        return bz2.open(path, "rb")
    if compression == "xz":
        import lzma

        return lzma.open(path, "rb")
    if compression == "zstd":
        return pa.input_stream(path, compression="zstd")
    return open(path, "rb")


def _decompressed(raw: Any, compression: str | None) -> Any:
    """An open binary file, decompressed; closing the result closes ``raw``."""
    if compression is None:
        return raw
    if compression == "zstd":
        return pa.input_stream(raw, compression="zstd")
    import bz2
    import gzip
    import lzma

    f = {"gzip": gzip, "bz2": bz2, "xz": lzma}[compression].open(raw, "rb")
    close = f.close

    def close_both() -> None:
        try:
            close()
        finally:
            raw.close()

    f.close = close_both
    return f


def is_plain_file(path: str) -> bool:
    """A file read as it is on disk: not compressed, not in an archive."""
    return compression_of(path) is None and split_member(path) is None


def open_lines(path: str) -> Any:
    """A file opened for reading bytes a line at a time (``readline``), decompressed."""
    if compression_of(path) != "zstd":
        return open_binary(path)
    import io

    with open_binary(path) as f:  # pyarrow's stream has no readline
        return io.BytesIO(f.read())


def is_utf8(encoding: str | None, errors: str | None = None) -> bool:
    """Whether a file of this ``encoding`` (and ``errors``, how its undecodable bytes are handled) is
    read as its bytes are: UTF-8 (with or without a byte order mark, which readers skip), strict."""
    return (encoding is None or codecs.lookup(encoding).name in ("utf-8", "utf-8-sig")) and errors in (None, "strict")


class Utf8Stream:
    """A file of another encoding read as UTF-8 bytes: ``read(n)`` (``n`` characters, encoded) and
    ``readline()``, line breaks as written (``\r\n`` kept). JSON parsers read UTF-8 only: HF decodes
    each chunk of a JSON file given ``encoding=`` and encodes it again as UTF-8, as this does, but
    a character at a time (a UTF-16 line break is two bytes: cut at its first, HF's chunks go wrong)."""

    def __init__(self, raw: Any, encoding: str, errors: str | None):
        import io

        self._text = io.TextIOWrapper(raw, encoding=encoding, errors=errors or "strict", newline="")

    def read(self, size: int | None = -1) -> bytes:
        return self._text.read(-1 if size is None else size).encode("utf-8")

    def readline(self) -> bytes:
        return self._text.readline().encode("utf-8")

    def close(self) -> None:
        self._text.close()

    def __enter__(self) -> "Utf8Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_utf8(path: str, encoding: str | None = None, errors: str | None = None) -> Any:
    """A file opened for reading UTF-8 bytes a line at a time (``read``, ``readline``), decompressed:
    the file's own bytes when it is UTF-8 (the fast path, :func:`open_lines`), else its text in
    ``encoding`` (undecodable bytes handled as ``errors`` says, as ``open`` does) encoded as UTF-8."""
    if is_utf8(encoding, errors):
        return open_lines(path)
    return Utf8Stream(open_binary(path), encoding or "utf-8", errors)


def open_text(path: str, encoding: str = "utf-8", errors: str | None = None) -> Any:
    """A file opened for reading text (universal newlines), decompressed as its extension says."""
    if is_plain_file(path):
        return open(path, encoding=encoding, errors=errors)
    import io

    return io.TextIOWrapper(open_binary(path), encoding=encoding, errors=errors)


#: how much of the first JSON Lines file gives the columns every file follows (HF's json builder
#: takes its features from the first chunk of the first file, 10 MB by default)
JSON_SCHEMA_BYTES = 10 << 20


def file_schema(path: str, format: str, chunksize: int | None = None,
                json_paths: list | None = None, encoding: str | None = None,
                encoding_errors: str | None = None) -> pa.Schema | None:
    """The columns and types every file of a source follows, as HF takes its features from the first
    file (``path``): a Parquet or Arrow file's schema; for a JSON Lines file, the columns pyarrow reads
    in its first chunk (``chunksize``, 10 MB by default, and the rest of the line), with HF 5.2's
    ``Json`` columns (``json_lines.py``; at ``json_paths`` when features with some are given), its
    text in ``encoding`` (UTF-8 by default).
    ``None`` for CSV and text files (HF does not align them), a JSON document, or a JSON file without
    rows. Raises ``OSError`` or ``pyarrow.ArrowException``."""
    if format == "parquet":
        import pyarrow.parquet as pq

        return pq.read_schema(path)
    if format == "arrow":
        with pa.memory_map(path, "r") as source:
            try:
                return pa.ipc.open_file(source).schema
            except pa.ArrowInvalid:
                source.seek(0)
                return pa.ipc.open_stream(source).schema
    if format != "json":
        return None
    from .json_lines import first_chunk_schema, hf_json

    if hf_json() is not None:  # HF 5.2: its Json columns found as HF finds them
        try:
            return first_chunk_schema(open_utf8(path, encoding, encoding_errors), chunksize or JSON_SCHEMA_BYTES,
                                      json_paths)
        except (pa.ArrowInvalid, ValueError):  # a JSON document, or a bad line (reading the file names it)
            return None
    import pyarrow.json as pj

    with open_utf8(path, encoding, encoding_errors) as f:
        head = f.read(JSON_SCHEMA_BYTES + 1)
    if len(head) > JSON_SCHEMA_BYTES:
        head = head[: head.rfind(b"\n", 0, JSON_SCHEMA_BYTES) + 1]  # whole lines only
    if not head.strip():
        return None
    try:
        table = pj.read_json(pa.BufferReader(head), read_options=pj.ReadOptions(block_size=len(head)))
    except pa.ArrowInvalid:  # a JSON document, or a bad line (reading the file names it)
        return None
    return table.schema if table.num_columns else None


# ---------------------------------------------------------------------- Parquet and Arrow options, as HF's builders
#: the options of HF's Parquet builder (``ParquetConfig``); ``batch_size`` and
#: ``fragment_scan_options`` tune reading only, and leave the rows as they are
PARQUET_OPTIONS = frozenset(("columns", "filters", "batch_size", "fragment_scan_options", "on_bad_files"))


def csv_options(kwargs: dict) -> None:
    """Refuse, when the dataset is built, an option that neither HF's csv builder, pandas'
    ``read_csv`` nor pyarrow's reader takes (a typo would otherwise fail at the first read)."""
    import inspect

    import pandas as pd

    known = set(inspect.signature(pd.read_csv).parameters) | PYARROW_CSV_OPTIONS | {"delimiter", "column_names"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"csv files take no reader option {unknown}: the options are pandas' read_csv options "
                        f"(and HF's delimiter / column_names), or pyarrow's {sorted(PYARROW_CSV_OPTIONS)}")


def parquet_options(format: str, kwargs: dict) -> tuple[list[str] | None, Any, list[str] | None]:
    """``(columns, filters, filter columns)`` of a Parquet source's reader options, as HF's Parquet
    builder takes them: the columns to read, the rows to keep as a pyarrow expression (from an
    expression or HF's / pyarrow's list-of-tuples form), and the columns those tuples name (``None``
    for an expression: every column is read). Options a Parquet or Arrow source does not have are
    refused here, not ignored (HF's builders refuse them too)."""
    if format not in ("parquet", "arrow"):
        return None, None, None
    allowed = PARQUET_OPTIONS if format == "parquet" else frozenset()
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(f"{format} files take no reader option {unknown}" + (
            f"; the options of Parquet files are {sorted(PARQUET_OPTIONS)}" if format == "parquet" else ""))
    if kwargs.get("on_bad_files", "error") != "error":
        raise ValueError(f"on_bad_files={kwargs['on_bad_files']!r} is not supported: a file skipped while unreadable "
                         "would shift the positions of a saved state; remove the bad files from data_files instead")
    columns = kwargs.get("columns")
    if columns is not None:
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise TypeError(f"columns= must be a list of column names, got {columns!r}")
        columns = list(columns)
    filters = kwargs.get("filters")
    if filters is None:
        return columns, None, None
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if isinstance(filters, pc.Expression):
        return columns, filters, None
    try:
        expression = pq.filters_to_expression(filters)
    except (TypeError, ValueError) as e:
        raise ValueError(f"filters={filters!r} is not a pyarrow expression or a list of (column, op, value) "
                         f"tuples: {e}") from None
    groups = filters if filters and isinstance(filters[0], list) else [filters]
    return columns, expression, list(dict.fromkeys(t[0] for group in groups for t in group))


def select_schema(schema: pa.Schema, columns: list[str], path: str) -> pa.Schema:
    """``schema`` with only ``columns``, in the file's order (as HF's Parquet builder yields them:
    ``columns=["b", "a"]`` gives ``a`` first); a column the file lacks is named."""
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise ValueError(f"columns={columns}: data file {path!r} has no column(s) {missing} (its columns: "
                         f"{schema.names})")
    wanted = set(columns)
    return pa.schema([field for field in schema if field.name in wanted], metadata=schema.metadata)


# ---------------------------------------------------------------------- text files, as HF's text builder
TEXT_SCHEMA = pa.schema({"text": pa.string()})


def text_options(kwargs: dict) -> dict:
    """The reader options of text files, checked; unknown ones are refused by name."""
    unknown = sorted(set(kwargs) - set(TEXT_OPTIONS))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for text files; expected some of {sorted(TEXT_OPTIONS)}")
    opts = {**TEXT_OPTIONS, **kwargs}
    if opts["sample_by"] not in ("line", "paragraph", "document"):
        raise ValueError(f"sample_by must be 'line', 'paragraph' or 'document', got {opts['sample_by']!r}")
    if not isinstance(opts["chunksize"], int) or opts["chunksize"] < 1:
        raise ValueError(f"chunksize must be a positive number of characters, got {opts['chunksize']!r}")
    return opts


def text_rows(f: Any, opts: dict) -> Iterator[list[str]]:
    """The rows of an open text file (universal newlines), a list per chunk read: lines (without
    their line break unless ``keep_linebreaks``), paragraphs (split on blank lines, empty ones
    dropped) or the whole file, as HF's ``text`` builder makes them."""
    import io

    by, size = opts["sample_by"], opts["chunksize"]
    if by == "document":
        yield [f.read()]
        return
    rest = ""
    while True:
        chunk = f.read(size)
        if not chunk:
            break
        chunk += f.readline()  # end on a whole line
        if by == "line":
            lines = io.StringIO(chunk).readlines()
            yield lines if opts["keep_linebreaks"] else [line.rstrip("\n") for line in lines]
            continue
        parts = (rest + chunk).split("\n\n")
        rest = parts.pop()
        yield [p for p in parts if p]
    if by == "paragraph" and rest:
        yield [rest]


# ---------------------------------------------------------------------- CSV, as HF's csv builder
PYARROW_CSV_OPTIONS = frozenset(("read_options", "parse_options", "convert_options"))

#: options of HF's builder configs that, at these values (HF's defaults), HF itself drops or that
#: only say what is done here anyway: ``from_csv(..., verbose=False)`` reads as without them
_HF_DEFAULTS = {"json": {"on_mixed_types": "use_json", "parse_agent_traces": True, "field": None},
                "csv": {"prefix": None, "mangle_dupe_cols": True, "verbose": False, "error_bad_lines": True,
                        "warn_bad_lines": True}}


def hf_reader_options(fmt: str, reader_kwargs: dict) -> dict:
    """``reader_kwargs`` of a ``fmt`` reader less HF's config options that change nothing at their
    value (HF's defaults: JSON's ``field=None`` reads the file's own rows), and, for CSV, less
    ``chunksize`` (HF reads a file that many rows at a time: the rows are the same; checked)."""
    defaults = _HF_DEFAULTS.get(fmt, {})
    out = {k: v for k, v in reader_kwargs.items()
           if not (k in defaults and type(v) is type(defaults[k]) and v == defaults[k])}
    if fmt == "csv" and "chunksize" in out and not PYARROW_CSV_OPTIONS & set(out):
        as_int(out.pop("chunksize"), "chunksize", lo=1)
    return out


def csv_dtypes(features: Any) -> dict:
    """The pandas dtypes HF's csv builder reads columns as, given ``features``: an integer column
    declared a string keeps its leading zeros. Columns stored other than they are given (an
    ``Image`` as a path, a ``ClassLabel`` as a name) are read as Python objects."""
    from datasets import Features
    from datasets.features.features import require_storage_cast

    features = features if isinstance(features, Features) else Features(features)
    schema = features.arrow_schema
    return {name: object if require_storage_cast(feature) else type_.to_pandas_dtype()
            for name, type_, feature in zip(schema.names, schema.types, features.values())}


def csv_table(path: str, kwargs: dict) -> pa.Table:
    """A CSV file as HF's csv builder reads it: pandas' ``read_csv`` (``sep``, ``names`` and the
    other pandas options; HF's ``delimiter`` and ``column_names`` too; tab-separated for ``.tsv``)."""
    import pandas as pd

    kw = dict(kwargs)
    if "delimiter" in kw:
        kw["sep"] = kw.pop("delimiter")
    if "column_names" in kw:
        kw["names"] = kw.pop("column_names")
    kw.setdefault("sep", "\t" if is_tsv(path) else ",")
    if is_plain_file(path):
        return pa.Table.from_pandas(pd.read_csv(path, **kw), preserve_index=False)
    with open_binary(path) as f:
        return pa.Table.from_pandas(pd.read_csv(f, **kw), preserve_index=False)


def is_tsv(path: str) -> bool:
    """A ``.tsv`` file, compressed or not: tab-separated, as HF reads it."""
    p = path.lower()
    if compression_of(p) is not None:
        p = os.path.splitext(p)[0]
    return p.endswith(".tsv")


# ---------------------------------------------------------------------- whole files as tables
def arrow_ipc_table(path: str) -> pa.Table:
    """An Arrow IPC file, file or stream format, memory-mapped (no copy)."""
    source = pa.memory_map(path, "r")
    try:
        return pa.ipc.open_file(source).read_all()
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_stream(source).read_all()


def csv_file_table(path: str, reader_kwargs: dict) -> pa.Table:
    """A CSV file as HF reads it (:func:`csv_table`), or with pyarrow's reader when pyarrow's
    options are given (tab-separated for ``.tsv``)."""
    kwargs = dict(reader_kwargs)
    if not PYARROW_CSV_OPTIONS & set(kwargs):
        return csv_table(path, kwargs)
    import pyarrow.csv as pc

    if is_tsv(path) and "parse_options" not in kwargs:
        kwargs["parse_options"] = pc.ParseOptions(delimiter="\t")
    with open_binary(path) as f:
        return pc.read_csv(f, **kwargs)
