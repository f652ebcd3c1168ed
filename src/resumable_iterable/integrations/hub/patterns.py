"""Globs over the posix paths of a repo or folder, as ``data_files`` uses them: ``*`` stays within a
folder, ``**`` crosses folders, ``?`` and ``[...]`` match one character, and a pattern without
wildcards may name a folder (everything below it). Also: the forms ``data_files`` may take, made
one ``{split: [patterns]}`` dict.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ...nodes.file_globs import unrequested


def _pattern_regex(pattern: str) -> re.Pattern:
    """A glob (``*`` within a folder, ``**`` across folders, ``?``, ``[...]``) as a regex on posix paths."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1: j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def match_files(patterns: str | list[str], files: list[str]) -> list[str]:
    """The files (posix paths relative to the root) matched by glob ``patterns``, in pattern order
    and sorted within a pattern; a pattern without wildcards may also name a folder."""
    if isinstance(patterns, str):
        patterns = [patterns]
    out: list[str] = []
    seen = set()
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            raise ValueError(f"data_files patterns must be non-empty strings, got {pattern!r}")
        pattern = pattern.replace("\\", "/")
        while pattern.startswith("./"):
            pattern = pattern[2:]
        if any(ch in pattern for ch in "*?["):
            rx = _pattern_regex(pattern)
            hits = [f for f in files if rx.match(f)]
        else:
            folder = pattern.rstrip("/") + "/"
            hits = [f for f in files if f == pattern or f.startswith(folder)]
        if not hits:
            raise FileNotFoundError(f"no data file matches {pattern!r}")
        for f in sorted(hits):
            if f not in seen:
                seen.add(f)
                out.append(f)
    return out


def match_data_files(patterns: list[str], files: list[str]) -> tuple[list[str], list[str]]:
    """The files of one split (posix paths relative to the root) as HF resolves its ``data_files``
    patterns: each pattern's matches (:func:`match_files`) less those HF leaves out unless the pattern
    names them (:func:`unrequested`: dataset metadata, hidden files and folders, ``__x`` folders), in
    pattern order, each file once. As in HF, a glob that matches no (other) file adds nothing; a path
    without wildcards that names no file or folder is a ``FileNotFoundError``. Also returns the globs
    that added nothing (for the error when the split, or every split, ends up without a file)."""
    out: list[str] = []
    seen: set = set()
    empty: list[str] = []
    for pattern in patterns:
        try:
            hits = match_files(pattern, files)
        except FileNotFoundError:
            if not any(ch in pattern for ch in "*?["):
                raise FileNotFoundError(f"data file {pattern!r} not found") from None
            hits = []
        hits = [f for f in hits if not unrequested(f, pattern)]
        if not hits:
            empty.append(pattern)
        for f in hits:
            if f not in seen:
                seen.add(f)
                out.append(f)
    return out, empty


def normalize_data_files(data_files: Any) -> dict[str, list[str]]:
    """``data_files`` as ``{split: [patterns]}``: a pattern or a list of them is the ``train`` split."""
    if isinstance(data_files, (str, os.PathLike)):
        return {"train": [os.fspath(data_files)]}
    if isinstance(data_files, (list, tuple)):
        return {"train": [os.fspath(p) for p in data_files]}
    if isinstance(data_files, dict):
        out = {}
        for split, value in data_files.items():
            out[str(split)] = [os.fspath(value)] if isinstance(value, (str, os.PathLike)) else [os.fspath(v) for v in value]
        return out
    raise TypeError(f"data_files must be a str, a list or a dict of split -> pattern(s), got {type(data_files).__name__}")
