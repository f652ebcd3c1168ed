"""What ``ri.StatefulDataLoader`` changes in the iterators that torch's and torchdata's loaders make:

* without workers, a batch the dataset raised in is rewound, so that a state taken after the error
  reads its rows again (:func:`rewind_batches_on_error`);
* with workers, the frame from which torch re-raises a worker's error is cleared as the error
  leaves, so that a caught error does not keep the iterator and its worker processes alive
  (:func:`free_on_worker_errors`);
* an iterator made before the loader loaded a state refuses to go on instead of re-reading the
  epoch (:func:`supersede`).

Each wrapper reaches the iterator weakly: an iterator must go with its last reference, since its
worker processes are shut down then (a reference cycle would leave that to the cyclic collector).
"""

from __future__ import annotations

import functools
import weakref
from inspect import GEN_CLOSED, getgeneratorstate
from types import GeneratorType
from typing import Any

from torch._utils import ExceptionWrapper

from ...nodes.batch import Rewind
from ...state import copy_example


def rewind_batches_on_error(it: Any, node: Any) -> None:
    """Without workers, torch's fetcher collects a batch by calling ``next()`` on the dataset's
    iterator ``batch_size`` times, and drops the rows it had when the dataset raises: a state taken
    after the error (the dataset's own, at that moment) would then lose them. The pipeline ``node``
    being read is put back where the batch began instead (as ``iter(batch_size)`` does), so that the
    state reads those rows again. With workers nothing is needed: the loader keeps the state each
    worker sent with its last batch.

    Only when the dataset's iterator is over - it raised, or it ended in this batch and the
    ``collate_fn`` (or pinning) raised after it: the fetcher's ``ended`` flag is put back too, or a
    state taken then would resume nothing. An error raised outside the dataset while its iterator
    is live (a ``collate_fn`` part-way through the epoch) leaves the pipeline alone, as torch does:
    the loop may go on with that iterator, whose generators would no longer match a state loaded
    under them (a shuffle buffer or a prefetch would repeat or lose rows). The rows given to the
    ``collate_fn`` in the batch where the input ended are copies, since a rewind after it keeps
    them (the copy of the state taken before the batch shares them with the shuffle buffer)."""
    # the iterator and its fetcher are reached by weak references: the wrappers they hold must not
    # keep them alive (a loop that breaks off would leave the dataset's iterator, and the threads of
    # a prefetch in it, to the cyclic garbage collector)
    rewind = Rewind(node)
    it_ref = weakref.ref(it)
    fetcher_ref = weakref.ref(it._dataset_fetcher)
    next_data = type(it)._next_data
    collate = it._dataset_fetcher.collate_fn
    ended: list = [False]  # the fetcher's flag before the batch

    def collate_copies_at_the_end(data):
        if fetcher_ref().ended:
            data = [copy_example(r) for r in data]
        return collate(data)

    def read():
        it = it_ref()
        fetcher = fetcher_ref()
        ended[0] = fetcher.ended

        def rewinds() -> bool:  # after an error: put the pipeline back? (then the fetcher's flag too)
            if fetcher is it._dataset_fetcher and _over(fetcher.dataset_iter):
                fetcher.ended = ended[0]
                return True
            return False

        return rewind.read(lambda: next_data(it), rewinds)

    it._dataset_fetcher.collate_fn = collate_copies_at_the_end
    it._next_data = read


def free_on_worker_errors(it: Any) -> Any:
    """``it``, a multiprocessing loader iterator, made so that an error raised in a worker (a
    ``map`` function that raises) does not keep the iterator - and its worker processes - alive
    until the cyclic garbage collector runs, once the caller has caught the error and dropped the
    iterator. torch re-raises a worker's error from a function whose frame keeps the error (a local
    variable), whose traceback holds that frame and the iterator's: a reference cycle. Its frame is
    cleared as the error leaves (its locals only name the error)."""
    if getattr(it, "_workers", None) and hasattr(type(it), "_process_data"):
        it._process_data = functools.partial(_process_data, weakref.ref(it), type(it)._process_data)
    return it


_RERAISE = ExceptionWrapper.reraise.__code__


def _process_data(it_ref: Any, method: Any, *args: Any) -> Any:
    try:
        return method(it_ref(), *args)
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is _RERAISE:
                tb.tb_frame.clear()  # (finished; reading its f_locals would keep them in a dict)
            tb = tb.tb_next
        raise


def _over(iterator: Any) -> bool:
    """Whether ``iterator`` (the dataset's) can yield nothing more: a generator that raised or
    returned. Anything else is taken as over (the pipeline is put back)."""
    return not isinstance(iterator, GeneratorType) or getgeneratorstate(iterator) == GEN_CLOSED


_SUPERSEDED_CLASSES: dict = {}


def supersede(it: Any) -> None:
    """Make ``it``, an iterator of a loader that has since loaded a state, refuse to go on.

    torchdata's ``load_state_dict`` drops the loader's iterator and keeps the state for the next
    one, but an iterator the training loop still holds (made before the load, e.g. to start the
    workers early) went on from where it was: the resumed run silently read the epoch again from
    its start. Its ``__next__`` now raises, naming the fix; it still shuts its workers down."""
    if it is None:
        return
    base = type(it)
    cls = _SUPERSEDED_CLASSES.get(base)
    if cls is None:
        def __next__(self):
            raise RuntimeError(
                "this DataLoader iterator was made before the loader's load_state_dict(): it would go on from "
                "where it was, not from the state loaded, which is for the loader's next iterator. Make the "
                "iterator after loading the state (iterate the loader again: for batch in loader / iter(loader))")

        cls = _SUPERSEDED_CLASSES[base] = type(base.__name__, (base,), {"__next__": __next__})
    it.__class__ = cls
