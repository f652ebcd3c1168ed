"""What a dataset says about itself, as HF's ``DatasetInfoMixin``: its ``info`` (a
``datasets.DatasetInfo``: a HF dataset source's description, citation, license..., with the
dataset's features), the shortcuts to its fields (``description``, ``citation``, ``builder_name``...)
and its ``split`` name. A mixin of :class:`~resumable_iterable.dataset.IterableDataset`: the facade
keeps ``_info`` and ``_named_split`` from its sources and gives them to the datasets it derives;
nothing here builds, iterates or holds state."""

from __future__ import annotations

from typing import Any


class InfoProperties:
    """``info``, its fields and ``split``, as properties of :class:`~resumable_iterable.dataset.IterableDataset`."""

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
