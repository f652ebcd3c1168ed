"""One dataset's iteration in one process: :class:`IterationSession`.

A dataset (``dataset.py``) is a description - a pipeline template and its rank split - plus a
session that owns everything about iterating it *here*:

* ``active``: the live node tree of the pass being iterated, or holding a loaded state not
  iterated yet (``pending``); ``active_worker`` is the DataLoader worker ``(id, num_workers)``
  it belongs to (``None``: no worker), ``active_epoch`` the epoch it was started or loaded with;
* ``loaded`` / ``claims``: a state loaded in the main process, kept so that DataLoader workers
  iterating the dataset afterwards can split it among themselves, and the shared record of
  which workers took their part (so only the first pass uses it);
* ``epoch`` and ``epoch_slot``: the epoch of the next fresh pass, and where the worker hooks
  (``hooks.py``) publish it for persistent workers.

``state_dict`` / ``load_state_dict`` of the dataset are this session's. Pickled (a DataLoader
worker, ``copy.deepcopy``), a session leaves out a pass being iterated; a loaded state not yet
iterated travels with it.
"""

from __future__ import annotations

import copy
import logging
import weakref
from multiprocessing.context import get_spawning_popen
from types import GeneratorType
from typing import Any

from .. import state as _state
from ..distributed import current_worker, note_pass
from ..nodes.base import Node
from . import hooks
from .loader_state import DATASET_STATE, SNAPSHOT, WORKER_SNAPSHOTS, worker_key
from .segments import SegmentsNode, plan_state
from .resume import (drawn_seeds, fresh_node, load_node, seeds_to_adopt, split_description, validate_loader_state,
                     worker_part)

logger = logging.getLogger(__name__)


class IterationSession:
    """The per-process iteration state of one dataset (see the module doc)."""

    #: ``active`` is a fresh pass made only so that ``state_dict`` could describe it (nothing
    #: loaded, nothing iterated): a later ``set_epoch`` replaces it by a pass of the new epoch
    placeholder = False
    #: the pass ``pass_node`` last returned continues a loaded state (else it starts fresh)
    resumes = False
    #: a DataLoader worker's states hold its global random generators (``"rng"``), set back when
    #: such a state is loaded in the same worker (``integrations/torch/worker_rng.py``)
    save_worker_rng = False
    #: in a DataLoader worker, the dataset's dict items go to the worker's queue through the
    #: framework's ``handoff`` (torch: their small tensors by value, ``integrations/torch/transport.py``);
    #: ``resumable_iterable.StatefulDataLoader(inline_tensor_bytes=0)`` turns it off
    small_tensors_by_value = True
    #: with ``save_worker_rng``: the loader's ``collate_fn`` when its collator keeps a generator of
    #: its own (``worker_rng.CollatorRng``), whose state the states of this process hold too
    #: (``"collator"`` in ``"rng"``) and a state loaded sets back
    collator_rng: Any = None
    #: persistent DataLoader workers resumed from a checkpoint taken when the pass had ended (which
    #: loads no state): ``(shared claims, {worker id: decoded "rng" entry}, num_workers)``, which each
    #: worker sets when its first pass starts (:meth:`set_next_pass_rng`)
    next_pass_rng: Any = None
    #: a weak reference to the iterator handed out for the pass last started (:meth:`iterating`)
    _iterator: Any = None

    def __init__(self, template: Node, split: tuple, epoch: int):
        self.template = template  # the dataset's unsplit pipeline; never iterated itself
        self.split = tuple(split)  # ("rank", rank, world_size, strategy) entries, applied at iteration
        self.epoch_slot: Any = None  # set by the worker hooks
        self.epoch_set_by_user = False
        self.active: Node | None = None
        self.active_worker: tuple[int, int] | None = None
        self.active_epoch = epoch
        self.active_deal = 0  # how the shards of `active` were dealt (distributed.py)
        self.pending = False
        self.loaded: dict | None = None
        self.claims: Any = None
        self._split_cache: tuple | None = None  # ((worker, deal), the "split" entry of this process's states)
        self._seeds: list | None = None  # the "seeds" entry of this dataset's states (resume.drawn_seeds)
        self.set_epoch(epoch)

    # ------------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int, by_user: bool = False) -> None:
        """The epoch of the next fresh pass (already checked); DataLoader workers read it too.
        ``by_user``: the dataset's ``set_epoch`` - from then on a loaded state resumes its own pass
        in its epoch but leaves the epoch of later passes to the user, and a loaded state of an
        earlier epoch is dropped (:meth:`moved_past`)."""
        self.epoch = epoch
        self.epoch_set_by_user = self.epoch_set_by_user or by_user
        if by_user and self.pending and not self.placeholder and self.active is not None:
            if self.moved_past(self.active_epoch):
                self._drop_pending()
        h = hooks.current()
        if h is not None:  # DataLoader workers, persistent ones too, read the main process's epoch
            h.publish_epoch(self, epoch)

    def moved_past(self, loaded_epoch: int) -> bool:
        """Whether the user's loop has set a later epoch than that of a state loaded (or being
        loaded): then that state is not resumed - with a warning - and the next pass is the set
        epoch from its start. An HF-style loop resumed from a state taken at the end of epoch 0
        goes on with ``set_epoch(1)`` and would otherwise get epoch 0's empty rest in place of
        epoch 1; a loader may load the state only when its iterator is made, after that
        ``set_epoch`` (torchdata does: with ``num_workers=0`` in the main process, else in each
        worker, where the epoch set is the main process's)."""
        epoch = self.requested_epoch()
        if not self.epoch_set_by_user or epoch <= loaded_epoch:
            return False
        logger.warning("the state loaded is one of epoch %d, but epoch %d was set: it is not resumed, and the next "
                       "pass is epoch %d from its start (to resume that state, set epoch %d before iterating)",
                       loaded_epoch, epoch, epoch, loaded_epoch)
        return True

    def requested_epoch(self) -> int:
        """The epoch a new pass uses: inside a DataLoader worker, the main process's current epoch
        (shared memory, so ``set_epoch`` reaches persistent workers); elsewhere :attr:`epoch`."""
        if current_worker() is not None:
            h = hooks.current()
            e = h.shared_epoch(self) if h is not None else None
            if e is not None:
                return e
        return self.epoch

    def prepare_for_workers(self) -> None:
        """Before DataLoader workers start (or ``isinstance`` asks whether this is a torch
        dataset): the shared epoch slot, and the shared record for a state loaded before torch
        was imported. Nothing without a framework's worker hooks. Asking for the hooks also gives
        the dataset class its framework base when the framework was imported since (a loader may
        have prepared the session already, so this is asked every time)."""
        h = hooks.current()
        if h is not None and self.epoch_slot is None:
            h.prepare_for_workers(self)

    # ------------------------------------------------------------------ the node tree iterated
    def _start_fresh(self, worker) -> Node:
        epoch = self.requested_epoch()
        node, deal = fresh_node(self.template, self.split, epoch, worker)
        self.active, self.active_worker, self.active_epoch, self.active_deal = node, worker, epoch, deal
        self.placeholder = False
        return node

    def _drop_pending(self) -> None:
        self.pending = False
        self.active = None
        self.loaded = None

    def _resolve_pending(self, worker) -> None:
        """Make a loaded-but-not-iterated state fit the process about to iterate.

        A state loaded in the main process and then iterated in DataLoader workers (the dataset
        was handed to the loader after ``load_state_dict``) is split among the workers like an
        elastic resume from one process; the shared claims make sure only the first pass uses
        it, even when each pass forks new workers. Elsewhere a state loaded for another process
        is dropped.
        """
        if not self.pending or self.active is None:
            return
        if self.placeholder:
            if self.active_worker != worker or self.requested_epoch() != self.active_epoch:
                self._drop_pending()  # made for another process, or the epoch was set since
            return
        loaded_in = self.active_worker
        claims = self.claims
        if loaded_in == worker:
            if worker is None and claims is not None and hooks.current().claimed(claims):
                self._drop_pending()  # DataLoader workers already used it
            return
        if loaded_in is not None or worker is None or self.loaded is None:
            self._drop_pending()  # another process's state, or just a fresh start: start afresh here
            return
        # loaded in the main process, now inside DataLoader worker `worker`
        h = hooks.current()
        if claims is None or h is None:
            raise ValueError("this dataset holds a state loaded with load_state_dict() before torch was imported and is "
                             "now iterated by DataLoader workers; import torch first, or load the state through "
                             "resumable_iterable.StatefulDataLoader")
        if not h.claim(claims, worker[0], worker[1]):
            self._drop_pending()
            return
        self.active, self.active_epoch = worker_part(self.template, self.split, self.loaded, worker)
        self.active_worker = worker

    def pass_node(self) -> Node:
        """The live node tree of the pass about to start: a loaded state not iterated yet, or a fresh one."""
        worker = current_worker()
        if worker is not None:
            h = hooks.current()
            if h is not None:
                h.worker_started()
                if self.next_pass_rng is not None:
                    self._set_next_pass_rng(h, worker)
        self._resolve_pending(worker)
        if self.pending and self.active is not None:
            self.resumes = not self.placeholder
            self.pending = False
            self.loaded = None  # used up: nothing left to split among workers
            return self.active
        self.resumes = False
        return self._start_fresh(worker)

    def set_next_pass_rng(self, entries: dict, num_workers: int) -> None:
        """In the main process: the first pass of each of the next ``num_workers`` persistent
        DataLoader workers starts with the generators ``entries[worker id]`` (decoded by the hooks'
        ``check_rng_state``), as the saved run's workers went on with theirs into their next pass.
        Only the first workers to start use them (shared claims): workers started for a later
        pass begin as usual."""
        h = hooks.current()
        self.next_pass_rng = (h.new_claims(), dict(entries), num_workers) if h is not None and entries else None

    def _set_next_pass_rng(self, h: Any, worker: tuple) -> None:
        claims, entries, num_workers = self.next_pass_rng
        self.next_pass_rng = None  # this worker's copy: once
        decoded = entries.get(worker[0])
        if decoded is None or worker[1] != num_workers or not h.claim(claims, worker[0], worker[1]):
            return
        if decoded[0] is not None:
            h.set_rng_state(decoded[0])
        if self.collator_rng is not None:
            self.collator_rng.load(*(decoded[1] or (None, None)))

    def iterating(self, iterator: Any) -> Any:
        """Note ``iterator`` (a generator) as the one the user iterates the pass just started with,
        so that :meth:`state_dict` can tell when it is asked from inside that iterator's step; return
        it (in a DataLoader worker, as the framework hands its items to the worker's queue)."""
        worker = current_worker()
        if worker is not None and isinstance(iterator, GeneratorType):
            note_pass(iterator)  # a dataset iterated inside this pass is read whole (current_worker)
        if self.small_tensors_by_value and worker is not None:
            h = hooks.current()
            if h is not None:
                iterator = h.handoff(iterator)
        self._iterator = weakref.ref(iterator) if isinstance(iterator, GeneratorType) else None
        return iterator

    def _check_between_examples(self) -> None:
        """Refuse a state asked for while the pass it would describe is producing an example: from
        a ``map``/``filter`` function or a generator source of that pass, a signal handler that
        interrupted it, or another thread. Its nodes are then part-way through a step (a source has
        counted a row its parent has not received yet...), so such a state would lose or repeat
        an example on resume."""
        ref = self._iterator
        it = ref() if ref is not None else None
        if it is not None and it.gi_running:
            raise RuntimeError("state_dict() was called while the dataset is producing an example (from inside a "
                               "map/filter function or a generator of this dataset, from a signal handler that "
                               "interrupted it, or from another thread): its steps are part-way done, and such a "
                               "state would lose or repeat an example. Take states between examples, in the "
                               "thread that iterates (from a signal handler: set a flag and save at the next step)")

    def current_node(self) -> Node:
        """The node tree whose state ``state_dict`` describes: the pass being iterated here, or a
        loaded state, or (neither) a fresh pass that the next iteration then starts from."""
        worker = current_worker()
        self._resolve_pending(worker)
        if self.active is None or self.active_worker != worker:
            self._start_fresh(worker)
            self.loaded = self.claims = None  # a fresh start, not a loaded state
            self.pending = self.placeholder = True
        return self.active

    # ------------------------------------------------------------------ states
    def state_dict(self) -> dict:
        """The dataset state of this process (see ``IterableDataset.state_dict``)."""
        self._check_between_examples()
        node = self.current_node()
        epoch = self.active_epoch
        seeds = self._seeds
        if seeds is None:
            seeds = self._seeds = drawn_seeds(self.template)
        if isinstance(node, SegmentsNode):
            plan = plan_state(node, epoch)
            if seeds:
                plan["seeds"] = [list(e) for e in seeds]
            return plan
        shape, fp = node.fingerprinted_shape()
        ctx = self.active_worker
        key = (ctx, self.active_deal)
        split = self._split_cache
        if split is None or split[0] != key:  # a dataset's pipeline and rank split never change
            split = self._split_cache = (key, split_description(self.template, self.split, ctx, self.active_deal))
        # in a DataLoader worker, shuffle buffers go to "buffers" as logs, which torchdata's
        # StatefulDataLoader sends as the writes since the last one (see state_buffers.BufferLog)
        buffers: dict | None = None if ctx is None else {}
        state = {"format": _state.FORMAT, "version": _state.VERSION, "fingerprint": fp,
                 "pipeline": _state.copy_state(shape), "epoch": epoch,
                 "state": node.state_dict(buffers), "split": _state.copy_state(split[1])}
        if buffers:
            state["buffers"] = buffers
        if seeds:  # a pipeline built without a seed: a rebuilt one adopts these (adopt_seeds)
            state["seeds"] = [list(e) for e in seeds]
        if self.save_worker_rng:
            h = hooks.current()
            if h is not None:
                # a worker's global generators (the main process's are the training loop's), and
                # the collator's own generator as it stands in this process
                rng = h.rng_state() if ctx is not None else {}
                collator = self.collator_rng.state() if self.collator_rng is not None else None
                if collator is not None:
                    rng["collator"] = collator
                if rng:
                    state["rng"] = rng
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Validate ``state_dict`` completely, then make it the next pass (see ``IterableDataset``)."""
        worker = current_worker()
        rng = None  # (hooks, (the worker's generators, the collator's) checked and decoded)
        if isinstance(state_dict, dict) and state_dict.get("rng") is not None:
            h = hooks.current()
            if h is not None:
                rng = (h, h.check_rng_state(state_dict["rng"], "state 'rng'"))
                if self.collator_rng is not None and rng[1][1] is not None:
                    self.collator_rng.check(rng[1][1][1])  # as many generators as the collate_fn's
        adopt = seeds_to_adopt(self.template, state_dict)
        node, epoch, deal = load_node(self.template, self.split, state_dict, worker)
        self.adopt_seeds(adopt)
        if self.moved_past(epoch):
            self._drop_pending()
            return
        if rng is not None and worker is not None and rng[1][0] is not None:
            rng[0].set_rng_state(rng[1][0])  # the worker's draws continue where the saved worker's stood
        if self.collator_rng is not None:
            # the collator's own generator too (no entry: it starts from its seed, as in a new process)
            collator = rng[1][1] if rng is not None else None
            self.collator_rng.load(*(collator or (None, None)))
        claims = None
        if worker is None:
            h = hooks.current()
            if h is not None:
                claims = h.new_claims()  # lets DataLoader workers split this state among themselves once
        if not self.epoch_set_by_user:
            # the passes after it follow the loaded epoch, unless the user sets epochs: a loader may
            # load a state lazily, after the loop's set_epoch (torchdata with num_workers=0 loads it
            # when the iterator is made; for a state taken at the end of an epoch it then starts
            # the next pass at once, in the epoch the loop set)
            self.set_epoch(epoch)
        self.active, self.active_worker, self.active_epoch, self.active_deal = node, worker, epoch, deal
        self.loaded = _state.copy_state(state_dict) if worker is None else None
        self.claims = claims
        self.pending, self.placeholder = True, False

    def adopt_seeds(self, adopt: list) -> None:
        """Make the nodes of the pipeline that drew their seed when built draw from the seeds a
        loaded state saved (``resume.seeds_to_adopt``): the epochs after the resumed one are then
        the saved run's, as with a seed given. DataLoader workers started from now on, and
        persistent ones that load their own states, get them too.

        The template is shared with the datasets made from this one without a new node
        (``with_format``, ``copy.copy``, ``split_dataset_by_node``) and is never changed in place:
        this session adopts the seeds into its own copy of it (the others keep drawing, and
        recording, their own)."""
        nodes = list(self.template.walk_built())
        if all(nodes[i].drawn_seed() == seed for i, seed in adopt):
            return
        self.template = self.template.clone()
        nodes = list(self.template.walk_built())
        for i, seed in adopt:
            nodes[i].adopt_seed(seed)
        self._seeds = None
        if self.pending and self.placeholder:
            self._drop_pending()  # a fresh pass made from the seeds drawn before

    def saved_seeds(self, loader_state: Any) -> list:
        """``seeds_to_adopt`` for the first dataset state in a ``StatefulDataLoader`` state (with
        workers, the main process loads none of them itself) that records seeds. Raises
        ``ValueError`` naming a malformed entry in any of them, before anything loads."""
        out = None
        for path, doc in _state.find_documents(loader_state, (_state.FORMAT, _state.PLAN_FORMAT)):
            if isinstance(doc, dict) and doc.get("seeds") is not None:
                adopt = seeds_to_adopt(self.template, doc, f"DataLoader state {path}")
                out = adopt if out is None else out
        return out or []

    def validate_loader_state(self, loader_state: dict, num_workers: int) -> int:
        """Check a ``StatefulDataLoader`` state for a loader with ``num_workers`` workers over this
        dataset; return its epoch (see ``resume.validate_loader_state``)."""
        epoch = validate_loader_state(self.template, self.split, loader_state, num_workers)
        h = hooks.current()
        if self.collator_rng is not None and h is not None:
            # the collate_fn's generators: as many as it has now, refused here rather than in a worker
            if num_workers == 0:
                states = [loader_state[DATASET_STATE]]
            else:
                states = [loader_state[SNAPSHOT][WORKER_SNAPSHOTS][worker_key(j)][DATASET_STATE]
                          for j in range(num_workers)]
            for j, st in enumerate(states):
                rng = st.get("rng") if isinstance(st, dict) else None
                collator = h.check_rng_state(rng, "state 'rng'")[1] if rng is not None else None
                if collator is not None:
                    try:
                        self.collator_rng.check(collator[1])
                    except ValueError as e:
                        raise ValueError(f"DataLoader state{f', worker {j}' if num_workers else ''}: {e}") from None
        return epoch

    # ------------------------------------------------------------------ pickling (DataLoader workers, copies)
    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.pop("_iterator", None)  # the copy iterates on its own
        if get_spawning_popen() is None:
            # the loader's collate_fn and the generators for its next workers go only to a spawned
            # DataLoader worker (which receives that collate_fn in the same pickle); a copy of the
            # dataset (pickle, copy.deepcopy) is a fresh one, not tied to that loader
            d.pop("collator_rng", None)
            d.pop("next_pass_rng", None)
        if not d["pending"]:
            d["active"] = None  # a pipeline being iterated is not shipped to DataLoader workers
        return d

    def __copy__(self) -> IterationSession:
        # as pickling does, but the copy gets its own copy of a loaded pass not iterated yet: both
        # would otherwise consume one node tree (what the copy yields, the original would skip)
        new = object.__new__(type(self))
        d = self.__getstate__()
        if d["active"] is not None:
            d["active"] = copy.deepcopy(d["active"])
        new.__setstate__(d)
        return new

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        h = hooks.current()
        if h is not None:
            # a copy (pickle, copy.deepcopy, copy.copy) gets its own shared epoch slot; a session
            # sent to a spawned DataLoader worker keeps reading its main process's
            h.adopt_unpickled(self)
