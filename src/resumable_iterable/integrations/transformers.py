"""Resume a ``transformers.Trainer`` on exactly the examples an uninterrupted run would have seen.

:class:`ResumableDataCallback` saves the state of the Trainer's training ``DataLoader`` - which
holds the state of the ``resumable_iterable`` pipeline, one per DataLoader worker - as a state
file (``save_state``: JSON text, or a binary state file when shuffle buffers hold large arrays)
in every checkpoint folder the Trainer writes, and loads it back when training resumes
with ``trainer.train(resume_from_checkpoint=...)``. The Trainer then does **not** re-read and
discard the batches consumed before the checkpoint (``ignore_data_skip`` is turned on): the
pipeline simply continues where it stood, shuffle buffer included.

Usage::

    from transformers import Trainer, TrainingArguments
    from resumable_iterable.integrations.transformers import ResumableDataCallback

    trainer = Trainer(model=model, args=TrainingArguments(..., max_steps=1000, save_steps=100),
                      train_dataset=ds)               # ds: a resumable_iterable.IterableDataset
    ResumableDataCallback.attach(trainer)
    trainer.train()                                   # writes <checkpoint>/resumable_iterable_state.json
    ...
    trainer.train(resume_from_checkpoint=True)        # continues exactly

:meth:`ResumableDataCallback.attach` does three things the Trainer cannot be told through
``TrainingArguments`` in transformers 5: it makes ``accelerate`` build the training loader as a
``torchdata`` ``StatefulDataLoader`` (so the state of every DataLoader worker is known in the
main process), sets ``args.ignore_data_skip = True`` (so the Trainer does not skip batches on
top of the restored position) and adds the callback. If you build the training loader yourself
(overriding ``Trainer.get_train_dataloader`` to return a loader with
``state_dict()``/``load_state_dict()``), passing ``callbacks=[ResumableDataCallback()]`` is enough.

How a checkpoint is matched with its data state: the callback is an ``ExportableState``; the
Trainer stores the SHA-256 of the data-state file (of its JSON document, for a binary state file:
see ``state_files.state_file_digest``) in ``trainer_state.json``. The state is encoded as soon as
the Trainer decides to save (``on_step_end`` / ``on_epoch_end``), before it writes any file of the
checkpoint: a state that cannot be saved stops training there with a clear error. The file is
written atomically when the Trainer asks for that digest (``state()``), just before it writes
``trainer_state.json`` and deletes older checkpoints (in ``on_save`` on processes other than the
main one). On resume the
callback looks for the file in ``args.resume_from_checkpoint`` (when set) and in
``<output_dir>/checkpoint-<global_step>``, and only accepts the file with that digest.

Another ``dataloader_num_workers`` at resume than at save is handled by elastic resume (see
``loader/elastic.py``): the rest of the interrupted pass is re-dealt among the new workers.

Epochs: for a dataset without ``__len__`` the Trainer restarts its epoch counter at 0 when it
resumes. The callback maps the Trainer's epoch numbers back onto the dataset's, so each new pass
after a resume is shuffled with the same ``(seed, epoch)`` as in the uninterrupted run.

Where the parts live: this module is the callback (the Trainer's events, capturing and writing
the state); ``trainer_checkpoint.py`` the data-state file (its name per process, its format, and how
a resume finds it and matches it with ``trainer_state.json``); ``trainer_loader.py`` what the
callback does to the Trainer's loader (its options, and putting it where a data state says).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterator

from transformers.trainer_callback import ExportableState, TrainerCallback

from ..loader.session import IterationSession
from ..state import find_documents
from ..state_files import EncodedState, encode_state
from . import trainer_checkpoint, trainer_loader
from .torch.transport import INLINE_MAX_BYTES, check_inline_bytes
# the data-state file (its name, format and where a resume finds it: trainer_checkpoint.py)
from .trainer_checkpoint import FORMAT, STATE_FILE, TRAINER_STATE_FILE, VERSION

logger = logging.getLogger("resumable_iterable")

#: attribute by which the first callback of ours to start a train() marks the Trainer's state
_MARK = "_resumable_iterable_callback"


def find_envelopes(obj: Any) -> Iterator[tuple[str, dict]]:
    """Yield ``(path, state)`` for every ``resumable_iterable`` state nested in ``obj``."""
    return find_documents(obj)


class ResumableDataCallback(TrainerCallback, ExportableState):
    """Save the training loader's state in every checkpoint and restore it on resume.

    Args:
        filename: name of the JSON file written into each checkpoint folder. Processes other
            than the main one (multi-process training) write ``<stem>.rank<N><suffix>``.
        inline_tensor_bytes: with DataLoader workers, the training loader's batches send tensors
            whose storage holds at most this many bytes inside the worker's message instead of
            through shared memory, as ``ri.StatefulDataLoader`` does (the same batches, faster for
            small rows; ``docs/torch.md``). 0 turns it off.
        save_worker_rng: with DataLoader workers, each worker's global random generators (torch,
            numpy, ``random``) are saved with the data state and set back on resume with the same
            ``dataloader_num_workers``, so a collator that masks at random gives the uninterrupted
            run's masks (as ``ri.StatefulDataLoader(save_worker_rng=True)``; ``worker_rng.py``).
            Without workers, the main process's generators as they were when accelerate took the
            data position (before it read the next batch ahead) are saved (``"main_rng"``) and used
            for that batch on resume (:class:`trainer_loader.MainRng`). A collator with a generator
            of its own (``DataCollatorForLanguageModeling(seed=...)``) has it saved with the dataset
            states and set back too, with any number of workers (``worker_rng.CollatorRng``); a
            checkpoint at the end of a pass, which loads no state, gives it (and each new persistent
            worker its generators) what the saved run ended the pass with.
    """

    def __init__(self, filename: str = STATE_FILE, inline_tensor_bytes: int = INLINE_MAX_BYTES,
                 save_worker_rng: bool = False):
        if not isinstance(filename, str) or not filename or os.sep in filename:
            raise ValueError(f"filename must be a plain file name, got {filename!r}")
        if not isinstance(save_worker_rng, bool):
            raise TypeError(f"save_worker_rng must be True or False, got {save_worker_rng!r}")
        self.filename = filename
        self.inline_tensor_bytes = check_inline_bytes(inline_tensor_bytes)
        self.save_worker_rng = save_worker_rng
        self.data_state_sha256: str | None = None
        self._loader: Any = None
        self._trainer_state: Any = None
        self._args: Any = None
        self._pending: tuple[int, EncodedState] | None = None  # (global_step, encoded file) captured for a checkpoint
        self._written: int | None = None  # the global step whose data state state() wrote
        self._resumed_at: int | None = None  # the global step restored, until the first epoch after it ends
        self._main_rng: trainer_loader.MainRng | None = None  # without workers, save_worker_rng
        self._captured: dict | None = None  # the payload of the last state captured

    # ------------------------------------------------------------------ setting up
    @classmethod
    def attach(cls, trainer: Any, **kwargs: Any) -> ResumableDataCallback:
        """Configure ``trainer`` for exact data resumption and add the callback to it.

        Turns on accelerate's ``StatefulDataLoader`` for the training loader, sets
        ``trainer.args.ignore_data_skip = True`` and adds a callback (or reuses one already
        added; the keyword arguments given then apply to it). Call it before ``trainer.train()``.
        Returns the callback.
        """
        config = getattr(getattr(trainer, "accelerator", None), "dataloader_config", None)
        if config is None:
            raise TypeError("attach() expects a transformers.Trainer (it has no accelerator.dataloader_config)")
        config.use_stateful_dataloader = True
        trainer.args.ignore_data_skip = True
        new = cls(**kwargs)  # checks the arguments
        for cb in trainer.callback_handler.callbacks:
            if isinstance(cb, cls):
                if "filename" in kwargs and new.filename != cb.filename:
                    raise ValueError(f"ResumableDataCallback.attach: the trainer already has this callback, with "
                                     f"filename={cb.filename!r}, not {new.filename!r}")
                if "inline_tensor_bytes" in kwargs:
                    cb.inline_tensor_bytes = new.inline_tensor_bytes
                if "save_worker_rng" in kwargs:
                    cb.save_worker_rng = new.save_worker_rng
                return cb
        trainer.add_callback(new)
        return new

    def file_name(self, process_index: int = 0) -> str:
        """The data-state file name for a process."""
        return trainer_checkpoint.state_file_name(self.filename, process_index)

    # ------------------------------------------------------------------ ExportableState
    def state(self) -> dict:
        """What the Trainer stores in ``trainer_state.json``: the digest of this checkpoint's data state.

        The Trainer calls this while it writes a checkpoint: after the model, optimizer and RNG
        files, before ``trainer_state.json`` and before it deletes older checkpoints
        (``save_total_limit``), all of which come before ``on_save``. The data state is written to
        the checkpoint folder here, so that a checkpoint whose ``trainer_state.json`` exists has it:
        a process that died after the rotation but before ``on_save`` left the only checkpoint
        kept without its data state. :meth:`on_save` writes it where this was not called.
        """
        if self._loader is not None and self._trainer_state is not None:
            step = self._trainer_state.global_step
            if self._pending is None or self._pending[0] != step:
                self._pending = (step, self._capture(step, self._args.process_index, self._args.world_size))
            else:
                self._collator_since_capture(step)
            self.data_state_sha256 = self._pending[1].digest
            folder = trainer_checkpoint.checkpoint_folder(self._args, step)
            # Only into a checkpoint being written: its folder exists (not under a hyperparameter
            # search: on_save says so) and its trainer_state.json does not yet. The Trainer also
            # asks when a new train() starts, and after a train() that raised the callback still
            # sees the old loader, which may have read past the checkpoint of this step.
            if os.path.isdir(folder) and not os.path.exists(os.path.join(folder, TRAINER_STATE_FILE)):
                self._pending[1].write(os.path.join(folder, self.file_name(self._args.process_index)))
                self._written = step
        return {"args": self._init_args(), "attributes": {"data_state_sha256": self.data_state_sha256}}

    def _init_args(self) -> dict:
        """The arguments this callback was built with, as ``trainer_state.json`` records them: with
        ``TrainingArguments(restore_callback_states_from_checkpoint=True)`` the Trainer replaces each
        stateful callback, when it resumes, by ``ResumableDataCallback(**args)``, which must keep
        ``inline_tensor_bytes`` and ``save_worker_rng``."""
        return {"filename": self.filename, "inline_tensor_bytes": self.inline_tensor_bytes,
                "save_worker_rng": self.save_worker_rng}

    # ------------------------------------------------------------------ Trainer events
    def on_init_end(self, args, state, control, **kwargs):
        if not args.ignore_data_skip:
            logger.info("ResumableDataCallback: setting ignore_data_skip=True (the data position is restored "
                        "from the saved pipeline state instead of skipping batches)")
            args.ignore_data_skip = True

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        # The Trainer hands every callback the same TrainerState, a new one per train(): the first
        # of ours to start marks it. A second one would restore the loader again and, when saving,
        # the Trainer appends the states of both to a list in trainer_state.json that grows with
        # each checkpoint, whose first entries (of the run's start) hold no data state: the resume
        # then failed, saying the checkpoint records no data state.
        # (its id, not the callback: a reference from the state would keep the loader's iterator,
        # and a prefetch thread reading for it, alive after training, until the garbage collector runs)
        other = getattr(state, _MARK, None)
        if other is not None and other != id(self):
            raise ValueError(
                "ResumableDataCallback: this Trainer has two ResumableDataCallback (one passed in "
                "Trainer(callbacks=[...]) or add_callback(), and another added since?): keep one. "
                "ResumableDataCallback.attach(trainer) reuses the one already there.")
        setattr(state, _MARK, id(self))
        loader = train_dataloader
        if loader is None:
            raise ValueError("ResumableDataCallback: the Trainer did not pass its training DataLoader")
        if not trainer_loader.is_stateful(loader):
            raise ValueError(
                "ResumableDataCallback: the training DataLoader cannot report its state (it is a "
                f"{type(trainer_loader.base_loader(loader)).__name__} without state_dict()). Call "
                "ResumableDataCallback.attach(trainer) before trainer.train() - it makes accelerate build a "
                "torchdata StatefulDataLoader - or return a StatefulDataLoader from get_train_dataloader()."
            )
        if not args.ignore_data_skip:
            raise ValueError(
                "ResumableDataCallback: TrainingArguments.ignore_data_skip must be True, otherwise the Trainer "
                "re-reads and skips the consumed batches after the restored position. Use "
                "ResumableDataCallback.attach(trainer), pass the callback to Trainer(callbacks=[...]), or set "
                "ignore_data_skip=True."
            )
        trainer_loader.check_dispatch(loader)
        trainer_loader.warn_if_not_ours(loader)
        if self.save_worker_rng:  # first: it may wrap the collate_fn, which inline_small_tensors wraps again
            trainer_loader.save_worker_rng(loader)
        else:
            trainer_loader.warn_unsaved_collator(loader)
        trainer_loader.inline_small_tensors(loader, self.inline_tensor_bytes)
        self._main_rng = (trainer_loader.MainRng(loader)
                          if self.save_worker_rng and trainer_loader.MainRng.applies(loader) else None)
        self._loader = loader
        self._trainer_state = state
        self._args = args
        self._pending = None
        self._written = None
        name = type(self).__name__
        self._resumed_at = None
        if state.global_step > 0:
            self._restore(args, state, loader)
            self._resumed_at = state.global_step
        # a checkpoint written without this callback has no entry for it; the Trainer would fail
        # with a KeyError when it saves the next checkpoint
        if isinstance(state.stateful_callbacks, dict) and name not in state.stateful_callbacks:
            state.stateful_callbacks[name] = {"args": self._init_args(), "attributes": {"data_state_sha256": None}}

    def on_step_end(self, args, state, control, **kwargs):
        self._capture_if_saving(state, control)

    def on_epoch_end(self, args, state, control, **kwargs):
        resumed_at, self._resumed_at = self._resumed_at, None
        if (resumed_at is not None and control.should_training_stop and state.global_step == resumed_at
                and state.global_step < state.max_steps):
            # The checkpoint was taken after the last batch of a pass that the loader had not yet
            # seen end (accelerate's loader looks one batch ahead and marks it; a loader returned by
            # get_train_dataloader may not): the rest of that pass is empty, and the Trainer stops on
            # an epoch without batches. Training goes on with the next pass, as it would have.
            logger.info("ResumableDataCallback: the checkpoint was at the end of a pass; training goes on with "
                        "the next one")
            control.should_training_stop = False
        self._capture_if_saving(state, control)

    def _capture_if_saving(self, state, control) -> None:
        """Encode the data state as soon as the Trainer decides to save a checkpoint - before it
        writes any file of it - so that a state that cannot be saved stops training with a
        clear error instead of leaving a checkpoint without (or with a broken) data state."""
        if self._loader is not None and control.should_save:
            args = self._args
            self._pending = (state.global_step, self._capture(state.global_step, args.process_index, args.world_size))

    def on_save(self, args, state, control, **kwargs):
        if self._loader is None:
            return
        if self._written == state.global_step:  # by state(), before trainer_state.json
            self._pending = None
            return
        folder = trainer_checkpoint.checkpoint_folder(args, state.global_step)
        if not os.path.isdir(folder):
            raise RuntimeError(
                f"ResumableDataCallback: the checkpoint folder {folder!r} does not exist; the data state cannot "
                "be saved with the checkpoint (hyperparameter-search runs are not supported)"
            )
        process, processes = args.process_index, args.world_size
        if self._pending is not None and self._pending[0] == state.global_step:
            encoded = self._pending[1]
        else:
            encoded = self._capture(state.global_step, process, processes)
        encoded.write(os.path.join(folder, self.file_name(process)))  # atomic: temporary file, fsync, rename
        self._pending = None

    def on_train_end(self, args, state, control, **kwargs):
        if self._loader is not None:
            # A StatefulDataLoader keeps its last iterator - and with num_workers > 0 its worker
            # processes - alive after training. Release them now: left running while another
            # loader starts workers, they later take torch's join timeout (5 s each) to stop.
            trainer_loader.drop_iterator(self._loader)
        self._loader = None
        self._trainer_state = None
        self._args = None
        self._pending = None
        self._captured = None

    # ------------------------------------------------------------------ internals
    def _capture(self, global_step: int, process: int, processes: int) -> EncodedState:
        """The loader's state, fully encoded (nothing written yet); raises if it cannot be saved."""
        base = trainer_loader.base_loader(self._loader)
        payload = {"format": FORMAT, "version": VERSION, "global_step": int(global_step),
                   "process_index": int(process), "num_processes": int(processes),
                   "loader": type(base).__name__, "loader_state": self._loader.state_dict()}
        if self._main_rng is not None and self._main_rng.last is not None:
            payload["main_rng"] = self._main_rng.last
        collator = self._collator_rng()
        if collator is not None and getattr(base, "num_workers", None) == 0:
            # the collator's own generator now: the data state holds it as it was when the data
            # position was taken (before the batch accelerate read ahead), and an evaluation may
            # draw from it before the checkpoint is saved (_collator_since_capture)
            entry = collator.state()
            if entry is not None:
                payload["collator_rng"] = entry
        self._captured = payload
        try:
            return encode_state(payload)
        except (TypeError, ValueError) as e:
            raise type(e)(
                f"ResumableDataCallback: cannot save the data state of step {global_step} (nothing of it was "
                f"written): {e}"
            ) from e

    def _collator_since_capture(self, step: int) -> None:
        """Without workers, the state captured at the end of the step holds the collator's own
        generator as it was then; an evaluation between that and the checkpoint, with the same
        collator in the main process, draws from it. The checkpoint then gets the generator as it
        is now (the state is encoded again: only then, and it is the one encoded before plus this
        small entry, so it cannot fail where the first did not)."""
        collator, payload = self._collator_rng(), self._captured
        if collator is None or not isinstance(payload, dict) or "collator_rng" not in payload:
            return
        entry = collator.state()
        if entry is not None and entry != payload.get("collator_rng"):
            payload["collator_rng"] = entry
            self._pending = (step, encode_state(payload))

    def _collator_rng(self) -> Any:
        """The training loader's ``CollatorRng`` (``save_worker_rng`` with a collator that keeps a
        generator of its own), or ``None``."""
        session = getattr(getattr(trainer_loader.base_loader(self._loader), "dataset", None), "session", None)
        return session.collator_rng if isinstance(session, IterationSession) else None

    def _restore(self, args, state, loader) -> None:
        process = args.process_index
        expected = trainer_checkpoint.expected_digest(state, type(self).__name__) if process == 0 else None
        name = self.file_name(process)
        found, looked = trainer_checkpoint.find_state_file(trainer_checkpoint.candidate_folders(args, state), name,
                                                           expected, state.global_step)
        if found is None and process > 0 and type(loader).__name__ == "DataLoaderDispatcher":
            # accelerate feeds every process from process 0's loader (see trainer_loader.check_dispatch): this
            # process's loader is never read, its file holds no position. Missing - the checkpoint
            # was written by fewer processes, or the job died after process 0 had completed it - it
            # is not needed: the data position is process 0's.
            logger.info("ResumableDataCallback: no data state of process %d in the checkpoint of step %d; its batches "
                        "come from process 0, whose state is restored", process, state.global_step)
            return
        if found is None:
            raise FileNotFoundError(
                f"ResumableDataCallback: cannot find the data state of the checkpoint being resumed (step "
                f"{state.global_step}); looked at: {'; '.join(looked)}. If the checkpoint is outside output_dir, "
                "also set TrainingArguments(resume_from_checkpoint=<that folder>)."
            )
        payload = trainer_checkpoint.read_payload(found, name, state.global_step)
        finished = trainer_loader.load_data_state(loader, payload, name, self._main_rng)
        logger.info("ResumableDataCallback: restored the data state of step %d%s", state.global_step,
                    " (the pass had ended; the next one starts)" if finished else "")
