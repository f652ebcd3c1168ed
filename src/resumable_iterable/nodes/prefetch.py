"""``prefetch(n)``: read up to ``n`` examples ahead in a background thread while the consumer
(the training step) works on the current one.

The thread pulls from the pipeline below and, with every example, takes a copy of that
pipeline's state (``state_dict`` stays cheap: no example is deep-copied). What this node shows
as its child's state is therefore *not* the live child, which the thread keeps moving, but the
copy that goes with the newest example the consumer has received; the examples received but not
yet yielded are kept in the state too:

State: ``{"node", "ahead", "children"}``

* ``children`` - the state of the pipeline below as of the last example received from the
  thread (a snapshot, updated in place as examples arrive).
* ``ahead`` - examples received from the thread and not yet yielded, in order (copied
  shallowly). On resume they are yielded first, then reading goes on from the snapshot: no
  example is lost and none is read twice. One a state copy may share is yielded as a copy
  (``HeldExamples``), so that the consumer's in-place edits cannot change a state taken earlier.

The thread stops when the iteration is closed (``break``, ``close()``, garbage collection),
when the pipeline below raises (the error reaches the consumer after the examples read
before it, and the state then includes what the failing node keeps about it, e.g. ``map``'s
retry), and at interpreter exit (daemon thread, stopped by an ``atexit`` hook).
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from typing import Iterator

from ..state import HeldExamples, copy_example, copy_state
from .base import Node
from .checks import as_int, check_examples

_OK, _END, _ERR = 0, 1, 2
_LIVE: weakref.WeakSet = weakref.WeakSet()
_THREAD = threading.local()  # .reading: this thread is a prefetch thread reading its pipeline


def reading_ahead() -> bool:
    """Whether this is the background thread of a prefetch, producing examples of the pass it
    reads ahead in (while the consumer's thread may be elsewhere: ``distributed.current_worker``)."""
    return getattr(_THREAD, "reading", False)


class _Reader:
    """The background thread of one iteration."""

    def __init__(self, child: Node, size: int, started: list):
        self.child = child
        self.queue: queue.Queue = queue.Queue(maxsize=size)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="resumable_iterable-prefetch", daemon=True)
        _LIVE.add(self)
        started.append(self)  # before the thread starts: a Ctrl-C landing from here on leaves it to close
        self.thread.start()

    def _put(self, item: tuple) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        _THREAD.reading = True
        child = self.child
        try:
            position = child.position
            for ex in child:
                # where ex came from goes with it (for error notes): the child reads on meanwhile
                if not self._put((_OK, (ex, position()), copy_state(child._state_dict))):
                    return
            self._put((_END, None, copy_state(child._state_dict)))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._put((_ERR, e, copy_state(child._state_dict)))

    def get(self) -> tuple:
        """The next item of the thread, waiting for it. A reader stopped at interpreter exit
        (:func:`_stop_all`) puts nothing more: its consumer, when it is itself the thread of a
        prefetch above (prefetch nested in prefetch), then stops too instead of waiting forever
        (and the exit for its ``join``)."""
        while True:
            try:
                return self.queue.get(timeout=0.05)
            except queue.Empty:
                if self.stop.is_set():
                    raise RuntimeError("prefetch: the reading thread below was stopped") from None

    #: bound here: ``close`` may run while the interpreter tears modules down (a generator left
    #: unfinished at exit is closed then), when module globals may already be gone
    _current_thread = staticmethod(threading.current_thread)

    def close(self, timeout: float = 2.0) -> None:
        self.stop.set()
        q = self.queue
        with q.mutex:  # empty it, waking a thread blocked putting into it (it then sees the stop)
            q.queue.clear()
            q.not_full.notify_all()
        # a thread never started (a Ctrl-C landed in ``__init__``) has nothing to join
        if self.thread is not self._current_thread() and self.thread.ident is not None:
            self.thread.join(timeout)


@atexit.register
def _stop_all() -> None:
    for reader in list(_LIVE):
        reader.close(timeout=1.0)


class PrefetchNode(Node):
    kind = "prefetch"
    #: where the last example yielded came from, for error notes (:meth:`position`; not state)
    _position: dict | None = None

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def __init__(self, child: Node, size: int):
        size = as_int(size, "prefetch(n)", lo=1)  # numpy integers and one-element tensors too
        self.size = size
        super().__init__([child])

    def params(self) -> dict:
        return {"size": self.size}

    def _fresh_state(self) -> dict:
        # the parent sees a snapshot of the child's state, never the dict the thread is moving
        return {"node": self.kind, **self._own_state(),
                "children": [copy_state(c._state_dict) for c in self.children]}

    def _own_state(self) -> dict:
        return {"ahead": HeldExamples()}

    def _sync_view(self) -> None:
        view = self._state_dict["children"][0]
        view.clear()
        view.update(copy_state(self.children[0]._state_dict))

    def _after_reset(self) -> None:
        self._sync_view()

    def shuffle_shards(self, seed: int | None) -> None:
        super().shuffle_shards(seed)
        self._sync_view()  # a shuffle above sets the shard order after this node was reset

    def load(self, state: dict) -> None:
        super().load(state)
        self._state_dict["ahead"] = HeldExamples(self._state_dict["ahead"])  # not owned: the state shares them
        self._sync_view()

    def _validate_own(self, state: dict, where: str) -> None:
        check_examples(state["ahead"], where, "ahead")
        if not all(isinstance(ex, dict) for ex in state["ahead"]):
            raise ValueError(f"{where}: every example read ahead in 'ahead' must be an object")
        if len(state["ahead"]) > self.size:
            raise ValueError(f"{where}: {len(state['ahead'])} examples read ahead, more than prefetch({self.size})")

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        view = st["children"][0]
        child = self.children[0]
        # the live child may have run ahead of what was yielded (an earlier iteration stopped
        # early): continue from the snapshot that goes with the examples still in `ahead`
        child.load(copy_state(view))
        started: list = []  # the reader, once its thread may run (closed below, even after a Ctrl-C)
        try:
            reader = _Reader(child, self.size, started)
            self._position = None
            ahead = st["ahead"]
            # where the last len(positions) examples of `ahead` came from (those loaded from a state:
            # not known)
            positions: list = []
            while True:
                if not ahead:
                    kind, value, snap = reader.get()
                    items = [(kind, value, snap)]
                    while kind == _OK:
                        try:
                            kind, value, snap = reader.queue.get_nowait()
                        except queue.Empty:
                            break
                        items.append((kind, value, snap))
                    got = [v[0] for k, v, _ in items if k == _OK]
                    flags = b"\x01" * len(got)
                    positions[:] = [v[1] for k, v, _ in items if k == _OK]
                    last_kind, last_value, snap = items[-1]
                    # the examples and the child's state that goes with them, recorded together
                    # (nothing called in between: no check point for a Ctrl-C); the snapshot was
                    # copied by the thread for this node alone
                    ahead[:] = got
                    ahead.owned[:] = flags
                    st["children"][0] = view = snap
                    if last_kind != _OK and not ahead:
                        if last_kind == _ERR:
                            raise last_value
                        return
                    if last_kind != _OK:
                        # yield what was read before the end / the error, then finish
                        while ahead:
                            ex = self._next(ahead, positions)
                            del ahead[0]  # nothing called from here to the yield
                            del ahead.owned[0]
                            yield ex
                        if last_kind == _ERR:
                            raise last_value
                        return
                ex = self._next(ahead, positions)
                del ahead[0]  # nothing called from here to the yield
                del ahead.owned[0]
                yield ex
        finally:
            # a reference cycle otherwise: the error raised from here, its traceback holds this frame
            items = value = last_value = None  # noqa: F841
            for r in started:
                r.close()

    def _next(self, ahead: HeldExamples, positions: list) -> dict:
        """The next example read ahead, left in ``ahead`` (the caller takes it out right before it
        yields it, so that a Ctrl-C landing here or as this returns loses nothing); a copy if a
        state taken since it was read may share it (the consumer may edit what it is given in place)."""
        self._position = positions.pop(0) if len(positions) == len(ahead) else None
        ex = ahead[0]
        return ex if ahead.owned[0] else copy_example(ex)

    def position(self) -> dict | None:
        """Where the last example yielded came from, as the thread saw it (the live child has read ahead)."""
        return self._position
