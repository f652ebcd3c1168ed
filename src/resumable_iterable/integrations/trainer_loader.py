"""What :class:`~resumable_iterable.integrations.transformers.ResumableDataCallback` does to the
Trainer's training loader: accelerate's wrapper (``DataLoaderShard``, ``DataLoaderDispatcher``)
around a torchdata ``StatefulDataLoader``, whose base loader holds the dataset.

Checks of the setting (``check_dispatch``, ``warn_if_not_ours``), the options it sets on the base
loader before its workers start (``save_worker_rng``, which also wraps a collator with a generator of its
own, ``inline_small_tensors``, ``drop_iterator``),
the main process's random generators without workers (``MainRng``) and the epoch numbering after a
resume (``shift_epochs``); on resume, putting the loader where a checkpoint's data state says
(``load_data_state``; another worker count re-dealt by ``fit_workers``)."""

from __future__ import annotations

import logging
import weakref
from typing import Any

from ..loader.loader_state import (DATASET_STATE, ITERATOR_FINISHED, SNAPSHOT, WORKER_SNAPSHOTS, loader_num_workers,
                                   worker_key)
from ..loader.session import IterationSession
from ..state import find_documents
from .torch.transport import InlineSmallTensors, WithoutHandoff
from .torch import worker_rng
from .torch.worker_rng import (decode_collator_entry, decode_rng_state, decode_worker_rng, rng_state, set_rng_state,
                               wrap_collator)

logger = logging.getLogger("resumable_iterable")


def base_loader(loader: Any) -> Any:
    """The loader that actually iterates (accelerate wraps it in a ``DataLoaderShard``)."""
    return getattr(loader, "base_dataloader", loader)


def is_stateful(loader: Any) -> bool:
    base = base_loader(loader)
    return callable(getattr(base, "state_dict", None)) and callable(getattr(base, "load_state_dict", None))


def check_dispatch(loader: Any) -> None:
    """Refuse a multi-process setting in which the saved position would be one batch ahead.

    With several processes, accelerate hands an iterable dataset to a ``DataLoaderDispatcher``:
    process 0 reads the batches of every process and sends each its part. Without
    ``split_batches`` it reads ``num_processes`` batches per step, one step ahead, and the loader
    state it reports is taken after the first of the next step's batches: a resume would skip that
    batch (seen here: 2 examples lost per resume with 2 processes). With ``split_batches=True`` it
    reads one batch per step and the reported state is exact.
    """
    if type(loader).__name__ != "DataLoaderDispatcher":
        return
    processes = getattr(getattr(loader, "state", None), "num_processes", 1)
    if processes > 1 and not getattr(loader, "split_batches", False):
        raise ValueError(
            f"ResumableDataCallback: with {processes} processes accelerate dispatches the batches of this iterable "
            "dataset from process 0 and, without split_batches, reports a loader state one batch ahead of what "
            "was trained on, so a resume would skip a batch. Set TrainingArguments(accelerator_config="
            "{'split_batches': True}) and give per_device_train_batch_size the global batch size (it is then "
            "split among the processes): the saved state is then exact.")


def inline_small_tensors(loader: Any, max_bytes: int) -> None:
    """Let the training loader's workers send the small tensors of their batches by value, as
    ``ri.StatefulDataLoader`` does (``integrations/torch/transport.py``): its ``collate_fn`` is
    wrapped once, and the dataset's own dict items follow ``max_bytes`` (0: through shared memory).
    With ``max_bytes`` 0 and a dataset not ours, our datasets iterated inside it hand their dicts out
    as they are too (``transport.WithoutHandoff``). Without workers nothing changes, and a
    ``ri.StatefulDataLoader`` has made its own choice (``inline_tensor_bytes``).

    accelerate asks the loader for its ``state_dict()`` when it wraps it, and torchdata answers by
    making the iterator, whose workers start with the ``collate_fn`` of that moment. Nothing has been
    read from it: it is dropped, so that the first pass starts its workers with the wrapped one
    (a resume loads its state afterwards, which drops it too)."""
    try:
        from .torch.loader import StatefulDataLoader as OurLoader
    except ImportError:  # pragma: no cover - without torchdata there is no loader of ours
        OurLoader = ()
    base = base_loader(loader)
    collate = getattr(base, "collate_fn", None)
    session = getattr(getattr(base, "dataset", None), "session", None)
    if (isinstance(session, IterationSession) and not isinstance(base, OurLoader)
            and session.small_tensors_by_value != (max_bytes > 0)):
        session.small_tensors_by_value = max_bytes > 0  # the dataset's own dict items (transport.handoff)
        if getattr(base, "num_workers", 0) > 0:  # workers started already have the setting of before
            drop_iterator(loader)
    if (max_bytes == 0 and not isinstance(session, IterationSession) and not isinstance(base, OurLoader)
            and getattr(base, "num_workers", 0) > 0
            and not isinstance(getattr(base, "worker_init_fn", None), WithoutHandoff)):
        base.worker_init_fn = WithoutHandoff(base.worker_init_fn)  # ours inside a dataset of the user's
        drop_iterator(loader)
    if (max_bytes > 0 and getattr(base, "num_workers", 0) > 0 and collate is not None
            and not isinstance(collate, InlineSmallTensors) and not isinstance(base, OurLoader)):
        base.collate_fn = InlineSmallTensors(collate, max_bytes)
        drop_iterator(loader)


def save_worker_rng(loader: Any) -> None:
    """Make the workers of the training loader save their global random generators with their
    states (``integrations/torch/worker_rng.py``), and a collator with a generator of its own
    (``DataCollatorForLanguageModeling(seed=...)``) its generator, with any number of workers: its
    ``collate_fn`` is wrapped in a ``CollatorRng``, which the dataset's session holds. The setting
    travels to the workers with the dataset, and the ``collate_fn`` is the iterator's from when it
    is made, so an iterator made before (accelerate asks for a state when it wraps the loader) is
    dropped, as for the ``collate_fn`` above. Call it before :func:`inline_small_tensors`."""
    base = base_loader(loader)
    session = getattr(getattr(base, "dataset", None), "session", None)
    if not isinstance(session, IterationSession):
        raise ValueError("ResumableDataCallback(save_worker_rng=True) needs the training dataset to be a "
                         f"resumable_iterable dataset, got {type(getattr(base, 'dataset', None)).__name__}")
    drop = False
    if not session.save_worker_rng:
        session.save_worker_rng = True
        drop = getattr(base, "num_workers", 0) > 0
    collate = getattr(base, "collate_fn", None)
    wrapped = wrap_collator(collate, "ResumableDataCallback") if collate is not None else None
    if wrapped is not None and session.collator_rng is not wrapped:
        if wrapped.collate_fn is collate:  # a new wrapper (else the collate_fn holds it already)
            base.collate_fn = wrapped
        session.collator_rng = wrapped
        drop = True
    if drop:
        drop_iterator(loader)


def warn_unsaved_collator(loader: Any) -> None:
    """Without ``save_worker_rng``: warn when the training loader's ``collate_fn`` draws from a
    seeded generator of its own, which is then not saved (``worker_rng.warn_unsaved_collator``)."""
    base = base_loader(loader)
    if isinstance(getattr(getattr(base, "dataset", None), "session", None), IterationSession):
        worker_rng.warn_unsaved_collator(getattr(base, "collate_fn", None), "ResumableDataCallback",
                                         "Use ResumableDataCallback.attach(trainer, save_worker_rng=True) to save it "
                                         "with the data state and set it back on resume.")


def ended_pass_worker_rng(loader: Any, loader_state: Any, where: str) -> dict | None:
    """For a checkpoint taken when the pass had ended (not loaded), with persistent workers and the
    same number of them: each worker's saved generators (its global ones, its collator's), decoded,
    by worker id, which the new workers set when their first pass starts
    (``IterationSession.set_next_pass_rng``): the uninterrupted run's persistent workers went on
    with theirs into the next pass. ``None`` otherwise (new workers each pass: fresh seeds in both
    runs)."""
    base = base_loader(loader)
    want = getattr(base, "num_workers", 0)
    if not (isinstance(want, int) and want > 0 and getattr(base, "persistent_workers", False)):
        return None
    try:
        if loader_num_workers(loader_state) != want:
            return None
        snapshots = loader_state[SNAPSHOT][WORKER_SNAPSHOTS]
    except (TypeError, ValueError, KeyError):
        return None
    out = {}
    for j in range(want):
        ws = snapshots.get(worker_key(j)) if isinstance(snapshots, dict) else None
        ds = ws.get(DATASET_STATE) if isinstance(ws, dict) else None
        rng = ds.get("rng") if isinstance(ds, dict) else None
        if rng is not None:
            out[j] = decode_worker_rng(rng, f"{where}: worker {j}'s 'rng'")
    return out


def warn_if_not_ours(loader: Any) -> None:
    """Say so when the training dataset is not a ``resumable_iterable`` one: the callback then
    saves and restores whatever the DataLoader reports for it, and the resume is only as exact as
    that dataset's own ``state_dict()``, if it has one."""
    dataset = getattr(base_loader(loader), "dataset", None)
    for candidate in (dataset, getattr(dataset, "dataset", None)):  # accelerate may wrap it (IterableDatasetShard)
        if isinstance(getattr(candidate, "session", None), IterationSession):
            return
    logger.warning(
        "ResumableDataCallback: the training dataset is a %s.%s, not a resumable_iterable dataset: the callback "
        "saves and restores the DataLoader's state all the same, but a resume is only as exact as that dataset's "
        "own state_dict() (a datasets.IterableDataset does not save the examples of its shuffle buffer; torchdata "
        "re-reads and skips what a dataset without one had yielded), and the passes of an iterable dataset are "
        "numbered from 0 again after a resume. Build it with resumable_iterable for an exact resume.",
        type(dataset).__module__, type(dataset).__qualname__)


class MainRng:
    """Without DataLoader workers, ``save_worker_rng=True``: the main process's random generators as
    they were when the loader's position was taken, and their setting back on resume.

    accelerate takes the base loader's state, then reads and collates the next batch (it looks one
    batch ahead), then yields the batch before: when the Trainer saves a checkpoint (and its
    ``rng_state.pth``), the generators have already drawn for that next batch (a collator's random
    masks), and a resumed run, which reads that batch again, drew other masks. So the generators
    are noted each time accelerate takes the base loader's state (``note``), saved with the data
    state, and on resume set for the reading of that first batch only; the Trainer's restored
    generators are then put back (``splice``), and everything after, the model's draws included,
    follows the uninterrupted run."""

    def __init__(self, loader: Any):
        self.base = base_loader(loader)
        self.last: dict | None = None
        original = _unbound(self.base, "state_dict")
        me = weakref.ref(self)  # (the replacement is kept on the loader: no reference cycle)

        def state_dict(*args: Any, **kwargs: Any) -> Any:
            state = original(*args, **kwargs)
            main = me()
            if main is not None:
                main.last = rng_state()
            return state

        self.base.state_dict = state_dict

    @staticmethod
    def applies(loader: Any) -> bool:
        """Only under accelerate's wrapper (which looks ahead) and without workers."""
        base = base_loader(loader)
        return base is not loader and getattr(base, "num_workers", None) == 0

    def splice(self, decoded: tuple) -> None:
        """Read the next batch with the generators ``decoded``, then put back those of that moment.

        accelerate makes the base loader's iterator (calling ``__iter__`` on it) and reads the first
        batch at once; the generators are swapped once the iterator is made (the Trainer has set
        its own by then) and the Trainer's, as they were before the iterator drew its base seed,
        are put back once the first batch is collated."""
        base = self.base
        make_iter, collate = base.__iter__, base.collate_fn
        trainer_rng: list = []

        def first_collate(*args: Any, **kwargs: Any) -> Any:
            try:
                return collate(*args, **kwargs)
            finally:
                base.collate_fn = collate
                if trainer_rng:
                    set_rng_state(trainer_rng.pop())

        def spliced_iter() -> Any:
            del base.__iter__  # once
            trainer_rng.append(decode_rng_state(rng_state()))
            iterator = make_iter()  # draws a base seed, which the uninterrupted run drew when its pass began
            set_rng_state(decoded)
            return iterator

        base.collate_fn = first_collate
        base.__iter__ = spliced_iter


def drop_iterator(loader: Any) -> None:
    """Make a torchdata ``StatefulDataLoader`` forget its current iterator (and stop its workers);
    loading an empty state is torchdata's documented way to do that."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:  # pragma: no cover - torchdata is needed to get here at all
        return
    base = base_loader(loader)
    if isinstance(base, StatefulDataLoader):
        base.load_state_dict({})


def _unbound(obj: Any, name: str) -> Any:
    """``obj.<name>``, to call from a replacement kept on ``obj`` itself: a method of its class is
    called on ``obj`` held weakly. (The bound method would hold ``obj``, a reference cycle that
    left the loader, its dataset and their shared-memory epoch slot to the cyclic garbage
    collector once the Trainer was done with them.)"""
    current = getattr(obj, name)
    if getattr(current, "__self__", None) is not obj:
        return current  # a function kept on the object already (no reference to it, or its own care)
    func, ref = current.__func__, weakref.ref(obj)
    return lambda *args, **kwargs: func(ref(), *args, **kwargs)


def shift_epochs(loader: Any, first_epoch: int) -> None:
    """Make the loader's ``set_epoch(e)`` use the dataset's epoch numbering after a resume.

    The Trainer counts epochs from 0 again when it resumes on a dataset without a length; the
    first epoch it sets is the dataset's ``first_epoch`` (the pass being resumed, or the next one).
    """
    original = _unbound(loader, "set_epoch")
    ref = weakref.ref(loader)
    first: list[int] = []

    def set_epoch(epoch: int) -> None:
        if not first:
            first.append(epoch)
        original(epoch - first[0] + first_epoch)
        owner = ref()
        if owner is not None and hasattr(owner, "iteration"):
            # accelerate's DataLoaderShard calls set_epoch(self.iteration) when it starts a pass:
            # keep that counter in the Trainer's numbering so the shift is applied once
            owner.iteration = epoch

    loader.set_epoch = set_epoch


def load_data_state(loader: Any, payload: dict, name: str, main_rng: MainRng | None) -> bool:
    """Put the Trainer's training ``loader`` where the checkpoint's data state ``payload`` (read
    from the file ``name``: ``trainer_checkpoint.read_payload``) says: its loader state (re-dealt
    for another worker count: :func:`fit_workers`), or, for a pass that had ended, a fresh iterator;
    the generators saved with ``save_worker_rng`` (``main_rng``: the callback's :class:`MainRng`,
    without workers); the seeds a seedless pipeline drew; the epoch numbering. Everything is
    checked before anything is loaded. Returns whether the saved pass had ended."""
    loader_state = payload["loader_state"]
    finished = bool(isinstance(loader_state, dict) and loader_state.get(ITERATOR_FINISHED))
    saved_rng = None
    if payload.get("main_rng") is not None and main_rng is not None and not finished:
        saved_rng = decode_rng_state(payload["main_rng"], f"{name}: 'main_rng'")  # checked before anything is loaded
    epochs = [env["epoch"] for _, env in find_documents(loader_state) if type(env.get("epoch")) is int]
    session = getattr(getattr(base_loader(loader), "dataset", None), "session", None)
    # without workers, the collator's own generator when the checkpoint was saved: after the
    # batch accelerate read ahead (collated with the one in the data state) and any evaluation
    # that collated with it; with persistent workers and a pass that had ended (not loaded),
    # each worker's generators. All checked before anything loads.
    at_save = worker_rng = None
    if (payload.get("collator_rng") is not None and isinstance(session, IterationSession)
            and session.collator_rng is not None and getattr(base_loader(loader), "num_workers", None) == 0):
        at_save = decode_collator_entry(payload["collator_rng"], f"{name}: 'collator_rng'")
    if finished and isinstance(session, IterationSession):
        worker_rng = ended_pass_worker_rng(loader, loader_state, name)
    # a pipeline built without a seed draws its later epochs from the saved run's seeds (the
    # workers of those epochs start from this process's pipeline, which loads no state itself)
    seeds = session.saved_seeds(loader_state) if isinstance(session, IterationSession) else []
    if not finished:
        loader.load_state_dict(fit_workers(loader, loader_state))
    else:
        # a pass that had ended needs no state: the next pass starts from the beginning, with
        # the next epoch. Drop the iterator accelerate created when it built the loader (it
        # would start its pass with the epoch of that moment).
        drop_iterator(loader)
    if saved_rng is not None:
        main_rng.splice(saved_rng)
    if at_save is not None:
        if main_rng is not None and not finished:  # accelerate collates that batch again first
            session.collator_rng.after_next_batch(at_save)
        else:  # nothing read ahead (a loader of the user's own, or the pass had ended)
            session.collator_rng.before_next_batch(payload["collator_rng"], at_save)
    if worker_rng:
        session.set_next_pass_rng(worker_rng, base_loader(loader).num_workers)
    if seeds:
        session.adopt_seeds(seeds)
    if epochs and callable(getattr(loader, "set_epoch", None)):
        shift_epochs(loader, max(epochs) + (1 if finished else 0))
    return finished


def fit_workers(loader: Any, loader_state: Any) -> Any:
    """A loader state saved with another ``dataloader_num_workers``, re-dealt for this loader
    (elastic resume: the rest of the epoch is still read exactly once; see ``loader/elastic.py``)."""
    want = getattr(base_loader(loader), "num_workers", None)
    if not isinstance(want, int) or not isinstance(loader_state, dict):
        return loader_state
    from ..loader.elastic import remap_loader_state

    try:
        saved = loader_num_workers(loader_state)
    except (TypeError, ValueError):
        return loader_state  # not a torchdata state: the loader judges it
    if saved == want:
        return loader_state
    logger.info("ResumableDataCallback: the checkpoint was written with %d DataLoader workers, this run "
                "has %d: the rest of the epoch is re-dealt among them (elastic resume)", saved, want)
    remapped = remap_loader_state(loader_state, want)
    if ITERATOR_FINISHED in loader_state:
        remapped.setdefault(ITERATOR_FINISHED, loader_state[ITERATOR_FINISHED])
    return remapped
