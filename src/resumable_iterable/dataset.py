"""The user-facing :class:`IterableDataset`: HF-style chaining over a tree of nodes, with
``state_dict()`` / ``load_state_dict()`` that resume exactly."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterator

from . import elastic as _elastic
from . import resume as _resume
from . import state as _state
from .distributed import current_worker, split_for_process
from .nodes.arrow import ArrowSource
from .nodes.base import Node
from .nodes.batch import BatchNode
from .nodes.columns import ColumnsNode
from .nodes.files import FORMATS, FileSource, format_of
from .nodes.filter import FilterNode
from .nodes.generator import GeneratorSource
from .nodes.map import MapNode
from .nodes.repeat import RepeatNode
from .nodes.shuffle import ShuffleNode
from .nodes.slicing import SkipNode, TakeNode


class _Base:
    """Plain mixin base: lets ``torch.utils.data.IterableDataset`` be appended to the bases of
    :class:`IterableDataset` once torch is imported, without importing torch ourselves."""


def _maybe_add_torch_base(cls: type) -> None:
    """Once torch is imported, make :class:`IterableDataset` a ``torch.utils.data.IterableDataset``
    (through ``integrations.torch.TorchDatasetMixin``, which also shares the epoch with DataLoader
    workers). The core never imports torch itself."""
    if "torch" not in sys.modules:
        return
    import torch.utils.data

    if torch.utils.data.IterableDataset not in IterableDataset.__mro__:
        from .integrations.torch import TorchDatasetMixin

        IterableDataset.__bases__ += (TorchDatasetMixin,)


def _shape_of(node: Node) -> tuple[dict, str]:
    cached = getattr(node, "_ri_shape", None)
    if cached is None:
        shape = node.shape()
        cached = (shape, _state.fingerprint(shape))
        node._ri_shape = cached
    return cached


class IterableDataset(_Base):
    """A lazy, resumable iterable dataset (see the package docs for the state contract)."""

    def __init__(self, node: Node, *, features: Any = None, column_names: list[str] | None = None,
                 _split: tuple = (), _epoch: int = 0):
        _maybe_add_torch_base(type(self))
        self._node = node
        self._features = features
        self._column_names = list(column_names) if column_names is not None else (
            list(features) if features is not None else None)
        self._split = tuple(_split)  # ("rank", rank, world_size) entries, applied at iteration
        self._store_epoch(_epoch)
        self._active: Node | None = None  # the node tree being iterated / holding a loaded state
        self._active_ctx = None  # the DataLoader worker (id, num_workers) _active belongs to, or None
        self._active_epoch = _epoch  # the epoch _active was started or loaded with
        self._pending = False  # _active holds a loaded state not iterated yet
        self._loaded = None  # a state loaded in the main process, for DataLoader workers to split
        self._claims = None  # shared record of which workers took their part of _loaded
        self._split_cache = None  # (worker, the "split" entry of this process's states)

    def _store_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        if "torch" in sys.modules:  # DataLoader workers, persistent ones too, read the main process's epoch
            from .integrations.torch import publish_epoch

            publish_epoch(self, epoch)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_hf(cls, dataset: Any, num_shards: int = 1) -> IterableDataset:
        """A HF map-style ``datasets.Dataset`` read in ``num_shards`` contiguous shards."""
        if not hasattr(dataset, "data") or not hasattr(dataset, "features"):
            raise TypeError(f"expected a datasets.Dataset, got {type(dataset).__name__}")
        return cls(ArrowSource.from_hf(dataset, num_shards=num_shards), features=dataset.features)

    @classmethod
    def from_arrow_table(cls, table: Any, num_shards: int = 1) -> IterableDataset:
        """A ``pyarrow.Table`` read in ``num_shards`` contiguous shards."""
        return cls(ArrowSource(table, num_shards=num_shards), column_names=table.column_names)

    @classmethod
    def from_generator(cls, generator: Callable[..., Iterator[dict]], gen_kwargs: dict | None = None,
                       features: Any = None) -> IterableDataset:
        """Examples yielded by ``generator(**gen_kwargs)``; list values of ``gen_kwargs`` are shards."""
        return cls(GeneratorSource(generator, gen_kwargs), features=features)

    @classmethod
    def from_files(cls, paths: str | list[str], format: str | None = None, **reader_kwargs: Any) -> IterableDataset:
        paths = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
        if format is None:
            found = {format_of(p) for p in paths}
            if len(found) != 1 or None in found:
                raise ValueError(f"cannot tell the format of {paths[:3]}...; pass format= one of {FORMATS}")
            format = found.pop()
        return cls(FileSource(paths, format, reader_kwargs=reader_kwargs))

    @classmethod
    def from_parquet(cls, paths: str | list[str]) -> IterableDataset:
        return cls.from_files(paths, "parquet")

    @classmethod
    def from_arrow(cls, paths: str | list[str]) -> IterableDataset:
        return cls.from_files(paths, "arrow")

    @classmethod
    def from_json(cls, paths: str | list[str], **reader_kwargs: Any) -> IterableDataset:
        return cls.from_files(paths, "json", **reader_kwargs)

    @classmethod
    def from_csv(cls, paths: str | list[str], **reader_kwargs: Any) -> IterableDataset:
        return cls.from_files(paths, "csv", **reader_kwargs)

    # ------------------------------------------------------------------ chaining
    def _derive(self, node: Node, features: Any = None, column_names: Any = "keep") -> IterableDataset:
        if column_names == "keep":
            column_names = self._column_names if features is None else None
        return type(self)(node, features=features, column_names=column_names, _split=self._split, _epoch=self._epoch)

    def map(self, function: Callable | None = None, with_indices: bool = False, input_columns: Any = None,
            batched: bool = False, batch_size: int | None = 1000, drop_last_batch: bool = False,
            remove_columns: Any = None, features: Any = None, fn_kwargs: dict | None = None) -> IterableDataset:
        """Apply ``function`` to each example (or each batch with ``batched=True``)."""
        node = MapNode(self._node.clone(), function, batched=batched, batch_size=batch_size,
                       with_indices=with_indices, input_columns=input_columns, remove_columns=remove_columns,
                       fn_kwargs=fn_kwargs, drop_last_batch=drop_last_batch)
        return self._derive(node, features=features, column_names=None)

    def filter(self, function: Callable | None = None, with_indices: bool = False, input_columns: Any = None,
               batched: bool = False, batch_size: int | None = 1000, fn_kwargs: dict | None = None) -> IterableDataset:
        """Keep the examples for which ``function`` returns true."""
        node = FilterNode(self._node.clone(), function, batched=batched, batch_size=batch_size,
                          with_indices=with_indices, input_columns=input_columns, fn_kwargs=fn_kwargs)
        return self._derive(node, features=self._features)

    def _columns(self, op: str, columns: Any) -> IterableDataset:
        node = ColumnsNode(self._node.clone(), op, columns)
        names = node.rename_map(self._column_names)
        if self._column_names is not None:
            known = set(self._column_names)
            asked = list(node.columns)
            missing = [c for c in asked if c not in known]
            if missing:
                raise ValueError(f"{op}: column(s) {missing} not in the dataset (columns: {self._column_names})")
        features = None
        if self._features is not None:
            try:
                if op == "select":
                    features = self._features.__class__({c: self._features[c] for c in node.columns})
                elif op == "remove":
                    features = self._features.__class__({c: f for c, f in self._features.items() if c not in node.columns})
                else:
                    features = self._features.__class__({node.columns.get(c, c): f for c, f in self._features.items()})
            except Exception:  # noqa: BLE001 - features are informative only
                features = None
        return self._derive(node, features=features, column_names=names)

    def select_columns(self, column_names: str | list[str]) -> IterableDataset:
        return self._columns("select", column_names)

    def remove_columns(self, column_names: str | list[str]) -> IterableDataset:
        return self._columns("remove", column_names)

    def rename_column(self, original_column_name: str, new_column_name: str) -> IterableDataset:
        return self._columns("rename", {original_column_name: new_column_name})

    def rename_columns(self, column_mapping: dict[str, str]) -> IterableDataset:
        return self._columns("rename", column_mapping)

    def skip(self, n: int) -> IterableDataset:
        return self._derive(SkipNode(self._node.clone(), n), features=self._features)

    def take(self, n: int) -> IterableDataset:
        return self._derive(TakeNode(self._node.clone(), n), features=self._features)

    def repeat(self, num_times: int | None) -> IterableDataset:
        return self._derive(RepeatNode(self._node.clone(), num_times), features=self._features)

    def shuffle(self, seed: int | None = None, generator: Any = None, buffer_size: int | None = 1000,
                buffer_state: str = "examples") -> IterableDataset:
        """Shuffle the shard order (per epoch) and mix examples through a buffer of ``buffer_size``.

        ``buffer_state`` chooses what a state keeps of the buffer: ``"examples"`` (exact, the
        default), ``"replay"`` (exact, stores only where each buffered example came from) or
        ``"drop"`` (like HF ``datasets``: smaller, but the buffered examples are lost on resume).

        ``buffer_size=None`` asks for a *global* shuffle of a random-access source (HF ``Dataset``,
        Arrow table, Parquet/Arrow files): every example once per epoch in a permutation of the whole
        dataset, with a state of a few integers (see the global shuffle docs).
        """
        if seed is None and generator is not None:
            seed = int(generator.integers(2**63))
        if buffer_size is None:
            if buffer_state != "examples":
                raise ValueError("buffer_state applies to the shuffle buffer; a global shuffle (buffer_size=None) "
                                 "has no buffer and its state is always a few integers")
            from .nodes.global_shuffle import make_global_shuffle

            node = make_global_shuffle(self._node.clone(), seed)
        else:
            node = ShuffleNode(self._node.clone(), seed=seed, buffer_size=buffer_size, buffer_state=buffer_state)
        return self._derive(node, features=self._features)

    def batch(self, batch_size: int, drop_last_batch: bool = False) -> IterableDataset:
        """Group examples into batches ``{column: [values]}``."""
        return self._derive(BatchNode(self._node.clone(), batch_size, drop_last_batch), features=None)

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> IterableDataset:
        """The part of this dataset made of shard group ``index`` out of ``num_shards``."""
        if num_shards > self.num_shards:
            raise ValueError(f"cannot split {self.num_shards} shards into {num_shards} groups")
        return self._derive(self._node.shard(num_shards, index, contiguous), features=self._features)

    # ------------------------------------------------------------------ properties
    @property
    def num_shards(self) -> int:
        return self._node.num_shards

    @property
    def n_shards(self) -> int:
        return self.num_shards

    @property
    def features(self) -> Any:
        return self._features

    @property
    def column_names(self) -> list[str] | None:
        return list(self._column_names) if self._column_names is not None else None

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch: it seeds the shard order and the shuffle buffer of the next fresh pass."""
        if type(epoch) is not int or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        self._store_epoch(epoch)

    def __repr__(self) -> str:
        cols = self._column_names
        return f"IterableDataset({{\n    features: {cols if cols is not None else 'Unknown'},\n    num_shards: {self.num_shards}\n}})"

    # ------------------------------------------------------------------ iteration and state
    def _iteration_node(self) -> Node:
        """The template pipeline this process iterates: split by rank, then by DataLoader worker."""
        return split_for_process(self._node, self._split)

    def __iter__(self) -> Iterator[dict]:
        worker = current_worker()
        _resume.resolve_pending(self, worker)
        if self._pending and self._active is not None:
            node = self._active
            self._pending = False
            self._loaded = None  # used up: nothing left to split among workers
        else:
            node, epoch = _resume.fresh_node(self, worker)
            self._active, self._active_ctx, self._active_epoch = node, worker, epoch
        return iter(node)

    def _current_node(self) -> Node:
        worker = current_worker()
        _resume.resolve_pending(self, worker)
        if self._active is None or self._active_ctx != worker:
            node, epoch = _resume.fresh_node(self, worker)
            self._active, self._active_ctx, self._active_epoch = node, worker, epoch
            self._loaded = self._claims = None  # a fresh start, not a loaded state
            self._pending = True
        return self._active

    def state_dict(self) -> dict:
        """A JSON-serialisable copy of the state: resume with :meth:`load_state_dict`.

        Besides the node tree, the state records how this process's part was split from the whole
        dataset (``"split"``: ranks and DataLoader worker), which elastic resume uses. During an
        epoch resumed elastically (``resumable_iterable.StatefulDataLoader`` with another worker
        count, or :func:`resumable_iterable.redistribute_states`) the state is an *elastic plan*
        (see ``plan.py``), which loads the same way.
        """
        node = self._current_node()
        epoch = self._active_epoch
        if isinstance(node, _elastic.SegmentsNode):
            return _elastic.plan_state(node, epoch)
        shape, fp = _shape_of(node)
        ctx = self._active_ctx
        split = self._split_cache
        if split is None or split[0] != ctx:  # a dataset's pipeline and rank split never change
            split = self._split_cache = (ctx, _resume.split_description(self, ctx))
        # in a DataLoader worker, shuffle buffers go to "buffers" as journals that torchdata's
        # StatefulDataLoader can send in parts (see ExampleChunks.journal)
        buffers: dict | None = None if ctx is None else {}
        state = {"format": _state.FORMAT, "version": _state.VERSION, "fingerprint": fp,
                 "pipeline": _state.copy_state(shape), "epoch": epoch,
                 "state": _state.copy_state(node._state_dict, buffers), "split": _state.copy_state(split[1])}
        if buffers:
            state["buffers"] = buffers
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue the next iteration right after the last example yielded when ``state_dict`` was taken.

        Accepts what :meth:`state_dict` returns (a plain state or an elastic plan). Raises
        ``ValueError`` (or ``TypeError``) before anything is changed if the state belongs to
        another pipeline or another rank / DataLoader worker, has an unknown version or is malformed.
        """
        worker = current_worker()
        node, epoch = _resume.load_node(self, state_dict, worker)
        claims = None
        if worker is None and "torch" in sys.modules:
            from .integrations.torch import new_claims

            claims = new_claims()  # lets DataLoader workers split this state among themselves once
        self._store_epoch(epoch)
        self._active, self._active_ctx, self._active_epoch = node, worker, epoch
        self._loaded = _state.copy_state(state_dict) if worker is None else None
        self._claims = claims
        self._pending = True

    def save_state(self, path: str | os.PathLike) -> None:
        """Write ``state_dict()`` to a JSON file (lossless for bytes / numpy values, with a checksum)."""
        _state.save_state(self.state_dict(), path)

    def load_state(self, path: str | os.PathLike) -> None:
        """Load a state file written by :meth:`save_state`."""
        self.load_state_dict(_state.load_state(path))

    # ------------------------------------------------------------------ pickling (DataLoader workers)
    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        if not d.get("_pending"):
            d["_active"] = None  # a pipeline being iterated is not shipped to DataLoader workers
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        _maybe_add_torch_base(type(self))


def to_iterable_dataset(dataset: Any, num_shards: int = 1) -> IterableDataset:
    """``datasets.Dataset.to_iterable_dataset`` with exact resumption."""
    return IterableDataset.from_hf(dataset, num_shards=num_shards)
