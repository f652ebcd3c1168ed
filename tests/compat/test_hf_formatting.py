"""The cases of HF ``datasets``' ``tests/test_formatting.py`` that format an ``IterableDataset``, ported
to ``resumable_iterable`` at the public-API level.

Upstream: https://github.com/huggingface/datasets, commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8,
file ``tests/test_formatting.py``. Test names are upstream's. The rest of that file tests HF's
formatter classes on Arrow tables (internals). The ``tf`` and ``jax`` cases need TensorFlow / JAX,
which are not installed (upstream skips them then too). See ``docs/compat.md``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import resumable_iterable as ri

pytestmark = pytest.mark.compat


class AnyArray:
    def __init__(self, data) -> None:
        self.data = data

    def __array__(self) -> np.ndarray:
        return np.asarray(self.data)


def _gen_any_arrays():
    for _ in range(10):
        yield {"array": AnyArray(list(range(10)))}


@pytest.fixture
def any_arrays_dataset():
    return ri.IterableDataset.from_generator(_gen_any_arrays)


def test_iterable_dataset_of_arrays_format_to_arrow(any_arrays_dataset: ri.IterableDataset):
    formatted = any_arrays_dataset.with_format("arrow")
    assert all(isinstance(example, pa.Table) for example in formatted)


def test_iterable_dataset_of_arrays_format_to_numpy(any_arrays_dataset: ri.IterableDataset):
    formatted = any_arrays_dataset.with_format("np")
    assert all(isinstance(example["array"], np.ndarray) for example in formatted)


def test_iterable_dataset_of_arrays_format_to_torch(any_arrays_dataset: ri.IterableDataset):
    torch = pytest.importorskip("torch")

    formatted = any_arrays_dataset.with_format("torch")
    assert all(isinstance(example["array"], torch.Tensor) for example in formatted)


def test_iterable_dataset_of_arrays_format_to_tf(any_arrays_dataset: ri.IterableDataset):
    tf = pytest.importorskip("tensorflow", reason="needs tensorflow (upstream skips too)")

    formatted = any_arrays_dataset.with_format("tf")
    assert all(isinstance(example["array"], tf.Tensor) for example in formatted)


def test_iterable_dataset_of_arrays_format_to_jax(any_arrays_dataset: ri.IterableDataset):
    pytest.importorskip("jax", reason="needs jax (upstream skips too)")
    import jax.numpy as jnp

    formatted = any_arrays_dataset.with_format("jax")
    assert all(isinstance(example["array"], jnp.ndarray) for example in formatted)
