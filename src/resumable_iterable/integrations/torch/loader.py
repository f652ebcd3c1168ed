"""torchdata's ``StatefulDataLoader`` with elastic resume: a state saved with W workers loads
with W′ workers, and a state is validated early, with a clear message, before it is loaded."""

from __future__ import annotations

import weakref
from typing import Any

from ...dataset_dict import IterableDatasetDict
from ...distributed import warn_too_many_workers
from ...loader import elastic
from ...loader.session import IterationSession
from .buffers import forget_workers_when_freed
from .iterators import free_on_worker_errors, rewind_batches_on_error, supersede
from .snapshots import cache_worker_states
from .transport import INLINE_MAX_BYTES, InlineSmallTensors, WithoutHandoff, check_inline_bytes
from .worker_rng import warn_unsaved_collator, wrap_collator
from .workers import prepare_for_workers

try:
    from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader
except ImportError as _e:  # pragma: no cover - torchdata is part of the [torch] extra
    _TorchdataLoader = None
    _IMPORT_ERROR = _e


def _is_ours(dataset: Any) -> bool:
    return isinstance(getattr(dataset, "session", None), IterationSession)


#: optional key of a loader state: the saved pass is over, the next one is this epoch (load_state_dict)
NEXT_PASS_EPOCH = "next_pass_epoch"

_TRAILING_CLASSES: dict = {}
#: a trailing iterator -> (a weak reference to) the loader keeping its batch states
_TRAIL_OWNERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _trailing(it: Any, loader: Any) -> Any:
    """Make torchdata's iterator ``it`` record, after each batch it yields, the loader's state at
    that moment (``StatefulDataLoader.keep_batch_states``): a loop that reads a batch ahead of
    the one it trains on (Lightning's) can then save the state as of the batch it trained on."""
    base = type(it)
    cls = _TRAILING_CLASSES.get(base)
    if cls is None:
        def __next__(self):
            batch = base.__next__(self)
            ref = _TRAIL_OWNERS.get(self)
            owner = ref() if ref is not None else None
            if owner is not None and owner._batch_states is not None:
                n = self._num_yielded
                if owner._batch_states and max(owner._batch_states) >= n:  # a new pass (persistent workers)
                    owner._batch_states.clear()
                owner._batch_states[n] = owner.state_dict()
                while len(owner._batch_states) > owner._keep_batch_states:
                    del owner._batch_states[min(owner._batch_states)]
            return batch

        cls = _TRAILING_CLASSES[base] = type(base.__name__, (base,), {"__next__": __next__})
    it.__class__ = cls
    _TRAIL_OWNERS[it] = weakref.ref(loader)
    return it


if _TorchdataLoader is not None:

    class StatefulDataLoader(_TorchdataLoader):
        """``torchdata.stateful_dataloader.StatefulDataLoader`` with **elastic resume**.

        Used exactly like torchdata's. In addition, ``load_state_dict`` accepts a state saved
        with any number of workers (0 = main process): with a ``resumable_iterable`` dataset the
        rest of the saved epoch then yields every example the saved loader had not yet yielded,
        exactly once (shuffle buffers included), and the next epoch is an ordinary one.

        Ordering after a change of worker count: what each old worker had left is continued in
        its own order, as a *segment*, by one new worker; segments are dealt to the new workers
        round-robin, starting with the old worker that was due next, and a new worker runs its
        segments one after another (a batch may join the end of one segment and the start of
        the next). With fewer segments than workers, simple pipelines hand their untouched shards
        to the workers that would idle. With the same worker count nothing changes: the
        continuation is identical to the uninterrupted run.

        Needs ``snapshot_every_n_steps=1`` (the default) in the loader that saved the state when
        the worker count changes. With ``drop_last=True`` each worker drops its last incomplete
        batch, so which examples are dropped can differ after an elastic resume.

        **An error part-way through a batch loses nothing.** Without workers, when the dataset
        raises while the loader collects a batch, the pipeline is put back where that batch began,
        so the state taken after the error reads its rows again (torchdata's class drops them).

        **Small tensors travel by value.** With workers, a batch's tensors whose storage holds at
        most ``inline_tensor_bytes`` bytes (64 KB by default; 0 turns this off) reach the main
        process inside the worker's message instead of through a shared-memory segment, whose
        handshake costs the main process far more than copying a few KB: the loader yields the
        same batches, 1.6-3x faster for batches of small rows (see ``transport.py``). The loader's
        ``collate_fn`` attribute is then an ``InlineSmallTensors`` wrapping yours (``.collate_fn``).
        (A resumable_iterable dataset does the same for its dict items in any DataLoader, at 64 KB;
        ``inline_tensor_bytes=0`` here turns that off too, also for ours iterated inside a dataset
        of yours, whose workers then start with a ``WithoutHandoff`` ``worker_init_fn`` wrapping yours.)

        **Random draws in the workers** (``save_worker_rng=True``): each worker's state also holds
        its global random generators (torch, numpy, ``random``), and a resume with the same number
        of workers sets them back, so a ``collate_fn`` that masks at random, or a ``map`` that
        augments with the global generators, gives the uninterrupted run's batches too (see
        ``worker_rng.py``; about 0.1 ms per state taken, hence off by default). It is a setting of
        the dataset's iteration, which this loader turns on; with ``num_workers=0`` the global
        generators are the training loop's own and are left alone. A collator with a generator of
        its own (``DataCollatorForLanguageModeling(seed=...)``) has it saved and set back too, with
        any ``num_workers`` (the loader's ``collate_fn`` is then a ``CollatorRng`` wrapping yours),
        also inside a lambda, closure, bound method or object of yours, and a ``torch`` / numpy
        ``Generator`` held there directly (``collator_search.find_generators``); with
        ``save_worker_rng=False`` such a ``collate_fn`` gets a ``CollatorRngWarning``.

        **A loop that reads ahead** (Lightning's Trainer reads one batch ahead of the one it trains
        on): ``keep_batch_states(n)`` keeps the loader's state after each of its last ``n`` batches,
        ``state_after(j)`` gives the one after batch ``j`` of the pass, and a state carrying
        ``"next_pass_epoch": e`` starts epoch ``e`` afresh when loaded (``integrations/lightning.py``).
        """

        def __init__(self, dataset: Any, *args: Any, inline_tensor_bytes: int = INLINE_MAX_BYTES,
                     save_worker_rng: bool = False, **kwargs: Any):
            if not isinstance(save_worker_rng, bool):
                raise TypeError(f"save_worker_rng must be True or False, got {save_worker_rng!r}")
            if isinstance(dataset, IterableDatasetDict):  # else torch reads it as a map-style dataset: KeyError 0
                splits = list(dataset)
                raise TypeError(f"StatefulDataLoader was given an IterableDatasetDict (the splits {splits}); give it one "
                                f"split, e.g. StatefulDataLoader(ds[{(splits or ['train'])[0]!r}], ...)")
            check_inline_bytes(inline_tensor_bytes)
            if _is_ours(dataset):
                prepare_for_workers(dataset.session)
                dataset.session.small_tensors_by_value = inline_tensor_bytes > 0
                if save_worker_rng:
                    dataset.session.save_worker_rng = True
            elif save_worker_rng:
                raise ValueError("save_worker_rng=True needs a resumable_iterable dataset: the worker's random "
                                 f"generators are saved with its dataset state (got {type(dataset).__name__})")
            super().__init__(dataset, *args, **kwargs)
            if save_worker_rng:
                # a collator with a generator of its own (DataCollatorForLanguageModeling(seed=...)):
                # its generator is saved with the dataset's states too (worker_rng.CollatorRng)
                wrapped = wrap_collator(self.collate_fn, "StatefulDataLoader")
                if wrapped is not None:
                    self.collate_fn = dataset.session.collator_rng = wrapped
            elif _is_ours(dataset):
                warn_unsaved_collator(self.collate_fn, "StatefulDataLoader", "Pass save_worker_rng=True to save "
                                      "it with the data state and set it back on resume.")
            if inline_tensor_bytes > 0 and self.num_workers > 0 and not isinstance(self.collate_fn, InlineSmallTensors):
                self.collate_fn = InlineSmallTensors(self.collate_fn, inline_tensor_bytes)
            if (inline_tensor_bytes == 0 and self.num_workers > 0 and not _is_ours(dataset)
                    and not isinstance(self.worker_init_fn, WithoutHandoff)):
                # our datasets inside a dataset of the user's (ChainDataset...) keep their dicts too
                self.worker_init_fn = WithoutHandoff(self.worker_init_fn)
            self._saved_epoch: int | None = None  # the epoch of a state given and not iterated yet
            # (the loader state, the epoch set, the saved epoch) the iterator was made with
            self._made_with: tuple | None = None
            # keep_batch_states: {batches yielded in the pass: the loader's state right after}
            self._batch_states: dict | None = None
            self._keep_batch_states = 0

        def keep_batch_states(self, n: int = 2) -> None:
            """From now on, keep the loader's state as it was right after each of the last ``n``
            batches yielded (``state_after``): for a training loop that reads ahead of the batch
            it trains on, whose checkpoint must hold the state as of the batch trained on
            (Lightning's Trainer reads one batch ahead: see ``integrations/lightning.py``). The
            state as it is now is kept too (on the first call; later calls only change ``n``).
            Costs one ``state_dict()`` per batch (with ``num_workers=0``, the dataset's state; with
            workers, a small dict)."""
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"keep_batch_states needs a number of batches >= 1, got {n!r}")
            if self._batch_states is not None:  # kept already: keep n from now on
                self._keep_batch_states = n
                return
            self._keep_batch_states = n
            self._batch_states = {}
            it = self._iterator
            if it is not None:
                if type(it) not in _TRAILING_CLASSES.values():
                    _trailing(it, self)  # persistent workers reuse it for the next pass
                if not self._initial_iter_for_state_dict and not it._finished:
                    self._batch_states[it._num_yielded] = self.state_dict()

        @property
        def keeps_batch_states(self) -> bool:
            """Whether ``keep_batch_states`` was called on this loader."""
            return self._batch_states is not None

        def state_after(self, batches: int) -> dict[str, Any] | None:
            """The loader's state as it was right after the ``batches``-th batch of the current
            pass (counted as its state counts them: from the pass's start, across a resume), if
            ``keep_batch_states`` kept it; else ``None``."""
            it = self._iterator
            if self._batch_states is None or it is None or it._finished:
                return None
            return self._batch_states.get(batches)

        def _get_iterator(self):
            if self._batch_states is not None:
                self._batch_states = {}
                return _trailing(self._get_iterator_untracked(), self)
            return self._get_iterator_untracked()

        def _get_iterator_untracked(self):
            if _is_ours(self.dataset):
                session = self.dataset.session
                saved = self._saved_epoch
                self._made_with = (self.next_iter_state, session.requested_epoch(), saved)
                if saved is not None and self.next_iter_state is not None:
                    self._saved_epoch = None
                    if session.moved_past(saved):
                        # the loop set a later epoch since the state was given: a fresh pass of it
                        # (torchdata's own state, e.g. its fetcher ended, would empty it otherwise)
                        self.next_iter_state = None
                prepare_for_workers(session)  # before the workers fork
                if self.num_workers > 1:
                    shards = self.dataset.num_shards  # the rank's
                    if self.num_workers > shards:
                        warn_too_many_workers(self.num_workers, shards)
                it = self._replayed_iterator()
                if self.num_workers == 0 and self.batch_size is not None:
                    rewind_batches_on_error(it, session.current_node())
                return it
            return self._replayed_iterator()

        def _replayed_iterator(self):
            """torchdata's iterator, which replays the batches a state was taken after since its last
            snapshot (``snapshot_every_n_steps`` > 1). A dataset that yields fewer batches when
            resumed than it did (``shuffle(buffer_state="drop")`` loses its buffer) ends that replay
            early, and the ``StopIteration`` escaped from ``iter(loader)``, naming nothing."""
            try:
                return free_on_worker_errors(forget_workers_when_freed(cache_worker_states(super()._get_iterator())))
            except StopIteration:
                raise ValueError(
                    f"resuming this loader state (snapshot_every_n_steps={self.snapshot_every_n_steps}) replays the "
                    "batches since its last snapshot, and the dataset ended before them (it yields "
                    "other batches after a resume than before, as shuffle(buffer_state='drop') does). Save with "
                    "snapshot_every_n_steps=1, or keep the exact buffer") from None

        def _forget_early_iterator(self) -> None:
            """If ``state_dict()`` made the iterator before the loop's ``set_epoch`` changed the
            epoch, drop it, so that the next one is made for the epoch set now (nothing was read
            from it; its workers, which have read ahead, stop when it is collected, as any dropped
            iterator's)."""
            made = self._made_with
            if (self._initial_iter_for_state_dict and made is not None and _is_ours(self.dataset)
                    and self.dataset.session.requested_epoch() != made[1]):
                self._iterator = None
                self._initial_iter_for_state_dict = False
                self.next_iter_state, self._saved_epoch = made[0], made[2]

        def __iter__(self):
            self._forget_early_iterator()
            return super().__iter__()

        def set_epoch(self, epoch: int) -> None:
            """``dataset.set_epoch(epoch)``, as accelerate's loaders do: a loop (the ``transformers``
            Trainer among them) that sets epochs on its loader reaches the dataset's shuffles."""
            dataset_set_epoch = getattr(self.dataset, "set_epoch", None)
            if callable(dataset_set_epoch):
                dataset_set_epoch(epoch)

        def state_dict(self) -> dict[str, Any]:
            self._forget_early_iterator()  # a state taken before the first batch is the epoch set now
            return super().state_dict()

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            """Load a state saved by a ``StatefulDataLoader`` with any number of workers.

            A state may carry ``"next_pass_epoch": e`` (``integrations/lightning.py`` adds it to a
            state saved after the last batch of a training loop's epoch): the saved pass is over
            for the loop, and the next pass is epoch ``e`` from its start, whatever of the saved
            pass the loader had not yet read (a loop that limits its epochs' batches) and whatever
            epoch the dataset has now; the seeds of a pipeline built without one are still taken
            from the state."""
            next_epoch = None
            if isinstance(state_dict, dict) and NEXT_PASS_EPOCH in state_dict:
                state_dict = dict(state_dict)
                next_epoch = state_dict.pop(NEXT_PASS_EPOCH)
                if not isinstance(next_epoch, int) or isinstance(next_epoch, bool) or next_epoch < 0:
                    raise ValueError(f"the loader state's {NEXT_PASS_EPOCH!r} must be an epoch (an int >= 0), got "
                                     f"{next_epoch!r}")
                if not _is_ours(self.dataset):
                    raise ValueError(f"the loader state's {NEXT_PASS_EPOCH!r} needs a resumable_iterable dataset "
                                     f"(got {type(self.dataset).__name__})")
            live = self._iterator
            if not _is_ours(self.dataset) or state_dict == {}:
                super().load_state_dict(state_dict)
                if state_dict != {}:  # ({}: no state, as torchdata takes it)
                    supersede(live)
                if next_epoch is not None:
                    self.dataset.set_epoch(next_epoch)
                return None
            session = self.dataset.session
            seeds = session.saved_seeds(state_dict)
            new = elastic.remap_loader_state(state_dict, self.num_workers)
            epoch = session.validate_loader_state(new, self.num_workers)
            super().load_state_dict(new)
            supersede(live)
            # a pipeline built without a seed draws the later epochs from the saved run's seeds: the
            # workers of those epochs start from this process's pipeline
            session.adopt_seeds(seeds)
            self._saved_epoch = epoch
            if self.num_workers > 0 and not session.epoch_set_by_user:
                # as with num_workers=0 (where the main-process dataset loads the state itself),
                # the dataset's epoch becomes the saved one unless the loop sets epochs
                session.set_epoch(epoch)
            if next_epoch is not None:
                # the pass is over: nothing of it is resumed (its seeds are adopted above)
                self.next_iter_state, self._saved_epoch = None, None
                self.dataset.set_epoch(next_epoch)

else:  # pragma: no cover

    def __getattr__(name: str):
        if name == "StatefulDataLoader":
            raise ImportError(f"resumable_iterable.StatefulDataLoader needs torchdata (pip install torchdata): {_IMPORT_ERROR}")
        raise AttributeError(name)

