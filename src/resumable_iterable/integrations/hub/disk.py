"""``load_from_disk``: a folder written by HF's ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``,
streamed as a resumable :class:`~resumable_iterable.IterableDataset` (or an
:class:`~resumable_iterable.IterableDatasetDict` of them), what HF users get with
``datasets.load_from_disk(path).to_iterable_dataset(num_shards=...)`` without loading the table.

The folder layout HF writes, read here:

* a ``Dataset`` folder: ``state.json`` (``_data_files``: the Arrow *stream* files in row order;
  ``_split``; ``_fingerprint``; the saved format ``_format_type`` / ``_format_kwargs`` /
  ``_format_columns`` / ``_output_all_columns``), ``dataset_info.json`` (HF's ``DatasetInfo``: features,
  description, splits...) and the ``data-XXXXX-of-NNNNN.arrow`` files. A ``select`` / ``shuffle`` /
  ``filter`` before ``save_to_disk`` leaves no indices mapping: HF writes the rows in their selected
  order;
* a ``DatasetDict`` folder: ``dataset_dict.json`` (``{"splits": [...]}``, in order) and one ``Dataset``
  folder per split.

Each data file is a shard of a file source (``nodes/files.py``), so ``split_dataset_by_node``,
DataLoader workers and ``reshard`` behave as for any Arrow files, and a state records the digest of
the files' names. The digest also takes in the folder's ``_fingerprint``
(``FileSource(identity=...)``): a state saved over one folder is refused by the pipeline of another
folder written by ``save_to_disk`` with as many shards (same file names, other rows), or of the same
folder saved again after other preprocessing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ...dataset import IterableDataset
from ...dataset_dict import IterableDatasetDict
from ...features import file_features
from ...nodes.files import FileSource
from .repo import HubRepo, parse_hf_path

STATE = "state.json"
INFO = "dataset_info.json"
DICT = "dataset_dict.json"


def load_from_disk(dataset_path: str | os.PathLike, keep_in_memory: bool | None = None,
                   storage_options: dict | None = None) -> IterableDataset | IterableDatasetDict:
    """A folder written by HF's ``save_to_disk``, streamed: an :class:`~resumable_iterable.IterableDataset`
    for a ``Dataset`` folder, an :class:`~resumable_iterable.IterableDatasetDict` (its splits in the saved
    order) for a ``DatasetDict`` folder. HF's ``datasets.load_from_disk`` arguments, in its order.

    Args:
        dataset_path: the local folder (``file://`` URLs too), or a folder of a Hub dataset repo,
            ``hf://datasets/user/repo[@revision]/path``, downloaded into the Hugging Face cache first (as
            HF downloads it whole; offline, read from the cache). Other remote URLs (``s3://``...) are
            refused: download the folder first.
        keep_in_memory: accepted; changes nothing: the Arrow files are memory-mapped and read a shard
            at a time, never loaded whole.
        storage_options: fsspec options, as HF's. HF gives them to the file system of the path, which
            for a local folder uses none of them: they change nothing here either (a dict or ``None``).
            For a Hub folder, a ``token`` is used; other options are refused (``ValueError``).

    Returns:
        One shard per data file, in the saved order, typed by ``dataset_info.json``'s features (HF's
        ``Image``, ``ClassLabel``... as saved), named by the saved split, with the saved info; the
        saved format applied (``with_format``), as HF's ``load_from_disk`` applies it (a format of some
        columns only, with ``output_all_columns=False``: those columns alone, as HF yields them).

    Raises:
        FileNotFoundError: the folder does not exist, is not a ``save_to_disk`` folder (naming the
            files missing), or a data file ``state.json`` lists is missing.
        ValueError: a damaged folder (JSON that does not parse, features that do not type the data
            files' columns), or one saved by ``datasets`` < 1.15 with an indices mapping.
        NotImplementedError: a remote URL but ``hf://``; a format of some columns saved with ``output_all_columns=True``.
    """
    path = _local_path(dataset_path, storage_options)
    if keep_in_memory is not None and not isinstance(keep_in_memory, bool):
        raise TypeError(f"keep_in_memory must be a bool or None, got {keep_in_memory!r}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Directory {path} not found")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path!r} is a file, not a folder written by save_to_disk (HF: FileNotFoundError too)")
    has = {name: os.path.isfile(os.path.join(path, name)) for name in (STATE, INFO, DICT)}
    if has[STATE] and has[INFO]:
        return _dataset(path)
    if has[DICT]:
        return _dataset_dict(path)
    missing = [name for name in (STATE, INFO) if not has[name]]
    raise FileNotFoundError(
        f"{path!r} is neither a Dataset folder nor a DatasetDict folder written by save_to_disk: it has no "
        f"{' nor '.join(repr(m) for m in missing)} (a Dataset folder holds {STATE!r} and {INFO!r}, a DatasetDict "
        f"folder {DICT!r}). For a folder of data files, use resumable_iterable.load_dataset({path!r})")


def _local_path(dataset_path: Any, storage_options: Any) -> str:
    """The local folder ``dataset_path`` names: a Hub folder (``hf://``) downloaded into the HF cache
    first; other remote file systems are refused."""
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    if not isinstance(dataset_path, (str, os.PathLike)):
        raise TypeError(f"dataset_path must be a path, got {type(dataset_path).__name__}")
    path = os.fspath(dataset_path)
    if path.startswith("file://"):
        path = path[len("file://"):]
    if path.startswith("hf://"):
        return _hub_folder(path, storage_options)
    if "://" in path:  # s3://, gs://...
        raise NotImplementedError(
            f"load_from_disk({path!r}): only local folders and Hub folders (hf://datasets/...) are read (HF "
            "downloads a remote folder whole before reading it); copy it to a local folder first (e.g. fsspec's "
            "fs.get(url, local, recursive=True)) and pass that folder")
    return os.path.expanduser(path)


def _hub_folder(url: str, storage_options: dict | None) -> str:
    """The local copy of the ``save_to_disk`` folder at ``url`` (``hf://datasets/user/repo[@revision]/path``):
    its JSON files, then the data files they list, downloaded into the Hugging Face cache at one commit
    (read from the cache offline), as HF downloads the folder before reading it. ``storage_options``
    are those of HF's Hub file system: its ``token`` is used; others, which would be ignored, are refused."""
    options = dict(storage_options or {})
    token = options.pop("token", None)
    from datasets import config

    if options.get("endpoint") == config.HF_ENDPOINT:
        options.pop("endpoint")
    if options:
        raise ValueError(f"storage_options {sorted(options)} are not used here: Hub files are downloaded with "
                         "huggingface_hub (pass {'token': ...}, set HF_ENDPOINT), not read through fsspec")
    repo_id, revision, sub = parse_hf_path(url)
    repo = HubRepo(repo_id, revision, token, None)
    prefix = f"{sub.strip('/')}/" if sub.strip("/") else ""
    # the folder's JSON files, and those of the Dataset folders just below it (a DatasetDict's splits)
    meta = [f for f in repo.files if f.startswith(prefix) and f.rsplit("/", 1)[-1] in (STATE, INFO, DICT)
            and f.count("/") - prefix.count("/") <= 1]
    if not meta:
        raise FileNotFoundError(f"{url!r}: no folder written by save_to_disk there: {repo_id} (commit {repo.commit}) "
                                f"has no {STATE!r}, {INFO!r} or {DICT!r} in {sub or 'its root'!r}")
    repo.fetch(meta)
    root = os.path.join(repo.folder, *prefix.split("/"))
    folders = [root]
    if not (os.path.isfile(os.path.join(root, STATE)) and os.path.isfile(os.path.join(root, INFO))) and \
            os.path.isfile(os.path.join(root, DICT)):
        saved = _read_json(root, DICT)
        splits = saved.get("splits") if isinstance(saved, dict) else None  # (damaged: said when read)
        folders = [os.path.join(root, s) for s in splits or [] if isinstance(s, str)]
    data = []
    for folder in folders:
        state = _read_json(folder, STATE) if os.path.isfile(os.path.join(folder, STATE)) else None
        files = state.get("_data_files") if isinstance(state, dict) else None
        rel = os.path.relpath(folder, repo.folder).replace(os.sep, "/")
        rel = "" if rel == "." else rel + "/"
        names = [rel + f["filename"] for f in files or [] if isinstance(f, dict) and isinstance(f.get("filename"), str)]
        data += [n for n in names if n in repo.files]  # (a file missing is named when the folder is read)
    if data:
        repo.fetch(data)
    return root


def _read_json(path: str, name: str) -> Any:
    try:
        with open(os.path.join(path, name), encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.path.join(path, name)!r} is not valid JSON ({e}): the save_to_disk folder is "
                         "damaged") from None


def _dataset_dict(path: str) -> IterableDatasetDict:
    saved = _read_json(path, DICT)
    splits = saved.get("splits") if isinstance(saved, dict) else None
    if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        raise ValueError(f"{os.path.join(path, DICT)!r} has no list of split names under 'splits': the "
                         "save_to_disk folder is damaged")
    out = {}
    for split in splits:
        sub = os.path.join(path, split)
        if not (os.path.isfile(os.path.join(sub, STATE)) and os.path.isfile(os.path.join(sub, INFO))):
            raise FileNotFoundError(f"{path!r}: the DatasetDict's split {split!r} (listed in {DICT!r}) has no "
                                    f"Dataset folder {sub!r} with {STATE!r} and {INFO!r}")
        out[split] = _dataset(sub)
    return IterableDatasetDict(out)


def _dataset(path: str) -> IterableDataset:
    from datasets import DatasetInfo, Split

    state = _read_json(path, STATE)
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, dict) and isinstance(f.get("filename"), str)
                                              for f in files):
        raise ValueError(f"{os.path.join(path, STATE)!r} has no list of data files under '_data_files': the "
                         "save_to_disk folder is damaged")
    if state.get("_indices_data_files"):  # datasets < 1.15 saved a select/shuffle's indices mapping beside the rows
        raise ValueError(f"{path!r} was saved by datasets < 1.15 with an indices mapping "
                         f"({[f.get('filename') for f in state['_indices_data_files']]}), which HF's load_from_disk now "
                         "ignores (it gives every row, unselected) and which is not applied here either: load it with "
                         "that datasets version, call flatten_indices() and save_to_disk again")
    info = DatasetInfo.from_dict(_read_json(path, INFO))
    split = None if state.get("_split") is None else Split(state["_split"])  # as HF's load_from_disk names it
    paths = [os.path.join(path, f["filename"]) for f in files]
    gone = [p for p in paths if not os.path.isfile(p)]
    if gone:
        raise FileNotFoundError(f"{path!r}: data file(s) {[os.path.basename(p) for p in gone]} listed in "
                                f"{STATE!r} are missing; the save_to_disk folder is incomplete")
    if not paths:  # an empty dataset: HF writes no data file at all
        from datasets import Dataset

        empty = Dataset.from_dict({c: [] for c in info.features or {}}, features=info.features, info=info, split=split)
        return _formatted(IterableDataset.from_hf(empty), state, path)
    source = FileSource(paths, "arrow", identity=state.get("_fingerprint"))
    found = _features(file_features(paths[0], "arrow"), info.features, path)
    source.set_features(found)
    ds = IterableDataset(source, features=found, split=split, info=info)
    return _formatted(ds, state, path)


def _features(found: Any, saved: Any, path: str) -> Any:
    """The features of the rows: ``dataset_info.json``'s (in the files' column order), which must type
    the columns as the data files do, as HF's ``Dataset`` requires; the files' when it has none."""
    if saved is None:
        return found
    try:
        ordered = saved.reorder_fields_as(found)
    except ValueError:  # other columns
        ordered = None
    if ordered is None or ordered.type != found.type:
        raise ValueError(f"{path!r}: the features of {INFO!r} do not type the columns as its data files do "
                         f"({INFO!r}: {saved}, the files: {found}); the save_to_disk folder was changed")
    return ordered


def _formatted(ds: IterableDataset, state: dict, path: str) -> IterableDataset:
    """``ds`` in the format saved in ``state``, as HF's ``load_from_disk`` sets it."""
    kind, kwargs = state.get("_format_type"), state.get("_format_kwargs") or {}
    columns = state.get("_format_columns")
    if columns is not None and set(columns) != set(ds.column_names):
        if state.get("_output_all_columns"):  # the other columns too, unformatted
            if kind is None:  # every column as Python values
                return ds
            raise NotImplementedError(
                f"{path!r} was saved formatted as {kind!r} for the columns {columns} with output_all_columns=True "
                "(the other columns unformatted); a format here applies to every column. Save it again after "
                f"dataset.with_format({kind!r}) (every column) or with_format(None)")
        ds = ds.select_columns([c for c in ds.column_names if c in columns])  # in the table's order, as HF
    return ds.with_format(kind, **kwargs) if kind is not None else ds
