"""resumable_iterable: lazy, composable iterable datasets whose state resumes exactly."""

from .combine import concatenate_datasets, interleave_datasets
from .dataset import IterableDataset, to_iterable_dataset
from .distributed import split_dataset_by_node
from .loader.elastic import redistribute_states
from .state import dumps_state, load_state, loads_state, save_state

__version__ = "0.2.0"

__all__ = [
    "IterableDataset",
    "to_iterable_dataset",
    "interleave_datasets",
    "concatenate_datasets",
    "split_dataset_by_node",
    "redistribute_states",
    "save_state",
    "load_state",
    "dumps_state",
    "loads_state",
    "load_dataset",
    "__version__",
]


def __getattr__(name: str):
    # imported on first use: the core must not import torch / torchdata
    if name == "StatefulDataLoader":
        from .integrations.torch import StatefulDataLoader

        return StatefulDataLoader
    if name == "load_dataset":
        from .integrations.hub import load_dataset

        return load_dataset
    raise AttributeError(f"module 'resumable_iterable' has no attribute {name!r}")
