"""The constructors of :class:`~resumable_iterable.dataset.IterableDataset` from Python objects (a
mixin of the facade, as ``readers.py`` for data files): a generator function (``from_generator``,
typed by its features as HF types it), a HF map-style ``datasets.Dataset`` (``from_hf``, what
``to_iterable_dataset`` does), a ``pyarrow.Table``, and, through a ``datasets.Dataset`` as HF builds
them, columns (``from_dict``), rows (``from_list``) and pandas / polars data frames. Each of the
latter is an Arrow source read in ``num_shards`` contiguous shards (``nodes/arrow.py``), typed by its
features. They build with the class's public constructor and methods only."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from .features import builder_info, features_of_schema
from .nodes.arrow import ArrowSource
from .nodes.checks import as_int
from .nodes.generator import GeneratorSource


class InMemoryConstructors:
    """HF's constructors from Python objects, as classmethods of :class:`~resumable_iterable.dataset.IterableDataset` (``cls``)."""

    @classmethod
    def from_generator(cls, generator: Callable[..., Iterator[dict]], features: Any = None,
                       gen_kwargs: dict | None = None, split: Any = "train") -> Any:
        """Examples yielded by ``generator(**gen_kwargs)``; list values of ``gen_kwargs`` are shards.
        The arguments are HF's, in HF's order (``features`` second).

        With ``features`` (HF ``datasets.Features``), each example is typed as HF does: missing
        columns are filled with ``None``, values are encoded and decoded with the features.
        ``split`` names the dataset's split (``"train"``, as HF) and its ``info`` is that of HF's
        ``generator`` builder."""
        features = _generator_features(features)
        ds = cls(GeneratorSource(generator, gen_kwargs), features=features, split=split,
                 info=builder_info("generator"))
        return ds.cast(features) if features is not None else ds

    @classmethod
    def from_hf(cls, dataset: Any, num_shards: int = 1) -> Any:
        """A HF map-style ``datasets.Dataset`` read in ``num_shards`` contiguous shards. As HF's
        ``to_iterable_dataset``, the result keeps the dataset's format (``with_format``)."""
        if not hasattr(dataset, "data") or not hasattr(dataset, "features"):
            raise TypeError(f"expected a datasets.Dataset, got {type(dataset).__name__}")
        num_shards = as_int(num_shards, "num_shards", lo=1)
        fmt = getattr(dataset, "format", None) or {}
        columns = fmt.get("columns")
        if fmt.get("type") is not None and columns is not None and set(columns) != set(dataset.column_names):
            # HF refuses it too (NotImplementedError); our formats apply to every column
            raise NotImplementedError(f"the datasets.Dataset is formatted as {fmt['type']!r} for columns {columns} "
                                      f"only: call dataset.with_format({fmt['type']!r}) (every column) or "
                                      "with_format(None) first, or select_columns on the iterable dataset")
        if fmt.get("type") == "custom":  # set_transform / with_transform: HF refuses it (NotImplementedError) too
            raise NotImplementedError("the datasets.Dataset has a transform (with_transform / set_transform), which "
                                      "an iterable dataset does not take: call dataset.with_format(None) first and "
                                      "give the function to map() on the iterable dataset")
        ds = cls(ArrowSource.from_hf(dataset, num_shards=num_shards), features=dataset.features, info=dataset.info,
                 split=dataset.split)
        if fmt.get("type") is not None:
            ds = ds.with_format(fmt["type"], **fmt.get("format_kwargs", {}))
        return ds

    @classmethod
    def from_arrow_table(cls, table: Any, num_shards: int = 1) -> Any:
        """A ``pyarrow.Table`` read in ``num_shards`` contiguous shards. The HF features in its schema
        metadata are honoured: media columns (``Image()``...) are decoded, as from Parquet files."""
        num_shards = as_int(num_shards, "num_shards", lo=1)
        features = features_of_schema(table.schema)
        return cls(ArrowSource(table, num_shards=num_shards, features=features), features=features,
                   column_names=table.column_names)

    @classmethod
    def from_dict(cls, mapping: dict, features: Any = None, info: Any = None, split: Any = None,
                  num_shards: int = 1) -> Any:
        """Columns ``{name: [values]}`` held in memory (as HF: through an in-memory ``datasets.Dataset``)."""
        from datasets import Dataset

        return cls.from_hf(Dataset.from_dict(mapping, features=features, info=info, split=split), num_shards=num_shards)

    @classmethod
    def from_list(cls, mapping: list[dict], features: Any = None, info: Any = None, split: Any = None,
                  num_shards: int = 1) -> Any:
        """Rows ``[{name: value}, ...]`` held in memory; the first row's keys are the columns (as HF)."""
        from datasets import Dataset

        return cls.from_hf(Dataset.from_list(mapping, features=features, info=info, split=split), num_shards=num_shards)

    @classmethod
    def from_pandas(cls, df: Any, features: Any = None, info: Any = None, split: Any = None,
                    preserve_index: bool | None = None, num_shards: int = 1) -> Any:
        """A ``pandas.DataFrame`` held in memory, typed as HF ``Dataset.from_pandas`` types it."""
        from datasets import Dataset

        return cls.from_hf(Dataset.from_pandas(df, features=features, info=info, split=split,
                                               preserve_index=preserve_index), num_shards=num_shards)

    @classmethod
    def from_polars(cls, df: Any, features: Any = None, info: Any = None, split: Any = None) -> Any:
        """A ``polars.DataFrame`` (or ``LazyFrame``, collected) held in memory, one shard, as HF."""
        from datasets import Dataset

        return cls.from_hf(Dataset.from_polars(df.collect() if hasattr(df, "collect") else df, features=features,
                                               info=info, split=split))


def _generator_features(features: Any) -> Any:
    """``from_generator``'s ``features``: ``datasets.Features``, or a plain dict of features made one.
    Anything else is a ``TypeError`` - a dict of ``gen_kwargs`` given second (this library's order
    before HF's was followed) among them, which would otherwise fail only when iterated."""
    if features is None:
        return None
    from datasets import Features

    if isinstance(features, Features):
        return features
    if isinstance(features, dict) and features:
        try:
            typed = Features(features)
            typed.arrow_schema  # noqa: B018 - every value a feature type
            return typed
        except Exception:  # noqa: BLE001 - not features: said below
            pass
    raise TypeError(f"from_generator(generator, features=None, gen_kwargs=None, split='train'): features must be "
                    f"datasets.Features, got {type(features).__name__} {features!r:.100}; give gen_kwargs by name "
                    "(gen_kwargs=...), as HF's order puts features second")
