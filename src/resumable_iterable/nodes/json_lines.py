"""JSON Lines read as HF 5.2's json builder reads them, HF's ``Json`` feature included: a chunk at a
time (``chunksize`` bytes, 10 MB by default, and the rest of the line), by pyarrow. A column whose
values mix types (``1`` and ``"a"``), or whose objects have varying keys (``{"a": 0}``, ``{"b": 0}``,
also inside lists: chat ``messages``), is stored as JSON text (pyarrow's ``json`` extension type,
HF's ``Json()``) and decoded to each value as written. As in HF, the first chunk of the first file
says which columns those are (objects of varying keys found there, mixed types where pyarrow
refuses the chunk): every file is encoded at those paths, and a column found mixed later (in a
chunk of its own) is encoded for the rest of its file, then cast to the first file's type (an
error, as in HF). Without HF's ``Json`` (``datasets`` < 5.2) none of this is done: ``None``."""

from __future__ import annotations

import codecs
import io
from typing import Any, BinaryIO, Callable

import pyarrow as pa

CHUNKSIZE = 10 << 20  # HF's JsonConfig.chunksize


def hf_json() -> Any:
    """HF's JSON helpers (``datasets.utils.json``), or ``None`` when ``datasets`` has no ``Json``."""
    try:
        from datasets.utils import json as hf
    except ImportError:
        return None
    return hf if hasattr(hf, "find_mixed_struct_types_field_paths") else None


def read_json(source: Callable[[], Any], block_size: int) -> pa.Table:
    """``pyarrow.json.read_json(source(), block_size)``, its lists whose first values are null read
    right. pyarrow's reader types such a list (``[null, 1]``) by its later values and returns an
    invalid array (offsets spanning more values than the list holds), whose values are garbage when
    read (``[1, 0]``) or fail a check: the lines are then read again with the types pyarrow found,
    which it fills right (``[None, 1]``, as HF yields them). ``source`` gives the bytes afresh."""
    import pyarrow.json as pj

    table = pj.read_json(source(), read_options=pj.ReadOptions(block_size=block_size))
    try:
        table.validate()  # cheap: sizes and offsets, not the values
    except pa.ArrowInvalid:
        table = pj.read_json(source(), read_options=pj.ReadOptions(block_size=block_size),
                             parse_options=pj.ParseOptions(explicit_schema=table.schema))
    return table


def json_paths(schema: pa.Schema | None) -> list[list]:
    """The paths of a schema's ``Json`` columns (``["messages", 0]``: the items of a list)."""
    if schema is None or hf_json() is None:
        return []
    from datasets import Features

    return hf_json().get_json_field_paths_from_feature(Features.from_arrow_schema(schema))


def _chunks(f: BinaryIO, chunksize: int) -> Any:
    """The chunks of a file open for reading bytes as HF reads them: ``chunksize`` bytes and the rest
    of the line (a byte order mark dropped); ``None`` for a file that starts as one JSON document (``[``)."""
    with f:
        first = True
        while True:
            chunk = f.read(chunksize)
            if not chunk:
                return
            if first and chunk.startswith(codecs.BOM_UTF8):
                chunk = chunk[len(codecs.BOM_UTF8):]
            if first and chunk.startswith(b"["):
                yield None
                return
            first = False
            yield chunk + f.readline()


def read_chunk(chunk: bytes, paths: list[list], detect: bool = False, mixed: list | None = None,
               examples: list | None = None) -> pa.Table:
    """One chunk read by pyarrow with its values at ``paths`` encoded as JSON text, as HF does;
    ``paths`` grows by the columns found mixed (and, with ``detect``, of varying keys, looked for in
    ``examples``, the chunk's objects when the caller has them, else its lines parsed), pyarrow's
    errors that found them appended to ``mixed``."""
    hf = hf_json()
    if detect and not paths and examples is None:
        # HF parses the chunk's lines into Python objects to look for objects of varying keys (and
        # empty ones); when pyarrow reads the chunk with every struct field present in every object,
        # there are none: the objects are not built (HF's result, 3x sooner). Else, as HF.
        table = _plain(chunk)
        if table is not None and all(same_keys(column) for column in table.columns):
            return table
    lines = chunk.splitlines() if detect or paths else None  # split only when needed (a cost per 10 MB)
    if detect:
        try:
            if examples is None:
                examples = [hf.ujson_loads(line) for line in lines]
            paths += hf.find_mixed_struct_types_field_paths(examples)
        except ValueError:  # not JSON Lines (pyarrow names the line)
            pass
    data = encoded(lines, paths) if paths else chunk
    block = max(CHUNKSIZE // 32, 16 << 10)
    block = len(data) if len(data) // 8 > block else block
    while True:
        try:
            table = read_json(lambda: io.BytesIO(data), block)
            break
        except pa.ArrowInvalid as e:
            message = str(e)
            if "Column(" in message and ") changed from" in message:
                lines = chunk.splitlines() if lines is None else lines
                path = hf.get_json_field_path_from_pyarrow_json_error(
                    message, examples=(hf.ujson_loads(line) for line in lines if line.strip()))
                if not path:
                    raise
                if any(path[:len(p)] == p for p in paths):
                    raise ValueError(f"Cannot encode mixed-type JSON field {path!r} as JSON") from e
                hf.insert_json_field_path(paths, path)
                if mixed is not None:
                    mixed.append(e)
                data = encoded(lines, paths)
            elif ("straddling" in message or "JSON conversion to" in message) and block < len(data):
                block *= 2
            else:
                raise
    return with_json_types(table, paths)


def same_keys(array: Any) -> bool:
    """Whether every object in ``array`` (a column, or the values of a list) has every field of its
    struct type, recursively, and none is empty: then HF's search for objects of varying keys
    (``find_mixed_struct_types_field_paths``) finds none. A null value counts as a missing field
    (it may be one: pyarrow reads both as null), which sends the document to the exact reader."""
    t = array.type
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            return False
        chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
        for chunk in chunks:
            valid = None
            for k in range(t.num_fields):
                child = chunk.field(k)
                if child.null_count:
                    if not chunk.null_count:
                        return False
                    import pyarrow.compute as pc

                    valid = chunk.is_valid() if valid is None else valid
                    if pc.any(pc.and_(valid, child.is_null())).as_py():
                        return False
                if not same_keys(child):
                    return False
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
        return all(same_keys(chunk.flatten()) for chunk in chunks)
    return True


def _plain(chunk: bytes) -> pa.Table | None:
    """A chunk read by pyarrow as :func:`read_chunk` reads it (its block size, grown as needed);
    ``None`` when pyarrow refuses it."""
    block = max(CHUNKSIZE // 32, 16 << 10)
    block = len(chunk) if len(chunk) // 8 > block else block
    while True:
        try:
            return read_json(lambda: io.BytesIO(chunk), max(block, 1))
        except pa.ArrowInvalid as e:
            if ("straddling" in str(e) or "JSON conversion to" in str(e)) and block < len(chunk):
                block *= 2
                continue
            return None


def encoded(lines: list[bytes], paths: list[list]) -> bytes:
    """JSON Lines with the values at ``paths`` replaced by their JSON text (blank lines dropped)."""
    hf = hf_json()
    out = []
    for line in lines:
        if line.strip():
            example = hf.ujson_loads(line)
            for path in paths:
                example = hf.json_encode_field(example, path)
            out.append(hf.ujson_dumps(example))
    return "\n".join(out).encode()


def with_json_types(table: pa.Table, paths: list[list]) -> pa.Table:
    """``table`` with its columns at ``paths`` typed ``Json`` (pyarrow's ``json``)."""
    if not paths:
        return table
    from datasets import Features
    from datasets.table import table_cast

    features = hf_json().set_json_types_in_feature(Features.from_arrow_schema(table.schema), paths)
    return table_cast(table, features.arrow_schema)


def first_chunk_schema(f: BinaryIO, chunksize: int, paths: list[list] | None) -> pa.Schema | None:
    """The schema of the first chunk of a file (open for reading bytes), its ``Json`` columns found as HF finds them (or at
    ``paths``, those of the features given), no column for rows of ``{}`` only; ``None`` for a JSON
    document or a file without rows (empty, or blank lines only)."""
    for chunk in _chunks(f, chunksize):
        if chunk is None or not chunk.strip():
            return None
        # rows of ``{}`` only: no column, which every later file then follows, as HF types its
        # features after that chunk ({}: a file with columns raises CastError)
        return read_chunk(chunk, list(paths or ()), detect=paths is None).schema
    return None


def json_lines_table(f: BinaryIO, paths: list[list], chunksize: int, align: Callable[[pa.Table], pa.Table],
                     carried: list | None = None) -> pa.Table:
    """A JSON Lines file (open for reading bytes), each chunk with the values at ``paths`` (and those found mixed in it and
    the chunks before) encoded as JSON text, then ``align``-ed to the first file's columns. A column
    found mixed that the first file types otherwise cannot be: pyarrow's error (``ArrowInvalid``).
    ``carried``: ``paths`` itself, grown in place, its first chunk searched for objects of varying
    keys too (a member of an archive of unknown features, see ``json_files.json_table``)."""
    paths, tables, mixed = (carried if carried is not None else list(paths)), [], []
    first = carried is not None
    for chunk in _chunks(f, chunksize):
        if chunk is None:
            raise pa.ArrowInvalid("a JSON document, not JSON Lines")
        if not chunk.strip():
            continue
        table = read_chunk(chunk, paths, detect=first, mixed=mixed)
        first = False
        try:
            tables.append(align(table))
        except ValueError:
            if mixed:  # a column the first file types otherwise changes type here: pyarrow's error names it
                raise mixed[-1] from None
            raise
    if not tables:
        return pa.table({})
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
