"""How each data file format is parsed, as HF's packaged builders read them: the file formats and
their extensions (a compression's after the format's, ``.csv.gz``), the first file's schema (JSON
Lines: HF 5.2's ``Json`` columns found as HF finds them, ``json_lines.py``), reader options, text
rows (HF's ``text`` builder), CSV (pandas, as HF) and Arrow IPC files; JSON files are read in
``json_files.py``. Opening a file (decompressed, in a zip archive, as text or UTF-8) is
``file_open.py``; which files a glob of data files gives, ``file_globs.py``. The source node over
these files, its shards, offsets and resumption, is ``files.py``."""

from __future__ import annotations

import os
from typing import Any, Iterator

import pyarrow as pa

from .checks import as_int
from .file_open import COMPRESSIONS, compression_of, is_plain_file, open_binary, open_utf8
# moved to file_open.py / file_globs.py, still importable here
from .file_globs import NOT_DATA, resolve_data_files, unrequested  # noqa: F401
from .file_open import is_utf8, open_lines, open_text  # noqa: F401

FORMATS = ("parquet", "arrow", "json", "csv", "text")
TEXT_OPTIONS = {"sample_by": "line", "keep_linebreaks": False, "encoding": "utf-8", "encoding_errors": None,
                "chunksize": 10 << 20}
_EXT = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow",
        ".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv", ".tsv": "csv"}


def format_of(path: str) -> str | None:
    p = path.lower()
    for suffix in COMPRESSIONS:
        if p.endswith(suffix):
            p = p[: -len(suffix)]
    return _EXT.get(os.path.splitext(p)[1])


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
        twice = sorted({c for c in columns if columns.count(c) > 1})
        if twice:  # HF reads them and fails at the first row (pyarrow: 'Field "a" exists 2 times')
            raise ValueError(f"columns={columns!r} names {twice} more than once: name each column once")
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
