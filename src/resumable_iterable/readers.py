"""The file readers of :class:`~resumable_iterable.dataset.IterableDataset`, HF's classmethods
``from_files`` / ``from_parquet`` / ``from_arrow`` / ``from_file`` / ``from_json`` / ``from_csv`` /
``from_text`` (a mixin of the facade): data files, one shard per file (``nodes/files.py``), typed
as HF's builders type them (the first file's columns, ``features=`` / ``info=`` cast to, HF 5.2's
``Json`` columns found in the first chunk), named as a split, and glob patterns resolved as HF's
readers resolve them."""

from __future__ import annotations

import os
from typing import Any

from .dataset_dict import IterableDatasetDict
from .features import builder_info, file_features
from .nodes.file_formats import FORMATS, PYARROW_CSV_OPTIONS, csv_dtypes, format_of, hf_reader_options
from .nodes.file_globs import resolve_data_files
from .nodes.files import FileSource


def _given(features: Any, info: Any) -> Any:
    """The features a file reader casts to: ``features``, else those of the ``info`` (a
    ``datasets.DatasetInfo``) given to it, as HF's builders take ``info=``."""
    return features if features is not None or info is None else info.features


def _data_files(path_or_paths: Any) -> list[str]:
    """The files a ``from_<format>`` reader is given, as HF's readers resolve them (glob patterns; a
    missing file is a ``FileNotFoundError`` now, not at the first read): ``resolve_data_files``.
    ``load_dataset`` hands ``from_files`` paths it resolved itself."""
    paths = [path_or_paths] if isinstance(path_or_paths, (str, os.PathLike)) else list(path_or_paths)
    return resolve_data_files([os.fspath(p) for p in paths])


class FileReaders:
    """HF's file readers, as classmethods of :class:`~resumable_iterable.dataset.IterableDataset`
    (``cls``), which they build with its public constructor and methods (``cast``, ``rename_column``)."""

    @classmethod
    def from_files(cls, paths: str | list[str], format: str | None = None, features: Any = None,
                   split: Any = None, info: Any = None, schema_from: str | None = None,
                   **reader_kwargs: Any) -> Any:
        """Data files, one shard per file (the ``from_<format>`` readers also take glob patterns, as
        HF's: :func:`_data_files`). ``features``: HF features to cast the rows to, as HF's
        builders do (for CSV, also the types pandas parses the columns as: ``"00123"`` stays a string).
        ``split``: the split's name, ``info`` its ``datasets.DatasetInfo`` (``load_dataset`` gives them;
        by default HF's builder of the format names it: ``builder_name="json"``, ``config_name="default"``...).
        ``schema_from``: the files follow the columns of this file (a zip: its first member) instead
        of the first of ``paths``, as HF's JSON, Parquet and Arrow builders give every split those of
        the first split's first file."""
        paths = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
        if not paths:  # before the first file's features are read
            raise ValueError("no data files given")
        if format is None:
            found = {format_of(p) for p in paths}
            if len(found) != 1 or None in found:
                raise ValueError(f"cannot tell the format of {paths[:3]}...; pass format= one of {FORMATS}")
            format = found.pop()
        reader_kwargs = hf_reader_options(format, reader_kwargs)  # HF's options that change nothing here
        if features is not None and format == "csv" and not PYARROW_CSV_OPTIONS & set(reader_kwargs):
            reader_kwargs.setdefault("dtype", csv_dtypes(features))
        source = FileSource(paths, format, reader_kwargs=reader_kwargs, schema_from=schema_from)
        found = file_features(source.schema_file() if schema_from is not None else paths[0], format)
        if format == "json":  # the first file's first chunk, HF 5.2's Json columns found there (or given)
            found = source.json_features(features)
        if found is not None and source.columns is not None:  # only those columns, in the file's order (HF's)
            missing = [c for c in source.columns if c not in found]
            if missing:
                raise ValueError(f"columns={source.columns}: data file {paths[0]!r} has no column(s) {missing} "
                                 f"(its columns: {list(found)})")
            found = type(found)({c: t for c, t in found.items() if c in set(source.columns)})
        if features is not None and source.columns is not None and set(source.columns) != set(features):
            # HF's Parquet builder: features of more columns than read are narrowed to those columns
            missing = [c for c in source.columns if c not in features]
            if missing:
                raise ValueError(f"columns={source.columns} and features must match: the features have no "
                                 f"column(s) {missing}")
            features = type(features)({c: features[c] for c in source.columns})
        source.set_features(found)
        source.check_features(features)
        ds = cls(source, features=found, split=split, info=info if info is not None else builder_info(format))
        if features is not None and format == "text" and len(features) == 1 and "text" not in features:
            ds = ds.rename_column("text", next(iter(features)))  # HF's text builder names it after the features
        return ds if features is None else ds.cast(features)

    @classmethod
    def from_parquet(cls, path_or_paths: str | list[str], split: Any = None, features: Any = None,
                     keep_in_memory: bool = False, info: Any = None, cache_dir: Any = None,
                     **reader_kwargs: Any) -> Any:
        """Parquet files, as HF's (reader options such as ``columns=``, ``filters=``). Like every
        ``from_<format>``: split ``"train"`` unless given, ``keep_in_memory`` and ``cache_dir`` ignored
        (streamed: nothing is cached), and ``info`` (a ``datasets.DatasetInfo``) kept as the dataset's,
        its features cast to when no ``features`` are given (narrowed to ``columns=``), as HF. A
        ``{split: path(s)}`` dict gives an :class:`~resumable_iterable.IterableDatasetDict` of
        datasets, one per split, as HF, or the one ``split`` names."""
        return cls._read_files("parquet", path_or_paths, split, features, info, reader_kwargs)

    @classmethod
    def from_arrow(cls, path_or_paths: str | list[str], split: Any = None, features: Any = None,
                   keep_in_memory: bool = False, info: Any = None, cache_dir: Any = None,
                   **reader_kwargs: Any) -> Any:
        return cls._read_files("arrow", path_or_paths, split, features, info, reader_kwargs)

    @classmethod
    def from_file(cls, filename: str | os.PathLike) -> Any:
        """One Arrow file (as written by HF ``datasets``), as HF ``IterableDataset.from_file`` (its info
        empty: no builder read it)."""
        from datasets import DatasetInfo

        return cls.from_files(filename, "arrow", info=DatasetInfo())

    @classmethod
    def from_json(cls, path_or_paths: str | list[str], split: Any = None, features: Any = None,
                  keep_in_memory: bool = False, info: Any = None, cache_dir: Any = None,
                  **reader_kwargs: Any) -> Any:
        return cls._read_files("json", path_or_paths, split, features, info, reader_kwargs)

    @classmethod
    def from_csv(cls, path_or_paths: str | list[str], split: Any = None, features: Any = None,
                 keep_in_memory: bool = False, info: Any = None, cache_dir: Any = None,
                 **reader_kwargs: Any) -> Any:
        return cls._read_files("csv", path_or_paths, split, features, info, reader_kwargs)

    @classmethod
    def from_text(cls, path_or_paths: str | list[str], split: Any = None, features: Any = None,
                  keep_in_memory: bool = False, keep_linebreaks: bool = False, sample_by: str = "line",
                  info: Any = None, cache_dir: Any = None, **reader_kwargs: Any) -> Any:
        """Text files read as HF's text builder reads them (a ``text`` column of lines, paragraphs
        or whole documents), one shard per file."""
        return cls._read_files("text", path_or_paths, split, features, info,
                               dict(reader_kwargs, keep_linebreaks=keep_linebreaks, sample_by=sample_by))

    @classmethod
    def _read_files(cls, fmt: str, path_or_paths: Any, split: Any, features: Any, info: Any,
                    reader_kwargs: dict) -> Any:
        """What every ``from_<format>`` reader does (see :meth:`from_parquet`)."""
        if isinstance(path_or_paths, dict):  # HF's readers: a dataset per split
            if split is not None and split not in path_or_paths:
                raise ValueError(f"split {split!r} is not one of the splits given: {list(path_or_paths)}")
            return IterableDatasetDict({str(name): cls._read_files(fmt, paths, str(name), features, info,
                                                                   dict(reader_kwargs))
                                        for name, paths in path_or_paths.items()}) if split is None else cls._read_files(
                fmt, path_or_paths[split], split, features, info, reader_kwargs)
        # split "train" unless given, as HF's file readers
        return cls.from_files(_data_files(path_or_paths), fmt, features=_given(features, info), info=info,
                              split=split if split is not None else "train", **reader_kwargs)
