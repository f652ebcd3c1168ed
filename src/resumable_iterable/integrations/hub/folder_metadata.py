"""The metadata files of a folder read by HF's folder builders (``folder.py``):
``metadata.csv`` / ``.jsonl`` / ``.parquet``, read as HF reads them (CSV through pandas, typed by
the features given), whose ``file_name`` / ``<name>_file_name`` fields (``file_names`` lists too,
inside structs and lists of structs as well) become media features (``Image()``), each value the
file it names, relative to the metadata file's folder (which it may not leave; inside an archive,
a member of that archive), checked to exist. Every metadata file must have the same features."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pyarrow as pa

from ...nodes.archives import digest_name, member_names, member_path, split_member

def inner(path: str) -> str:
    """A path, or the name inside its archive of an archive member (``zip://<member>::<archive>``)."""
    member = split_member(path)
    return path if member is None else member[1]


def _folder(path: str) -> str:
    """The folder of a metadata file, which its file names are relative to (for an archive member,
    its folder inside the archive, named as a member is)."""
    member = split_member(path)
    return os.path.dirname(path) if member is None else member_path(member[0], member[1].rpartition("/")[0])


def encoded(rows: list[dict], features: Any) -> pa.Table:
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
        return _read_metadata_from(data, inner(path), features)
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


def metadata_features(metadata: dict[str, list[str]], column: str, base: Any) -> Any:
    """The features of the rows: the metadata files' columns, file names made media features.
    Every metadata file must have the same features (as HF checks)."""
    from datasets import Features

    files = sorted({m for ms in metadata.values() for m in ms}, key=digest_name)
    exts = sorted({os.path.splitext(inner(m))[1] for m in files})
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


def metadata_table(path: str, features: Any, column: str, base: Any) -> pa.Table:
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


def typed_metadata_table(path: str, features: Any, base: Any) -> pa.Table:
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
    return encoded(rows, features)


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
