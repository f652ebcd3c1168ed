"""What a dataset says about itself: its ``features``, ``column_names`` / ``num_columns``,
``num_shards`` (the rank's, after ``split_dataset_by_node``), its ``repr``, and, as HF's
``DatasetInfoMixin``, its ``info`` (a ``datasets.DatasetInfo``: a HF dataset source's description,
citation, license..., with the dataset's features), the shortcuts to its fields (``description``,
``citation``, ``builder_name``...) and its ``split`` name. A mixin of
:class:`~resumable_iterable.dataset.IterableDataset`: the facade keeps what these read (its
features, column names, pipeline and rank splits; ``_info`` and ``_named_split`` from its sources,
given to the datasets it derives); nothing here builds, iterates or holds state."""

from __future__ import annotations

from typing import Any

from .distributed import rank_shards, ranks_of


class InfoProperties:
    """What :class:`~resumable_iterable.dataset.IterableDataset` says about itself, as properties."""

    @property
    def num_shards(self) -> int:
        """The shards this dataset reads; after ``split_dataset_by_node`` the rank's (as HF)."""
        return rank_shards(self._node.num_shards, ranks_of(self._split))

    @property
    def n_shards(self) -> int:
        return self.num_shards

    @property
    def features(self) -> Any:
        return self._features

    @property
    def num_columns(self) -> int | None:
        """``len(column_names)``; ``None`` where the columns are unknown (e.g. after a ``map``), as HF."""
        return len(self._column_names) if self._column_names is not None else None

    @property
    def column_names(self) -> list[str] | None:
        return list(self._column_names) if self._column_names is not None else None

    def __repr__(self) -> str:
        cols = self._column_names
        return f"IterableDataset({{\n    features: {cols if cols is not None else 'Unknown'},\n    num_shards: {self.num_shards}\n}})"

    _info: Any = None  # the datasets.DatasetInfo of a HF dataset source (from_hf), kept by derived datasets

    @property
    def info(self) -> Any:
        """A ``datasets.DatasetInfo``, as HF's: a HF dataset source's description, citation, license...
        (empty otherwise), with this dataset's features."""
        from datasets import DatasetInfo

        info = self._info.copy() if self._info is not None else DatasetInfo()
        info.features = self._features
        return info

    description = property(lambda self: self.info.description, doc="``info.description``")
    citation = property(lambda self: self.info.citation, doc="``info.citation``")
    homepage = property(lambda self: self.info.homepage, doc="``info.homepage``")
    license = property(lambda self: self.info.license, doc="``info.license``")
    size_in_bytes = property(lambda self: self.info.size_in_bytes, doc="``info.size_in_bytes``")
    builder_name = property(lambda self: self.info.builder_name, doc="``info.builder_name``")
    config_name = property(lambda self: self.info.config_name, doc="``info.config_name``")
    version = property(lambda self: self.info.version, doc="``info.version``")
    dataset_size = property(lambda self: self.info.dataset_size, doc="``info.dataset_size``")
    download_size = property(lambda self: self.info.download_size, doc="``info.download_size``")
    download_checksums = property(lambda self: self.info.download_checksums, doc="``info.download_checksums``")
    supervised_keys = property(lambda self: self.info.supervised_keys, doc="``info.supervised_keys``")

    _named_split: Any = None  # the split name of a HF dataset source or a from_* constructor, kept by derived datasets

    @property
    def split(self) -> Any:
        """The split name (a ``datasets.NamedSplit`` or ``str``) the source was given, if any (as HF)."""
        return self._named_split
