"""Data files given to ``load_dataset(<format>, data_files=...)`` directly (``load.py``), made local
paths as HF resolves them: local paths and globs, ``hf://`` URLs of Hub repos' files (each repo
opened once), and fsspec URLs of an archive's members (``zip://<glob>::<archive>``,
``tar://...``), each member a data file; a glob matching nothing adds nothing, a path that does
not exist is an error; hidden files and dataset metadata are left out unless a pattern names them."""

from __future__ import annotations

import glob
import os
from typing import Any

from ...nodes.archives import member_path, split_member, tar_members, zip_member_names
from ...nodes.file_globs import unrequested
from .patterns import match_data_files, match_files
from .repo import HubRepo, parse_hf_path

def resolve_direct(patterns: list[str], revision: str | None, token: Any, cache_dir: str | None,
                    repos: dict) -> list[str]:
    """Local paths for ``data_files`` given as local globs / paths or ``hf://`` URLs. ``repos`` keeps
    the Hub repos opened so far, so each repo's revision is resolved and its files listed once."""
    out: list[str] = []
    for p in patterns:
        if p.startswith("hf://"):
            repo_id, url_revision, sub = parse_hf_path(p)
            key = (repo_id, url_revision or revision)
            repo = repos.get(key)
            if repo is None:
                repo = repos[key] = HubRepo(*key, token, cache_dir)
            hits, _ = match_data_files([sub], repo.files)  # a glob matching nothing adds nothing, as in HF
            out.extend(repo.fetch(hits) if hits else [])
        elif split_member(p) is not None:
            out.extend(_archive_url_files(p))
        elif any(ch in p for ch in "*?["):
            hits = sorted(glob.glob(p, recursive=True))
            out.extend(h for h in hits if os.path.isfile(h) and not unrequested(h, p))  # none: adds nothing, as HF
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise FileNotFoundError(f"data file {p!r} not found")
    return out


def archive_contents(patterns: list[str]) -> str:
    """What the archives named by ``zip://<glob>::<archive>`` patterns hold, for an error saying that
    the globs matched nothing."""
    out = ""
    for p in patterns:
        member = split_member(p)
        if member is not None and os.path.isfile(member[0]):
            names = zip_member_names(member[0]) if p.startswith("zip") else tar_members(member[0])
            out += f": the archive {member[0]!r} holds {sorted(names)[:5]}{'...' if len(names) > 5 else ''}"
    return out


def _archive_url_files(url: str) -> list[str]:
    """The members of a local archive that HF's fsspec URL ``zip://<glob>::<archive>`` or
    ``tar://<glob>::<archive>`` names, each a data file (``zip://<member>::<archive>``). The glob is
    a ``data_files`` glob over the archive's files; hidden ones and dataset metadata are left out
    unless asked for (``unrequested``), as HF leaves them out; a glob that matches nothing gives nothing (a
    member name that is not in the archive is a ``FileNotFoundError``), as in HF."""
    archive, pattern = split_member(url)
    kind = url[:3]
    if not os.path.isfile(archive):
        raise FileNotFoundError(f"data file {url!r}: the archive {archive!r} is not a local file")
    names = zip_member_names(archive) if kind == "zip" else tar_members(archive)
    names = [n for n in names if not unrequested(n, pattern)]
    try:
        hits = match_files(pattern, names)
    except FileNotFoundError:
        if any(ch in pattern for ch in "*?["):  # a glob that matches nothing adds nothing, as HF's
            return []
        raise FileNotFoundError(f"no data file matches {url!r}: the archive {archive!r} holds "
                                f"{sorted(names)[:5]}{'...' if len(names) > 5 else ''}") from None
    return [member_path(archive, name, kind) for name in hits]
