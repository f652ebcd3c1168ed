"""Where the files of a ``load_dataset`` path are: a local folder (walked once), or a Hub dataset
repo (``"user/repo"`` or ``hf://datasets/user/repo[@revision]/path``) pinned to one commit.

A Hub repo is resolved with ``huggingface_hub``: the revision is resolved and the file listing
read once (and cached by ``huggingface_hub``), only the chosen files are downloaded into the
Hugging Face cache. With ``HF_HUB_OFFLINE=1`` (or when the Hub cannot be reached) everything comes
from the cache: the listing ``huggingface_hub`` stored with the snapshot and the files already
downloaded; files that are not all in the cache raise an error naming them.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote


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


def local_files(root: str) -> list[str]:
    """Every file below the folder ``root`` (hidden folders skipped), as sorted posix paths relative to it."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        for fn in filenames:
            out.append(fn if rel == "." else f"{rel.replace(os.sep, '/')}/{fn}")
    return sorted(out)


class HubRepo:
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
