"""torch tensors in states, exactly: dtype (``bfloat16``, ``complex32``, ``bool``... included),
shape and bytes, and ``requires_grad``. An example holds one when a ``map`` returns tensors
(a tokenizer called with ``return_tensors="pt"``) below a shuffle buffer.

A tensor is stored as its raw bytes (C order), like a numpy array: inline base64 or a blob of a
binary state file, read on load straight into the new tensor's memory. Only dense CPU tensors of
the exact type ``torch.Tensor`` are stored; a tensor on another device, sparse, quantized or
nested, or of a subclass (``nn.Parameter``...) is refused with a ``TypeError`` saying why. The
dtype is looked up by name among torch's own dtypes: decoding runs no code of the state's choosing.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np


def tensor_class() -> type | None:
    """``torch.Tensor`` if torch is loaded (a tensor can only exist if torch was imported)."""
    mod = sys.modules.get("torch")
    return getattr(mod, "Tensor", None) if mod is not None else None


def tensor_bytes(t: Any) -> tuple[dict, np.ndarray]:
    """The fields describing tensor ``t`` and its bytes (a flat ``uint8`` array, C order)."""
    if t.device.type != "cpu":
        raise TypeError(f"cannot store a torch tensor on device {t.device} in a state: move it to the CPU "
                        "(.cpu()) in the function that makes it")
    if t.layout is not _torch().strided or t.is_quantized or t.is_nested:
        kind = "quantized" if t.is_quantized else "nested" if t.is_nested else f"{t.layout} (layout)"
        raise TypeError(f"cannot store a {kind} torch tensor in a state: only dense tensors are stored")
    fields: dict[str, Any] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
    if t.requires_grad:
        fields["requires_grad"] = True
    flat = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    raw = flat.view(_torch().uint8) if flat.numel() else flat.new_empty(0, dtype=_torch().uint8)
    return fields, raw.numpy()


def _torch() -> Any:
    return sys.modules["torch"]


def tensor_itemsize(obj: dict) -> tuple[Any, int]:
    """``(dtype, bytes per element)`` of an encoded tensor; ``ValueError`` for an unknown dtype."""
    try:
        import torch
    except ImportError:  # pragma: no cover - only a state saved with torch holds tensors
        raise ValueError("the state holds a torch tensor; install torch to load it") from None
    name = obj["dtype"]
    found = _dtypes(torch).get(name) if type(name) is str else None
    if found is None:
        raise ValueError(f"unknown torch dtype {name!r}")
    return found


@functools.lru_cache(maxsize=1)
def _dtypes(torch: Any) -> dict:
    """Name -> ``(dtype, bytes per element)`` of torch's own dtypes (not the quantized ones)."""
    out = {}
    for d in vars(torch).values():
        name = str(d).removeprefix("torch.") if isinstance(d, torch.dtype) else ""
        if name and not name.startswith("q"):  # qint8...: quantized
            try:  # the dtype's own size: allocating a complex32 tensor warns that it is experimental
                out[name] = (d, d.itemsize if hasattr(d, "itemsize") else torch.empty(0, dtype=d).element_size())
            except (RuntimeError, TypeError):  # pragma: no cover - a dtype torch cannot allocate
                pass
    return out


def tensor_from_bytes(obj: dict, dtype: Any, data: np.ndarray) -> Any:
    """The tensor ``obj`` describes, sharing the memory of ``data`` (a new flat ``uint8`` array
    holding its bytes)."""
    import torch

    flat = torch.from_numpy(data)
    out = (flat.view(dtype) if data.size else torch.empty(0, dtype=dtype)).reshape(obj["shape"])
    rg = obj.get("requires_grad", False)
    if rg is not False:
        if rg is not True:
            raise ValueError(f"bad requires_grad {rg!r}")
        out.requires_grad_(True)
    return out
