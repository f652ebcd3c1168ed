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
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import Any

import pyarrow as pa

from ...dataset import IterableDataset
from ...dataset_dict import IterableDatasetDict
from ...features import builder_info
from ...nodes.archives import digest_name, member_names, member_path, split_member, zip_members
from ...nodes.arrow import ArrowSource
from ...nodes.checks import as_int
from ...nodes.file_globs import unrequested
from ...nodes.files import names_digest
from .patterns import normalize_data_files
from .repo import local_files
from .splits import is_candidate, infer_splits

METADATA_FILENAMES = ("metadata.csv", "metadata.jsonl", "metadata.parquet")
#: the zip archives of a split whose files HF counts to choose its builder
#: (``config.ARCHIVES_MAX_NUMBER_FOR_MODULE_INFERENCE``)
ARCHIVES_LOOKED_INTO = 10

# HF's ImageFolder.EXTENSIONS: the extensions Pillow opens (fixed, so that the files chosen do
# not depend on the Pillow installed)
IMAGE_EXTENSIONS = frozenset((
    ".blp", ".bmp", ".dib", ".bufr", ".cur", ".pcx", ".dcx", ".dds", ".ps", ".eps", ".fit", ".fits", ".fli",
    ".flc", ".ftc", ".ftu", ".gbr", ".gif", ".grib", ".png", ".apng", ".jp2", ".j2k", ".jpc", ".jpf", ".jpx",
    ".j2c", ".icns", ".ico", ".im", ".iim", ".tif", ".tiff", ".jfif", ".jpe", ".jpg", ".jpeg", ".mpg", ".mpeg",
    ".msp", ".pcd", ".pxr", ".pbm", ".pgm", ".ppm", ".pnm", ".psd", ".bw", ".rgb", ".rgba", ".sgi", ".ras",
    ".tga", ".icb", ".vda", ".vst", ".webp", ".wmf", ".emf", ".xbm", ".xpm",
))

#: the folder builders read here: name -> (base column, HF feature class name, extensions)
FOLDER_BUILDERS = {"imagefolder": ("image", "Image", IMAGE_EXTENSIONS)}

# the extensions by which HF picks a builder other than imagefolder for a folder (HF's
# ``_EXTENSION_TO_MODULE``; ".mpg" and ".mpeg" go to its audio and video builders)
_AUDIO_VIDEO = (".3g2 .3gp .aiff .asf .au .avr .caf .f4v .flac .flv .htk .ircam .m4v .mat4 .mat5 .mp3 .mpc2k "
                ".mpg .mxf .nist .nut .ogg .ogm .opus .paf .pvf .raw .rf64 .sd2 .sds .svx .voc .w64 .wav .wavex "
                ".webm .wma .wmv .wve .xi .avi .mkv .mov .mp4 .mpeg")
_OTHER_BUILDER_EXTENSIONS = frozenset((
    ".csv .tsv .json .jsonl .ndjson .geoparquet .gpq .parquet .arrow .txt .conll .conllu .tar .xml .h5 .hdf5 "
    ".eval .md .toml .lance .tsfile .vortex .afa .fa .faa .fasta .ffn .fna .frn .gb .gbk .genbank .fastq .fq "
    ".ent .pdb .cif .mmcif .glb .gltf .ply .stl .pdf .nii .zip " + _AUDIO_VIDEO).split())
_PREFERRED = (".parquet", ".lance", ".vortex", ".arrow", ".jsonl", ".json", ".csv")


def builder_of(files: list[str], members: Any = None) -> str | None:
    """``"imagefolder"`` when HF's ``load_dataset(folder)`` reads ``files`` (the files of a split)
    with its imagefolder builder: their most common extension (metadata files aside; ties go to
    Parquet, ..., CSV, then by name) is an image extension, or is ``.zip`` and the most common
    extension of the files in the archives is (``members(zips)``: their names; ``None``: not
    looked into). ``None`` otherwise."""
    counts: dict[tuple[str, bool], int] = {}
    for f in files:
        name = f.rsplit("/", 1)[-1]
        for suffix in name.split(".")[1:]:
            k = ("." + suffix.lower(), name in METADATA_FILENAMES)
            counts[k] = counts.get(k, 0) + 1

    def rank(item):
        (ext, is_metadata), count = item
        return (not is_metadata, count, *(ext == p for p in _PREFERRED), ext)

    for (ext, _), _ in sorted(counts.items(), key=rank, reverse=True):
        if ext == ".zip" and members is not None:  # HF looks into the archives
            return _archives_builder(members([f for f in files if f.lower().endswith(".zip")]))
        if ext in _OTHER_BUILDER_EXTENSIONS:
            return None
        if ext in IMAGE_EXTENSIONS:
            return "imagefolder"
    return None


def _archives_builder(names: list[str]) -> str | None:
    """``"imagefolder"`` when the most common extension of the files in a split's archives (HF's
    count: every suffix of each name) is an image extension."""
    counts: dict[str, int] = {}
    for name in names:
        for suffix in name.rsplit("/", 1)[-1].split(".")[1:]:
            counts["." + suffix.lower()] = counts.get("." + suffix.lower(), 0) + 1
    if not counts:
        return None
    top = max(counts.values())
    ext = next(e for e, n in counts.items() if n == top)  # HF's Counter.most_common: the first seen
    return "imagefolder" if ext in IMAGE_EXTENSIONS else None


def folder_builder(files: list[str], data_dir: str | None, locate: Any = None) -> str | None:
    """The folder builder that HF would read a folder with (its files ``files``, posix, relative),
    found without ``data_files`` nor a dataset card config: the same for every split, else ``None``.
    ``locate``: a function giving the local paths of files (a list of them, relative to the folder or
    repo), by which a split's zip archives are looked into as HF does: the first
    ``ARCHIVES_LOOKED_INTO`` of them, downloaded from a Hub repo (``None``: not looked into)."""
    prefix = data_dir.strip("/") + "/" if data_dir else ""
    files = [f[len(prefix):] for f in files if f.startswith(prefix) and is_candidate(f)]
    if not files:
        return None
    members = None
    if locate is not None:
        def members(zips: list[str]) -> list[str]:
            local = locate([prefix + z for z in zips[:ARCHIVES_LOOKED_INTO]])
            return [m for z in local for m in zip_members(z)]
    found = {builder_of(fs, members) for fs in infer_splits(files).values()}
    return found.pop() if len(found) == 1 else None


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
            name = _inner(p)
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
    meta_features = _metadata_features(metadata, column, base) if add_metadata else None
    for s in wanted:
        if add_metadata:
            if not metadata[s]:
                raise FileNotFoundError(f"load_dataset({builder!r}): split {s!r} has no metadata file "
                                        f"({', '.join(METADATA_FILENAMES)}) while other splits have one")
            if features is not None:  # HF's rows, encoded with the features given
                feats = features
                tables = [_typed_metadata_table(m, features, base) for m in sorted(metadata[s], key=_digest_name)]
            else:
                feats = meta_features
                tables = [_metadata_table(m, feats, column, base) for m in sorted(metadata[s], key=_digest_name)]
            table = pa.concat_tables(tables)
        else:
            if not images[s]:
                raise FileNotFoundError(f"load_dataset({builder!r}): no {column} file in split {s!r} "
                                        f"(files with the extensions {', '.join(sorted(extensions)[:8])}, ...)")
            names = [_parent(p) for p in images[s]]
            if features is not None:  # HF's rows ({column: path, "label": folder name}) encoded with them
                feats = features
                rows = [{column: p, "label": n} if add_labels else {column: p} for p, n in zip(images[s], names)]
                table = _encoded(rows, features)
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


def _inner(path: str) -> str:
    """A path, or the name inside its archive of an archive member (``zip://<member>::<archive>``)."""
    member = split_member(path)
    return path if member is None else member[1]


def _parent(path: str) -> str:
    """The name of the folder holding a file (inside its archive for a member; ``""`` at its root)."""
    return os.path.basename(os.path.dirname(path)) if split_member(path) is None else _inner(path).rpartition(
        "/")[0].rpartition("/")[2]


def _digest_name(path: str) -> str:
    """A file's name for the state's digest and the order of metadata files: an archive member as a
    file in a folder named after its archive (so that a moved folder still matches)."""
    return digest_name(path)


def _folder(path: str) -> str:
    """The folder of a metadata file, which its file names are relative to (for an archive member,
    its folder inside the archive, named as a member is)."""
    member = split_member(path)
    return os.path.dirname(path) if member is None else member_path(member[0], member[1].rpartition("/")[0])

def _encoded(rows: list[dict], features: Any) -> pa.Table:
    """Rows as HF's streaming builders type them with ``features``: columns not in the features
    dropped, missing ones ``None``, values encoded."""
    return pa.Table.from_pylist([features.encode_example({k: r.get(k) for k in features}) for r in rows],
                                schema=features.arrow_schema)


def _read_metadata(path: str, features: Any = None) -> pa.Table:
    """A metadata file as HF's folder builder reads it (CSV through pandas, which parses the
    columns of ``features`` as their types: ``"007"`` declared a string keeps its zeros)."""
    if split_member(path) is not None:  # an archive member: read from its bytes
        import io

        from ...nodes.file_open import open_binary

        with open_binary(path) as f:
            data = io.BytesIO(f.read())
        return _read_metadata_from(data, _inner(path), features)
    return _read_metadata_from(path, path, features)


def _read_metadata_from(path: Any, name: str, features: Any) -> pa.Table:
    """A metadata file (a path or a file object) named ``name``, read as HF reads it."""
    if name.endswith(".csv"):
        import pandas as pd

        dtype = None
        if features is not None:
            from datasets.features.features import require_storage_cast

            schema = features.arrow_schema
            dtype = {name: object if require_storage_cast(f) else t.to_pandas_dtype()
                     for name, t, f in zip(schema.names, schema.types, features.values())}
        return pa.Table.from_pandas(pd.read_csv(path, dtype=dtype))
    if name.endswith(".jsonl"):
        import pyarrow.json as paj

        return paj.read_json(path)
    import pyarrow.parquet as pq

    return pq.read_table(path)


def _file_key(key: str, feature: Any, column: str) -> tuple[str, bool] | None:
    """``(new name, is a list)`` when the metadata field ``key`` names files (HF's rule: a string
    ``file_name`` / ``<name>_file_name``, a list of strings ``file_names`` / ``<name>_file_names``)."""
    from datasets import List, Value

    strings = (Value("string"), Value("large_string"))
    if (key == "file_name" or key.endswith("_file_name")) and feature in strings:
        return key[: -len("_file_name")] or column, False
    if (key == "file_names" or key.endswith("_file_names")) and (
            feature in [List(v) for v in strings] or feature in [[v] for v in strings]):
        return key[: -len("_file_names")] or column + "s", True
    return None


def _media_features(feature: Any, column: str, base: Any) -> Any:
    """``feature`` with its file-name fields (at any depth, as HF) made media features."""
    from datasets import List

    if isinstance(feature, dict):
        out = type(feature)()
        for key, f in feature.items():
            found = _file_key(key, f, column)
            if found is None:
                out[key] = _media_features(f, column, base)
            else:
                out[found[0]] = List(base()) if found[1] else base()
        return out
    if isinstance(feature, list):
        return [_media_features(feature[0], column, base)]
    inner = getattr(feature, "feature", None)
    if inner is not None and hasattr(feature, "__dataclass_fields__"):  # List / LargeList
        return dataclasses.replace(feature, feature=_media_features(inner, column, base))
    return feature


def _media_values(value: Any, feature: Any, column: str, where: tuple[str, str]) -> Any:
    """A metadata value of ``feature`` with the file names in it replaced by the files they name."""
    if value is None:
        return None
    if isinstance(feature, dict):
        out = {}
        for key, f in feature.items():
            found = _file_key(key, f, column)
            v = value.get(key)
            if found is None:
                out[key] = _media_values(v, f, column, where)
            elif found[1]:
                out[found[0]] = None if v is None else [_file(*where, n) for n in v]
            else:
                out[found[0]] = _file(*where, v)
        return out
    inner = feature[0] if isinstance(feature, list) else getattr(feature, "feature", None)
    if inner is not None and isinstance(value, list):
        return [_media_values(v, inner, column, where) for v in value]
    return value


def _metadata_features(metadata: dict[str, list[str]], column: str, base: Any) -> Any:
    """The features of the rows: the metadata files' columns, file names made media features.
    Every metadata file must have the same features (as HF checks)."""
    from datasets import Features

    files = sorted({m for ms in metadata.values() for m in ms}, key=_digest_name)
    exts = sorted({os.path.splitext(_inner(m))[1] for m in files})
    if len(exts) > 1:
        raise ValueError(f"found metadata files with different extensions: {exts}")
    found = [(m, Features.from_arrow_schema(_read_metadata(m).schema)) for m in files]
    for m, f in found[1:]:
        if f != found[0][1]:
            raise ValueError(f"metadata files {found[0][0]!r} and {m!r} have different features: {found[0][1]} != {f}")
    features = _media_features(found[0][1], column, base)
    if features == found[0][1]:
        raise ValueError(f"metadata file {found[0][0]!r} has no 'file_name' column (nor '*_file_name', "
                         f"'file_names', '*_file_names'): it must name the {column} of each row; "
                         f"its columns: {list(found[0][1])}")
    return features


def _metadata_table(path: str, features: Any, column: str, base: Any) -> pa.Table:
    """The rows of one metadata file, file names replaced by ``{"bytes": None, "path"}`` of the
    files they name (relative to the metadata file's folder, which they may not leave)."""
    from datasets import Features

    table = _read_metadata(path)
    where = (path, _folder(path))
    schema = features.arrow_schema
    arrays = []
    for (key, feature), type_ in zip(Features.from_arrow_schema(table.schema).items(), schema.types):
        one = {key: feature}
        if _media_features(one, column, base) == one:  # no file named in this column
            array = table.column(key)
            arrays.append(array if array.type == type_ else array.cast(type_))
        else:
            values = [_media_values({key: v}, one, column, where) for v in table.column(key).to_pylist()]
            arrays.append(pa.array([next(iter(v.values())) for v in values], type=type_))
    return pa.Table.from_arrays(arrays, schema=schema)


def _typed_metadata_table(path: str, features: Any, base: Any) -> pa.Table:
    """The rows of one metadata file as HF reads them when given ``features``: each top-level
    media column (``<name>``, or a list of them) takes the files that ``file_name`` (or
    ``<name>_file_name``; ``file_names`` / ``<name>_file_names`` for lists) names."""
    where = (path, _folder(path))
    rows = _read_metadata(path, features).to_pylist()
    for name, feature in features.items():
        inner = feature[0] if isinstance(feature, list) else getattr(feature, "feature", None)
        many = not isinstance(feature, base)
        if many and not isinstance(inner, base):
            continue
        for r in rows:
            if many:
                value = r.pop("file_names", None) or r.pop(name + "_file_names", None)
                r[name] = None if value is None else [_file(*where, v) for v in value]
            else:
                r[name] = _file(*where, r.pop("file_name", None) or r.pop(name + "_file_name", None))
    return _encoded(rows, features)


def _file(metadata_file: str, folder: str, name: Any) -> dict | None:
    """The file that a metadata row names, checked to lie below the metadata file's folder and to exist."""
    if name is None:
        return None
    rel = os.path.normpath(name).replace("\\", "/")
    if "://" in name or os.path.isabs(name) or rel == ".." or rel.startswith("../"):
        raise ValueError(f"Invalid metadata file_name in {metadata_file!r}: file_name {name!r} must be "
                         "a relative path inside the metadata file's folder (no '..', absolute path or URL scheme)")
    inside = split_member(folder)
    if inside is not None:  # a metadata file inside an archive names a file of that archive
        archive, base = inside
        member = f"{base}/{rel}" if base else rel
        if member not in member_names(archive):
            raise FileNotFoundError(f"metadata file {metadata_file!r} names {name!r}, but the archive {archive!r} "
                                    f"holds no {member!r}")
        return {"bytes": None, "path": member_path(archive, member)}
    full = os.path.join(folder, rel)
    if not os.path.isfile(full):
        raise FileNotFoundError(f"metadata file {metadata_file!r} names {name!r}, but {full!r} does not exist")
    return {"bytes": None, "path": full}
