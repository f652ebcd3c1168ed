"""How a DataLoader worker's batches reach the main process: small tensors travel inside the
message, by value, instead of through shared memory.

torch sends every tensor a worker puts on its queue through shared memory: the worker moves the
tensor's storage into a new shared-memory segment, and the main process receives it with a socket
handshake that passes the file descriptor (torch's default ``file_descriptor`` strategy) or opens
it by name (``file_system``). That is the right way to move megabytes. For the 256-byte ``id``
column of a batch of 32 text rows it costs some hundred times the copy, and it is paid in the main
process, which all workers share: there it took about half the time of a text pipeline, and the
loader moved no more than 1-2k batches a second whatever the workers did.

:class:`InlineSmallTensors` wraps the loader's ``collate_fn``. In a worker it replaces each small
plain CPU tensor of the collated batch (at most ``max_bytes``, and at most :data:`INLINE_BUDGET`
bytes per batch) by a stand-in whose pickle carries the tensor's bytes, dtype and shape. The
main process unpickles a new tensor with the same values, dtype and shape: what the loader yields
is unchanged, only its path. Measured on 2 cores, one tensor per batch, 2 workers: 2.8-3.2x the
batches per second up to 16 KB, 2.2x at 64 KB, 1.3x at 256 KB, half from 1 MB on (with
``file_system``: 2.0-2.4x, 1.5x, 1.1x, 0.5x).

What stays on torch's path: tensors larger than the limit, subclasses of ``torch.Tensor``
(``nn.Parameter``, tensor wrappers), tensors that require grad, are not contiguous, not on the
CPU, not strided, quantized or carry a conjugate/negative bit, and anything inside
containers other than ``dict``, ``list`` and ``tuple`` (named tuples included). A list whose first
item is not a tensor or one of those containers is taken to hold no tensor (batches are
homogeneous), so long lists of ints or strings cost nothing to look at. Tensors that shared memory
with each other in the worker arrive as separate tensors (the same tensor object twice arrives as
one object).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import get_worker_info

#: tensors of at most this many bytes travel inside the worker's message by default
INLINE_MAX_BYTES = 64 << 10
#: at most this many bytes of tensors travel inside one message; the rest go through shared memory
INLINE_BUDGET = 256 << 10

_SCALARS = (int, float, bool, str, bytes, type(None), np.ndarray, np.generic)  # never hold a tensor


def tensor_from_bytes(data: bytes, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor a :class:`_Inline` stand-in pickled: a new, writable tensor of ``dtype`` and
    ``shape`` holding ``data``."""
    t = torch.empty(shape, dtype=dtype)
    if data:
        t.view(-1).view(torch.uint8).numpy()[:] = np.frombuffer(data, dtype=np.uint8)
    return t


class _Inline:
    """A small tensor in a worker's batch, pickled as its bytes (unpickled as a tensor)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def __reduce__(self):
        t = self.tensor
        return (tensor_from_bytes, (t.reshape(-1).view(torch.uint8).numpy().tobytes(), t.dtype, tuple(t.shape)))


def _inlinable(t: torch.Tensor, max_bytes: int) -> bool:
    return (t.device.type == "cpu" and t.layout is torch.strided and not t.requires_grad
            and t.nbytes <= max_bytes and t.is_contiguous() and not t.is_quantized
            and not t.is_conj() and not t.is_neg())


def inline_small_tensors(batch: Any, max_bytes: int = INLINE_MAX_BYTES, budget: int = INLINE_BUDGET) -> Any:
    """``batch`` with its small tensors replaced by stand-ins that pickle them by value (see the
    module's docstring); containers holding none are returned as they are."""
    left = [budget]
    done: dict[int, Any] = {}  # id of a tensor -> its stand-in, so that one object stays one object

    def walk(x: Any) -> Any:
        kind = type(x)
        if kind is torch.Tensor:
            got = done.get(id(x))
            if got is None:
                got = x
                if _inlinable(x, max_bytes) and x.nbytes <= left[0]:
                    left[0] -= x.nbytes
                    got = _Inline(x)
                done[id(x)] = got
            return got
        if kind is dict:
            items = {k: walk(v) for k, v in x.items()}
            return x if all(items[k] is v for k, v in x.items()) else items
        if isinstance(x, (list, tuple)) and (kind in (list, tuple) or hasattr(x, "_fields")):
            if not x or isinstance(x[0], _SCALARS):
                return x
            items = [walk(v) for v in x]
            if all(a is b for a, b in zip(items, x)):
                return x
            if kind is list:
                return items
            return tuple(items) if kind is tuple else kind(*items)
        return x

    return walk(batch)


class InlineSmallTensors:
    """A ``collate_fn`` that calls ``collate_fn`` and, in a DataLoader worker, lets the small tensors
    of its result travel to the main process by value (:func:`inline_small_tensors`). In the main
    process it returns ``collate_fn``'s result untouched."""

    def __init__(self, collate_fn: Callable[[Any], Any], max_bytes: int = INLINE_MAX_BYTES):
        self.collate_fn = collate_fn
        self.max_bytes = max_bytes

    def __call__(self, batch: Any) -> Any:
        out = self.collate_fn(batch)
        if get_worker_info() is None:
            return out
        return inline_small_tensors(out, self.max_bytes)

    def __repr__(self) -> str:
        return f"InlineSmallTensors({self.collate_fn!r}, max_bytes={self.max_bytes})"
