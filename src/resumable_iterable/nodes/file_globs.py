"""Which files a glob of data files gives, as HF resolves ``data_files``: a path that exists is
itself, a pattern its matching files, sorted, without those HF leaves out (dataset metadata as
``README.md``, hidden files and folders, ``__pycache__``...) unless the pattern names them; a path
or pattern that gives no file is an error when the dataset is built. Used by the file readers
(``from_json``...) and the Hub's folders (``integrations/hub/``)."""

from __future__ import annotations

import os

#: the file names HF's ``data_files`` globs leave out unless the pattern ends with that name (dataset metadata)
NOT_DATA = frozenset(("README.md", "config.json", "dataset_info.json", "dataset_infos.json", "dummy_data.zip",
                      "dataset_dict.json"))


def unrequested(path: str, pattern: str) -> bool:
    """Whether HF's glob resolution leaves ``path``, matched by glob ``pattern``, out: dataset metadata
    (``README.md``...) unless the pattern ends with that name; a hidden file or one in a hidden folder
    (``.x``) unless the pattern has as many hidden parts (``.*/*`` asks for the files of hidden
    folders); a file in a special folder (``__x``, as ``__pycache__``) unless the pattern's folders
    have as many such parts."""
    parts = [x for x in path.replace("\\", "/").split("/") if x]
    wanted = [x for x in pattern.replace("\\", "/").split("/") if x]
    if parts and parts[-1] in NOT_DATA and (not wanted or wanted[-1] != parts[-1]):
        return True

    def hidden(xs: list[str]) -> int:
        return sum(1 for x in xs if x.startswith(".") and set(x) != {"."})

    def special(xs: list[str]) -> int:
        return sum(1 for x in xs[:-1] if x.startswith("__"))

    return hidden(parts) != hidden(wanted) or special(parts) != special(wanted)


def resolve_data_files(paths: list[str]) -> list[str]:
    """Data files given to ``from_json`` / ``from_csv`` / ``from_text`` / ``from_parquet`` ... as HF's
    file readers resolve them: a path that exists is itself; a glob pattern (``*``, ``?``, ``[...]``,
    ``**``) its matching files, sorted, without those HF leaves out (:func:`unrequested`: dataset
    metadata as ``README.md``, hidden files and folders, ``__pycache__``...) unless the pattern names
    them. As in HF, a pattern that matches no other file adds none (with other patterns that do); a
    path that does not exist, or patterns that give no file at all, are a ``FileNotFoundError`` naming
    them when the dataset is built (HF: "Unable to find"; for globs HF fails later, or reads an empty
    dataset), not an error at the first read. URLs and archive members (``zip://...::...``) are kept
    as given."""
    import glob

    out: list[str] = []
    left_out: list[str] = []
    for p in paths:
        if os.path.exists(p) or "://" in p:
            out.append(p)
            continue
        if not any(ch in p for ch in "*?["):
            raise FileNotFoundError(f"Unable to find data file {p!r}")
        hits = [h for h in sorted(glob.glob(p, recursive=True, include_hidden=True)) if os.path.isfile(h)]
        kept = [h for h in hits if not unrequested(h, p)]
        left_out.extend(h for h in hits if h not in kept)
        out.extend(kept)
    if paths and not out:  # (no paths at all: the caller says "no data files given")
        why = (f" (it matches only files HF's globs leave out: {left_out[:3]} - dataset metadata, hidden files "
               "and folders, __pycache__...; name them in the pattern to read them)") if left_out else ""
        raise FileNotFoundError(f"Unable to find data files matching {paths[0] if len(paths) == 1 else paths!r}{why}")
    return out
