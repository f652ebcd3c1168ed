"""resumable_iterable: lazy, composable iterable datasets whose state resumes exactly."""

from .combine import concatenate_datasets, interleave_datasets
from .dataset import IterableDataset, to_iterable_dataset
from .distributed import split_dataset_by_node
from .state import dumps_state, load_state, loads_state, save_state

__version__ = "0.1.0"

__all__ = [
    "IterableDataset",
    "to_iterable_dataset",
    "interleave_datasets",
    "concatenate_datasets",
    "split_dataset_by_node",
    "save_state",
    "load_state",
    "dumps_state",
    "loads_state",
    "__version__",
]
