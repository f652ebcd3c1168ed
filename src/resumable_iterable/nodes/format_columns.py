"""Which columns of a Python batch HF's numpy / torch formatter formats from their values, where
an Arrow table of the batch would change them: decoded media (PIL images, also in lists and
structs), tensors of dtypes numpy has not, numpy arrays (of numbers or fixed-width strings, alone
or next to other values), numpy scalars, and values no Arrow column holds. The format node
(``format.py``) formats those columns with the formatter, and the others through an Arrow table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


def needs_decoding(features: Any) -> bool:
    if features is None:
        return False
    from datasets.features.features import require_decoding

    return any(require_decoding(f) for f in features.values())


def decoded_columns(features: Any) -> set:
    """The columns whose features HF decodes (``Image``, ``Audio``..., also inside lists and structs)."""
    if features is None:
        return set()
    from datasets.features.features import require_decoding

    return {name for name, f in features.items() if require_decoding(f)}


def image_columns(batch: dict) -> set:
    """The columns of a Python batch whose first value that is not ``None`` is a PIL image, or a torch
    tensor of a dtype numpy has not (``bfloat16``, which a map may return): formatted from their
    values, as HF formats them (an Arrow table cannot hold them)."""
    import sys

    image = getattr(sys.modules.get("PIL.Image"), "Image", None)
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    if image is None and tensor is None:
        return set()
    kinds = tuple(t for t in (image, tensor) if t is not None)
    out = set()
    for k, v in batch.items():
        first = next((x for x in v if x is not None), None) if type(v) is list else None
        if isinstance(first, kinds) and (image is not None and isinstance(first, image) or _not_numpy(first)):
            out.add(k)
        elif image is not None and type(first) in (list, tuple, dict) and _holds_image(first, image):
            out.add(k)  # images in a list or struct (a map's crops or frames): an Arrow table encodes them
    return out


def _holds_image(value: Any, image: type, depth: int = 4) -> bool:
    """Whether ``value``, a list or dict, holds a PIL image (a list's first value not ``None``, any
    value of a dict, nested up to ``depth`` levels)."""
    if isinstance(value, image):
        return True
    if depth == 0:
        return False
    if type(value) in (list, tuple):
        first = next((x for x in value if x is not None), None)
        return first is not None and _holds_image(first, image, depth - 1)
    if type(value) is dict:
        return any(_holds_image(x, image, depth - 1) for x in value.values() if x is not None)
    return False


def _not_numpy(t: Any) -> bool:
    """Whether numpy cannot hold tensor ``t``'s dtype."""
    try:
        np.asarray(t.reshape(-1)[:0])
    except TypeError:
        return True
    return False


#: numpy dtype kinds of the arrays :func:`array_columns` takes: bool, signed / unsigned integers,
#: floats, and fixed-width strings and bytes (``'<U2'``, ``'|S2'``: HF stacks those too)
_ARRAY_KINDS = frozenset("biufUS")
#: numpy dtype kinds of the scalars :func:`scalar_columns` takes: bool, signed / unsigned integers, floats
_NUMBER_KINDS = frozenset("biuf")


def array_columns(batch: dict, schema: pa.Schema | None, skip: set) -> tuple[set, set]:
    """The columns of a Python batch holding numpy arrays (``ndim >= 1``) of numbers or fixed-width
    strings (a map's pixel or feature arrays) whose Arrow type no ``schema`` declares, as two sets:

    * all values such arrays: HF's formatter makes them one array or tensor (or a list of them
      where the shapes or dtypes differ) straight from the arrays, with the dtypes it gives any
      number; string arrays stay ``'<U'`` / ``'S'``. Through an Arrow table they were turned into
      nested Python lists, then read back number row by number row - 5-20 times slower than
      decoding a small JPEG (``benchmarks/bench_pipelines.py``, vision) - and strings came back
      as object arrays;
    * such arrays next to other values (Python lists, PIL images; ``None`` aside): formatted from
      the values too, as HF's formatter does - a table would make the arrays lists of the same
      type as the lists and stack them all (HF stacks them only where each value's own array
      has the same dtype and shape: Python floats are float64, a numpy formatter's arrays
      float32)."""
    names = schema.names if schema is not None else ()
    arrays, mixed = set(), set()
    kinds = _ARRAY_KINDS
    for k, v in batch.items():
        if k in skip or k in names or type(v) is not list or not v or np.ndarray not in set(map(type, v)):
            continue  # (the types at once: a column of lists pays a microsecond, not one per value)
        array = other = none = False
        for x in v:
            if type(x) is np.ndarray and x.ndim and x.dtype.kind in kinds:
                array = True
            elif x is None:
                none = True
            else:
                other = True
                if array:
                    break
        if array:
            if other:
                mixed.add(k)
            elif not none:
                arrays.add(k)
    return arrays, mixed


#: what building an Arrow table of Python values raises when a value has no Arrow type
NOT_ARROW = (pa.ArrowException, TypeError, ValueError, OverflowError)


def unfit_columns(batch: dict, skip: set, to_table: Any) -> set:
    """The columns of a Python batch (other than ``skip``) that ``to_table`` cannot make an Arrow
    column of, each tried alone (only after the whole batch failed)."""
    out = set()
    for k, v in batch.items():
        if k in skip:
            continue
        try:
            to_table({k: v})
        except NOT_ARROW:
            out.add(k)
    return out


def scalar_columns(batch: dict, schema: pa.Schema | None, skip: set) -> set:
    """The columns of a Python batch whose values are all numpy scalars of numbers (a map's
    ``np.float64(score)`` or ``np.int32(label)``) and whose Arrow type no ``schema`` declares: HF's
    formatter keeps their dtype (a float64 score stays float64 in a numpy batch), which an Arrow
    table would make the dtype it gives any number (float32, int64)."""
    names = schema.names if schema is not None else ()
    out = set()
    for k, v in batch.items():
        if k in skip or k in names or type(v) is not list or not v:
            continue
        for x in v:
            if not isinstance(x, np.generic) or x.dtype.kind not in _NUMBER_KINDS:
                break
        else:
            out.add(k)
    return out
