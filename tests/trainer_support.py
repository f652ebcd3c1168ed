"""What the Trainer tests share: a tiny model that records the ids it is fed, and a callback that
simulates a crash right after the checkpoint of a given step is complete. Import it only after
``pytest.importorskip("torch")`` / ``("transformers")``."""

from __future__ import annotations

import torch
import transformers


class Recorder(torch.nn.Module):
    """A tiny model that records what it is fed (its ``ids``, or its packed ``input_ids``)."""

    def __init__(self, width: int = 1):
        super().__init__()
        self.lin = torch.nn.Linear(width, 1)
        self.seen: list = []

    def forward(self, ids=None, input_ids=None, **_):
        x = ids if ids is not None else input_ids
        self.seen.extend(x.tolist())
        x = x.float()
        if x.dim() == 1:
            x = x.unsqueeze(-1)
        return {"loss": (self.lin(x) ** 2).mean()}


class Crash(Exception):
    pass


class CrashAfterSave(transformers.TrainerCallback):
    """Simulates a crash right after the checkpoint of step ``at`` is complete."""

    def __init__(self, at: int):
        self.at = at

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise Crash()
