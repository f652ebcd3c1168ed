"""Saving and loading states: the two file formats, atomic writes, checksums.

The codec (``state_codec.py``) turns a state into a JSON document, handing out large arrays and
bytes as raw *blobs*. This module stores the result:

* **JSON text** (:func:`dumps_state`, and :func:`save_state` when the state holds no large
  values): one JSON object, binary values in base64, with a ``"checksum"`` entry - the SHA-256
  of the rest of the object in canonical form. A list of states is wrapped as
  ``{"__ri__": "root", "value": [...], "checksum": ...}``.
* **Binary state file** (:func:`save_state` when the state holds arrays or bytes of at least
  ``BLOB_MIN`` bytes, typically the examples of a shuffle buffer): the same JSON document, with
  every large value replaced by a reference to a raw blob stored after it; its layout, and
  reading one, is ``state_binary.py``. The JSON is checked against the header's SHA-256 and every
  blob against its own checksum
  (xxh3-128 from the ``xxhash`` package that HF ``datasets`` installs - it runs at memory
  speed; SHA-256 where ``xxhash`` is missing; the file names the one it used), so a truncated
  or damaged file is refused with a ``ValueError``. The blobs are the arrays' own bytes:
  writing costs one pass over them (hashing) plus the write; loading reads each blob straight
  into the memory of a new (writable) array.

:func:`load_state` and :func:`loads_state` read both formats. Files are written atomically
(``atomic_files.py``: a temporary file, ``fsync``, rename): a crash leaves the previous file or
the new one, and the next save to that path removes the temporary file a killed process left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from .atomic_files import write_chunks_atomic
from .state_binary import ALIGN  # noqa: F401 (still importable here)
from .state_binary import (BLOB_HASH, FILE_VERSION, HEADER, MAGIC, align, blob_hasher, load_binary_file, loads_binary,
                           parse_header)
from .state_codec import TAG, decode, encode, too_deep


# --------------------------------------------------------------------------- JSON text


def _checksum(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _text_document(payload: Any) -> dict:
    """The top-level JSON object of a text state: the payload with its checksum."""
    if type(payload) is not dict:  # a list of states: wrapped, so that the checksum has a place
        payload = {TAG: "root", "value": payload}
    payload["checksum"] = _checksum(payload)
    return payload


def dumps_state(state: Any, indent: int | None = None) -> str:
    """Encode a state (as returned by ``state_dict()``), or a list of states (one per rank), to
    JSON text with a checksum. Binary values are stored inline in base64 (see :func:`save_state`
    for the compact binary file)."""
    payload = encode(state, None)
    try:
        return json.dumps(_text_document(payload), indent=indent, allow_nan=False)
    except RecursionError:
        raise too_deep() from None


def _refuse_damaged_checksum_key(raw: dict) -> None:
    """A text without a "checksum" entry is a state a user wrote as plain JSON, unless it holds an
    entry whose value is a checksum: then the name "checksum" itself was damaged (one flipped bit
    would otherwise skip the whole check)."""
    for key, value in raw.items():
        if type(value) is str and _CHECKSUM_VALUE.fullmatch(value):
            raise ValueError(f"state has a checksum under the name {key!r} instead of 'checksum': "
                             "the state was damaged or edited")


_CHECKSUM_VALUE = re.compile(r"sha256:[0-9a-f]{64}")


def _loads_text(text: str) -> Any:
    if text.startswith("\ufeff"):  # a byte order mark, as some editors save UTF-8 (JSON may ignore it)
        text = text[1:]
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"state is not valid JSON (truncated or damaged?): {e}") from None
    except RecursionError:
        raise too_deep() from None
    if type(raw) is list:  # a list of states (one per rank) written with plain json.dump: no checksum
        return decode(raw, None)
    if not isinstance(raw, dict):
        raise ValueError(f"state must be a JSON object (or a list of states), got {type(raw).__name__}")
    if "checksum" not in raw:
        _refuse_damaged_checksum_key(raw)
    else:
        body = {k: v for k, v in raw.items() if k != "checksum"}
        try:
            expected = _checksum(body)
        except ValueError as e:
            raise ValueError(f"state holds values JSON does not allow: {e}") from None
        except RecursionError:
            raise too_deep() from None
        if raw["checksum"] != expected:
            raise ValueError("state checksum does not match its content: the state was damaged or edited")
    body = {k: v for k, v in raw.items() if k != "checksum"}
    if body.get(TAG) == "root" and set(body) == {TAG, "value"}:
        return decode(body["value"], None)
    return decode(body, None)


# --------------------------------------------------------------------------- binary state files


class EncodedState:
    """A state encoded for saving, before anything is written.

    ``document`` is the JSON document (UTF-8), ``blobs`` the raw large values it refers to (views
    of the state's own arrays and bytes, not copies), ``digest`` the SHA-256 (hex) that
    :func:`state_file_digest` returns for the written file: of the JSON text, or of the JSON
    document of a binary file (which holds the checksum of every blob).
    """

    __slots__ = ("document", "blobs", "digest", "_table", "_header")

    def __init__(self, state: Any):
        blobs: list[memoryview] = []
        payload = encode(state, blobs)
        self.blobs = blobs
        try:
            if not blobs:
                self.document = json.dumps(_text_document(payload), allow_nan=False).encode()
                self.digest = hashlib.sha256(self.document).hexdigest()
                self._header = b""
                return
            table, offset, digest = [], 0, blob_hasher(BLOB_HASH)
            for b in blobs:
                table.append([offset, b.nbytes, digest(b)])
                offset = align(offset + b.nbytes)
            data_len = table[-1][0] + table[-1][1]
            self.document = json.dumps({"blobs": table, "hash": BLOB_HASH, "value": payload}, allow_nan=False,
                                       separators=(",", ":")).encode()
        except RecursionError:
            raise too_deep() from None
        sha = hashlib.sha256(self.document)
        self.digest = sha.hexdigest()
        self._header = HEADER.pack(MAGIC, FILE_VERSION, 0, len(self.document), data_len, sha.digest())

    @property
    def binary(self) -> bool:
        """Whether this is a binary state file (else JSON text)."""
        return bool(self._header)

    def chunks(self) -> list:
        """The file's bytes, as a list of buffers to write in order."""
        if not self._header:
            return [self.document]
        out: list = [self._header, self.document, bytes(align(64 + len(self.document)) - 64 - len(self.document))]
        last = len(self.blobs) - 1
        for i, b in enumerate(self.blobs):
            out.append(b)
            pad = align(b.nbytes) - b.nbytes
            if pad and i != last:
                out.append(bytes(pad))
        return out

    @property
    def nbytes(self) -> int:
        return sum(memoryview(c).nbytes for c in self.chunks())

    def to_bytes(self) -> bytes:
        return b"".join(self.chunks())

    def write(self, path: str | os.PathLike) -> None:
        """Write the file atomically (``atomic_files.py``)."""
        write_chunks_atomic(path, self.chunks())


def encode_state(state: Any) -> EncodedState:
    """Encode a state (or a list of states) for :meth:`EncodedState.write`: every value is
    checked and encoded here, so an unsupported value raises before any file is touched."""
    return EncodedState(state)


# --------------------------------------------------------------------------- public API


def _refuse_truncated_magic(data: bytes) -> None:
    """A file of fewer bytes than :data:`MAGIC` that begins it is a binary state file cut short
    (it is no UTF-8 text: ``\x93`` never starts a character), not a text to decode."""
    if 0 < len(data) < len(MAGIC) and MAGIC.startswith(data):
        raise ValueError("binary state file is truncated (its header is incomplete)")


def loads_state(data: str | bytes | bytearray | memoryview) -> Any:
    """Decode a state from JSON text written by :func:`dumps_state`, or from the bytes of a file
    written by :func:`save_state` (either format), verifying its checksums."""
    if isinstance(data, str):
        return _loads_text(data)
    if bytes(memoryview(data)[: len(MAGIC)]) == MAGIC:
        return loads_binary(data)
    _refuse_truncated_magic(bytes(memoryview(data)[: len(MAGIC)]))
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"state is neither a binary state file nor UTF-8 JSON text (not UTF-8: {e})") from None
    return _loads_text(text)


def save_state(state: Any, path: str | os.PathLike) -> None:
    """Write a state (or a list of states, e.g. one per rank) to ``path`` atomically.

    The file is JSON text (as :func:`dumps_state`) unless the state holds arrays or bytes of
    ``BLOB_MIN`` (1 KiB) or more; then it is a binary state file that stores those values
    raw (see the module docstring). Everything is encoded before the file is opened: a value
    that cannot be saved raises ``TypeError``/``ValueError`` and leaves ``path`` untouched.
    """
    encode_state(state).write(path)


def read_state_file(path: str | os.PathLike) -> Any:
    """:func:`load_state` without naming the file in its errors (for callers that name it their
    way). A binary state file's blobs are read one by one into their arrays: the file is never
    held in memory whole."""
    with open(path, "rb") as f:
        head = f.read(len(MAGIC))
        if head == MAGIC:
            return load_binary_file(f, os.fstat(f.fileno()).st_size)
        data = head + f.read()
    _refuse_truncated_magic(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"it is neither a binary state file nor UTF-8 JSON (not UTF-8: {e})") from None
    return _loads_text(text)


def load_state(path: str | os.PathLike) -> Any:
    """Read a state written by :func:`save_state` (JSON text or a binary state file)."""
    p = os.fspath(path)
    try:
        return read_state_file(p)
    except ValueError as e:
        raise ValueError(f"cannot load state file {p!r}: {e}") from None


def state_file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 (hex) identifying a state file's content without reading its blobs: of the
    whole file for JSON text, of the JSON document (which holds every blob's checksum) for a
    binary state file. Equal to :attr:`EncodedState.digest` of what was written."""
    with open(path, "rb") as f:
        head = f.read(HEADER.size)
        if head[: len(MAGIC)] == MAGIC:
            json_len, _, _ = parse_header(head, os.fstat(f.fileno()).st_size)
            return hashlib.sha256(f.read(json_len)).hexdigest()
        sha = hashlib.sha256(head)
        while chunk := f.read(1 << 20):
            sha.update(chunk)
        return sha.hexdigest()
