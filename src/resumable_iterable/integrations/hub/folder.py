"""``load_dataset("imagefolder", data_dir=... | data_files=...)``: a folder of images as HF's
``imagefolder`` builder reads it in streaming mode - the same rows in the same order, the same
features, the same shards.

The rules (HF's ``folder_based_builder``):

* the files of each split are found as for the other formats (``splits.py``: ``data_files``, or
  folders / file names holding a split keyword); images are the files with an image extension,
  metadata files are named ``metadata.csv``, ``metadata.jsonl`` or ``metadata.parquet``; other
  files are ignored;
* a ``.zip`` file holds more of them: its images (after the images outside archives, archive after
  archive, each in HF's order: ``nodes/archives.py``) and its metadata files, whose file names are
  relative to their folder inside the archive. An image inside is named as HF names it,
  ``zip://<member>::<archive>``, and decoded from there as HF decodes it. (HF also yields the
  archive's other files as images, which fail to decode, and labels its images with the archive's
  folder, which fails; here other files are ignored as outside archives, and the label is the
  image's folder inside the archive, as HF's features declare it);
* with a metadata file (and ``drop_metadata`` not true), the rows are the metadata rows (of the
  metadata files in sorted path order; HF reads several in an order that varies from run to
  run): its ``file_name`` column (``<name>_file_name``: column ``<name>``) names an image
  relative to the metadata file's folder and becomes the ``image`` column
  (``Image()``), the other columns are kept; no label is added. ``file_names`` /
  ``<name>_file_names`` lists become lists of images; such fields inside structs and lists of
  structs are converted too;
* otherwise the rows are the images, in path order, with a ``label`` (``ClassLabel`` of
  the sorted parent folder names) when ``drop_labels`` is false, or when it is ``None`` and the
  images lie at the same depth in more than one folder.

Every path is resolved when the dataset is built (the table holds ``{"bytes": None, "path"}``
per image, decoded when read as HF's ``Image`` feature decodes it): a metadata row naming an
image that does not exist is an error here, not in the middle of an epoch. HF's streaming
builder reads a split as one shard; ``num_shards=`` splits it into contiguous shards (as
``to_iterable_dataset``) so that several DataLoader workers share it.

This module finds a split's files and builds its rows; the metadata files are read and their file
names made media in ``folder_metadata.py``; which builder HF picks for a folder given no builder
is ``builder_choice.py``.
"""

from __future__ import annotations

import glob
import os
from typing import Any

import pyarrow as pa

from ...dataset import IterableDataset
from ...dataset_dict import IterableDatasetDict
from ...features import builder_info
from ...nodes.archives import digest_name, member_path, split_member, zip_members
from ...nodes.arrow import ArrowSource
from ...nodes.checks import as_int
from ...nodes.file_globs import unrequested
from ...nodes.files import names_digest
from .builder_choice import FOLDER_BUILDERS, METADATA_FILENAMES
from .folder_metadata import encoded, inner, metadata_features, metadata_table, typed_metadata_table
from .patterns import normalize_data_files
from .repo import local_files
from .splits import is_candidate, infer_splits


def load_folder(builder: str, data_dir: str | None, data_files: Any, split: str | None,
                drop_labels: bool | None = None, drop_metadata: bool | None = None,
                features: Any = None, num_shards: int = 1, info: Any = None) -> IterableDataset | IterableDatasetDict:
    """The splits of a folder of media files as HF's folder builder (``builder``) reads them.
    ``num_shards``: the contiguous shards of each split (HF's streaming builder has one). ``info``:
    their ``datasets.DatasetInfo`` (by default HF's for ``load_dataset(builder, ...)``)."""
    column, feature_name, extensions = FOLDER_BUILDERS[builder]
    num_shards = as_int(num_shards, "num_shards", lo=1)
    if features is not None and not hasattr(features, "encode_example"):
        from datasets import Features

        features = Features(features)
    if data_dir is None and data_files is None:
        raise ValueError(f"load_dataset({builder!r}) needs data_dir=... or data_files=...")
    if data_dir is not None:
        data_dir = os.fspath(data_dir)
        if not os.path.isdir(data_dir):
            raise FileNotFoundError(f"load_dataset({builder!r}): data_dir {data_dir!r} is not a local folder "
                                    "(for a Hub repo of images, pass its id: load_dataset('user/repo'))")
    splits = _split_files(data_dir, data_files)
    if split is not None and split not in splits:
        raise ValueError(f"unknown split {split!r}; available splits: {sorted(splits)}")

    images: dict[str, list[str]] = {}
    metadata: dict[str, list[str]] = {}
    for s, paths in splits.items():
        images[s], metadata[s] = [], []
        archives = [p for p in paths if os.path.splitext(p)[1].lower() == ".zip"]
        # as HF: the files outside archives, then each archive's members (paths named as HF names them)
        files = [p for p in paths if os.path.splitext(p)[1].lower() != ".zip"]
        for p in files + [member_path(a, m) for a in archives for m in zip_members(a)]:
            name = inner(p)
            root, ext = os.path.splitext(name)
            if ext.lower() in extensions or os.path.splitext(root)[1].lower() in extensions:
                images[s].append(p)
            elif name.rsplit("/", 1)[-1] in METADATA_FILENAMES:
                metadata[s].append(p)
    analyze = not drop_labels or not drop_metadata
    add_metadata = analyze and any(metadata.values()) and not drop_metadata
    add_labels = False
    labels: list[str] = []
    if analyze and not any(metadata.values()):
        image_paths = [p for ps in images.values() for p in ps]
        labels = sorted({_parent(p) for p in image_paths})
        depths = {p.replace("\\", "/").count("/") for p in image_paths}
        add_labels = (len(labels) > 1 and len(depths) == 1) if drop_labels is None else not drop_labels

    import datasets
    from datasets import ClassLabel, Features

    base = getattr(datasets, feature_name)
    wanted = {split: splits[split]} if split is not None else splits
    out = {}
    meta_features = metadata_features(metadata, column, base) if add_metadata else None
    for s in wanted:
        if add_metadata:
            if not metadata[s]:
                raise FileNotFoundError(f"load_dataset({builder!r}): split {s!r} has no metadata file "
                                        f"({', '.join(METADATA_FILENAMES)}) while other splits have one")
            if features is not None:  # HF's rows, encoded with the features given
                feats = features
                tables = [typed_metadata_table(m, features, base) for m in sorted(metadata[s], key=_digest_name)]
            else:
                feats = meta_features
                tables = [metadata_table(m, feats, column, base) for m in sorted(metadata[s], key=_digest_name)]
            table = pa.concat_tables(tables)
        else:
            if not images[s]:
                raise FileNotFoundError(f"load_dataset({builder!r}): no {column} file in split {s!r} "
                                        f"(files with the extensions {', '.join(sorted(extensions)[:8])}, ...)")
            names = [_parent(p) for p in images[s]]
            if features is not None:  # HF's rows ({column: path, "label": folder name}) encoded with them
                feats = features
                rows = [{column: p, "label": n} if add_labels else {column: p} for p, n in zip(images[s], names)]
                table = encoded(rows, features)
            else:
                feats = Features({column: base()})
                data = {column: [{"bytes": None, "path": p} for p in images[s]]}
                if add_labels:
                    feats["label"] = ClassLabel(names=labels)
                    index = {name: i for i, name in enumerate(labels)}
                    data["label"] = [index[n] for n in names]
                table = pa.Table.from_pydict(data, schema=feats.arrow_schema)
        if num_shards > max(table.num_rows, 1):
            raise ValueError(f"num_shards={num_shards} is larger than the number of rows of split {s!r} "
                             f"({table.num_rows})")
        # rows are counted in the order of these files: a state refuses other names or another order
        named = sorted(metadata[s], key=_digest_name) if add_metadata else images[s]
        source = ArrowSource(table, num_shards=num_shards, features=feats,
                             names_digest=names_digest([_digest_name(p) for p in named]),
                             arrow_rows=False)  # HF's builder yields Python examples: formatted from them
        out[s] = IterableDataset(source, features=feats, split=s, info=info if info is not None else builder_info(builder))
    return out[split] if split is not None else IterableDatasetDict(out)


def _split_files(data_dir: str | None, data_files: Any) -> dict[str, list[str]]:
    """``{split: [absolute paths]}``: ``data_files`` (relative to ``data_dir`` or the current
    folder) or, without them, the files below ``data_dir`` grouped by ``splits.py``'s rules."""
    base = os.path.realpath(os.path.expanduser(data_dir if data_dir is not None else "."))
    if data_files is None:
        files = [f for f in local_files(base) if is_candidate(f)]
        if not files:
            raise FileNotFoundError(f"no file found under data_dir={data_dir!r}")
        return {s: [os.path.join(base, *f.split("/")) for f in fs] for s, fs in infer_splits(files).items()}
    out = {}
    for s, patterns in normalize_data_files(data_files).items():
        paths: list[str] = []
        for p in patterns:
            if "://" in p:
                raise ValueError(f"data file {p!r}: the image folder builder reads local files; for a Hub repo of "
                                 "images, pass its id: load_dataset('user/repo')")
            full = os.path.join(base, os.path.expanduser(p))
            if any(ch in p for ch in "*?["):
                hits = [h for h in sorted(glob.glob(full, recursive=True, include_hidden=True)) if os.path.isfile(h)]
                # as HF: hidden files and dataset metadata only when the pattern names them; a glob that
                # matches nothing adds nothing; a file two patterns match is read twice
                paths.extend(h for h in hits if not unrequested(os.path.relpath(h, base), p))
            elif os.path.isfile(full):
                paths.append(os.path.normpath(full))
            else:
                raise FileNotFoundError(f"data file {p!r} not found")
        out[s] = paths
    if not any(out.values()):
        raise FileNotFoundError(f"no data file matches data_files={data_files!r} (hidden files and dataset metadata "
                                "are left out unless a pattern names them)")
    return out


def _parent(path: str) -> str:
    """The name of the folder holding a file (inside its archive for a member; ``""`` at its root)."""
    return os.path.basename(os.path.dirname(path)) if split_member(path) is None else inner(path).rpartition(
        "/")[0].rpartition("/")[2]


def _digest_name(path: str) -> str:
    """A file's name for the state's digest and the order of metadata files: an archive member as a
    file in a folder named after its archive (so that a moved folder still matches)."""
    return digest_name(path)

