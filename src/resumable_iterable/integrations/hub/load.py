"""``load_dataset``: a local folder, a Hub dataset repo, or data files given directly, as one lazy
:class:`~resumable_iterable.IterableDataset` per split (one shard per file). Where the files are
is ``repo.py``'s story, which files make which split ``splits.py``'s, folders of images
``folder.py``'s, data files given directly ``direct_files.py``'s, the arguments that say how to
load (split names, modes, the token) ``load_options.py``'s; this module ties them together and
builds the pipelines.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ...dataset import IterableDataset
from ...dataset_dict import IterableDatasetDict
from ...nodes.archives import archive_kind, zip_members
from ...nodes.checks import as_int
from ...nodes.file_formats import FORMATS, format_of, hf_reader_options
from ...features import builder_info
from .card import card_config_name, card_configs, card_info
from .disk import STATE as SAVED_STATE
from .builder_choice import FOLDER_BUILDERS, folder_builder
from .direct_files import archive_contents, resolve_direct
from .folder import load_folder
from .load_options import check_mode, options_token, split_name
from .patterns import normalize_data_files
from .repo import HubRepo, is_hub_repo_id, local_files, missing_path_message, parse_hf_path
from .splits import is_candidate, resolve_splits

_FORMAT_ALIASES = {**{f: f for f in FORMATS}, "jsonl": "json"}
#: HF's other packaged builders: named in the error rather than taken for a missing folder
_HF_BUILDERS = frozenset(("audiofolder", "conll", "eval", "fasta", "fastq", "genbank", "harbor", "hdf5", "iceberg",
                          "lance", "meshfolder", "mmcif", "niftifolder", "pandas", "pdb", "pdffolder",
                          "tsfile", "videofolder", "vortex", "webdataset", "xml"))


def _split_dataset(paths: list[str], fmt: str | None, split: str, reader_kwargs: dict,
                   about: tuple = (None, None, None), first: str | None = None) -> IterableDataset:
    """The files of one split as a pipeline; their format is checked here (not left to ``from_files``)
    so that the error names the split and the formats it mixes. Zip archives of JSON, CSV or text
    files are read as HF's streaming readers read them (``nodes/archives.py``). ``about``:
    ``(dataset_name, config_name, card info)`` of its ``info`` (HF's builder of the format, by default).
    ``first``: the first split's first file, whose columns the JSON, Parquet and Arrow files of every
    split follow, as in HF."""
    if not paths:  # HF's split whose data_files globs match no file: no rows, the first split's first file's columns
        return _split_dataset([first], fmt, split, reader_kwargs, about, first).take(0)
    archives = {p: archive_kind(p, sniff=False) for p in paths}
    if fmt is None and any(archives.values()):
        plain = [p for p in paths if not archives[p]]
        if plain or "tar" in archives.values():  # the other files' format (FileSource refuses tar archives)
            found = sorted({format_of(p) or "?" for p in plain}) or ["text"]
        else:  # only zips: HF reads them with the format of most of the files in them
            found = [_members_format(paths, split)]
        if len(found) == 1 and found[0] != "?":
            fmt = found[0]
    if fmt is None:
        found = sorted({format_of(p) or "?" for p in paths})
        if len(found) != 1 or found[0] == "?":
            raise ValueError(f"split {split!r} mixes file formats {found}; choose the files with data_files=... "
                             f"or pass format= one of {FORMATS}")
        fmt = found[0]
    reader_kwargs = _without_hf_defaults(fmt, reader_kwargs)
    # (with features given, HF infers none: each split is cast to them)
    schema_from = (first if fmt in _TYPED_AS_THE_FIRST_SPLIT and first is not None and first != paths[0]
                   and reader_kwargs.get("features") is None else None)
    return IterableDataset.from_files(paths, fmt, split=split, info=builder_info(fmt, *about),
                                      schema_from=schema_from, **reader_kwargs)


def _without_hf_defaults(fmt: str, reader_kwargs: dict) -> dict:
    """``reader_kwargs`` less HF's options that change nothing here (``hf_reader_options``: the data
    file formats'; for ``imagefolder`` its defaults and ``decode_num_threads``, HF's threads decoding
    a Hub repo's files)."""
    if fmt not in FOLDER_BUILDERS:
        return hf_reader_options(fmt, reader_kwargs)
    out = {k: v for k, v in reader_kwargs.items() if not (k in ("metadata_filenames", "filters") and v is None)}
    if "decode_num_threads" in out:
        as_int(out.pop("decode_num_threads"), "decode_num_threads", lo=0)
    return out


#: the formats whose HF builder types every split as the first split's first file (CSV and text: each file its own)
_TYPED_AS_THE_FIRST_SPLIT = ("json", "parquet", "arrow")


def _follows_first(path: str) -> bool:
    """``path`` may be read in a format typed as the first split's first file: a JSON, Parquet or
    Arrow file, or a zip archive (of JSON files, maybe)."""
    return format_of(path) in _TYPED_AS_THE_FIRST_SPLIT or archive_kind(path, sniff=False) == "zip"


def _has_rows(path: str, fmt: str | None, reader_kwargs: dict) -> bool:
    """Whether a data file may give the first table, whose columns every split follows: any but a
    local JSON file of nothing but white space (HF reads no table from an empty file)."""
    from ...nodes.json_files import blank_file

    if (fmt or format_of(path)) != "json" or archive_kind(path, sniff=False) or not os.path.isfile(path):
        return True
    return not blank_file(path, reader_kwargs.get("encoding"), reader_kwargs.get("encoding_errors"))


def _first_with_rows(files: list[str], fmt: str | None, reader_kwargs: dict) -> str:
    """The file of a split whose columns the splits follow: the first that may have rows (empty JSON
    files skipped, as HF takes the features from the first table it reads), else its first."""
    return next((f for f in files if _has_rows(f, fmt, reader_kwargs)), files[0])


def _members_format(archives: list[str], split: str) -> str:
    """The format of most of the files in a split's zip archives (HF's rule), when it is one read
    in archives (JSON, CSV, text)."""
    counts: dict = {}
    for a in archives:
        for m in zip_members(a):
            f = format_of(m) or ("text" if m.lower().endswith(".txt") else None)
            counts[f] = counts.get(f, 0) + 1
    top = max(counts, key=lambda f: counts[f]) if counts else None
    if top not in ("json", "csv", "text"):
        raise ValueError(f"split {split!r}: {archives[0]!r} is a zip archive, and most files in the split's "
                         f"archives are {'empty' if not counts else 'not JSON, CSV or text files'}; name their format "
                         "(load_dataset('csv' | 'json' | 'text', data_files=...)) or extract them")
    return top


def load_dataset(path: str | os.PathLike, name: str | None = None, data_dir: str | None = None,
                 data_files: Any = None, split: Any = None, cache_dir: str | os.PathLike | None = None,
                 features: Any = None, download_config: Any = None, download_mode: Any = None,
                 verification_mode: Any = None, keep_in_memory: bool | None = None, save_infos: bool = False,
                 revision: str | None = None, token: Any = None, streaming: bool = True, num_proc: int | None = None,
                 storage_options: dict | None = None, *, format: str | None = None,
                 **reader_kwargs: Any) -> IterableDataset | IterableDatasetDict | list:
    """Load the data files of a local folder or a Hub dataset repo as resumable iterable datasets.
    The arguments are HF's ``datasets.load_dataset``'s, in its order (``format`` aside, keyword-only).

    Args:
        path: a local folder, a Hub dataset repo id (``"user/repo"``), an
            ``hf://datasets/user/repo[@revision][/path]`` URL, or a format name (``"parquet"``,
            ``"arrow"``, ``"json"``, ``"csv"``, ``"text"``) together with ``data_files`` and / or a local
            ``data_dir`` (its files, split by name as a folder's), or
            ``"imagefolder"`` with ``data_dir`` / ``data_files`` (HF's streaming imagefolder, options
            ``drop_labels``, ``drop_metadata``, ``features``, ``num_shards``: see ``folder.py``). A folder
            or repo whose files are mostly images is read as an imagefolder, as in HF.
        name: the config of the dataset card (``configs:`` in ``README.md``) to use.
        data_dir: only consider files below this folder of the repo.
        data_files: a glob or list of globs (the ``train`` split) or a dict ``{split: glob(s)}``.
        split: the split to return (``"train+test"``, ``"all"``: the splits one after the other);
            ``None`` returns a dict of every split, a list of split names a list of datasets (as HF's
            ``load_dataset`` without streaming; HF's streaming refuses a list).
        cache_dir: the Hugging Face cache to use (default: ``HF_HUB_CACHE``).
        features: cast the rows to these features (every format), as HF.
        download_config: a ``datasets.DownloadConfig``: its ``token`` is the token when ``token`` is not
            given, its ``storage_options`` are taken as ``storage_options``; the rest changes nothing,
            as in HF's streaming ``load_dataset``.
        download_mode: one of HF's ``DownloadMode`` values; changes nothing (nothing is prepared).
        verification_mode: one of HF's ``VerificationMode`` values; changes nothing, as when streaming in HF.
        keep_in_memory: accepted; changes nothing, as when streaming in HF.
        save_infos: accepted; changes nothing, as when streaming in HF.
        revision: a branch, tag or commit of a Hub repo (default: the default branch).
        token: passed to ``huggingface_hub`` for private repos.
        streaming: accepted for compatibility with ``datasets.load_dataset``; the result is always
            lazy (files are read when iterated, one shard per file).
        num_proc: must be ``None``: HF's streaming ``load_dataset`` raises ``NotImplementedError`` for it.
        storage_options: fsspec options by protocol, as HF's. Local files and Hub files are read here,
            not through fsspec: options for other protocols (whose files are not read) are ignored,
            as HF ignores them for files of another protocol; a ``token`` for ``"hf"`` is the token;
            other options that HF would apply to the Hub's files are refused (``ValueError``).
        format: force the file format instead of inferring it from the extensions.
        **reader_kwargs: the reader's options, as in HF: ``columns``, ``filters``, ``batch_size`` for
            Parquet; pandas' ``read_csv`` options for CSV (``sep``, ``column_names``...; pyarrow's
            ``read_options`` / ``parse_options`` / ``convert_options`` select pyarrow's reader instead),
            ``field`` or pyarrow's options for JSON, and for text files ``sample_by``,
            ``keep_linebreaks``, ``encoding``, ``encoding_errors``, ``chunksize``.

    A folder written by HF's ``Dataset.save_to_disk`` is refused with HF's ``ValueError``: read it with
    :func:`~resumable_iterable.load_from_disk`.

    Returns:
        An :class:`~resumable_iterable.IterableDataset` (one shard per file, in sorted path order)
        or, with ``split=None``, an :class:`~resumable_iterable.IterableDatasetDict` of them keyed by
        split (HF's ``map``, ``filter``, ``shuffle``... on every split; each split has its own state),
        or a list of datasets for a list of splits.
    """
    del streaming, keep_in_memory, save_infos
    if num_proc is not None:
        raise NotImplementedError(f"load_dataset(num_proc={num_proc!r}): loading a streaming dataset with several "
                                  "processes is not implemented (nor in HF's streaming load_dataset); the datasets "
                                  "here are always streamed: to read with several processes, iterate with a DataLoader "
                                  "of num_workers > 1")
    if data_files is not None and isinstance(data_files, (str, list, tuple, dict)) and not data_files:
        raise ValueError(f"data_files={data_files!r} is empty: no data files given (give some, or None, the "
                         "default, as HF requires)")
    if isinstance(path, (str, os.PathLike)) and os.path.isfile(os.path.join(os.fspath(path), SAVED_STATE)):
        # HF refuses it too (same error): its state.json and dataset_info.json are no data files
        raise ValueError(f"You are trying to load a dataset that was saved using `save_to_disk` ({os.fspath(path)!r} "
                         "holds its state.json). Please use `load_from_disk` instead: "
                         f"resumable_iterable.load_from_disk({os.fspath(path)!r}). (Earlier releases read it here as "
                         "a folder of Arrow files: a state saved from that pipeline resumes over "
                         f"resumable_iterable.load_dataset('arrow', data_dir={os.fspath(path)!r}, split='train'), "
                         "which still reads it so)")
    check_mode("download_mode", download_mode)
    check_mode("verification_mode", verification_mode)
    token = options_token(path, data_files, token, download_config, storage_options)
    if features is not None:
        reader_kwargs["features"] = features
    if reader_kwargs.pop("trust_remote_code", None):  # HF 5.2 takes it, and says it runs no code anymore
        warnings.warn("load_dataset(trust_remote_code=True): loading scripts are not run (nor by HF's datasets 5.2); "
                      "the argument is ignored, the data files are read", stacklevel=2)
    if isinstance(split, (list, tuple)):  # HF's non-streaming load_dataset: a dataset per split, in that order
        return [_load(path, name, data_dir, data_files, split_name(s), revision, token, cache_dir, format,
                      dict(reader_kwargs)) for s in split]
    return _load(path, name, data_dir, data_files, None if split is None else split_name(split), revision, token,
                 cache_dir, format, reader_kwargs)


def _load(path: Any, name: str | None, data_dir: str | None, data_files: Any, split: str | None, revision: str | None,
          token: Any, cache_dir: Any, format: str | None, reader_kwargs: dict, dataset_name: str | None = None):
    """``load_dataset``; ``dataset_name``: the ``info.dataset_name`` of what it reads (by default HF's:
    the builder's name for files given to it, the folder's or repo's name for a folder or repo)."""
    if format is not None and format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; expected one of {FORMATS}")
    if _split_names(split) is not None:  # "train+test", "all": the splits one after the other, as HF
        def load(s: str | None) -> Any:
            return _load(path, name, data_dir, data_files, s, revision, token, cache_dir, format, dict(reader_kwargs),
                         dataset_name)
        return _combined_splits(split, load)
    path = os.fspath(path)
    cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
    repo: HubRepo | None = None
    readme = None
    if path in FOLDER_BUILDERS and not os.path.exists(path):
        if format is not None or revision is not None or name is not None:
            raise ValueError(f"load_dataset({path!r}) takes no format=, revision= or name=")
        return _load_folder(path, data_dir, data_files, split, reader_kwargs)
    if path in _HF_BUILDERS and not os.path.exists(path):
        raise ValueError(f"load_dataset({path!r}): HF's {path!r} builder is not supported here; the formats read "
                         f"are {sorted(_FORMAT_ALIASES)} and folders of images ('imagefolder'). Load it with "
                         "datasets.load_dataset(...) and pass the result to resumable_iterable.to_iterable_dataset, "
                         "or convert the data to Parquet")
    if path in _FORMAT_ALIASES and not os.path.isdir(path):
        if data_dir is not None and os.path.isdir(data_dir) and revision is None and name is None:
            # load_dataset("arrow", data_dir=...): HF's data_files are below data_dir (its splits by file name)
            fmt = format or _FORMAT_ALIASES[path]
            return _load(data_dir, None, None, data_files, split, None, token, cache_dir, fmt, reader_kwargs,
                         dataset_name=fmt)
        # load_dataset("parquet", data_files=...): files given directly (local paths or hf:// URLs)
        if data_files is None:
            raise ValueError(f"load_dataset({path!r}) needs data_files=...")
        format = format or _FORMAT_ALIASES[path]
        splits = normalize_data_files(data_files)
        repos: dict = {}
        resolved = {s: resolve_direct(pats, revision, token, cache_dir, repos) for s, pats in splits.items()}
        # a split whose globs match no file is an empty split, as in HF (which fails when every split is empty)
        first = next((_first_with_rows(fs, format, reader_kwargs) for fs in resolved.values() if fs), None)
        if first is None:
            raise FileNotFoundError(f"no data file matches data_files={data_files!r}"
                                    f"{archive_contents([p for ps in splits.values() for p in ps])} (hidden files, "
                                    "README.md and other dataset metadata are left out unless a pattern names them)")
        wanted = {split: resolved[split]} if split in resolved else resolved
        return _pick({s: _split_dataset(p, format, s, reader_kwargs, (format, name), first) for s, p in wanted.items()},
                     split)
    if path.startswith("hf://"):
        repo_id, url_revision, sub = parse_hf_path(path)
        revision = url_revision or revision
        repo = HubRepo(repo_id, revision, token, cache_dir)
        if sub:
            if any(ch in sub for ch in "*?[") or sub in repo.files:
                data_files = data_files if data_files is not None else sub
            else:
                data_dir = f"{sub}/{data_dir}" if data_dir else sub
        files, readme = repo.files, repo.readme()
        dataset_name = dataset_name or repo_id.split("/")[-1]
    elif os.path.isdir(path):
        if revision is not None:
            raise ValueError("revision= only applies to Hub repos, not to a local folder")
        files = local_files(path)
        readme = os.path.join(path, "README.md") if "README.md" in files else None
        dataset_name = dataset_name or os.path.basename(os.path.normpath(os.path.abspath(path)))
    elif os.path.isfile(path):
        data_files = data_files if data_files is not None else os.path.basename(path)
        files = [os.path.basename(path)]
        path = os.path.dirname(os.path.abspath(path))
    elif is_hub_repo_id(path) and not os.path.exists(path):
        repo = HubRepo(path, revision, token, cache_dir)
        files, readme = repo.files, repo.readme()
        dataset_name = dataset_name or path.split("/")[-1]
    else:
        raise FileNotFoundError(missing_path_message(path))

    # a split of zip archives is read with the builder of most of the files in them, as in HF: they are
    # looked into (downloaded from a Hub repo: they are its data)
    root = path
    locate = repo.fetch if repo is not None else (lambda rel: [os.path.join(root, *f.split("/")) for f in rel])
    builder = folder_builder(files, data_dir, locate) if data_files is None and format is None else None
    if builder is not None and not card_configs(readme):
        # a folder of images: HF's load_dataset(folder) reads it with its imagefolder builder
        if name not in (None, "default"):
            raise ValueError(f"config {name!r} not found: the dataset card declares no configs")
        if repo is not None:  # every file below data_dir, downloaded into the snapshot of the commit
            prefix = data_dir.strip("/") + "/" if data_dir else ""
            repo.fetch([f for f in files if f.startswith(prefix) and is_candidate(f)])
            path = repo.folder
        info = builder_info(builder, dataset_name, card_config_name(readme, name), card_info(readme, name))
        return _load_folder(builder, os.path.join(path, data_dir or ""), None, split, reader_kwargs, info)
    empty: dict = {}
    splits = resolve_splits(files, data_files=data_files, data_dir=data_dir, readme=readme, name=name,
                            empty_splits=empty)
    if empty and format is None:  # (HF cannot tell the format of a split without files either: ValueError)
        s, patterns = next(iter(empty.items()))
        raise FileNotFoundError(f"split {s!r}: no data file matches {patterns!r}, so its format is unknown; "
                                f"name it (load_dataset('json', data_dir=..., data_files=...)) for an empty split")
    if split is not None and split not in splits:
        raise ValueError(f"unknown split {split!r}; available splits: {sorted(splits)}")
    wanted = {split: splits[split]} if split is not None else splits
    # the first split's first file gives JSON, Parquet and Arrow files their columns in every split, as in HF
    follows = (format in _TYPED_AS_THE_FIRST_SPLIT if format is not None
               else any(_follows_first(f) for fs in wanted.values() for f in fs))
    first = next((fs[0] for fs in splits.values() if fs), None) if follows or empty else None
    needed = list(dict.fromkeys([f for fs in wanted.values() for f in fs] + ([first] if first else [])))
    # one download call for every split: each call asks the Hub about the commit again
    local = dict(zip(needed, repo.fetch(needed))) if repo is not None else {
        f: os.path.join(path, *f.split("/")) for f in needed}
    base = card_info(readme, name)
    if reader_kwargs.get("features") is None:  # the card's, which HF casts to unless features= is given
        reader_kwargs["features"] = None if base is None else base.features
    about = (dataset_name, card_config_name(readme, name), base)
    first = local.get(first)
    if first is not None:  # the first split's first JSON file with a row (HF's first table)
        first_split = next(fs for fs in splits.values() if fs)
        if repo is None:
            first = _first_with_rows([os.path.join(path, *f.split("/")) for f in first_split], format, reader_kwargs)
        elif not _has_rows(first, format, reader_kwargs):  # a repo's: the next ones, downloaded one at a time
            for f in first_split[1:]:
                candidate = local[f] if f in local else repo.fetch([f])[0]
                if _has_rows(candidate, format, reader_kwargs):
                    first = candidate
                    break
    out = {s: _split_dataset([local[f] for f in fs], format, s, reader_kwargs, about, first)
           for s, fs in wanted.items()}
    return _pick(out, split)


def _load_folder(builder: str, data_dir: str | None, data_files: Any, split: str | None, options: dict,
                 info: Any = None):
    options = _without_hf_defaults(builder, options)
    unknown = set(options) - {"drop_labels", "drop_metadata", "features", "num_shards"}
    if unknown:
        raise TypeError(f"load_dataset({builder!r}) got unexpected option(s) {sorted(unknown)}; its options are "
                        "data_dir, data_files, split, drop_labels, drop_metadata, features, num_shards")
    return load_folder(builder, data_dir, data_files, split, info=info, **options)


def _split_names(split: Any) -> list[str] | None:
    """The splits a split name such as ``"train+test"`` joins (``[]`` for ``"all"``: every split), or
    ``None`` for one split. Slices (``"train[:10%]"``) stay one name, refused as HF's streaming refuses them."""
    if not isinstance(split, str) or "[" in split or "]" in split:
        return None
    if split == "all":
        return []
    return [s.strip() for s in split.split("+")] if "+" in split else None


def _combined_splits(split: str, load: Any) -> IterableDataset:
    """HF's streaming ``load_dataset(split="train+test")`` (or ``"all"``): the splits concatenated in
    that order (every split, in the order ``split=None`` gives them, for ``"all"``), named ``split``."""
    from ...combine import concatenate_datasets

    names = _split_names(split)
    every = load(None) if not names else None
    if every is not None:
        parts, names = list(every.values()), list(every)
    else:
        parts = [load(s) for s in names]  # an unknown name raises, naming the available splits
    try:
        return concatenate_datasets(parts, split=split)
    except ValueError as e:  # features that cannot be aligned: name the splits, not the datasets' places
        if "can't be aligned" not in str(e):
            raise
        raise ValueError(f"load_dataset(split={split!r}) joins the splits {names} (datasets 0, 1, ... below), which "
                         f"type a column otherwise: {e}") from None


def _pick(datasets: dict[str, IterableDataset], split: str | None):
    if split is not None and split not in datasets:
        raise ValueError(f"unknown split {split!r}; available splits: {sorted(datasets)}")
    return datasets[split] if split is not None else IterableDatasetDict(datasets)
