"""Which data files make which split, following the conventions of Hugging Face ``datasets``:

1. ``data_files`` when given: a pattern or list of patterns (the ``train`` split), or a dict
   ``{split: pattern(s)}`` (see ``patterns.py``), relative to the root or to ``data_dir``;
2. otherwise the ``configs`` section of the dataset card (see ``card.py``), ``name`` choosing
   the config;
3. otherwise files named like ``data/<split>-00000-of-00003.parquet``;
4. otherwise folders named after a split (``train/``, ``validation/``, ``dev/``, ``test/``, ...);
5. otherwise file names holding a split keyword (``train.csv``, ``my_test-0.jsonl``, ...);
6. otherwise every data file is in ``train``.

Hidden files and repo metadata (``README.md``, ``.gitattributes``, ...) are never data.
"""

from __future__ import annotations

import re
from typing import Any

from ...nodes.file_formats import format_of
from .card import card_configs, config_data_files
from .patterns import match_data_files, normalize_data_files

SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_SEP = r"[-._ 0-9]"
_IGNORED = {"readme.md", ".gitattributes", "config.json", "dataset_info.json", "dataset_infos.json",
            "dataset_dict.json", "state.json"}
_SHARDED = re.compile(r"^data/(?P<split>\w+?)-\d{5}-of-\d{5}[^/]*$")


def is_candidate(path: str) -> bool:
    """Not hidden (``.git*``, ``__pycache__``, ...) and not repo metadata (``README.md``, ...)."""
    parts = path.split("/")
    if any(p.startswith(".") or p.startswith("__") for p in parts):
        return False
    return parts[-1].lower() not in _IGNORED


def _is_data_file(path: str) -> bool:
    """A file of a known format, or a zip archive (HF reads the files in it)."""
    return is_candidate(path) and (format_of(path) is not None or path.lower().endswith(".zip"))


def _keyword_in(name: str, keyword: str) -> bool:
    """``keyword`` in ``name``, at its start or after a separator, and followed by a separator or
    the end (separators: ``-``, ``.``, ``_``, space, digits)."""
    k = re.escape(keyword)
    return re.search(rf"(?:^|{_SEP}){k}(?:{_SEP}|$)", name) is not None


def infer_splits(files: list[str]) -> dict[str, list[str]]:
    """Group data files into splits following the Hugging Face ``datasets`` naming conventions."""
    files = sorted(files)
    if not files:
        return {}
    sharded: dict[str, list[str]] = {}
    for f in files:
        m = _SHARDED.match(f)
        if m:
            sharded.setdefault(m.group("split"), []).append(f)
    if sharded:
        return _hf_order(sharded)
    by_dir: dict[str, list[str]] = {}
    by_name: dict[str, list[str]] = {}
    for f in files:
        *dirs, name = f.split("/")
        stem = name.rsplit(".", 1)[0]
        for split, keywords in SPLIT_KEYWORDS.items():
            if any(_keyword_in(d.lower(), k) for d in dirs for k in keywords):
                by_dir.setdefault(split, []).append(f)
            if any(_keyword_in(stem.lower(), k) for k in keywords):
                by_name.setdefault(split, []).append(f)
    if by_dir:
        return _hf_order(by_dir)
    if by_name:
        return _hf_order(by_name)
    return {"train": files}


def _hf_order(splits: dict[str, list[str]]) -> dict[str, list[str]]:
    """The splits in HF's order: train, validation, test, then the others sorted by name."""
    first = [s for s in SPLIT_KEYWORDS if s in splits]
    return {s: splits[s] for s in first + sorted(set(splits) - set(first))}


def resolve_splits(files: list[str], data_files: Any = None, data_dir: str | None = None,
                   readme: str | None = None, name: str | None = None,
                   empty_splits: dict | None = None) -> dict[str, list[str]]:
    """``{split: [files]}`` for a repo / folder whose data files (posix, relative) are ``files``. A
    split whose ``data_files`` patterns match no file is an empty list, as in HF (its patterns go in
    ``empty_splits``, when given); patterns matching no file at all are a ``FileNotFoundError``."""
    data = sorted(f for f in files if _is_data_file(f))
    if data_files is None:
        card = config_data_files(card_configs(readme), name)
        if card is not None:
            data_files, card_dir = card
            data_dir = data_dir or card_dir
            if not data_files:
                data_files = None
    elif name is not None:
        config_data_files(card_configs(readme), name)  # validates the name
    prefix = ""
    if data_dir:
        prefix = data_dir.strip("/") + "/"
        data = [f[len(prefix):] for f in data if f.startswith(prefix)]
        if data_files is None and not data:
            raise FileNotFoundError(f"no data file under data_dir={data_dir!r}")
    if data_files is not None:
        # explicit patterns may name any file, even one with an unusual name or a hidden one, as HF's
        # (match_data_files: what HF leaves out unless named, globs that match nothing dropped)
        candidates = sorted(f[len(prefix):] for f in files if f.startswith(prefix))
        splits, unmatched = {}, {}
        for split, pats in normalize_data_files(data_files).items():
            splits[split], unmatched[split] = match_data_files(pats, candidates)
        if not any(splits.values()):
            raise FileNotFoundError(f"no data file matches data_files={data_files!r} (hidden files, README.md "
                                    "and other dataset metadata are left out unless a pattern names them)")
        if empty_splits is not None:
            empty_splits.update({s: unmatched[s] for s, fs in splits.items() if not fs})
    else:
        splits = infer_splits(data)
    if not splits:
        raise FileNotFoundError("no data files (parquet, arrow, json/jsonl, csv) found")
    return {split: [prefix + f for f in fs] for split, fs in splits.items()}
