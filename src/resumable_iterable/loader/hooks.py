"""Where a framework whose DataLoader runs worker processes (torch) plugs into the loader layer.

The core never imports torch. What DataLoader workers share with the main process lives in the
framework's integration (``integrations/torch/workers.py``), which registers it here as
:class:`WorkerHooks` when it is imported:

* ``attach_base(cls)``: make the dataset class a ``torch.utils.data.IterableDataset``;
* ``publish_epoch`` / ``shared_epoch``: the main process's epoch of a session, in shared memory,
  so that ``set_epoch`` reaches persistent workers;
* ``new_claims`` / ``claim`` / ``claimed``: the shared record of which workers took their part
  of a state loaded in the main process;
* ``prepare_for_workers`` / ``adopt_unpickled``: a session about to be sent to workers, or just
  unpickled or copied;
* ``worker_started``: called in a DataLoader worker when a pass starts there (the worker then
  watches for the death of its main process);
* ``handoff``: the items of a pass in a DataLoader worker, as they go to the worker's queue (torch:
  dicts whose small tensors reach the main process by value, ``integrations/torch/transport.py``);
* ``rng_state`` / ``check_rng_state`` / ``set_rng_state``: a worker's global random generators,
  saved with its state when the session asks (``save_worker_rng``), checked (which gives what
  ``set_rng_state`` sets back), and set back. ``check_rng_state`` checks a whole ``"rng"`` entry,
  the collator's generator (``"collator"``, see the session's ``collator_rng``) included, and
  gives ``(the global generators or None, (collator entry, decoded) or None)``.

Who imports that integration? The package's ``__init__`` registers a *provider*
(:func:`register_provider`): the modules that must be imported (``torch``) and a function that
imports the integration. :func:`current` runs it the first time it is asked while those modules
are imported - when a dataset is built, unpickled, given an epoch or checked with ``isinstance``
- so the order of ``import torch`` and ``import resumable_iterable`` does not matter. Without
them, :func:`current` is ``None`` and none of this exists.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class WorkerHooks:
    """What a framework's DataLoader integration provides (see the module doc)."""

    attach_base: Callable[[type], None]
    publish_epoch: Callable[[Any, int], None]
    shared_epoch: Callable[[Any], "int | None"]
    new_claims: Callable[[], Any]
    claim: Callable[[Any, int, int], bool]
    claimed: Callable[[Any], bool]
    prepare_for_workers: Callable[[Any], None]
    adopt_unpickled: Callable[[Any], None]
    worker_started: Callable[[], None]
    handoff: Callable[[Iterator[Any]], Iterator[Any]]
    rng_state: Callable[[], dict]
    check_rng_state: Callable[[Any, str], Any]
    set_rng_state: Callable[[Any], None]


_providers: list[tuple[tuple[str, ...], Callable[[], None]]] = []
_hooks: WorkerHooks | None = None
_bases: list[type] = []  # classes the framework's dataset base is still to be added to


def _imported(name: str) -> bool:
    """Module ``name`` is imported and done initialising (not halfway through its own import)."""
    mod = sys.modules.get(name)
    return mod is not None and not getattr(getattr(mod, "__spec__", None), "_initializing", False)


def register_provider(modules: tuple[str, ...], load: Callable[[], None]) -> None:
    """Run ``load`` (which imports an integration that calls :func:`register_hooks`) the first
    time :func:`current` is asked once every module of ``modules`` is imported."""
    _providers.append((tuple(modules), load))


def register_hooks(hooks: WorkerHooks) -> None:
    """Install a framework's hooks (the classes given to :func:`register_base` get its base at
    the next :func:`current`)."""
    global _hooks
    _hooks = hooks


def register_base(cls: type) -> None:
    """``cls`` (the dataset facade) becomes the framework's dataset class once hooks are known."""
    _bases.append(cls)
    current()  # a framework imported before us: cls gets its base now


def current() -> WorkerHooks | None:
    """The registered hooks, loading the integration of a framework imported since the last call."""
    if _hooks is None and _providers:
        for i, (modules, load) in enumerate(_providers):
            if all(_imported(m) for m in modules):
                del _providers[i]
                load()
                break
    if _bases and _hooks is not None:
        while _bases:
            _hooks.attach_base(_bases.pop())
    return _hooks
