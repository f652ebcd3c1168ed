"""Opening a data file for reading: decompressed as its extension says (``.gz``, ``.bz2``, ``.xz``,
``.zst``, as HF infers it), a member of a zip archive (``zip://<member>::<archive>``, see
``archives.py``) read through its archive, as bytes a line at a time, as text, or as UTF-8 bytes
decoded from another encoding (for the JSON parsers, which read UTF-8 only). How each format is
parsed once open is ``file_formats.py``."""

from __future__ import annotations

import codecs
import os
from typing import Any

import pyarrow as pa

from .archives import open_member, split_member

#: the compressions a file's last extension names
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".xz": "xz"}


def compression_of(path: str) -> str | None:
    """The compression a file's extension names (``.gz``, ``.bz2``, ``.zst``, ``.xz``), as HF infers it."""
    member = split_member(path)
    if member is not None:  # an archive member: its own name says
        path = member[1]
    return COMPRESSIONS.get(os.path.splitext(path.lower())[1])


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
    cls = _closing_class(compression)
    f = cls(fileobj=raw, mode="rb") if compression == "gzip" else cls(raw, "rb")
    f._raw = raw
    return f


class _ClosesRaw:
    """Mixed into a decompressing file class: closing the file closes the archive member it reads,
    ``_raw``, too. (A ``close`` replaced on the instance, calling the one it replaced, was a
    reference cycle: each compressed member opened - each shard of each pass - left its file
    objects and their buffers to the cyclic garbage collector.)"""

    _raw: Any = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            raw = self._raw
            if raw is not None:
                raw.close()


_CLOSING: dict = {}  # compression -> its decompressing file class with _ClosesRaw


def _closing_class(compression: str) -> type:
    cls = _CLOSING.get(compression)
    if cls is None:
        if compression == "gzip":
            import gzip

            base = gzip.GzipFile
        elif compression == "bz2":
            import bz2

            base = bz2.BZ2File
        else:
            import lzma

            base = lzma.LZMAFile
        cls = _CLOSING[compression] = type(f"{base.__name__}ClosingMember", (_ClosesRaw, base), {})
    return cls


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


def open_text(path: str, encoding: str = "utf-8", errors: str | None = None, newline: str | None = None) -> Any:
    """A file opened for reading text (universal newlines, unless ``newline=""``: line breaks as
    written), decompressed as its extension says."""
    if is_plain_file(path):
        return open(path, encoding=encoding, errors=errors, newline=newline)
    import io

    return io.TextIOWrapper(open_binary(path), encoding=encoding, errors=errors, newline=newline)
