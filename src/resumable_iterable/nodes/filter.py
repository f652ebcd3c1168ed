"""``filter``: keep the examples for which a predicate is true, per example or per batch.

It shares ``map``'s state and its mid-batch checkpointing (see ``nodes/map.py``): a batched
predicate checkpointed in the middle of a batch resumes by computing the batch again (re-read,
or from the rows it keeps) and skipping the rows already yielded.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from .base import Node
from .map import MapNode
from .rows import rows_to_batch


class FilterNode(MapNode):
    kind = "filter"

    def __init__(self, child: Node, function: Callable | None, *, batched: bool = False, batch_size: int | None = 1000,
                 with_indices: bool = False, input_columns: list[str] | None = None, fn_kwargs: dict | None = None):
        if function is None:  # keep everything, as HF does
            function = _keep_batch if batched else _keep_example
        super().__init__(child, function, batched=batched,
                         batch_size=batch_size, with_indices=with_indices, input_columns=input_columns,
                         fn_kwargs=fn_kwargs)

    def params(self) -> dict:
        p = super().params()
        del p["remove_columns"], p["drop_last_batch"]
        return p

    def _validate_own(self, state: dict, where: str) -> None:
        super()._validate_own(state, where)
        if self.batched and state["retry"] and state["skip"] > len(state["retry"]):
            raise ValueError(f"{where}: 'skip' = {state['skip']}, more than the {len(state['retry'])} rows of the "
                             "batch in progress (a filter yields at most its rows)")

    def _finish(self, ex: dict, inp: dict, out: Any) -> Any:
        return ex if out else None

    def _iter_examples_plain(self) -> Iterator[dict]:
        """The hot path: ``function(example)`` with no extra arguments, inlined (same result as
        :meth:`_apply_one`: the predicate sees a copy, the example itself is yielded)."""
        st = self._state_dict
        fn = self.function
        for ex in self.children[0]:
            index = st["index"]
            st["index"] = index + 1
            try:
                keep = fn(dict(ex))
            except BaseException as e:
                self._failed(e, ex, index)
                raise
            if keep:
                yield ex

    def _apply_batch(self, rows: list[dict], index: int) -> list[dict]:
        mask = self._call(rows_to_batch(rows), list(range(index, index + len(rows))))
        try:
            mask = list(mask)
        except TypeError:
            raise TypeError(f"batched filter function must return a list of booleans, got {type(mask).__name__}") from None
        if len(mask) != len(rows):
            raise ValueError(f"batched filter function returned {len(mask)} booleans for {len(rows)} rows")
        return [r for r, keep in zip(rows, mask) if keep]


def _keep_example(*args: Any, **kwargs: Any) -> bool:
    return True


def _keep_batch(first: Any, *args: Any, **kwargs: Any) -> list[bool]:
    """``first`` is the batch dict, or the first input column's values with ``input_columns``."""
    n = len(next(iter(first.values()))) if isinstance(first, dict) else len(first)
    return [True] * n
