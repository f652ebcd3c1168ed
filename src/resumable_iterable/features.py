"""HF ``datasets`` features as the facade knows them: read from Arrow/Parquet schemas, inferred
from a pipeline's first examples, mapped over nested features (``decode``), and those of
``batch()``'s output. Pure helpers: nothing here iterates a pipeline the caller is using."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from .nodes.base import Node
from .nodes.file_formats import file_schema


def infer_features(node: Node, n: int) -> Any:
    """HF ``Features`` inferred from the first ``n`` examples that ``node`` yields (it is iterated:
    pass a fresh copy), or ``None`` when they cannot be read or typed."""
    it = iter(node)
    try:
        head = [ex for _, ex in zip(range(n), it)]
        if not head or not all(isinstance(ex, dict) for ex in head):
            return None
        import pyarrow as pa

        columns = dict.fromkeys(c for ex in head for c in ex)  # in order of appearance, as HF
        table = pa.Table.from_pydict({c: [ex.get(c) for ex in head] for c in columns})
        return features_of_schema(table.schema)
    except Exception as e:  # noqa: BLE001 - features are informative: a pipeline that cannot be peeked at still works
        logging.getLogger("resumable_iterable").debug("cannot infer the features from the first examples: %r", e)
        return None
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def features_of_schema(schema: Any) -> Any:
    """HF ``Features`` of a pyarrow schema (HF's own metadata in the schema is honoured)."""
    from datasets import Features

    return Features.from_arrow_schema(schema)


def file_features(path: str, format: str) -> Any:
    """The features in the schema of an Arrow / Parquet file, ``{"text": string}`` for text files;
    ``None`` for JSON / CSV (a schema needs parsing). An Arrow / Parquet file that cannot be read
    raises ``ValueError`` naming it, as HF's ``load_dataset`` fails: the pipeline built without
    its features would have another shape (no column alignment in ``interleave_datasets``), so a
    state of the healthy run would be refused for that instead of for the file."""
    import pyarrow as pa

    if format == "text":
        from datasets import Features, Value

        return Features({"text": Value("string")})
    if format not in ("parquet", "arrow"):
        return None
    try:
        return features_of_schema(file_schema(path, format))
    except (OSError, pa.ArrowException) as e:
        raise ValueError(f"cannot read data file {path!r} (shard 0): {e}") from None


def check_feature_types(features: Any, where: str) -> None:
    """``TypeError`` naming the column whose feature is no HF feature type (a string ``"int8"``, a
    pyarrow type...): HF's cast raises a bare ``TypeError`` ("'str' object is not callable") when
    it builds the Arrow type; an example encoded with it would pass unchanged."""
    from datasets import Features

    for name, feature in features.items():
        try:
            Features({name: feature}).type
        except TypeError as e:
            raise TypeError(f"{where}: the feature of column {name!r} is not a datasets feature type, got "
                            f"{feature!r} ({e}): write e.g. datasets.Value('int8'), ClassLabel(names=[...]), "
                            "List(Value('float32'))") from None


def batched_features(features: Any) -> Any:
    """The features of ``batch()``'s output: each column a list of the given features' values."""
    if features is None:
        return None
    try:
        from datasets import List
    except ImportError:  # datasets < 4
        from datasets import Sequence as List
    return features.__class__({c: List(f) for c, f in features.items()})


def row_features(features: Any) -> Any:
    """The features of the examples ``batch()`` grouped, from those of its batches (each column a
    list of them); ``None`` when not known."""
    if features is None:
        return None
    inner = {c: getattr(f, "feature", None) for c, f in features.items()}
    if any(f is None for f in inner.values()):
        return None
    return features.__class__(inner)


def map_feature(feature: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to every leaf feature of a (possibly nested) HF feature."""
    if isinstance(feature, dict):
        return type(feature)({k: map_feature(v, fn) for k, v in feature.items()})
    if isinstance(feature, (list, tuple)):
        return type(feature)(map_feature(v, fn) for v in feature)
    inner = getattr(feature, "feature", None)
    if inner is not None and hasattr(feature, "__dataclass_fields__"):  # List / Sequence / LargeList
        return dataclasses.replace(feature, feature=map_feature(inner, fn))
    return fn(feature)


def media_only_change(old: Any, new: Any) -> bool:
    """Whether two HF features differ only in the settings of media features of the same kind
    (``decode``, an ``Image``'s ``mode``, an ``Audio``'s ``sampling_rate``...). Every variant of a
    media feature stores the same ``{bytes, path}`` values, which HF's cast leaves as they are (it
    casts them on its Arrow path and decodes them once, the new way), so a source can take the new
    features instead of decoding the old way and encoding again (which lost the stored path and
    bytes, and needs the encoder of the kind: ``torchcodec`` for audio)."""
    def strip(feature: Any) -> Any:
        if hasattr(feature, "decode") and hasattr(feature, "__dataclass_fields__"):
            return type(feature)()
        return feature

    try:
        return {k: map_feature(v, strip) for k, v in old.items()} == {k: map_feature(v, strip) for k, v in new.items()}
    except Exception:  # noqa: BLE001 - unusual features: take the general path
        return False


def json_as_text(old: Any, new: Any) -> list[str]:
    """The columns that HF 5.2's ``Json`` in ``old`` features casts to a string in ``new`` (their
    values become their JSON text, as HF's Arrow cast of the text storage gives)."""
    try:
        from datasets import Json
    except ImportError:  # datasets < 5.2
        return []
    return [k for k, f in (old or {}).items()
            if isinstance(f, Json) and getattr(new.get(k), "dtype", None) in ("string", "large_string")]


def builder_info(builder: str, dataset_name: str | None = None, config_name: str | None = None,
                 base: Any = None) -> Any:
    """The ``datasets.DatasetInfo`` HF's builder ``builder`` (``"json"``, ``"imagefolder"``...) gives
    the datasets it reads: ``builder_name``, ``dataset_name`` (the builder's name unless given: HF's
    folder or repo name), ``config_name`` (``"default"`` unless given) and ``version`` ``0.0.0``, on
    ``base`` (a dataset card's info: description, citation, splits...) when given."""
    from datasets import DatasetInfo
    from datasets.naming import camelcase_to_snakecase
    from datasets.utils.version import Version

    info = base.copy() if base is not None else DatasetInfo()
    info.builder_name = builder
    info.dataset_name = camelcase_to_snakecase(dataset_name) if dataset_name else builder
    info.config_name = config_name or "default"
    info.version = Version("0.0.0")
    return info
