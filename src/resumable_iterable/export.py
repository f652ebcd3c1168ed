"""Reading a whole dataset out, as HF ``IterableDataset``'s ``to_list``, ``to_dict``, ``to_pandas``,
``to_polars``, ``to_csv``, ``to_json``, ``to_parquet``, ``to_sql`` and ``push_to_hub`` do (the
facade's methods: :class:`ExportMethods`, a mixin of ``IterableDataset``), and HF ``IterableDatasetDict.push_to_hub`` (every split in one push).

As in HF, the dataset is read as Arrow tables (``with_format("arrow").iter(batch_size)``), which
are concatenated and handed to a map-style ``datasets.Dataset``, whose own method writes or
converts them: the values, types and files are HF's. Each export reads a *fresh pass* over a copy
of the dataset (the one ``with_format`` makes): the dataset's own iteration, its ``state_dict()``
and a state loaded and not iterated yet are left as they were, and the whole dataset is read from
its start (HF does the same). The pass is that of the dataset's rank split and current epoch
(``set_epoch``; HF's copy reads epoch 0), in the order iterating the dataset would give.

Differences from HF, on purpose: the tables are cast to the dataset's declared features (HF does
that for ``to_pandas`` only), an empty dataset gives an empty result typed by its features (HF
raises ``ArrowInvalid: Must pass at least one table``), ``batched=True`` without ``batch_size``
reads batches of 1000 rows as HF documents (HF's iterable reads one batch of everything), and
``to_parquet(batch_size=...)`` sets the row group size as HF documents (HF's iterable ignores it).
"""

from __future__ import annotations

from typing import Any, Iterator

#: rows read at a time (HF's ``datasets.config.DEFAULT_MAX_BATCH_SIZE``)
DEFAULT_BATCH_SIZE = 1000


def tables(dataset: Any, batch_size: int | None = None) -> Iterator[Any]:
    """The dataset's rows as ``pyarrow.Table`` s of ``batch_size`` rows (a fresh pass, see above),
    cast to its features when they are known."""
    from datasets.table import table_cast

    features = dataset.features
    schema = features.arrow_schema if features is not None else None
    for table in dataset.with_format("arrow").iter(batch_size or DEFAULT_BATCH_SIZE):
        if schema is not None and table.schema != schema:
            table = table_cast(table, schema)
        yield table


def whole_table(dataset: Any, batch_size: int | None = None) -> Any:
    """All the dataset's rows as one ``pyarrow.Table``; empty, it has the features' columns (or the
    known column names, typed ``null``)."""
    import pyarrow as pa

    found = list(tables(dataset, batch_size))
    if found:
        return pa.concat_tables(found, promote_options="default")  # a column all None in one batch
    if dataset.features is not None:
        return dataset.features.arrow_schema.empty_table()
    return pa.table({name: pa.array([], pa.null()) for name in dataset.column_names or []})


def hf_dataset(table: Any, features: Any = None) -> Any:
    """A map-style ``datasets.Dataset`` over ``table`` (not written anywhere), as HF's exports make."""
    from datasets import Dataset, DatasetInfo

    info = DatasetInfo(features=features.copy()) if features is not None else None
    return Dataset(table, info=info, fingerprint="unset")


def push_splits_to_hub(splits: dict, repo_id: str, *, max_shard_size: Any = None, num_shards: dict | None = None,
                       **kwargs: Any) -> Any:
    """HF ``IterableDatasetDict.push_to_hub`` of ``splits`` (``{name: dataset}``, checked by the
    caller): each split written as :meth:`ExportMethods.push_to_hub` writes one, and the map-style
    ``datasets.DatasetDict`` of them pushed by HF in one go (one commit, one card for every split).
    Without ``max_shard_size``, a split not in ``num_shards`` gets as many files as it has shards."""
    if max_shard_size is None:
        given = num_shards or {}
        num_shards = {s: given[s] if given.get(s) is not None else ds.num_shards for s, ds in splits.items()}
    else:
        num_shards = None
    import tempfile

    from datasets import DatasetDict

    with tempfile.TemporaryDirectory(prefix="resumable_iterable_push_") as tmp:
        hf = DatasetDict({s: _written(ds, tmp, f"{i}.arrow") for i, (s, ds) in enumerate(splits.items())})
        return hf.push_to_hub(repo_id, max_shard_size=max_shard_size, num_shards=num_shards, **kwargs)


def _written(dataset: Any, folder: str, name: str) -> Any:
    """The dataset (a fresh pass) written to the Arrow file ``name`` in ``folder``, a batch at a time,
    and opened memory-mapped as a map-style ``datasets.Dataset`` with its info and split."""
    import os

    import pyarrow as pa
    from datasets import Dataset

    info = dataset.info
    path = os.path.join(folder, name)
    writer, schema = None, None
    with open(path, "wb") as sink:
        for table in tables(dataset):
            if writer is None:
                writer, schema = pa.ipc.new_stream(sink, table.schema), table.schema
            elif table.schema != schema:
                table = table.cast(schema)  # unknown features: typed by the first batch
            writer.write_table(table)
        if writer is None:  # empty: its features' (or columns') empty table
            table = whole_table(dataset)
            writer = pa.ipc.new_stream(sink, table.schema)
            writer.write_table(table)
        writer.close()
    return Dataset.from_file(path, info=info if info.features is not None else None, split=dataset.split)


def _to_file(dataset: Any, kind: str, *args: Any, **kwargs: Any) -> int:
    """``datasets.Dataset.to_<kind>(*args, **kwargs)`` of the whole dataset (``csv``, ``json``,
    ``parquet``, ``sql``): the number of bytes (``sql``: of rows) written, as HF returns."""
    return getattr(hf_dataset(whole_table(dataset)), f"to_{kind}")(*args, **kwargs)


class ExportMethods:
    """HF's export methods, as methods of :class:`~resumable_iterable.dataset.IterableDataset` (a
    mixin of the facade): each reads a fresh pass of a copy (see the module doc)."""

    def push_to_hub(self, repo_id: str, config_name: str = "default", set_default: bool | None = None,
                    split: str | None = None, data_dir: str | None = None, commit_message: str | None = None,
                    commit_description: str | None = None, private: bool | None = None, token: str | None = None,
                    revision: str | None = None, create_pr: bool | None = False, max_shard_size: Any = None,
                    num_shards: int | None = None, embed_external_files: bool = True, num_proc: int | None = None) -> Any:
        """Upload the dataset to the Hub as Parquet files with a dataset card, as HF. The dataset is
        written (a fresh pass) to a temporary Arrow file, a batch at a time, and that file,
        memory-mapped as a map-style ``datasets.Dataset`` with this dataset's info and split, is
        pushed by HF's own ``Dataset.push_to_hub`` (Parquet shards, dataset card, configs;
        ``huggingface_hub`` does the uploads). Without ``num_shards`` or ``max_shard_size``, as many
        Parquet files as the dataset has shards (as HF's iterable), rows split evenly among them in
        order. Needs disk space for one copy of the dataset, not memory."""
        if max_shard_size is not None and num_shards is not None:  # before reading anything (HF's message)
            raise ValueError("Failed to push_to_hub: please specify either max_shard_size or num_shards, but not both.")
        if max_shard_size is None and num_shards is None:
            num_shards = self.num_shards
        import tempfile

        with tempfile.TemporaryDirectory(prefix="resumable_iterable_push_") as tmp:
            hf = _written(self, tmp, "data.arrow")
            return hf.push_to_hub(repo_id, config_name=config_name, set_default=set_default, split=split,
                                  data_dir=data_dir, commit_message=commit_message,
                                  commit_description=commit_description, private=private, token=token,
                                  revision=revision, create_pr=create_pr, max_shard_size=max_shard_size,
                                  num_shards=num_shards, embed_external_files=embed_external_files, num_proc=num_proc)

    def to_list(self) -> list:
        """All examples as a list of dicts, as HF. Like every ``to_*`` export, it reads a fresh pass of a
        copy (this dataset's iteration and state are untouched)."""
        return hf_dataset(whole_table(self)).to_list()

    def to_dict(self, batch_size: int | None = None, batched: bool = False) -> Any:
        """All examples as columns ``{name: [values]}`` (``batched=True``: an iterator of one per batch)."""
        if batched:
            return (hf_dataset(table).to_dict() for table in tables(self, batch_size))
        return hf_dataset(whole_table(self)).to_dict()

    def to_pandas(self, batch_size: int | None = None, batched: bool = False) -> Any:
        """All examples as one ``pandas.DataFrame`` (or, with ``batched=True``, an iterator of one
        DataFrame per batch of ``batch_size``), typed with the dataset's features, as HF does."""
        features = self.features
        if batched:
            return (hf_dataset(table, features).to_pandas() for table in tables(self, batch_size))
        return hf_dataset(whole_table(self), features).to_pandas()

    def to_polars(self, batch_size: int | None = None, batched: bool = False, schema_overrides: dict | None = None,
                  rechunk: bool = True) -> Any:
        """All examples as one ``polars.DataFrame`` (``batched=True``: an iterator of one per batch)."""
        if batched:
            return (hf_dataset(table).to_polars(schema_overrides=schema_overrides, rechunk=rechunk)
                    for table in tables(self, batch_size))
        return hf_dataset(whole_table(self)).to_polars(schema_overrides=schema_overrides, rechunk=rechunk)

    def to_csv(self, path_or_buf: Any, batch_size: int | None = None, storage_options: dict | None = None,
               **to_csv_kwargs: Any) -> int:
        """Write all examples to a CSV file (as HF, through ``pandas.DataFrame.to_csv``); bytes written."""
        return _to_file(self, "csv", path_or_buf, batch_size=batch_size, storage_options=storage_options,
                        **to_csv_kwargs)

    def to_json(self, path_or_buf: Any, batch_size: int | None = None, storage_options: dict | None = None,
                **to_json_kwargs: Any) -> int:
        """Write all examples to a JSON Lines file (``lines=False``: JSON), as HF; bytes written."""
        return _to_file(self, "json", path_or_buf, batch_size=batch_size, storage_options=storage_options,
                        **to_json_kwargs)

    def to_parquet(self, path_or_buf: Any, batch_size: int | None = None, storage_options: dict | None = None,
                   **parquet_writer_kwargs: Any) -> int:
        """Write all examples to a Parquet file (``batch_size``: rows per row group), as HF; bytes written."""
        return _to_file(self, "parquet", path_or_buf, batch_size=batch_size, storage_options=storage_options,
                        **parquet_writer_kwargs)

    def to_sql(self, name: str, con: Any, batch_size: int | None = None, **sql_writer_kwargs: Any) -> int:
        """Write all examples to SQL table ``name`` (``con``: a URI or a sqlite3 / SQLAlchemy connection), as
        HF; the number of rows written."""
        return _to_file(self, "sql", name, con, batch_size=batch_size, **sql_writer_kwargs)
