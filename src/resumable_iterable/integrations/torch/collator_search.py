"""Where a ``collate_fn`` keeps random generators of its own: the search behind
``save_worker_rng=True``'s collator entry (:mod:`.worker_rng` saves and sets back what it finds).

Users hand the collator over in many shapes (``lambda b: collator(b)``, a closure, a bound method
of their own class, a callable object holding it, a ``torch`` / numpy ``Generator`` of their own).
:func:`find_generators` looks once, when the loader is built, without calling anything: closure
cells, default arguments, the globals the code loads, a bound method's object, attributes, the first
values of lists, tuples and dicts, a few references deep. Each find is a :class:`Slot`, read again at
every use (a reassigned attribute or ``nonlocal`` is followed). Datasets' and loaders' own generators
(a shuffle's) are left alone: setting them back would move the data.
"""

from __future__ import annotations

import dis
import functools
import logging
import random
import types
from typing import Any

import numpy as np
import torch

NESTED = ("collate_fn", "data_collator", "func")  # InlineSmallTensors, transformers' RemoveColumnsCollator, partial
_GENERATORS = (torch.Generator, np.random.Generator)
_MAX_DEPTH = 3  # references followed from the collate_fn (wrappers of ours, transformers' and partials are free)
_LOOK_DEPTH = 5  # deeper than _MAX_DEPTH, generators are only reported (not saved: too far to be surely the collate_fn's)
_MAX_SEEN = 400  # objects looked at, at most: the search stays cheap whatever the collate_fn holds
# datasets and loaders (ours, HF's, torch's): their generators are the data's (a shuffle's), not the
# collate_fn's, and setting them back would move the data; only the collate_fn they wrap is followed
_DATA_MODULES = ("resumable_iterable.", "datasets.", "torch.utils.data", "torchdata.")
# the functions of these packages (torch's default_collate, ...) are not looked into
_LIBRARIES = frozenset({"torch", "numpy", "transformers", "datasets", "torchdata", "accelerate", "resumable_iterable"})
_PLAIN = (str, bytes, int, float, bool, complex, type(None), type, types.ModuleType, types.BuiltinFunctionType,
          types.CodeType, np.ndarray, torch.Tensor, logging.Logger)


def _owns_generator(obj: Any) -> bool:
    """``obj`` keeps a generator of its own: a torch / numpy one now, or none yet with a ``seed``
    to make it from (``DataCollatorForLanguageModeling`` makes it at its first batch)."""
    if isinstance(obj, (*_PLAIN, *_GENERATORS)) or type(obj).__module__.startswith(_DATA_MODULES):
        return False
    try:
        gen = getattr(obj, "generator", None)
        if isinstance(gen, _GENERATORS):
            return True
        return gen is None and hasattr(obj, "generator") and getattr(obj, "seed", None) is not None
    except Exception:  # an object whose attributes cannot be read so (a proxy): not a collator of that kind
        return False


class Slot:
    """Where the search found a generator or a collator owning one: read again at each use, so that
    a variable or attribute given a new generator (a closure's ``nonlocal``, ``self.rng = ...``) is
    followed. ``how``: ``"fixed"`` (``owner`` is it), ``"attr"`` (``owner``'s attribute ``name``;
    a closure cell's ``cell_contents`` too), ``"item"`` (``owner[name]``, a list, tuple or dict),
    ``"global"`` (the global ``name`` of the function
    ``owner``, which a spawned worker finds in its own module)."""

    __slots__ = ("owner", "name", "how", "path")

    def __init__(self, owner: Any, name: Any, how: str, path: str):
        self.owner, self.name, self.how, self.path = owner, name, how, path

    def get(self) -> Any:
        if self.how == "attr":
            try:
                return getattr(self.owner, self.name)
            except (AttributeError, ValueError):  # an empty cell
                return None
        if self.how == "global":
            return self.owner.__globals__.get(self.name)
        if self.how == "item":
            try:
                return self.owner[self.name]
            except (IndexError, KeyError):
                return None
        return self.owner

    def __getstate__(self) -> tuple:
        return (self.owner, self.name, self.how, self.path)

    def __setstate__(self, state: tuple) -> None:
        self.owner, self.name, self.how, self.path = state


def _global_names(code: types.CodeType, out: set, depth: int = 0) -> set:
    """The globals ``code`` (and the functions / comprehensions defined in it) reads."""
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            out.add(ins.argval)
    if depth < 2:
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                _global_names(const, out, depth + 1)
    return out


def _references(obj: Any, path: str, depth: int) -> list[tuple[Slot, bool]]:
    """What ``obj`` (``depth`` references from the collate_fn) refers to that the search follows:
    ``(slot, free)``; ``free`` for the wrappers (ours, transformers', ``functools.partial``, a bound
    method's function), which cost no depth."""
    out: list[tuple[Slot, bool]] = []
    if isinstance(obj, functools.partial):
        out.append((Slot(obj.func, None, "fixed", f"{path}.func"), True))
        out += [(Slot(a, None, "fixed", f"{path}.args[{i}]"), False) for i, a in enumerate(obj.args)]
        out += [(Slot(v, None, "fixed", f"{path}.keywords[{k!r}]"), False) for k, v in obj.keywords.items()]
        return out
    if isinstance(obj, types.MethodType):
        return [(Slot(obj.__func__, None, "fixed", f"{path}.__func__"), True),
                (Slot(obj.__self__, None, "fixed", f"{path}.__self__"), False)]
    if isinstance(obj, types.FunctionType):
        if (obj.__module__ or "").partition(".")[0] in _LIBRARIES:  # their code: no collate_fn's generator
            return out
        code = obj.__code__
        for name, cell in zip(code.co_freevars, obj.__closure__ or ()):
            out.append((Slot(cell, "cell_contents", "attr", f"{path} (closure variable {name!r})"), False))
        for i, v in enumerate(obj.__defaults__ or ()):
            out.append((Slot(v, None, "fixed", f"{path} (default argument {i})"), False))
        for k, v in (obj.__kwdefaults__ or {}).items():
            out.append((Slot(v, None, "fixed", f"{path} (default argument {k!r})"), False))
        g = obj.__globals__
        for name in sorted(_global_names(code, set())):
            if name in g:
                out.append((Slot(obj, name, "global", f"{path} (global {name!r})"), False))
        return out
    if isinstance(obj, _PLAIN):
        return out
    if type(obj) in (list, tuple, dict):  # the first values of a container
        items = list(obj.items())[:16] if type(obj) is dict else list(enumerate(obj[:16]))
        return [(Slot(obj, k, "item", f"{path}[{k!r}]"), False) for k, _ in items]
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not type(obj).__module__.startswith(_DATA_MODULES):
        for k in list(attrs)[:64]:
            if isinstance(k, str):
                out.append((Slot(obj, k, "attr", f"{path}.{k}"), k in NESTED))
        # the collate_fn's own __call__ (or that of an object its function holds): the globals it
        # reads; not further, where it would be the code of libraries (a tokenizer's __call__)
        call = getattr(type(obj), "__call__", None) if depth <= 1 else None
        if isinstance(call, types.FunctionType) and not type(obj).__module__.startswith("resumable_iterable"):
            out.append((Slot(call, None, "fixed", f"{path}.__call__"), True))
    else:  # __slots__ (InlineSmallTensors), or a dataset / loader: only the collate_fn it wraps
        for k in NESTED:
            if getattr(obj, k, None) is not None:
                out.append((Slot(obj, k, "attr", f"{path}.{k}"), True))
    return out


def describe(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


def find_generators(collate_fn: Any, skip: tuple = ()) -> tuple[list[tuple[str, Slot]], list[str]]:
    """The generators a ``collate_fn`` draws from that ``worker_rng.CollatorRng`` can save (objects of
    the types ``skip`` are not looked into), found without
    calling anything: ``([(kind, slot), ...], [what was found and cannot be saved, ...])``. ``kind``:
    ``"collator"`` (an object with a ``generator`` of its own, or none yet and a ``seed``:
    ``DataCollatorForLanguageModeling(seed=...)``, read through its ``generator`` attribute) or
    ``"generator"`` (a ``torch.Generator`` / numpy ``Generator`` held directly). Looked in: the
    collate_fn itself, ``functools.partial`` (function, arguments), our and transformers' wrappers,
    a function's closure variables, default arguments and the globals it reads, a bound method's
    object, the attributes of objects (and a callable object's ``__call__``) and the first 16
    values of lists, tuples and dicts, up to three references from the collate_fn (up to five, a
    generator is reported as not saved). One generator reached by two paths counts once."""
    found: list[tuple[str, Slot]] = []
    unsaved: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[Slot, int]] = [(Slot(collate_fn, None, "fixed", describe(collate_fn)), 0)]
    while stack and len(seen) < _MAX_SEEN:
        slot, depth = stack.pop(0)
        obj = slot.get()
        if obj is None or id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        if isinstance(obj, _GENERATORS):
            if obj is torch.default_generator:  # the global one: a worker's is saved with the others (rng_state)
                continue
            problem = _unsaveable(obj) or _too_deep(depth)
            if problem:
                unsaved.append(f"{slot.path}: {problem}")
            else:
                found.append(("generator", slot))
            continue
        if isinstance(obj, (random.Random, np.random.RandomState)):
            unsaved.append(f"{slot.path}: a {type(obj).__module__}.{type(obj).__qualname__}, whose state is not "
                           "saved (draw from a torch.Generator or np.random.default_rng(seed) instead)")
            continue
        if _owns_generator(obj):
            problem = _unsaveable(getattr(obj, "generator", None))
            if problem or _too_deep(depth):
                unsaved.append(f"{slot.path}.generator: {problem}" if problem else f"{slot.path}: {_too_deep(depth)}")
            else:
                found.append(("collator", slot))
            continue
        for ref, free in _references(obj, slot.path, depth):
            if free or depth < _LOOK_DEPTH:
                stack.append((ref, depth if free else depth + 1))
    return found, unsaved


def _too_deep(depth: int) -> str | None:
    if depth <= _MAX_DEPTH:
        return None
    return (f"{depth} references from the collate_fn, deeper than the {_MAX_DEPTH} followed to save a generator "
            "(hold it nearer: in an attribute of the collate_fn's object or a variable of its function)")


def _unsaveable(gen: Any) -> str | None:
    """Why the generator ``gen`` cannot be saved, or ``None``."""
    if isinstance(gen, torch.Generator) and gen.device.type != "cpu":
        return f"a torch.Generator on {gen.device}: only CPU generators are saved"
    if isinstance(gen, np.random.Generator) and type(gen.bit_generator) is not np.random.PCG64:
        return (f"a numpy Generator of {type(gen.bit_generator).__name__}: only PCG64 (np.random.default_rng) "
                "is saved")
    return None
