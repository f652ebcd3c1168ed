"""resumable_iterable: lazy, composable iterable datasets whose state resumes exactly.

Layers, each importing only those before it: ``state`` (state format and files) -> ``nodes/``
(one pipeline stage per module) -> ``distributed`` (splitting a pipeline among ranks and
DataLoader workers) -> ``loader/`` (per-process iteration session, resume, elastic plans,
torchdata loader states) -> ``dataset`` (the chaining facade) -> ``combine`` -> ``integrations/``
(torch, transformers, hub) -> ``cli``. This module ties them together: it tells the loader
layer how to load the torch integration once torch is imported (``loader/hooks.py``).
"""

from .loader.hooks import register_provider


def _load_torch_integration() -> None:
    from .integrations import torch  # noqa: F401 - registers the DataLoader worker hooks


register_provider(("torch", "torch.utils.data"), _load_torch_integration)

from .combine import concatenate_datasets, interleave_datasets  # noqa: E402
from .dataset import IterableDataset, to_iterable_dataset  # noqa: E402
from .dataset_dict import IterableDatasetDict  # noqa: E402
from .distributed import split_dataset_by_node  # noqa: E402
from .loader.elastic import redistribute_states  # noqa: E402
from .state import dumps_state, load_state, loads_state, save_state  # noqa: E402

__version__ = "0.2.0"

__all__ = [
    "IterableDataset",
    "IterableDatasetDict",
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
    "load_from_disk",
    "__version__",
]


def __getattr__(name: str):
    # imported on first use: the core must not import torch / torchdata
    if name == "StatefulDataLoader":
        from .integrations.torch import StatefulDataLoader

        return StatefulDataLoader
    if name in ("load_dataset", "load_from_disk"):
        from .integrations import hub

        return getattr(hub, name)
    raise AttributeError(f"module 'resumable_iterable' has no attribute {name!r}")
