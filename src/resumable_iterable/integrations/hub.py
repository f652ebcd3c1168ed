"""``load_dataset``: data files of a local folder or a Hugging Face Hub dataset repo, one shard per file.

Supported formats: Parquet, Arrow IPC, JSON Lines, CSV (see :mod:`resumable_iterable.nodes.files`).

Which files make which split follows the conventions of Hugging Face ``datasets``:

1. ``data_files`` when given: a pattern or list of patterns (the ``train`` split), or a dict
   ``{split: pattern(s)}``. Patterns are globs relative to the repo / folder root (or to
   ``data_dir``): ``*`` stays within a folder, ``**`` crosses folders, a folder name means
   everything below it.
2. otherwise the ``configs`` section of the dataset card (YAML front matter of ``README.md``),
   with ``name`` choosing the config;
3. otherwise files named like ``data/<split>-00000-of-00003.parquet``;
4. otherwise folders named after a split (``train/``, ``validation/``, ``dev/``, ``test/``, ...);
5. otherwise file names holding a split keyword (``train.csv``, ``my_test-0.jsonl``, ...);
6. otherwise every data file is in ``train``.

Hub repos (``"user/repo"`` or ``hf://datasets/user/repo[@revision]/path``) are resolved with
``huggingface_hub``: the revision is resolved and the file listing read once (and cached by
``huggingface_hub``), only the chosen files are downloaded into the Hugging Face cache, pinned to
one commit. With ``HF_HUB_OFFLINE=1`` (or when the Hub cannot be reached) everything comes from
the cache: the listing ``huggingface_hub`` stored with the snapshot and the files already
downloaded; a split whose files are not all in the cache raises an error naming them.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote

from ..dataset import IterableDataset
from ..nodes.files import FORMATS, format_of

SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_SEP = r"[-._ 0-9]"
_IGNORED = {"readme.md", ".gitattributes", "config.json", "dataset_info.json", "dataset_infos.json",
            "dataset_dict.json", "state.json"}
_SHARDED = re.compile(r"^data/(?P<split>\w+?)-\d{5}-of-\d{5}[^/]*$")
_FORMAT_ALIASES = {**{f: f for f in FORMATS}, "jsonl": "json"}


# --------------------------------------------------------------------------- patterns


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


def _normalize_data_files(data_files: Any) -> dict[str, list[str]]:
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


# --------------------------------------------------------------------------- split conventions


def _is_candidate(path: str) -> bool:
    """Not hidden (``.git*``, ``__pycache__``, ...) and not repo metadata (``README.md``, ...)."""
    parts = path.split("/")
    if any(p.startswith(".") or p.startswith("__") for p in parts):
        return False
    return parts[-1].lower() not in _IGNORED


def _is_data_file(path: str) -> bool:
    return _is_candidate(path) and format_of(path) is not None


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
        return sharded
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
        return by_dir
    if by_name:
        return by_name
    return {"train": files}


def _card_configs(readme: str | None) -> list[dict]:
    if readme is None or not os.path.isfile(readme):
        return []
    from huggingface_hub.repocard import metadata_load

    try:
        meta = metadata_load(readme) or {}
    except Exception as e:  # noqa: BLE001 - a broken card must not hide the data
        raise ValueError(f"cannot read the YAML header of {readme}: {e}") from None
    configs = meta.get("configs") or []
    return [c for c in configs if isinstance(c, dict)]


def _config_data_files(configs: list[dict], name: str | None) -> tuple[dict[str, list[str]], str | None] | None:
    """``(data_files, data_dir)`` of the chosen card config, or ``None`` when the card has none."""
    if not configs:
        if name not in (None, "default"):
            raise ValueError(f"config {name!r} not found: the dataset card declares no configs")
        return None
    names = [c.get("config_name", "default") for c in configs]
    if name is None:
        chosen = next((c for c in configs if c.get("default")), None)
        if chosen is None:
            if len(configs) > 1 and "default" not in names:
                raise ValueError(f"this dataset has several configs {names}: pick one with name=...")
            chosen = configs[names.index("default")] if "default" in names else configs[0]
    else:
        if name not in names:
            raise ValueError(f"config {name!r} not found; available configs: {names}")
        chosen = configs[names.index(name)]
    data_files = chosen.get("data_files")
    data_dir = chosen.get("data_dir")
    if data_files is None:
        return ({}, data_dir) if data_dir else None
    if isinstance(data_files, list) and all(isinstance(e, dict) for e in data_files):
        return {str(e["split"]): e["path"] if isinstance(e["path"], list) else [e["path"]] for e in data_files}, data_dir
    return _normalize_data_files(data_files), data_dir


def resolve_splits(files: list[str], data_files: Any = None, data_dir: str | None = None,
                   readme: str | None = None, name: str | None = None) -> dict[str, list[str]]:
    """``{split: [files]}`` for a repo / folder whose data files (posix, relative) are ``files``."""
    data = sorted(f for f in files if _is_data_file(f))
    if data_files is None:
        card = _config_data_files(_card_configs(readme), name)
        if card is not None:
            data_files, card_dir = card
            data_dir = data_dir or card_dir
            if not data_files:
                data_files = None
    elif name is not None:
        _config_data_files(_card_configs(readme), name)  # validates the name
    prefix = ""
    if data_dir:
        prefix = data_dir.strip("/") + "/"
        data = [f[len(prefix):] for f in data if f.startswith(prefix)]
        if data_files is None and not data:
            raise FileNotFoundError(f"no data file under data_dir={data_dir!r}")
    if data_files is not None:
        # explicit patterns may name any file, even one with an unusual name, as long as its format is known
        candidates = sorted(f[len(prefix):] for f in files if f.startswith(prefix) and _is_candidate(f))
        splits = {split: match_files(pats, candidates) for split, pats in _normalize_data_files(data_files).items()}
    else:
        splits = infer_splits(data)
    if not splits:
        raise FileNotFoundError("no data files (parquet, arrow, json/jsonl, csv) found")
    return {split: [prefix + f for f in fs] for split, fs in splits.items()}


# --------------------------------------------------------------------------- sources


def parse_hf_path(path: str) -> tuple[str, str | None, str]:
    """``hf://datasets/<namespace>/<name>[@<revision>]/<path in repo>`` -> (repo_id, revision, path)."""
    if not path.startswith("hf://"):
        raise ValueError(f"not an hf:// path: {path!r}")
    rest = path[len("hf://"):]
    if not rest.startswith("datasets/"):
        raise ValueError(f"only dataset repos are supported: expected hf://datasets/<namespace>/<name>/..., got {path!r}")
    parts = rest[len("datasets/"):].split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"expected hf://datasets/<namespace>/<name>[@<revision>]/..., got {path!r}")
    namespace, name = parts[0], parts[1]
    revision = None
    if "@" in name:
        name, revision = name.split("@", 1)
        revision = unquote(revision) or None
    return f"{namespace}/{name}", revision, "/".join(p for p in parts[2:] if p)


_REPO_PART = re.compile(r"\w(?:[\w.-]{0,94}\w)?", re.ASCII)


def is_hub_repo_id(path: str) -> bool:
    """``path`` has the form of a Hub dataset repo id ``namespace/name`` (the rules
    ``huggingface_hub`` checks: ASCII letters, digits, ``-``, ``_``, ``.``; each part at most 96
    characters, not starting or ending with ``-`` or ``.``; no ``--`` or ``..``; not ending in
    ``.git``). ``./data``, ``../x/y``, ``/abs/path`` and ``folder/`` are paths, not repo ids."""
    parts = path.split("/")
    return (len(parts) == 2 and all(_REPO_PART.fullmatch(p) for p in parts)
            and "--" not in path and ".." not in path and not path.endswith(".git"))


def missing_path_message(path: str) -> str:
    """The error for a ``load_dataset`` path that is not a local folder or file, nor a repo id."""
    full = os.path.abspath(os.path.expanduser(path))
    where = f" ({full})" if full != path else ""
    return (f"local folder or file {path!r} does not exist{where}: it is neither a local folder or file nor a Hub "
            "dataset repo id (Hub ids look like 'namespace/name')")


def _local_files(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        for fn in filenames:
            out.append(fn if rel == "." else f"{rel.replace(os.sep, '/')}/{fn}")
    return sorted(out)


class _HubRepo:
    """A dataset repo at one commit: its file listing, and local paths of the files it downloads."""

    def __init__(self, repo_id: str, revision: str | None, token: Any, cache_dir: str | None):
        from huggingface_hub import snapshot_download

        self.repo_id, self.token, self.cache_dir = repo_id, token, cache_dir
        self._download = snapshot_download
        # resolves the revision (from the cache when offline) and fetches the dataset card
        self.folder = self._get(revision, ["README.md"])
        self.commit = os.path.basename(os.path.normpath(self.folder))
        self.files = self._list()

    def _get(self, revision: str | None, patterns: list[str], files: list[str] | None = None) -> str:
        from huggingface_hub import constants
        from huggingface_hub.errors import LocalEntryNotFoundError

        offline = getattr(constants, "is_offline_mode", lambda: constants.HF_HUB_OFFLINE)()
        try:
            return self._download(self.repo_id, repo_type="dataset", revision=revision, allow_patterns=patterns,
                                  cache_dir=self.cache_dir, token=self.token, local_files_only=offline)
        except LocalEntryNotFoundError as e:
            missing = ""
            if files is not None:
                gone = [f for f in files if not os.path.isfile(os.path.join(self.folder, *f.split("/")))]
                missing = f"; not in the cache: {', '.join(gone[:5])}{' ...' if len(gone) > 5 else ''}" if gone else ""
            why = "offline mode is on (HF_HUB_OFFLINE)" if offline else "the Hub cannot be reached"
            raise FileNotFoundError(
                f"dataset {self.repo_id!r} (revision {revision or 'main'}): {why} and the files are not all in "
                f"the local cache{missing} ({e})"
            ) from None

    def _list(self) -> list[str]:
        try:
            from huggingface_hub import get_cached_repo_tree
            from huggingface_hub.errors import CachedRepoTreeNotFoundError
        except ImportError:  # huggingface_hub without a tree cache: ask the Hub
            get_cached_repo_tree = None
        if get_cached_repo_tree is not None:
            try:
                tree = get_cached_repo_tree(self.repo_id, repo_type="dataset", revision=self.commit,
                                            cache_dir=self.cache_dir)
                return sorted(f.path for f in tree)
            except CachedRepoTreeNotFoundError:
                pass
        from huggingface_hub import HfApi

        return sorted(HfApi(token=self.token).list_repo_files(self.repo_id, repo_type="dataset", revision=self.commit))

    def readme(self) -> str | None:
        return os.path.join(self.folder, "README.md") if "README.md" in self.files else None

    def fetch(self, files: list[str]) -> list[str]:
        """Download ``files`` (at the pinned commit) into the cache; return their local paths."""
        folder = self._get(self.commit, [_glob_escape(f) for f in files], files)
        return [os.path.join(folder, *f.split("/")) for f in files]


def _glob_escape(path: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", path)


def _split_dataset(paths: list[str], fmt: str | None, split: str, reader_kwargs: dict) -> IterableDataset:
    if fmt is None:
        found = sorted({format_of(p) or "?" for p in paths})
        if len(found) != 1 or found[0] == "?":
            raise ValueError(f"split {split!r} mixes file formats {found}; choose the files with data_files=... "
                             f"or pass format= one of {FORMATS}")
        fmt = found[0]
    return IterableDataset.from_files(paths, fmt, **reader_kwargs)


def load_dataset(path: str | os.PathLike, name: str | None = None, *, data_dir: str | None = None,
                 data_files: Any = None, split: str | None = None, revision: str | None = None,
                 token: Any = None, cache_dir: str | os.PathLike | None = None, format: str | None = None,
                 streaming: bool = True, **reader_kwargs: Any) -> IterableDataset | dict[str, IterableDataset]:
    """Load the data files of a local folder or a Hub dataset repo as resumable iterable datasets.

    Args:
        path: a local folder, a Hub dataset repo id (``"user/repo"``), an
            ``hf://datasets/user/repo[@revision][/path]`` URL, or a format name (``"parquet"``,
            ``"arrow"``, ``"json"``, ``"csv"``) together with ``data_files``.
        name: the config of the dataset card (``configs:`` in ``README.md``) to use.
        data_dir: only consider files below this folder of the repo.
        data_files: a glob or list of globs (the ``train`` split) or a dict ``{split: glob(s)}``.
        split: the split to return; ``None`` returns a dict of every split.
        revision: a branch, tag or commit of a Hub repo (default: the default branch).
        token: passed to ``huggingface_hub`` for private repos.
        cache_dir: the Hugging Face cache to use (default: ``HF_HUB_CACHE``).
        format: force the file format instead of inferring it from the extensions.
        streaming: accepted for compatibility with ``datasets.load_dataset``; the result is always
            lazy (files are read when iterated, one shard per file).
        **reader_kwargs: passed to the pyarrow reader (JSON / CSV options).

    Returns:
        An :class:`~resumable_iterable.IterableDataset` (one shard per file, in sorted path order)
        or, with ``split=None``, a dict of them keyed by split.
    """
    del streaming
    if format is not None and format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; expected one of {FORMATS}")
    path = os.fspath(path)
    cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
    repo: _HubRepo | None = None
    readme = None
    if path in _FORMAT_ALIASES and not os.path.isdir(path):
        # load_dataset("parquet", data_files=...): files given directly (local paths or hf:// URLs)
        if data_files is None:
            raise ValueError(f"load_dataset({path!r}) needs data_files=...")
        format = format or _FORMAT_ALIASES[path]
        splits = _normalize_data_files(data_files)
        repos: dict = {}
        resolved = {s: _resolve_direct(pats, revision, token, cache_dir, repos) for s, pats in splits.items()}
        return _pick({s: _split_dataset(p, format, s, reader_kwargs) for s, p in resolved.items()}, split)
    if path.startswith("hf://"):
        repo_id, url_revision, sub = parse_hf_path(path)
        revision = url_revision or revision
        repo = _HubRepo(repo_id, revision, token, cache_dir)
        if sub:
            if any(ch in sub for ch in "*?[") or sub in repo.files:
                data_files = data_files if data_files is not None else sub
            else:
                data_dir = f"{sub}/{data_dir}" if data_dir else sub
        files, readme = repo.files, repo.readme()
    elif os.path.isdir(path):
        if revision is not None:
            raise ValueError("revision= only applies to Hub repos, not to a local folder")
        files = _local_files(path)
        readme = os.path.join(path, "README.md") if "README.md" in files else None
    elif os.path.isfile(path):
        data_files = data_files if data_files is not None else os.path.basename(path)
        files = [os.path.basename(path)]
        path = os.path.dirname(os.path.abspath(path))
    elif is_hub_repo_id(path) and not os.path.exists(path):
        repo = _HubRepo(path, revision, token, cache_dir)
        files, readme = repo.files, repo.readme()
    else:
        raise FileNotFoundError(missing_path_message(path))

    splits = resolve_splits(files, data_files=data_files, data_dir=data_dir, readme=readme, name=name)
    if split is not None and split not in splits:
        raise ValueError(f"unknown split {split!r}; available splits: {sorted(splits)}")
    wanted = {split: splits[split]} if split is not None else splits
    needed = list(dict.fromkeys(f for fs in wanted.values() for f in fs))
    # one download call for every split: each call asks the Hub about the commit again
    local = dict(zip(needed, repo.fetch(needed))) if repo is not None else {
        f: os.path.join(path, *f.split("/")) for f in needed}
    out = {s: _split_dataset([local[f] for f in fs], format, s, reader_kwargs) for s, fs in wanted.items()}
    return _pick(out, split)


def _resolve_direct(patterns: list[str], revision: str | None, token: Any, cache_dir: str | None,
                    repos: dict) -> list[str]:
    """Local paths for ``data_files`` given as local globs / paths or ``hf://`` URLs. ``repos`` keeps
    the Hub repos opened so far, so each repo's revision is resolved and its files listed once."""
    import glob

    out: list[str] = []
    for p in patterns:
        if p.startswith("hf://"):
            repo_id, url_revision, sub = parse_hf_path(p)
            key = (repo_id, url_revision or revision)
            repo = repos.get(key)
            if repo is None:
                repo = repos[key] = _HubRepo(*key, token, cache_dir)
            out.extend(repo.fetch(match_files(sub, repo.files)))
        elif any(ch in p for ch in "*?["):
            hits = sorted(glob.glob(p, recursive=True))
            hits = [h for h in hits if os.path.isfile(h)]
            if not hits:
                raise FileNotFoundError(f"no data file matches {p!r}")
            out.extend(hits)
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise FileNotFoundError(f"data file {p!r} not found")
    return out


def _pick(datasets: dict[str, IterableDataset], split: str | None):
    return datasets[split] if split is not None else datasets
