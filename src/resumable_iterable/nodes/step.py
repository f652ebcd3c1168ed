"""``step``: keep every ``step``-th example starting at ``offset`` (example-level split by rank
when the shards do not divide evenly among ranks, as HF ``split_dataset_by_node`` does).

State: ``{"node", "seen", "children"}`` - examples read from the child so far.
"""

from __future__ import annotations

from typing import Iterator

from .base import Node
from .checks import check_int


class StepNode(Node):
    kind = "step"

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def __init__(self, child: Node, step: int, offset: int):
        if type(step) is not int or step < 1 or type(offset) is not int or not 0 <= offset < step:
            raise ValueError(f"invalid step/offset: {step}/{offset}")
        self.step = step
        self.offset = offset
        super().__init__([child])

    def params(self) -> dict:
        return {"step": self.step, "offset": self.offset}

    def _own_state(self) -> dict:
        return {"seen": 0}

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "seen", where)

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        step, offset = self.step, self.offset
        for ex in self.children[0]:
            seen = st["seen"]
            st["seen"] = seen + 1
            if seen % step == offset:
                yield ex

    # -- capabilities (see ``Node``): examples pass through unchanged
    def replay_problem(self) -> str | None:
        return None

    def row_local_problem(self) -> str | None:
        return "a step node (split_dataset_by_node): split after the shuffle"
