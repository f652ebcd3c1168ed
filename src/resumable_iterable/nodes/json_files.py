"""JSON files as HF's json builder reads them: its reader options (checked when the dataset is
built), JSON Lines (a chunk at a time with HF 5.2's ``Json`` columns, ``json_lines.py``; or by
pyarrow's reader when its options are given), one JSON document (a list of objects read as JSON
Lines, as HF 5.2 does, and a list of other values as the rows ``{"text": value}``; other documents
and ``field=`` by pandas; ``json_documents.py``), and, for
a file that is neither, an error naming its first line that is no JSON object. Files of another
``encoding`` than UTF-8 are read as their text encoded as UTF-8 (``file_formats.open_utf8``), as HF
reads them; the rows, and the offsets that count them, are the same. Opening files (compressed, in
zip archives) is ``file_formats.py``."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

from .file_formats import JSON_SCHEMA_BYTES
from .file_open import is_plain_file, is_utf8, open_text, open_utf8


#: options of HF's JSON builder that tune reading only: accepted and left out, but ``chunksize``
#: (``block_size``, HF's older name), kept: HF 5.2 finds its ``Json`` columns in the first chunk
JSON_TUNING_OPTIONS = frozenset(("use_threads", "block_size", "chunksize", "newlines_in_values"))
JSON_OPTIONS = frozenset(("field", "read_options", "parse_options", "encoding", "encoding_errors")) | JSON_TUNING_OPTIONS


def json_options(kwargs: dict) -> dict:
    """The reader options of JSON files, checked when the dataset is built: ``field``, pyarrow's
    ``read_options`` / ``parse_options``, and HF's options (those that only tune reading are left
    out). ``encoding`` (a codec Python knows) and ``encoding_errors`` (``"strict"``, ``"replace"``,
    ``"ignore"``...) are kept only when the files are not read as their bytes are (UTF-8, a byte
    order mark skipped: the fast path, see ``file_formats.open_utf8``)."""
    import codecs

    unknown = sorted(set(kwargs) - JSON_OPTIONS)
    if unknown:
        raise TypeError(f"json files take no reader option {unknown}; their options are {sorted(JSON_OPTIONS)}")
    encoding, errors = kwargs.get("encoding"), kwargs.get("encoding_errors")
    try:
        encoding = None if encoding is None else codecs.lookup(encoding).name
    except (LookupError, TypeError):
        raise ValueError(f"encoding={kwargs['encoding']!r} is not an encoding Python knows (utf-8, utf-16, "
                         "latin-1, cp1252...)") from None
    try:
        errors is None or codecs.lookup_error(errors)
    except (LookupError, TypeError):
        raise ValueError(f"encoding_errors={errors!r} is not an error handler Python knows (strict, replace, "
                         "ignore, backslashreplace...)") from None
    options = {k: v for k, v in kwargs.items() if k not in JSON_TUNING_OPTIONS and k not in ("encoding", "encoding_errors")}
    if not is_utf8(encoding, errors):
        options["encoding"] = encoding or "utf-8"
        if errors is not None:
            options["encoding_errors"] = errors
    chunksize = kwargs.get("block_size") or kwargs.get("chunksize")  # HF: block_size, if given, wins
    if chunksize is not None:
        if not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError(f"chunksize must be a positive number of bytes, got {chunksize!r}")
        options["chunksize"] = chunksize
    return options


def json_table(path: str, reader_kwargs: dict, schema: pa.Schema | None = None, align: Any = None,
               carried: list | None = None) -> pa.Table:
    """A JSON file as HF's json builder reads it (:func:`_json_table`), its text checked to be valid
    UTF-8: pyarrow's JSON reader does not check it, and a string of a stray byte (a latin-1 file
    read as UTF-8) failed only when yielded, as in HF, or went on to the consumer undecodable."""
    table = _json_table(path, reader_kwargs, schema, align, carried)
    try:
        table.validate(full=True)
    except pa.ArrowInvalid as e:
        raise ValueError(f"its text is not valid {reader_kwargs.get('encoding') or 'UTF-8'} ({e}): pass the file's "
                         "encoding= (latin-1, cp1252, utf-16...), or encoding_errors='replace' to read the bytes "
                         "that do not decode as U+FFFD") from None
    return table


def _json_table(path: str, reader_kwargs: dict, schema: pa.Schema | None = None, align: Any = None,
                carried: list | None = None) -> pa.Table:
    """A JSON file as HF's json builder reads it: JSON Lines (a chunk at a time, with HF 5.2's
    ``Json`` columns: those of ``schema``, the first file's, and each chunk ``align``-ed to it), or
    one document (a list of objects, or the list under ``field``); with pyarrow's options, JSON Lines
    read by pyarrow. A file that is neither names its first line that is no JSON object.

    ``carried`` (a member of a zip archive whose features are unknown): the Json paths found in the
    members before it, which HF's reader goes on encoding (a column of mixed values in the first
    member is JSON text in the next ones too); those this file's first chunk shows are added to it."""
    import pyarrow.json as pj

    from .json_lines import hf_json, json_lines_table, json_paths

    kwargs = dict(reader_kwargs)
    field = kwargs.pop("field", None)
    chunksize = kwargs.pop("chunksize", None) or JSON_SCHEMA_BYTES
    encoding, errors = kwargs.pop("encoding", None), kwargs.pop("encoding_errors", None)
    if field is not None:
        return json_document(path, field, encoding, errors)
    if kwargs:  # pyarrow options given: JSON Lines it is
        with open_utf8(path, encoding, errors) as f:
            return pj.read_json(pa.BufferReader(f.read()) if encoding else f, **kwargs)
    try:
        if hf_json() is None:
            return json_lines(path, encoding, errors)
        if carried is None and schema is None:  # features unknown (the first file is a document): as HF,
            carried = []  # each file's first chunk shows its own Json columns, varying keys included
        lines = open_utf8(path, encoding, errors)
        if carried is not None:
            return json_lines_table(lines, carried, chunksize, align or (lambda table: table), carried)
        return json_lines_table(lines, json_paths(schema), chunksize, align or (lambda table: table))
    except pa.ArrowInvalid as e:
        # without its traceback: kept past the handler, it would hold this frame, which holds it (a
        # cycle keeping the file's whole table, read below, until the cyclic garbage collector runs)
        lines_error = e.with_traceback(None)
    # one JSON document: HF 5.2 reads a list of objects as JSON Lines (pyarrow's types, Json columns
    # where they mix types or keys, not pandas's, which fails on a column of strings and numbers,
    # fills keys with None and makes a 'modified' column of integers dates), a list of other values as
    # {"text": value} rows (pandas made [[1, 2], [3]] columns "0", "1"); other documents by pandas
    table = None if hf_json() is None else _hf_document(path, carried if carried is not None else json_paths(schema),
                                                         encoding, errors)
    if table is not None:
        return table
    try:
        return json_document(path, None, encoding, errors)
    except (ValueError, pa.ArrowTypeError):
        # neither: name the line that is no JSON object (pyarrow's "row" counts from the start of
        # its block, not of the file)
        raise ValueError(json_lines_problem(path, lines_error, encoding, errors) or str(lines_error)) from None


def _hf_document(path: str, carried: list | None, encoding: str | None, errors: str | None) -> pa.Table | None:
    """A JSON document that is a list of objects (``json_documents.py``), ``None`` for another."""
    from .json_documents import read_list_of_objects

    try:
        return read_list_of_objects(path if encoding is None and is_plain_file(path) else
                                    open_utf8(path, encoding, errors), carried)
    except (ValueError, pa.ArrowInvalid):  # not JSON: the line is named
        return None


def blank_file(path: str, encoding: str | None = None, errors: str | None = None) -> bool:
    """Whether a JSON file holds no row: nothing but white space (a byte order mark aside). Reads up
    to its first other character (a file that cannot be read is not blank: reading it says why)."""
    try:
        with open_utf8(path, encoding, errors) as f:
            first = True
            while True:
                block = f.read(1 << 16)
                if not block:
                    return True
                if first and block.startswith(b"\xef\xbb\xbf"):
                    block = block[3:]
                first = False
                if block.strip():
                    return False
    except Exception:  # noqa: BLE001 - damaged (a zip member's CRC, a gzip stream), an unknown encoding...:
        return False  # not blank; reading the file (or building the dataset) names the problem


def json_lines(path: str, encoding: str | None = None, errors: str | None = None) -> pa.Table:
    """A JSON Lines file read by pyarrow, as HF reads it: an empty file has no rows, and a line longer
    than pyarrow's block is read with a larger block (HF doubles it too)."""
    from .json_lines import read_json

    if is_plain_file(path) and encoding is None:
        size, source = os.path.getsize(path), lambda: path
    else:
        with open_utf8(path, encoding, errors) as f:
            data = pa.py_buffer(f.read())
        size, source = data.size, lambda: pa.BufferReader(data)
    block = 1 << 20
    while True:
        try:
            return read_json(source, block)
        except pa.ArrowInvalid as e:
            if "straddling" in str(e) and block < size:
                block *= 2
                continue
            if "Empty JSON file" in str(e):
                return pa.table({})
            raise


def json_lines_problem(path: str, error: Exception, encoding: str | None = None,
                       errors: str | None = None) -> str | None:
    """Where a JSON Lines file that pyarrow refused (``error``) goes wrong, as a message naming the line:
    the first line that is not a JSON object, or where the column pyarrow names changes type."""
    import json
    import re

    m = re.search(r"Column\((.*?)\) changed from", str(error))
    keys = [k for k in m.group(1).split("/") if k] if m else None
    first = None  # (kind, line) of the column's first non-null value
    first_line = True
    encoding = encoding or "utf-8-sig"
    with open_text(path, encoding, errors or "replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as e:
                if first_line:  # maybe one document spanning lines (``[`` or ``{`` alone on line 1)
                    try:
                        with open_text(path, encoding, errors or "replace") as doc:
                            json.load(doc)
                    except ValueError as doc_error:
                        return f"not valid JSON (neither JSON Lines nor one JSON document): {doc_error}"
                return f"line {n} is not valid JSON ({e}): {line[:80]!r}"
            first_line = False
            if not isinstance(value, dict):
                return f"line {n} is a JSON {type(value).__name__}, not an object: {line[:80]!r}"
            for k in keys or ():
                value = value.get(k) if isinstance(value, dict) else None
            if keys and value is not None:
                kind = _json_kind(value)
                if first is None:
                    first = (kind, n)
                elif kind != first[0]:
                    return (f"line {n}: column {'.'.join(keys)!r} holds a {kind}, but a {first[0]} on line "
                            f"{first[1]}: {line[:80]!r}")
    return None


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}[type(value)]


def json_document(path: str, field: str | None, encoding: str | None = None, errors: str | None = None) -> pa.Table:
    """A JSON file holding one document, as HF's json builder reads it (pandas' ``read_json``): the
    rows of a list of objects (or of a dict of columns), or of the document's ``field``, whose text
    is cut out of the file (``json_documents.field_value``) rather than the whole document parsed and
    the field written again, as HF does; its text in ``encoding`` (UTF-8 by default, a byte order
    mark skipped)."""
    import pandas as pd

    if field is None:
        with open_text(path, encoding or "utf-8-sig", errors, newline="") as f:  # a raw \r in a string kept
            df = pd.read_json(f, dtype_backend="pyarrow")
    else:
        df = pd.read_json(_TextOnce(_field_text(path, field, encoding, errors)), dtype_backend="pyarrow")
    if df.columns.tolist() == [0]:
        df.columns = ["text"]  # a list of plain values, as HF names it
    return pa.Table.from_pandas(df, preserve_index=False)


class _TextOnce:
    """A text handed to pandas' ``read_json`` as a file, read once and let go: ``io.StringIO`` would
    hold a copy of 4 bytes a character beside it (``read_json`` reads a file whole)."""

    def __init__(self, text: str):
        self._text = text

    def read(self, size: int = -1) -> str:
        text, self._text = self._text, ""
        return text

    def __iter__(self) -> Any:  # a file for pandas has both
        return iter(())


def _field_text(path: str, field: str, encoding: str | None, errors: str | None) -> str:
    """The JSON text of the value of key ``field`` of the document that file ``path`` holds."""
    import codecs
    import json

    from .json_documents import field_value, read_bytes

    buf = read_bytes(path if encoding is None and is_plain_file(path) else open_utf8(path, encoding, errors))
    span = field_value(buf, field)
    if span is not None:
        return codecs.decode(memoryview(buf)[span[0]:span[1]], "utf-8")
    doc = json.loads(buf.tobytes())  # the error names what is wrong
    if not isinstance(doc, dict) or field not in doc:
        keys = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"field {field!r} is not in the JSON document (its keys: {keys})")
    return json.dumps(doc[field])
