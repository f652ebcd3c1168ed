"""JSON files as HF's json builder reads them: its reader options (checked when the dataset is
built), JSON Lines (a chunk at a time with HF 5.2's ``Json`` columns, ``json_lines.py``; or by
pyarrow's reader when its options are given), one JSON document (a list of objects read as JSON
Lines, as HF 5.2 does; other documents and ``field=`` by pandas), and, for a file that is neither,
an error naming its first line that is no JSON object. Opening files (compressed, in zip archives)
is ``file_formats.py``."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

from .file_formats import JSON_SCHEMA_BYTES, is_plain_file, open_binary, open_lines, open_text


#: options of HF's JSON builder that tune reading only: accepted and left out, but ``chunksize``
#: (``block_size``, HF's older name), kept: HF 5.2 finds its ``Json`` columns in the first chunk
JSON_TUNING_OPTIONS = frozenset(("use_threads", "block_size", "chunksize", "newlines_in_values"))
JSON_OPTIONS = frozenset(("field", "read_options", "parse_options", "encoding", "encoding_errors")) | JSON_TUNING_OPTIONS


def json_options(kwargs: dict) -> dict:
    """The reader options of JSON files, checked when the dataset is built: ``field``, pyarrow's
    ``read_options`` / ``parse_options``, and HF's options (those that only tune reading are left
    out; an encoding other than UTF-8 is refused by name)."""
    unknown = sorted(set(kwargs) - JSON_OPTIONS)
    if unknown:
        raise TypeError(f"json files take no reader option {unknown}; their options are {sorted(JSON_OPTIONS)}")
    encoding = str(kwargs.get("encoding") or "utf-8").lower().replace("_", "-")
    if encoding not in ("utf-8", "utf8", "utf-8-sig", "utf8-sig"):  # a UTF-8 byte order mark is skipped as read
        raise ValueError(f"encoding={kwargs['encoding']!r}: JSON files are read as UTF-8 here; convert the file "
                         "to UTF-8 (e.g. iconv) first")
    options = {k: v for k, v in kwargs.items() if k not in JSON_TUNING_OPTIONS and k not in ("encoding", "encoding_errors")}
    chunksize = kwargs.get("block_size") or kwargs.get("chunksize")  # HF: block_size, if given, wins
    if chunksize is not None:
        if not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError(f"chunksize must be a positive number of bytes, got {chunksize!r}")
        options["chunksize"] = chunksize
    return options


def json_table(path: str, reader_kwargs: dict, schema: pa.Schema | None = None, align: Any = None,
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
    if field is not None:
        return json_document(path, field)
    if kwargs:  # pyarrow options given: JSON Lines it is
        with open_binary(path) as f:
            return pj.read_json(f, **kwargs)
    try:
        if hf_json() is None:
            return json_lines(path)
        if carried is None and schema is None:  # features unknown (the first file is a document): as HF,
            carried = []  # each file's first chunk shows its own Json columns, varying keys included
        if carried is not None:
            return json_lines_table(open_lines(path), carried, chunksize, align or (lambda table: table), carried)
        return json_lines_table(open_lines(path), json_paths(schema), chunksize, align or (lambda table: table))
    except pa.ArrowInvalid as e:
        lines_error = e
    # one JSON document: HF 5.2 reads a list of objects as JSON Lines (pyarrow's types, Json columns
    # where they mix types or keys, not pandas's, which fails on a column of strings and numbers,
    # fills keys with None and makes a 'modified' column of integers dates); other documents by pandas
    table = None if hf_json() is None else _hf_document(path, carried if carried is not None else json_paths(schema))
    if table is not None:
        return table
    try:
        return json_document(path, None)
    except (ValueError, pa.ArrowTypeError):
        # neither: name the line that is no JSON object (pyarrow's "row" counts from the start of
        # its block, not of the file)
        raise ValueError(json_lines_problem(path, lines_error) or str(lines_error)) from None


def _hf_document(path: str, carried: list | None = None) -> pa.Table | None:
    from .json_lines import document_table

    try:
        return document_table(open_lines(path), carried)
    except (ValueError, pa.ArrowInvalid):  # not JSON: the line is named
        return None


def json_lines(path: str) -> pa.Table:
    """A JSON Lines file read by pyarrow, as HF reads it: an empty file has no rows, and a line longer
    than pyarrow's block is read with a larger block (HF doubles it too)."""
    import pyarrow.json as pj

    if is_plain_file(path):
        size, source = os.path.getsize(path), lambda: path
    else:
        with open_binary(path) as f:
            data = pa.py_buffer(f.read())
        size, source = data.size, lambda: pa.BufferReader(data)
    block = 1 << 20
    while True:
        try:
            return pj.read_json(source(), read_options=pj.ReadOptions(block_size=block))
        except pa.ArrowInvalid as e:
            if "straddling" in str(e) and block < size:
                block *= 2
                continue
            if "Empty JSON file" in str(e):
                return pa.table({})
            raise


def json_lines_problem(path: str, error: Exception) -> str | None:
    """Where a JSON Lines file that pyarrow refused (``error``) goes wrong, as a message naming the line:
    the first line that is not a JSON object, or where the column pyarrow names changes type."""
    import json
    import re

    m = re.search(r"Column\((.*?)\) changed from", str(error))
    keys = [k for k in m.group(1).split("/") if k] if m else None
    first = None  # (kind, line) of the column's first non-null value
    first_line = True
    with open_text(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as e:
                if first_line:  # maybe one document spanning lines (``[`` or ``{`` alone on line 1)
                    try:
                        with open_text(path, errors="replace") as doc:
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


def json_document(path: str, field: str | None) -> pa.Table:
    """A JSON file holding one document, as HF's json builder reads it: the rows of a list of
    objects (or of a dict of columns), or of the document's ``field``."""
    import io
    import json

    import pandas as pd

    with open_text(path, "utf-8-sig") as f:  # UTF-8, and a byte order mark skipped as JSON Lines files skip it
        if field is None:
            df = pd.read_json(f, dtype_backend="pyarrow")
        else:
            doc = json.load(f)
    if field is not None:
        if not isinstance(doc, dict) or field not in doc:
            keys = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
            raise ValueError(f"field {field!r} is not in the JSON document (its keys: {keys})")
        df = pd.read_json(io.StringIO(json.dumps(doc[field])), dtype_backend="pyarrow")
    if df.columns.tolist() == [0]:
        df.columns = ["text"]  # a list of plain values, as HF names it
    return pa.Table.from_pandas(df, preserve_index=False)
