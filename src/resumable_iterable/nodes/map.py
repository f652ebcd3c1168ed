"""``map``: apply a function per example or per batch of examples.

State: ``{"node", "index", "prev", "skip", "retry", "children"}``

* ``index`` - input examples consumed before the current batch (drives ``with_indices``).
* ``prev`` / ``skip`` - *batched mode only*: a copy of the child's state taken when the
  current batch started, and how many output rows of that batch were already yielded.
  A checkpoint taken in the middle of a batch rewinds the child to ``prev``, re-reads and
  re-computes the batch and skips the ``skip`` rows already yielded: no row is replayed and
  none is dropped. This needs the batched function to be deterministic, as HF assumes too.
  Between batches ``prev`` is ``None``.
* ``retry`` - *per-example mode*: the input examples read and not yet processed: empty, or the
  one the function raised on, or (calls started ahead, below) those whose calls were in flight.
  A state taken then processes them again first when it is loaded, instead of skipping them (in
  batched mode the batch is simply not consumed: ``prev`` rewinds it). They are copied first (a
  state copy shares them).
  *Batched mode*, when the child holds a buffer of stored examples at least as large as a batch
  (a ``shuffle`` below, whose buffer a DataLoader worker cannot describe by arithmetic): ``prev``
  would copy that whole buffer at every batch, and the state would carry it (into every state a
  worker sends during the batch, deep-copied by every ``state_dict()`` in a process, into every
  file saved). The batch keeps its input rows in ``retry`` instead (copies, as read: the
  function may edit its input in place), with ``skip`` as above; the child's state then stands
  after them. A resumed pass computes the batch from them (reading the rest first if it was cut
  short by an error below).

Errors raised *below* the node (a generator, or another function, failing while a batch is being
read) rewind the child to the start of the batch as well (or leave the rows read in ``retry``),
so no row read for it is lost.

The function receives a shallow copy of the example (or a fresh batch dict), so in-place edits
never reach examples still referenced by a shuffle buffer or a saved state. As in HF, what it
returns goes onto the example as it came (a column the function popped or reassigned without
returning it keeps its value; a function that returns ``None``, which HF refuses, keeps the
example as the function left it). With ``remove_columns``, as in HF, the removed columns are gone
from the output unless the function returned them in a new dict (a function that edits and
returns its input loses them too).

``async def`` functions run on an event loop the iteration owns (on a helper thread when the
caller already runs a loop; see ``calls.py``). Per example, as in HF, up to ``ahead`` calls (HF's
1000 for an ``async`` function; ``decode(num_threads=n)``: ``2 * n`` calls on ``n`` threads) run at
once: that many inputs are read, their calls started together and waited for, and the outputs
yielded in order; the inputs stay in ``retry`` until their output is yielded, so the state stays
exact (a resumed pass calls the function again on those not yielded).

This module holds the node: its parameters, state, validation, calling the function and
re-deriving an example; its passes are mixins, per example in ``map_examples.py`` (the hot loop,
retries, calls ahead) and by batches in ``map_batches.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterator

from ..state import ExampleList
from .base import Node
from .checks import check_int
from .calls import AsyncRunner, is_async_function
from .map_batches import BatchPass
from .map_examples import ExamplePasses
from .replay import MAX_INT, check_list
from .rows import rows_read


#: per-example calls of an ``async`` function run at once (HF's ``max_num_running_async_map_functions_in_parallel``)
ASYNC_AHEAD = 1000


class MapNode(ExamplePasses, BatchPass, Node):
    kind = "map"

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): ``cast``, a filter after ``with_format``
        return bool(getattr(self.function, "keeps_arrow_rows", False))

    def __init__(self, child: Node, function: Callable | None, *, batched: bool = False, batch_size: int | None = 1000,
                 with_indices: bool = False, input_columns: list[str] | None = None,
                 remove_columns: list[str] | None = None, fn_kwargs: dict | None = None,
                 drop_last_batch: bool = False, replace_input: bool = False, threads: int = 0):
        if function is None:
            function = _identity
        if not callable(function):
            raise TypeError(f"{self.kind} function must be callable, got {type(function).__name__}")
        if batched and (batch_size is None or batch_size <= 0):
            batch_size = None  # whole input as one batch, as HF does for batch_size<=0/None
        if batched and batch_size is not None and not isinstance(batch_size, int):
            raise TypeError(f"batch_size must be an int, got {batch_size!r}")
        self.function = function
        self.batched = bool(batched)
        self.batch_size = batch_size
        self.with_indices = bool(with_indices)
        self.input_columns = [input_columns] if isinstance(input_columns, str) else (
            list(input_columns) if input_columns else None)
        self.remove_columns = [remove_columns] if isinstance(remove_columns, str) else list(remove_columns or [])
        self.fn_kwargs = dict(fn_kwargs or {})
        #: the function gets the input columns' values (else the whole example or batch: a function
        #: that picks them itself, after formatting the whole, as ``formatted_calls.py``'s do)
        self.pick_columns = self.input_columns is not None and not getattr(function, "takes_whole_input", False)
        self.drop_last_batch = bool(drop_last_batch)
        self.is_async = is_async_function(function)
        self._runner: AsyncRunner | None = None  # set while an async function is being iterated
        # per example, calls run at once (not a parameter: the outputs and the states are the same):
        # a plain function on `threads` threads, 2 * threads calls at a time (HF's decode(num_threads))
        self.threads = int(threads)
        self.ahead = 1 if self.batched else (ASYNC_AHEAD if self.is_async else max(1, 2 * self.threads))
        #: batched: the function's output replaces the batch (no input column is kept), as HF
        #: does for a function given formatted tables (see ``formatted_calls.py``)
        self.replace_input = bool(replace_input)
        super().__init__([child])

    def params(self) -> dict:
        p = {"batched": self.batched, "batch_size": self.batch_size if self.batched else None,
             "with_indices": self.with_indices, "remove_columns": self.remove_columns,
             "input_columns": self.input_columns, "drop_last_batch": self.drop_last_batch}
        if self.replace_input:  # only then: the other maps' fingerprints stay as they were
            p["replace_input"] = True
        return p

    def _own_state(self) -> dict:
        return {"index": 0, "prev": None, "skip": 0, "retry": ExampleList()}

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        self._state_dict["retry"] = ExampleList(self._state_dict["retry"])

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "index", where)
        check_int(state, "skip", where)
        retry = state["retry"]
        if not isinstance(retry, list) or not all(isinstance(ex, dict) for ex in retry):
            raise ValueError(f"{where}: 'retry' must be a list of the examples read and not processed yet (objects)")
        if state["prev"] is not None:
            if not self.batched:
                raise ValueError(f"{where}: 'prev' must be null for a per-example {self.kind}")
            if retry:
                raise ValueError(f"{where}: a batch in progress keeps either 'prev' or its rows in 'retry', not both")
            self.children[0].validate(state["prev"], f"{where}.prev")
        elif state["skip"] and not (self.batched and retry):
            raise ValueError(f"{where}: 'skip' must be 0 when no batch is in progress")
        if self.batched and retry:
            # rows this node can never have kept: loaded, they crashed the pass or lost/repeated rows
            size = self.batch_size
            if size is None:
                raise ValueError(f"{where}: 'retry' holds rows, but this {self.kind} reads its whole input as one "
                                 "batch (batch_size=None), whose start it keeps as 'prev', never as rows")
            if len(retry) > size:
                raise ValueError(f"{where}: 'retry' holds {len(retry)} rows, more than a batch of this "
                                 f"{self.kind} (batch_size={size})")
            if state["skip"] and self.drop_last_batch and len(retry) < size:
                raise ValueError(f"{where}: a batch in progress holds {len(retry)} rows, but with "
                                 f"drop_last_batch=True only whole batches (batch_size={size}) are computed")

    # ------------------------------------------------------------------ calling the function
    def _describe(self, what: str, first: dict | None = None, at: Any = "child") -> str:
        """The note added to an error: the node, ``what`` failed, and where it was read (``first``:
        the position of a batch's first row; ``at``: of the (last) row, by default the child's)."""
        name = getattr(self.function, "__qualname__", repr(self.function))
        where = rows_read(first, self.children[0].position() if at == "child" else at)
        return f"in {self.kind}({name}) on {what}{where}"

    def _args(self, arg: Any, index: Any) -> list:
        args = [arg[c] for c in self.input_columns] if self.pick_columns else [arg]
        if self.with_indices:
            args.append(index)
        return args

    def _call(self, arg: Any, index: Any) -> Any:
        args = self._args(arg, index)
        if not self.is_async:
            return self.function(*args, **self.fn_kwargs)
        runner = self._runner
        if runner is not None:
            return runner.run(self.function(*args, **self.fn_kwargs))
        runner = AsyncRunner()  # called outside an iteration (e.g. re-deriving replayed examples)
        try:
            return runner.run(self.function(*args, **self.fn_kwargs))
        finally:
            runner.close()

    def _apply_one(self, ex: dict, index: int) -> Any:
        """Output example, or ``None`` to drop it (filter)."""
        inp = dict(ex)
        return self._finish(ex, inp, self._call(inp, index))

    async def _apply_one_async(self, ex: dict, index: int) -> Any:
        inp = dict(ex)
        return self._finish(ex, inp, await self.function(*self._args(inp, index), **self.fn_kwargs))

    def _finish(self, ex: dict, inp: dict, out: Any) -> Any:
        """The output example for input ``ex`` given to the function as ``inp``, which returned ``out``."""
        if out is None:  # the example as the function left it
            base = inp
        elif not isinstance(out, Mapping):
            raise TypeError(f"{self.kind} function must return a dict or None, got {type(out).__name__}")
        else:
            base = dict(ex)  # as HF, {**example, **out}: a popped column comes back, columns keep their order
        if self.remove_columns:
            for c in self.remove_columns:
                base.pop(c, None)
                if out is inp:
                    inp.pop(c, None)
        if out is not None and out is not base:
            base.update(out)
        return base

    # ------------------------------------------------------------------ capabilities (see ``Node``)
    def describe(self) -> str:
        name = getattr(self.function, "__qualname__", type(self.function).__name__)
        return f"{self.kind}({name}{', batched=True' if self.batched else ''})"

    def replay_problem(self) -> str | None:
        if self.batched:
            return ("a batched function's output rows depend on the whole batch, so one row cannot be "
                    "re-derived alone")
        return None

    def rereads_plainly(self) -> bool:
        return False  # re-deriving runs the user's function again

    def provenance_reader(self):
        # a node above reads where each example came from as it receives it: calls one at a time,
        # so that the nodes below describe the example being yielded
        self.ahead = 1
        child = self.children[0].provenance_reader()
        if not self.with_indices:
            return child
        st = self._state_dict
        return lambda: [st["index"] - 1, *child()]

    def position_back(self, back: int) -> dict | None:
        """Per example (not a filter), one output per input, in order: the input's, past the inputs
        read and not yielded yet (``retry``: calls started ahead, or inputs a state held)."""
        if self.batched or self.kind != "map":
            return None
        return self.children[0].position_back(back + len(self._state_dict["retry"]))

    def examples_yielded(self) -> int | None:
        """Per example (not a filter): the inputs read, but those not yielded yet (``retry``)."""
        if self.batched or self.kind != "map":
            return None
        n = self.children[0].examples_yielded()
        return None if n is None else n - len(self._state_dict["retry"])

    def position_of(self, prov: Any) -> dict | None:
        return self.children[0].position_of(prov[1:] if self.with_indices else prov)

    def check_provenance(self, prov: Any, where: str) -> None:
        if self.with_indices:
            check_list(prov, where)
            if not prov or type(prov[0]) is not int or not 0 <= prov[0] <= MAX_INT:
                raise ValueError(f"{where}: a {self.kind} position starts with a non-negative example index, "
                                 f"got {prov!r}")
            prov = prov[1:]
        self.children[0].check_provenance(prov, where)

    def reread(self, provs: list[list], bar: Any = None) -> list[dict]:
        """The function is run again on each re-read input, with the index it had; a filter that
        now rejects an example it had kept is reported."""
        if self.with_indices:
            indices = [p[0] for p in provs]
            inputs = self.children[0].reread([p[1:] for p in provs], bar)
        else:
            indices = [0] * len(provs)
            inputs = self.children[0].reread(provs, bar)
        return [self._reapply(ex, i) for ex, i in zip(inputs, indices)]

    def _reapply(self, ex: dict, index: int) -> dict:
        try:
            out = self._apply_one(ex, index)
        except Exception as e:
            e.add_note(f"while re-deriving a buffered example through {self.describe()} (example #{index}) "
                       "to resume a replay-mode shuffle")
            raise
        if out is None:
            raise ValueError(
                f"resuming a replay-mode shuffle: {self.describe()} now rejects example #{index} it had kept when "
                "the state was saved: the predicate is not deterministic, or the data changed since then"
            )
        return out

    def row_local_problem(self) -> str | None:
        what = f"{self.kind}({getattr(self.function, '__qualname__', type(self.function).__name__)}"
        if self.batched:
            return (f"a batched {what}, batched=True): a batched function sees the rows in shuffled "
                    f"batches, so its output would not be a shuffle of the unshuffled output")
        if self.with_indices:
            return (f"a {what}, with_indices=True): the indices it receives are positions in the "
                    f"stream, which the global shuffle changes")
        return None

    # ------------------------------------------------------------------ iteration
    def _iter(self) -> Iterator[dict]:
        if self.is_async:
            return self._iter_async()
        return self._iter_batched() if self.batched else self._iter_examples()

    def _iter_async(self) -> Iterator[dict]:
        """The same loops, each call of the async function awaited on this iteration's event loop."""
        runner = self._runner = AsyncRunner()
        try:
            yield from (self._iter_batched() if self.batched else self._iter_examples())
        finally:
            self._runner = None
            runner.close()


def _identity(x: Any, *args: Any, **kwargs: Any) -> Any:
    return x


