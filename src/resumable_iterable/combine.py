"""``interleave_datasets`` and ``concatenate_datasets``."""

from __future__ import annotations

from typing import Any

from .dataset import IterableDataset
from .nodes.base import resolve_seed
from .nodes.concat import ConcatNode
from .nodes.interleave import InterleaveNode


def _check(datasets: list, what: str) -> list[IterableDataset]:
    datasets = list(datasets)
    if not datasets:
        raise ValueError(f"{what} needs at least one dataset")
    for i, d in enumerate(datasets):
        if not isinstance(d, IterableDataset):
            raise TypeError(f"{what}: dataset {i} is a {type(d).__name__}, not a resumable_iterable.IterableDataset "
                            "(wrap a datasets.Dataset with resumable_iterable.to_iterable_dataset)")
        if d._split != datasets[0]._split:
            raise ValueError(f"{what}: datasets must be split by node identically before combining")
    return datasets


def _merged_features(datasets: list[IterableDataset]) -> Any:
    feats = [d.features for d in datasets]
    if any(f is None for f in feats):
        return None
    merged = feats[0].copy()
    for f in feats[1:]:
        for k, v in f.items():
            merged.setdefault(k, v)
    return merged


def _common_column_names(datasets: list[IterableDataset]) -> list[str] | None:
    """The column names of the first dataset if every dataset has the same, else ``None``."""
    names = datasets[0].column_names
    return names if all(d.column_names == names for d in datasets[1:]) else None


def interleave_datasets(datasets: list[IterableDataset], probabilities: list[float] | None = None,
                        seed: int | None = None, stopping_strategy: str = "first_exhausted") -> IterableDataset:
    """Alternate between datasets: in turn, or at random with ``probabilities`` (seeded by ``seed``)."""
    datasets = _check(datasets, "interleave_datasets")
    if seed is not None:
        seed = resolve_seed(seed)  # any integer type, stored as a plain int
    node = InterleaveNode([d._node.clone() for d in datasets], probabilities=probabilities, seed=seed,
                          stopping_strategy=stopping_strategy)
    first = datasets[0]
    return IterableDataset(node, features=_merged_features(datasets), column_names=_common_column_names(datasets),
                           _split=first._split, _epoch=first._epoch)


def concatenate_datasets(datasets: list[IterableDataset], axis: int = 0) -> IterableDataset:
    """One dataset after the other (``axis=0``) or their columns side by side (``axis=1``)."""
    datasets = _check(datasets, "concatenate_datasets")
    node = ConcatNode([d._node.clone() for d in datasets], axis=axis)
    names = None
    if axis == 0:
        names = _common_column_names(datasets)
    elif all(d.column_names is not None for d in datasets):
        names = [c for d in datasets for c in d.column_names]
        if len(set(names)) != len(names):
            raise ValueError(f"concatenate_datasets(axis=1): duplicated column names in {names}")
    return IterableDataset(node, features=_merged_features(datasets) if axis == 0 else None, column_names=names,
                           _split=datasets[0]._split, _epoch=datasets[0]._epoch)
