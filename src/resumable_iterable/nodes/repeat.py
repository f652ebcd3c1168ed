"""``repeat(num_times)``: iterate the child ``num_times`` times (``None``: forever).

State: ``{"node", "round", "children"}``. Each round resets the child in place, so every
round reads the same examples in the same order (as HF does; use ``set_epoch`` for a new
shuffle order). A child that yields nothing in a full round ends an endless repeat instead
of spinning.
"""

from __future__ import annotations

from typing import Iterator

from .base import Node
from .checks import as_int, check_int


class RepeatNode(Node):
    kind = "repeat"

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True

    def __init__(self, child: Node, num_times: int | None):
        self.num_times = as_int(num_times, "repeat(num_times)", none_ok=True)
        super().__init__([child])

    def params(self) -> dict:
        return {"num_times": self.num_times}

    def _own_state(self) -> dict:
        return {"round": 0}

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "round", where, hi=self.num_times)

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        child = self.children[0]
        fresh = False
        while self.num_times is None or st["round"] < self.num_times:
            yielded = False
            for ex in child:
                yielded = True
                yield ex
            if fresh and not yielded:
                return
            st["round"] += 1
            try:
                child.reset()
            except BaseException:  # a Ctrl-C cut the reset short: finish it, the state counts the new round
                child.reset()
                raise
            fresh = True

    # -- capabilities (see ``Node``): examples pass through unchanged
    def position_back(self, back: int) -> dict | None:
        """The input's, in the round being read (the input counts the examples of this round only);
        ``None`` in an earlier round (the input was reset since)."""
        n = self.children[0].examples_yielded()
        return None if n is None or back >= n else self.children[0].position_back(back)

    def replay_problem(self) -> str | None:
        return None

    def row_local_problem(self) -> str | None:
        return "a repeat node: repeat after the shuffle (with set_epoch for new orders)"
