"""The per-example passes of ``map`` and ``filter`` (``nodes/map.py``): the plain hot loop
(``function(example)``, inlined), the general one (input columns, indices, keyword arguments),
calls started ahead (``ahead`` at once: an ``async`` function, or ``decode(num_threads=n)``), and
first the examples a loaded state holds in ``retry``. An example the function raised on stays in
``retry``, so a state taken then processes it again.

A mixin of :class:`~resumable_iterable.nodes.map.MapNode`, which owns the parameters, the state
schema (see its module doc), validation, loading and calling the function; this module iterates
that state per example."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Iterator

from ..state import ExampleList, copy_example
from .base import add_context
from .calls import CallsAhead


#: where an input held in a loaded state was read: not known
_HELD = object()


class ExamplePasses:
    """The per-example passes of :class:`~resumable_iterable.nodes.map.MapNode` (a mixin:
    ``self`` is the node)."""

    def _iter_examples(self) -> Iterator[dict]:
        if self.ahead > 1:
            return self._iter_ahead()
        general = self.input_columns is not None or self.with_indices or self.fn_kwargs or self.is_async
        loop = self._iter_examples_general if general else self._iter_examples_plain
        if self._state_dict["retry"]:
            return itertools.chain(self._iter_retry(), loop())
        return loop()

    def _failed(self, e: Exception, ex: dict, index: int) -> None:
        """The function raised on ``ex``: keep it in the state, so that a state taken now retries
        it (rather than skipping it) when it is loaded, and name where it came from."""
        st = self._state_dict
        st["index"] = index
        st["retry"] = ExampleList([ex])
        add_context(e, self._describe(f"example #{index}"))

    def _iter_retry(self) -> Iterator[dict]:
        """First, the examples read and not processed when the loaded state was taken."""
        st = self._state_dict
        retry = st["retry"]
        while retry:
            ex, index = copy_example(retry[0]), st["index"]  # a state copy may share the stored one
            try:
                out = self._apply_one(ex, index)
            except BaseException as e:
                # one example held: the child's state is right after it (else: where it is, unknown)
                add_context(e, self._describe(f"example #{index} (retried from the state)",
                                              at="child" if len(retry) == 1 else None))
                raise
            del retry[0]
            st["index"] = index + 1
            if out is not None:
                yield out

    def _iter_ahead(self) -> Iterator[dict]:
        """Per example, ``ahead`` calls at once: read that many inputs (after those held in the
        state), start their calls, wait for them all, yield the outputs in order. The inputs stay
        in ``retry`` until their output is yielded; a call that raised leaves its input first there,
        after the outputs of the inputs before it were yielded. An input that raises while read
        comes after the outputs of the inputs read before it."""
        st = self._state_dict
        held = st["retry"]
        child = self.children[0]
        it = iter(child)
        calls = CallsAhead(self._apply_one_async if self.is_async else self._apply_one, self.threads, self._runner)
        more, failure = True, None
        try:
            while True:
                where = [_HELD] * len(held)  # where each input was read (unknown for those from a state)
                while more and len(held) < self.ahead:
                    try:
                        ex = next(it)
                    except StopIteration:
                        more = False
                    except BaseException as e:  # raised after the outputs of the inputs read before it
                        more, failure = False, e
                    else:
                        held.append(ex)
                        where.append(child.position())
                if not held:
                    if failure is not None:
                        raise failure
                    return
                base = st["index"]
                results = calls.run([(copy_example(ex), base + j) for j, ex in enumerate(held)])  # a state may share ex
                for j, (out, error) in enumerate(results):
                    if error is not None:
                        held_in_state = where[j] is _HELD
                        what = f"example #{st['index']}" + (" (retried from the state)" if held_in_state else "")
                        add_context(error, self._describe(what, at=None if held_in_state else where[j]))
                        raise error
                    del held[0]
                    st["index"] += 1
                    if out is not None:
                        yield out
        finally:
            # a reference cycle otherwise: the error raised from here, its traceback holds this frame
            failure = error = results = None  # noqa: F841
            calls.close()

    def _iter_examples_general(self) -> Iterator[dict]:
        st = self._state_dict
        apply = self._apply_one
        for ex in self.children[0]:
            index = st["index"]
            st["index"] = index + 1
            try:
                out = apply(ex, index)
            except BaseException as e:  # KeyboardInterrupt too: a state saved then keeps the example
                self._failed(e, ex, index)
                raise
            if out is not None:
                yield out

    def _iter_examples_plain(self) -> Iterator[dict]:
        """The hot path: ``function(example)`` with no extra arguments, inlined (same result as
        :meth:`_apply_one`)."""
        st = self._state_dict
        fn = self.function
        remove = self.remove_columns
        for ex in self.children[0]:
            index = st["index"]
            st["index"] = index + 1
            try:
                inp = dict(ex)  # in the try: a Ctrl-C raised as this call returns keeps the example too
                out = fn(inp)
                if out is not None and out is not inp and type(out) is not dict and not isinstance(out, Mapping):
                    raise TypeError(f"{self.kind} function must return a dict or None, got {type(out).__name__}")
                # as HF, the output goes onto the example as it came, {**example, **out} (_finish, inlined);
                # in the try too: a Ctrl-C landing in _finish keeps the example, already counted
                res = self._finish(ex, inp, out) if remove else inp if out is None else {**ex, **out}
            except BaseException as e:
                self._failed(e, ex, index)
                raise
            yield res
