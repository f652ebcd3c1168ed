"""Helpers shared by the ports of HF ``datasets``' IterableDataset tests (see ``test_hf_iterable_dataset.py``).

The upstream helpers yield ``(key, example)`` pairs for HF's private ``ExamplesIterable``; these
yield plain examples, which is what a public ``from_generator`` takes. Everything here builds its
data locally: no downloads.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa

import resumable_iterable as ri
from harness import assert_resumes_exactly

UPSTREAM_COMMIT = "b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8"

DEFAULT_N_EXAMPLES = 20

#: the rows of upstream conftest.py's DATA fixture, which its csv / parquet / json files hold
DATA = [
    {"col_1": "0", "col_2": 0, "col_3": 0.0},
    {"col_1": "1", "col_2": 1, "col_3": 1.0},
    {"col_1": "2", "col_2": 2, "col_3": 2.0},
    {"col_1": "3", "col_2": 3, "col_3": 3.0},
]

DEFAULT_BATCH_SIZE = 4
DEFAULT_FILEPATH = "file.txt"


def generate_examples_fn(**kwargs):
    """Upstream's generator, without the keys: ``n`` examples ``{"id": i, **kwargs}`` per file path."""
    kwargs = kwargs.copy()
    n = kwargs.pop("n", DEFAULT_N_EXAMPLES)
    filepaths = kwargs.pop("filepaths", None)
    for filepath in filepaths or [DEFAULT_FILEPATH]:
        if filepaths is not None:
            kwargs["filepath"] = filepath
        for i in range(n):
            yield {"id": i, **kwargs}


def generate_tables(**kwargs) -> list[pa.Table]:
    """Upstream's ``generate_tables_fn`` as a list of tables (one per ``batch_size`` rows, plus the rest)."""
    kwargs = kwargs.copy()
    n = kwargs.pop("n", DEFAULT_N_EXAMPLES)
    batch_size = kwargs.pop("batch_size", DEFAULT_BATCH_SIZE)
    filepaths = kwargs.pop("filepaths", None)
    tables = []
    for filepath in filepaths or [DEFAULT_FILEPATH]:
        buffer = []
        if filepaths is not None:
            kwargs["filepath"] = filepath
        for i in range(n):
            buffer.append({"id": i, **kwargs})
            if len(buffer) == batch_size:
                tables.append(pa.Table.from_pylist(buffer))
                buffer = []
        tables.append(pa.Table.from_pylist(buffer))
    return tables


def examples_ds(features=None, **gen_kwargs) -> ri.IterableDataset:
    """The public counterpart of upstream's ``ExamplesIterable(generate_examples_fn, gen_kwargs)``:
    list values of ``gen_kwargs`` are shards, as in HF."""
    return ri.IterableDataset.from_generator(generate_examples_fn, gen_kwargs=gen_kwargs, features=features)


def tables_ds(tables: list[pa.Table]) -> ri.IterableDataset:
    """The public counterpart of upstream's ``ArrowExamplesIterable``: an Arrow source, one shard per
    non-empty table."""
    tables = [t for t in tables if len(t)]
    table = pa.concat_tables(tables)
    ds = ri.IterableDataset.from_arrow_table(table, num_shards=len(tables))
    return ds


def all_examples(**gen_kwargs) -> list[dict]:
    return list(generate_examples_fn(**gen_kwargs))


def examples_to_batch(examples: list[dict]) -> dict:
    """HF's ``_examples_to_batch``: columns in order of appearance, ``None`` where an example lacks one."""
    cols = {col: None for ex in examples for col in ex}
    return {col: [ex.get(col) for ex in examples] for col in cols}


def batch_to_examples(batch: dict) -> list[dict]:
    n = len(next(iter(batch.values()))) if batch else 0
    return [{col: values[i] for col, values in batch.items()} for i in range(n)]


def assert_resumes(build, max_cuts: int | None = 12) -> list:
    """Upstream's ``assert_load_state_dict_resumes_iteration`` at the public level: a state taken
    after every k examples (JSON round trip) resumes a freshly built pipeline exactly."""
    return assert_resumes_exactly(build, max_cuts=max_cuts)


def normalize_batched_output(batch):
    def to_python(value):
        if isinstance(value, np.ndarray):
            return [to_python(item) for item in value.tolist()]
        if isinstance(value, (list, tuple)):
            return [to_python(item) for item in value]
        return value

    import pandas as pd

    if isinstance(batch, pa.Table):
        return {column: to_python(values) for column, values in batch.to_pydict().items()}
    if isinstance(batch, pd.DataFrame):
        return {column: to_python(batch[column].tolist()) for column in batch.columns}
    if "polars" in sys.modules:
        import polars as pl

        if isinstance(batch, pl.DataFrame):
            return {column: to_python(values) for column, values in batch.to_dict(as_series=False).items()}
    return to_python(batch)
