"""Resume a PyTorch Lightning ``Trainer`` mid-epoch on exactly the batches an uninterrupted run
would have trained on.

Lightning (>= 2.3) saves the ``state_dict()`` of a training loader that has one (torchdata's
``StatefulDataLoader``, ``resumable_iterable.StatefulDataLoader``) in its checkpoints, and loads
it back on ``trainer.fit(..., ckpt_path=...)``. Two things make that inexact on its own:

* **The batch read ahead.** For a loader without ``len()`` - every iterable dataset - the
  Trainer reads one batch ahead of the one it trains on (to know which batch is an epoch's
  last). A checkpoint written after step ``k`` holds the loader's state after batch ``k + 1``,
  and a resume skips that batch.
* **The epoch.** Lightning sets epochs on samplers only, never on an iterable dataset; and on a
  resume it makes the loader's iterator (and reads its first batch) before any hook of the epoch
  runs. A checkpoint written after an epoch's last batch therefore resumed the *next* epoch with
  the saved epoch's shuffle order.

:class:`ResumableDataCallback` fixes both, for a ``resumable_iterable.StatefulDataLoader`` over a
``resumable_iterable`` dataset (any ``num_workers``)::

    import lightning.pytorch as pl
    import resumable_iterable as ri
    from resumable_iterable.integrations.lightning import ResumableDataCallback

    loader = ri.StatefulDataLoader(ds.shuffle(seed=0, buffer_size=1000), batch_size=32, num_workers=2)
    trainer = pl.Trainer(max_epochs=2, callbacks=[ResumableDataCallback(),
                         pl.callbacks.ModelCheckpoint(every_n_train_steps=500, save_top_k=-1)])
    trainer.fit(model, train_dataloaders=loader)                  # or a LightningDataModule
    ...
    trainer.fit(model, train_dataloaders=loader, ckpt_path="...ckpt")   # continues exactly

What it does: it sets the dataset's epoch to the Trainer's at the start of every epoch
(``on_train_epoch_start``); it asks the loader to keep its state after each of its last few
batches (``StatefulDataLoader.keep_batch_states``) and, when a checkpoint is written
(``on_save_checkpoint``), puts in it the loader's state as of the last batch the Trainer trained
on instead of the one it read ahead. After an epoch's last batch it keeps the loader's state and
marks it (``"next_pass_epoch"``): on resume the loader starts that next epoch from its start, with
its own shuffle order. With several ranks (DDP), whose checkpoint Lightning writes from rank 0
only, it gathers every rank's loader states into it and gives each rank its own on resume. The
rest is Lightning's: it restores the loader state in its checkpoint.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch.distributed
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import CombinedLoader

from ..loader.session import IterationSession
from .torch.loader import NEXT_PASS_EPOCH, StatefulDataLoader

logger = logging.getLogger("resumable_iterable")

#: how many of its last batches' states the loader keeps: the Trainer trains at most one behind
KEEP = 3
#: in the callback's entry of a checkpoint: the training loaders' states of every rank
BY_RANK = "loader_states_by_rank"


def _distributed(trainer: Any) -> bool:
    return (trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized())


def _stateful(loader: Any) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def _ours(loader: Any) -> bool:
    return (isinstance(loader, StatefulDataLoader)
            and isinstance(getattr(loader.dataset, "session", None), IterationSession))


def _count_the_epoch_started(epoch_progress: Any) -> None:
    """Resumed from a checkpoint taken after an epoch's last batch, Lightning (2.6) runs the next
    epoch as the rest of the saved one: it neither calls ``on_train_epoch_start`` nor counts the
    epoch as ready and started. A checkpoint written later in that epoch then says the epoch had
    not started, and a resume from it trains the whole epoch again (the batches before it twice).
    Counting the epoch started when its first batch comes makes such a checkpoint a mid-epoch one."""
    for counts in (epoch_progress.total, epoch_progress.current):
        if counts.ready == counts.processed:  # not counted (counted: ready == processed + 1)
            counts.ready += 1
            counts.started += 1


class ResumableDataCallback(Callback):
    """Exact mid-epoch resume of a Lightning ``Trainer`` fed by ``resumable_iterable.StatefulDataLoader``
    (see the module doc). Add it to ``Trainer(callbacks=[...])`` in the run that saves and in the
    run that resumes. A training loader of another kind (a plain ``torch`` ``DataLoader``,
    torchdata's own ``StatefulDataLoader``, another dataset) is left to Lightning, with a warning."""

    def __init__(self) -> None:
        self._reset()

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # before a checkpoint is restored: a callback used for another fit() starts afresh
        self._reset()

    def _reset(self) -> None:
        #: the Trainer's count of batches in this epoch (``batch_progress.current.ready``) when its
        #: pass began: 0, except after a resume from an epoch's last batch, where Lightning goes on
        #: counting from the saved epoch's end (saved in the checkpoint, for a later resume)
        self._epoch_base = 0
        self._base_pending = False
        self._resumed_pass_over = False
        self._trainer: Any = None
        #: resumed from a checkpoint written without this callback, whose loader states Lightning
        #: took after the batch it had read ahead: the loaders count that many batches more than
        #: the Trainer in the resumed pass
        self._unfollowed = False
        self._offset = 0
        #: the epoch of the last batch trained on
        self._pass_epoch: int | None = None

    def state_dict(self) -> dict:
        return {"epoch_base": self._epoch_base, "pass_over": self._pass_over(), "offset": self._offset}

    def load_state_dict(self, state_dict: dict) -> None:
        self._epoch_base = int(state_dict.get("epoch_base", 0))
        # saved after an epoch's last batch: the next batch starts a pass (Lightning calls no
        # on_train_epoch_start for that epoch)
        self._base_pending = self._resumed_pass_over = bool(state_dict.get("pass_over", False))
        self._offset = 0 if self._base_pending else int(state_dict.get("offset", 0))  # the offset of a pass

    def _pass_over(self) -> bool:
        """Whether the Trainer is done with the current pass (after its epoch's last batch, or
        before its first)."""
        trainer = self._trainer
        if trainer is None:
            return False
        progress = trainer.fit_loop.epoch_loop.batch_progress
        return bool(progress.is_last_batch) or progress.current.ready - self._epoch_base <= 0 or self._base_pending

    def _loaders(self, trainer: Any) -> list:
        """The Trainer's stateful training loaders, in the order of its checkpoint's loader states."""
        iterables = trainer.train_dataloader
        if iterables is None:
            return []
        return [dl for dl in CombinedLoader(iterables).flattened if _stateful(dl)]

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._trainer = trainer
        if self._unfollowed:
            self._resumed_unfollowed(trainer)
        iterables = trainer.train_dataloader
        flat = CombinedLoader(iterables).flattened if iterables is not None else []
        for dl in flat:
            if _ours(dl):
                dl.keep_batch_states(KEEP)
            else:
                logger.warning(
                    "ResumableDataCallback: the training loader %s is not a resumable_iterable.StatefulDataLoader "
                    "over a resumable_iterable dataset; a mid-epoch resume of it is left to Lightning, which saves the "
                    "loader's state one batch ahead of the batch trained on (or, for a loader without state, "
                    "restarts the epoch)", type(dl).__name__)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        # Lightning sets epochs on samplers only; the hook runs before the epoch's iterator is made
        # (except for the epoch a resume continues, which keeps the saved state's own epoch)
        self._base_pending = True  # the count is reset after this hook, or not (see _epoch_base)
        self._offset = 0
        for dl in self._loaders(trainer):
            if _ours(dl):
                dl.keep_batch_states(KEEP)  # a loader built for this epoch (reload_dataloaders_every_n_epochs)
                dl.set_epoch(trainer.current_epoch)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._pass_epoch = trainer.current_epoch
        if self._base_pending:  # the first batch of a pass
            self._base_pending = False
            self._offset = 0
            self._epoch_base = trainer.fit_loop.epoch_loop.batch_progress.current.ready - 1
            if self._resumed_pass_over:
                self._resumed_pass_over = False
                _count_the_epoch_started(trainer.fit_loop.epoch_progress)
                if any(_ours(dl) and not dl.keeps_batch_states for dl in self._loaders(trainer)):
                    # Lightning built this epoch's loader and read from it without a hook of ours
                    # in between: neither its epoch nor the states of its first batches are known
                    raise RuntimeError(
                        "ResumableDataCallback: resumed from a checkpoint taken after the last batch of an epoch, "
                        "Lightning built a new training loader for the next epoch (reload_dataloaders_every_n_epochs) "
                        "and read from it without calling on_train_epoch_start, so that epoch cannot be resumed "
                        "exactly. Resume from a checkpoint taken mid-epoch, or keep the training loader "
                        "(reload_dataloaders_every_n_epochs=0).")

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        mine = self._loader_states(trainer, checkpoint)
        if _distributed(trainer):
            # Lightning writes the checkpoint of rank 0 only, whose loader states are rank 0's: every
            # rank's go in it too (all ranks build the checkpoint, so all of them take part)
            by_rank: list = [None] * trainer.world_size
            torch.distributed.all_gather_object(by_rank, mine)
            own = checkpoint.get("callbacks", {}).get(self.state_key)
            if isinstance(own, dict):
                own[BY_RANK] = by_rank

    def _resumed_unfollowed(self, trainer: Any) -> None:
        """Resumed from a checkpoint written without this callback: say what was lost, and follow
        the loaders from where Lightning's state put them."""
        progress = trainer.fit_loop.epoch_loop.batch_progress
        if progress.is_last_batch:
            # its loader state ended the pass: the next batch starts a pass, in the saved epoch's order
            self._base_pending = self._resumed_pass_over = True
            logger.warning("ResumableDataCallback: the checkpoint was written without this callback after the last "
                           "batch of an epoch: the next epoch is read in the order of the saved one")
            return
        # a loader without len(): Lightning had read one batch ahead, and saved the state after it
        self._offset = 1 if math.isinf(trainer.num_training_batches) else 0
        if self._offset:
            logger.warning("ResumableDataCallback: the checkpoint was written without this callback: Lightning saved "
                           "the training loader's state after the batch it had read ahead, which this resume skips; "
                           "checkpoints written from now on resume exactly")

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        # before Lightning reads its loops' states: each rank is given its own loader states
        own = checkpoint.get("callbacks", {}).get(self.state_key)
        loop_state = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
        self._unfollowed = own is None and bool(loop_state.get("combined_loader"))
        by_rank = own.get(BY_RANK) if isinstance(own, dict) else None
        if not by_rank or "combined_loader" not in loop_state:
            return
        if len(by_rank) != trainer.world_size:
            raise ValueError(
                f"ResumableDataCallback: this checkpoint holds the training loader states of {len(by_rank)} ranks, "
                f"and it is resumed with {trainer.world_size}: resume with {len(by_rank)} processes (moving rank "
                "states to another world size is resumable_iterable.redistribute_states' job, outside Lightning)")
        if by_rank[trainer.global_rank] is not None:
            loop_state["combined_loader"] = by_rank[trainer.global_rank]

    def _loader_states(self, trainer: Any, checkpoint: dict) -> list | None:
        """Put in ``checkpoint`` the training loaders' states as of the last batch trained on (and
        return them), or leave it as it is (``None``)."""
        states = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {}).get("combined_loader")
        if not states:
            return None
        loaders = self._loaders(trainer)
        if len(loaders) != len(states):
            return None  # not the Trainer's training loaders as it saved them: leave the checkpoint alone
        progress = trainer.fit_loop.epoch_loop.batch_progress
        trained = progress.current.ready - self._epoch_base  # batches of this pass handed to training_step
        if self._base_pending or trained <= 0:
            next_epoch = trainer.current_epoch  # this epoch has not begun its pass (nor reset is_last_batch)
        elif progress.is_last_batch:  # the counts still describe that pass (at the next epoch's start too)
            next_epoch = (trainer.current_epoch if self._pass_epoch is None else self._pass_epoch) + 1
        else:
            next_epoch = None
        for i, dl in enumerate(loaders):
            if not _ours(dl):
                continue
            if next_epoch is not None:
                # no batch of a pass to resume: a resume starts that epoch from its start
                state = dict(states[i])
                state[NEXT_PASS_EPOCH] = next_epoch
                states[i] = state
                continue
            state = dl.state_after(trained + self._offset)
            if state is None:
                raise RuntimeError(
                    f"ResumableDataCallback: the state of training loader {i} after batch {trained} of epoch "
                    f"{trainer.current_epoch} was not kept, so the checkpoint cannot hold it: the loader began a new "
                    "pass within the Trainer's epoch (several training loaders of different lengths, which "
                    "CombinedLoader's 'max_size_cycle' mode restarts, are not supported), or it was not followed (the "
                    "callback was added after fit() began, or the loader is iterated by another loop too)")
            states[i] = state
        return states
