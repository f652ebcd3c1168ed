"""JSON documents (a file holding one JSON value, not JSON Lines) read without building a Python
object per value: the document's bytes are scanned for its structure (strings, nesting depth) with
numpy, a block at a time, so that

* a list of objects becomes JSON Lines in place (its top-level commas line breaks, its brackets
  and the line breaks between tokens spaces: the same bytes, one object a line), which pyarrow
  parses, as HF 5.2 reads such a list (as JSON Lines, by pyarrow); a list of other values (lists,
  strings, numbers) becomes the lines ``{"text": value}``, as HF 5.2 reads it;
* the value of one key of an object (HF's ``field=``) is cut out of the file's bytes for pandas,
  which HF hands it to, instead of the whole document parsed and the field written again.

The file is held once (its bytes, changed in place) beside what is read from it. HF's reader
parses the document into Python objects (several times the file's size) and writes each object
again. Whatever the scan cannot vouch for (not a list of objects, a column HF would find of
varying keys and store as JSON text, a document that is not valid JSON) is left to the exact
readers (``json_lines.read_chunk``, pandas), so rows and types are HF's either way (but for the
float precision HF loses, see :func:`read_list_of_objects`)."""

from __future__ import annotations

from typing import BinaryIO, Iterator

import numpy as np
import pyarrow as pa

_QUOTE, _BACKSLASH, _COMMA, _COLON = 34, 92, 44, 58
_OPEN, _CLOSE = (91, 123), (93, 125)  # [ {   ] }
_WHITESPACE = (32, 9, 10, 13)


def read_bytes(source: str | BinaryIO) -> np.ndarray:
    """A file (a path: a plain file, read straight into the array; or a file open for reading
    bytes), read whole into a writable array, a byte order mark made spaces."""
    if isinstance(source, str):
        buf = np.fromfile(source, dtype=np.uint8)
    else:
        with source as f:
            data = f.read()
        buf = np.frombuffer(data, dtype=np.uint8).copy()
        del data
    if buf[:3].tobytes() == b"\xef\xbb\xbf":
        buf[:3] = 32
    return buf


def _escaped(buf: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Of quotes right after a backslash (positions in ``buf``), those it escapes: after an odd run
    of backslashes."""
    run = np.ones(cand.size, dtype=np.int64)
    live = np.arange(cand.size)
    k = 2
    while live.size:
        pos = cand[live] - k
        ok = pos >= 0
        ok[ok] = buf[pos[ok]] == _BACKSLASH
        live = live[ok]
        run[live] += 1
        k += 1
    return cand[run % 2 == 1]


#: what each byte is to the scan: 0 nothing (most bytes), else one of these
_Q, _OPENS, _CLOSES, _COMMAS, _COLONS, _BREAKS = 1, 3, 4, 5, 6, 7
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[_COMMA], _CLASS[list(_OPEN)], _CLASS[list(_CLOSE)], _CLASS[[10, 13]] = _COMMAS, _OPENS, _CLOSES, _BREAKS
_CLASS_COLONS = _CLASS.copy()
_CLASS_COLONS[_COLON] = _COLONS
#: bytes scanned at a time: a block and its masks stay in the processor's caches
STEP = 1 << 20


def _structure(buf: np.ndarray, colons: bool = False) -> Iterator[tuple]:
    """``(start, positions, kinds, outside, depth, quotes, depth before)`` for each block of ``buf``
    (from ``start``): the positions in the block of its brackets, commas, line breaks (and colons),
    what each is (``_OPENS``...), whether it is outside strings, and the nesting depth after it; the
    block's unescaped quotes (a mask) and the depth at its start. Strings are told by the parity of
    the quotes before a byte (a running sum over the block), so only the few structural bytes are
    looked at one by one. Returns (``StopIteration.value``) ``(ended outside strings, final depth,
    lowest depth)``."""
    table = _CLASS_COLONS if colons else _CLASS
    in_string, depth, lowest = 0, 0, 0
    for s in range(0, buf.size, STEP):
        a = buf[s:s + STEP]
        quotes = a == _QUOTE
        cand = np.flatnonzero(quotes[1:] & (a[:-1] == _BACKSLASH)) + 1  # quotes after a backslash
        if s and quotes[0] and buf[s - 1] == _BACKSLASH:
            cand = np.concatenate([[0], cand])
        if cand.size:
            quotes[_escaped(buf, cand + s) - s] = False
        inside = np.cumsum(quotes, dtype=np.int8)  # parity only: wrapping keeps it
        inside += in_string
        inside &= 1
        in_string = int(inside[-1])
        kinds = table[a]
        pos = np.flatnonzero(kinds)
        kinds = kinds[pos]
        outside = inside[pos] == 0
        step = ((kinds == _OPENS) & outside).astype(np.int32)
        step -= (kinds == _CLOSES) & outside
        d = np.cumsum(step, dtype=np.int32)
        d += depth
        before = depth
        if d.size:
            depth = int(d[-1])
            lowest = min(lowest, int(d.min()))
        yield s, pos, kinds, outside, d, quotes, before
    return in_string == 0, depth, lowest


def _space(a: np.ndarray) -> np.ndarray:
    return (a == _WHITESPACE[0]) | (a == _WHITESPACE[1]) | (a == _WHITESPACE[2]) | (a == _WHITESPACE[3])


def _last_byte(buf: np.ndarray) -> int:
    """The position of the last byte of ``buf`` that is not white space (-1: none)."""
    for s in range(buf.size, 0, -4096):
        tail = np.flatnonzero(~_space(buf[max(0, s - 4096):s]))
        if tail.size:
            return max(0, s - 4096) + int(tail[-1])
    return -1


def _first_byte(buf: np.ndarray) -> int | None:
    """The first byte of ``buf`` that is not white space (``None``: none in the first 4 KB)."""
    lead = np.flatnonzero(~_space(buf[:4096]))
    return int(buf[lead[0]]) if lead.size else None


def list_as_lines(buf: np.ndarray, inner: list | None = None) -> int | None:
    """Turn ``buf``, a JSON document that is a list, into JSON Lines in place, one item a line;
    the number of items (negative when some are no objects), or ``None`` (``buf`` then partly changed) when it is no list (or not valid
    JSON as far as its structure shows). ``inner`` gets the positions of the raw line breaks inside
    strings (arrays), which the lines still hold: see :func:`escape_breaks`."""
    if _first_byte(buf) != _OPEN[0]:
        return None
    last = _last_byte(buf)  # before the list's closing bracket is made a space
    items, objects, opened, closes, end = 1, 0, 0, 0, -1
    scan = _structure(buf)
    while True:
        try:
            s, pos, kinds, outside, d, _, _ = next(scan)
        except StopIteration as stop:
            ended, depth, lowest = stop.value
            break
        structural = outside & ((kinds == _OPENS) | (kinds == _CLOSES))
        outer = structural & (((kinds == _OPENS) & (d == 1)) | ((kinds == _CLOSES) & (d == 0)))
        n = int(np.count_nonzero(outer))
        if n:
            opened += int(np.count_nonzero(outer & (kinds == _OPENS)))
            found = np.flatnonzero(outer & (kinds == _CLOSES))
            closes += found.size
            if found.size:
                end = s + int(pos[found[-1]])
        a = buf[s:s + STEP]
        starts = pos[outside & (kinds == _OPENS) & (d == 2)]  # where the items that are objects or lists start
        objects += int(np.count_nonzero(a[starts] == _OPEN[1]))
        a[pos[outside & (kinds == _BREAKS)]] = 32  # line breaks between tokens
        if inner is not None:
            found = pos[~outside & (kinds == _BREAKS)]
            if found.size:
                inner.append(found + s)
        commas = pos[outside & (kinds == _COMMAS) & (d == 1)]
        items += commas.size
        a[commas] = 10
        a[pos[outer]] = 32
    if not ended or depth != 0 or lowest < 0 or opened != 1 or closes != 1 or last != end:
        return None
    return items if objects == items else -items


def escape_breaks(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``buf`` with its raw line breaks at positions ``at`` (inside strings) written as ``\\n`` /
    ``\\r``: sloppy JSON that HF's ``ujson`` reads (and writes again escaped), which would cut a line
    of JSON Lines in two."""
    chars = buf[at]
    out = np.insert(buf, at, _BACKSLASH)
    out[at + np.arange(1, at.size + 1)] = np.where(chars == 10, ord("n"), ord("r"))
    return out


def read_list_of_objects(source: str | BinaryIO, carried: list | None = None) -> pa.Table | None:
    """A JSON document that is a list of objects (``source``: see :func:`read_bytes`) read as HF 5.2
    reads it: as JSON Lines, by pyarrow, its ``Json`` columns found as in the first chunk of a JSON
    Lines file (``json_lines.read_chunk``; ``carried``: paths already found, grown in place, see
    ``json_files.json_table``). ``None`` for another document (a list of other values, an object).

    When HF's search would find no ``Json`` column (no struct of which an object lacks a field or
    which is empty: ``json_lines.same_keys``; no column of mixed types, which pyarrow refuses), the lines
    are read by pyarrow with no Python object built; else by ``read_chunk``. The values are those
    written: HF writes each object again with pandas' ``ujson_dumps`` first, which keeps 10
    significant digits of a float (``docs/compat.md``).

    A list that HF 5.2 takes for a list of other values (no ``{`` before the first ``"`` in its
    first 100 bytes: ``[1, 2]``, ``["a"]``, ``[[1, 2], [3]]``) is read as HF reads it: each item
    the value of a column ``text`` (``{"text": [1, 2]}``), its ``Json`` columns found as above."""
    from .json_lines import read_chunk, read_json, same_keys

    buf = read_bytes(source)
    values = b"{" not in buf[:100].tobytes().split(b'"', 1)[0]  # HF 5.2's test of a list of objects
    inner: list = []
    items = list_as_lines(buf, inner)
    if items is None or (items < 0 and not values):
        return None
    if inner:  # raw line breaks in strings
        buf = escape_breaks(buf, np.concatenate(inner))
    if values:
        lines = [b'{"text": ' + line + b"}" for line in buf.tobytes().split(b"\n") if line.strip()]
        if not lines:
            return None  # an empty list: no row (pandas says so)
        paths = carried if carried is not None else []
        return read_chunk(b"\n".join(lines), paths, detect=True)
    data = pa.py_buffer(buf)
    if not carried:
        block = data.size if data.size // 8 > 1 << 20 else 1 << 20  # as HF: one block for a large document
        while True:
            try:
                table = read_json(lambda: pa.BufferReader(data), max(block, 1))
                break
            except pa.ArrowException as e:
                if ("straddling" in str(e) or "JSON conversion to" in str(e)) and block < data.size:
                    block *= 2
                    continue
                table = None  # mixed types, or not JSON: read_chunk says
                break
        if table is not None and table.num_rows == items and all(same_keys(c) for c in table.columns):
            return table
    del data
    paths = carried if carried is not None else []
    found = list(paths)
    try:
        return read_chunk(buf.tobytes(), paths, detect=True)
    except (ValueError, pa.ArrowInvalid):
        # what pyarrow refuses but HF's ujson reads (a raw control character or a lone surrogate in a
        # string...): the objects parsed and written again with ujson, as HF reads every list document
        from .json_lines import hf_json

        paths[:] = found
        hf = hf_json()
        examples = [hf.ujson_loads(line) for line in buf.tobytes().split(b"\n") if line.strip()]
        return read_chunk("\n".join(hf.ujson_dumps(x) for x in examples).encode(), paths, detect=True,
                          examples=examples)


def field_value(buf: np.ndarray, field: str) -> tuple[int, int] | None:
    """Where the value of key ``field`` of the object that ``buf`` holds lies (``buf[start:end]``;
    the last of keys written twice, as ``json.load`` keeps it); ``None`` when ``buf`` is no object
    with that key (or not valid JSON as far as its structure shows)."""
    import json

    if _first_byte(buf) != _OPEN[1]:
        return None
    marks: list[np.ndarray] = []  # the quotes, colons and commas of the object's own level
    kinds_: list[np.ndarray] = []
    end, closes = -1, 0
    scan = _structure(buf, colons=True)
    while True:
        try:
            s, pos, kinds, outside, d, quotes, before = next(scan)
        except StopIteration as stop:
            ended, depth, lowest = stop.value
            break
        found = np.flatnonzero(outside & (kinds == _CLOSES) & (d == 0))
        closes += found.size
        if found.size:
            end = s + int(pos[found[-1]])
        level = (d == 1) & outside & ((kinds == _COLONS) | (kinds == _COMMAS))
        q = np.flatnonzero(quotes)
        at = np.searchsorted(pos, q) - 1  # the structural byte before each quote: its depth
        q_depth = np.where(at >= 0, d[np.maximum(at, 0)] if d.size else before, before)
        q = q[q_depth == 1]
        marks += [pos[level] + s, q + s]
        kinds_ += [kinds[level], np.full(q.size, _Q, np.uint8)]
    if not ended or depth != 0 or lowest < 0 or closes != 1 or _last_byte(buf) != end:
        return None
    order = np.concatenate(marks)
    sort = np.argsort(order, kind="stable")
    order, kind = order[sort].tolist(), np.concatenate(kinds_)[sort].tolist()
    found_at = None
    for i, k in enumerate(kind):
        # a key: two quotes right before a colon
        if k == _COLONS and i >= 2 and kind[i - 1] == kind[i - 2] == _Q:
            text = buf[order[i - 2]:order[i - 1] + 1].tobytes()
            try:
                key = json.loads(text) if b"\\" in text else text[1:-1].decode("utf-8")
            except ValueError:
                return None
            if key == field:
                nxt = next((order[j] for j in range(i + 1, len(order)) if kind[j] == _COMMAS), end)
                found_at = (order[i] + 1, nxt)
    return found_at
