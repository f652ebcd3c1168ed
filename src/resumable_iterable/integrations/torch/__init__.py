"""PyTorch support: DataLoader workers, ``set_epoch`` for persistent workers, shuffle buffers sent
from workers, and :class:`StatefulDataLoader` with elastic resume.

Importing this package needs ``torch``; :class:`StatefulDataLoader` also needs ``torchdata``.

* ``workers.py`` - what workers share with the main process (torch base class, epochs, claims of
  a loaded state), registered with the loader layer's hooks on import;
* ``buffers.py`` - a worker's shuffle-buffer logs, sent as the writes since the last one, and
  their rebuilding in the main process;
* ``arena.py`` - the worker's shared-memory arena, where large arrays of those examples are copied once;
* ``transport.py`` - small tensors of a worker's batch sent by value (:class:`InlineSmallTensors`), and
  of the dataset's dicts in any DataLoader (``handoff``, ``WorkerDict``);
* ``loader.py`` - ``StatefulDataLoader`` with elastic resume, sending small tensors by value;
  ``snapshots.py`` its per-batch snapshot, rebuilding only the worker that changed;
  ``iterators.py`` what it changes in the loaders' iterators (a batch rewound after an error
  without workers, a worker's error let go of, an iterator made before a state was loaded refused);
* ``worker_rng.py`` - a worker's random generators and a collate_fn's own, saved with its state
  (``save_worker_rng``; :class:`CollatorRngWarning` names what is not saved).
"""

from __future__ import annotations

from . import buffers, loader
from .transport import InlineSmallTensors
from .worker_rng import CollatorRngWarning
from .workers import TorchDatasetMixin, register

register()
del buffers  # imported for what it installs: the packer of shuffle-buffer logs in workers


def __getattr__(name: str):
    if name == "StatefulDataLoader":  # raises ImportError naming torchdata when it is missing
        return loader.StatefulDataLoader
    raise AttributeError(name)

__all__ = ["CollatorRngWarning", "InlineSmallTensors", "StatefulDataLoader", "TorchDatasetMixin"]
