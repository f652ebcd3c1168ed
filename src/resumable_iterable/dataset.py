"""The user-facing :class:`IterableDataset`: HF-style constructors and chaining over a tree of
nodes, with ``state_dict()`` / ``load_state_dict()`` that resume exactly.

The facade layer: a dataset is a description (its pipeline template, rank split, features and
format) and builds new ones; code above it builds with the public ``pipeline``, ``rank_splits``
and ``derive``. This module holds that description and the chaining methods (``map``,
``filter``, the column methods, ``skip``/``take``, ``shuffle``, ``batch``, ``pack``,
``with_format``, ``shard``...). The rest of the class comes from mixins, one story each:
iterating it and its state (``__iter__``, ``iter``, ``state_dict``, ``load_state_dict``,
``set_epoch``...) from ``iteration.py``, which hands them to its
:class:`~resumable_iterable.loader.session.IterationSession` (``loader/session.py``); its HF
features (``cast``, ``cast_column``, ``decode``, ``resolve_features``) from ``casting.py``; what
it says about itself (``features``, ``column_names``, ``num_shards``, ``info``, ``split``) from
``info.py``; its file readers (``from_files``, ``from_parquet``, ``from_json``...) from
``readers.py``, its constructors from Python objects (``from_generator``, ``from_hf``,
``from_dict``, ``from_pandas``...) from ``constructors.py`` and its exports (``to_list``,
``to_parquet``, ``push_to_hub``...) from ``export.py``."""

from __future__ import annotations

import copy
from typing import Any, Callable

from .casting import CastingMethods
from .constructors import InMemoryConstructors
from .distributed import check_rank_splits, check_strategy, ranks_of
from .export import ExportMethods
from .features import batched_features, json_as_text
from .info import InfoProperties
from .iteration import IterableColumn, IterationMethods
from .loader import hooks
from .loader.session import IterationSession
from .nodes.base import Node
from .nodes.batch import BatchNode
from .nodes.checks import as_int
from .nodes.columns import ColumnsNode
from .nodes.filter import FilterNode
from .nodes.group import GroupNode
from .nodes.map import MapNode
from .nodes.pack import PackNode
from .nodes.prefetch import PrefetchNode
from .nodes.repeat import RepeatNode
from .nodes.shard_interleave import ShardInterleaveNode
from .nodes.shuffle import ShuffleNode
from .nodes.slicing import SkipNode, TakeNode
from .nodes.typed import AddColumn, ApplyFeatures
from .readers import FileReaders

__all__ = ["IterableColumn", "IterableDataset", "to_iterable_dataset"]  # IterableColumn: from iteration.py, also here


class _Base:
    """Plain mixin base: lets ``torch.utils.data.IterableDataset`` be appended to the bases of
    :class:`IterableDataset` once torch is imported (``loader/hooks.py``), without importing torch
    ourselves."""



class IterableDataset(FileReaders, InMemoryConstructors, ExportMethods, IterationMethods, CastingMethods,
                      InfoProperties, _Base):
    """A lazy, resumable iterable dataset (see the package docs for the state contract)."""

    def __init__(self, node: Node, *, features: Any = None, column_names: list[str] | None = None,
                 split: Any = None, info: Any = None, _split: tuple = (), _epoch: int = 0):
        self._node = node
        if split is not None:  # its name, as HF's ``split=`` (the rank splits are ``_split``)
            self._named_split = split
        if info is not None:  # a ``datasets.DatasetInfo`` (its features are this dataset's, not the info's)
            self._info = info.copy()
        self._features = features
        self._column_names = list(column_names) if column_names is not None else (
            list(features) if features is not None else None)
        # ("rank", rank, world_size, strategy) entries, applied at iteration; `_split` and `_epoch` are given
        # only by derive (outside this module: derive, or split_dataset_by_node)
        self._split = tuple(_split)
        # everything about iterating this dataset in this process (loader/session.py)
        self._session = IterationSession(node, self._split, _epoch)

    @property
    def _distributed(self) -> Any:
        # The first thing HF's ``datasets.distributed.split_dataset_by_node`` reads of an iterable
        # dataset: given ours, it would fail with an AttributeError on this name. Say which function to call.
        raise TypeError("datasets.distributed.split_dataset_by_node was given a resumable_iterable.IterableDataset: "
                        "use resumable_iterable.split_dataset_by_node (same arguments), which splits it by node "
                        "and keeps it resumable")

    # ------------------------------------------------------------------ building on the pipeline
    @property
    def pipeline(self) -> Node:
        """The node tree (``nodes/``) this dataset describes, before any split by rank or DataLoader worker.

        For code that builds new pipelines over datasets, as ``interleave_datasets`` does: put
        ``pipeline.clone()`` under new nodes and make a dataset of the result with :meth:`derive`
        (or the constructor). It is a template that datasets share and that is never iterated:
        do not iterate, load or change it in place - iterate the dataset."""
        return self._node

    @property
    def rank_splits(self) -> tuple[tuple, ...]:
        """``(rank, world_size)`` of each ``split_dataset_by_node`` that made this dataset, first
        to last (empty: not split by node); ``(rank, world_size, strategy)`` where it was given a
        strategy other than ``"auto"``."""
        return tuple(tuple(entry) for entry in ranks_of(self._split))

    def derive(self, pipeline: Node, *, features: Any = None, column_names: list[str] | None = None,
               split_by_node: tuple | None = None) -> IterableDataset:
        """A dataset over ``pipeline`` that is otherwise this one: the same rank splits, epoch,
        format and info. This is how the chaining methods build their results.

        ``pipeline`` is a node tree built on this dataset's :attr:`pipeline` (see there);
        ``features`` and ``column_names`` describe its examples (``None``: unknown; the column
        names default to the features'). ``split_by_node=(rank, world_size[, strategy])`` adds a
        split by node, as :func:`~resumable_iterable.split_dataset_by_node` (which calls this) does.
        """
        split = self._split
        if split_by_node is not None:
            rank, world_size, *rest = split_by_node
            world_size = as_int(world_size, "world_size", lo=1)
            rank = as_int(rank, "rank", hi=world_size - 1)
            strategy = check_strategy(rest[0] if rest else "auto")
            split = (*split, ("rank", rank, world_size, strategy))
        if split:  # too few shards, a shuffle() without a seed under ranks...: refused now, not when iterated
            check_rank_splits(pipeline, ranks_of(split))
        new = type(self)(pipeline, features=features, column_names=column_names, _split=split, _epoch=self.epoch)
        new._format = self._format
        new._info = self._info
        new._named_split = self._named_split
        return new

    # ------------------------------------------------------------------ chaining
    def _derive(self, node: Node, features: Any = None, column_names: Any = "keep") -> IterableDataset:
        """:meth:`derive`, keeping this dataset's column names when ``features`` is not given
        (``column_names="keep"``)."""
        if column_names == "keep":
            column_names = self._column_names if features is None else None
        return self.derive(node, features=features, column_names=column_names)

    def map(self, function: Callable | None = None, with_indices: bool = False, input_columns: Any = None,
            batched: bool = False, batch_size: int | None = 1000, drop_last_batch: bool = False,
            remove_columns: Any = None, features: Any = None, fn_kwargs: dict | None = None) -> IterableDataset:
        """Apply ``function`` to each example (or each batch with ``batched=True``). After
        ``with_format``, it receives formatted values, as in HF (see ``nodes/formatted_calls.py``)."""
        if batched:
            batch_size = as_int(batch_size, "batch_size", lo=None, none_ok=True)
        if function is None and features is None and self._features is not None and remove_columns is not None:
            # no function: the examples keep their columns but the removed ones, so do the features
            # (HF 5.2 forgets them here, as after any map; its map-style Dataset keeps them)
            removed = {remove_columns} if isinstance(remove_columns, str) else set(remove_columns)
            if removed <= set(self._features):
                features = self._features.__class__({c: f for c, f in self._features.items() if c not in removed})
        function, batched, batch_size, replace = self._formatted_call(function, "map", batched, batch_size,
                                                                      input_columns, remove_columns)
        node = MapNode(self._node.clone(), function, batched=batched, batch_size=batch_size,
                       with_indices=with_indices, input_columns=input_columns, remove_columns=remove_columns,
                       fn_kwargs=fn_kwargs, drop_last_batch=drop_last_batch, replace_input=replace)
        return self._derive(node, features=features, column_names=None)

    def filter(self, function: Callable | None = None, with_indices: bool = False, input_columns: Any = None,
               batched: bool = False, batch_size: int | None = 1000, fn_kwargs: dict | None = None) -> IterableDataset:
        """Keep the examples for which ``function`` returns true. After ``with_format``, it
        receives formatted values, as in HF (see ``nodes/formatted_calls.py``)."""
        if batched:
            batch_size = as_int(batch_size, "batch_size", lo=None, none_ok=True)
        function, batched, batch_size, _ = self._formatted_call(function, "filter", batched, batch_size,
                                                                input_columns)
        node = FilterNode(self._node.clone(), function, batched=batched, batch_size=batch_size,
                          with_indices=with_indices, input_columns=input_columns, fn_kwargs=fn_kwargs)
        return self._derive(node, features=self._features)

    def _formatted_call(self, function: Any, kind: str, batched: bool, batch_size: Any, input_columns: Any,
                        remove_columns: Any = None) -> tuple:
        """``(function, batched, batch_size, replace_input)`` for a map/filter node (after
        ``with_format`` the function receives formatted values: ``nodes/formatted_calls.py``)."""
        if self._format is None or function is None:
            return function, batched, batch_size, False
        from .nodes.arrow_batches import arrow_rooted, chain_schema
        from .nodes.formatted_calls import formatted_function

        arrow_rows = (self._features or {}) if arrow_rooted(self._node) else None
        return formatted_function(function, self._format, kind, batched, batch_size, input_columns,
                                  chain_schema(self._node), arrow_rows, remove_columns)

    def _columns(self, op: str, columns: Any) -> IterableDataset:
        node = ColumnsNode(self._node.clone(), op, columns)
        names = node.rename_map(self._column_names)
        if self._column_names is not None:
            known = set(self._column_names)
            asked = list(node.columns)
            missing = [c for c in asked if c not in known]
            if missing:
                raise ValueError(f"{op}: column(s) {missing} not in the dataset (columns: {self._column_names})")
            if op == "rename":
                node.check_rename(self._column_names)
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

    # ------------------------------------------------------------------ HF features and columns
    def _typed(self, features: Any, keep_other_columns: bool = False) -> IterableDataset:
        """This dataset with ``features`` applied to every example (see ``nodes/typed.py``)."""
        from .nodes.arrow_batches import arrow_rooted

        apply = ApplyFeatures(features, json_as_text(self._features, features), keep_other_columns=keep_other_columns,
                              arrow_rows=arrow_rooted(self._node))
        node = MapNode(self._node.clone(), apply)
        typed = self._derive(node, features=features, column_names=list(features))
        if keep_other_columns:  # cast_column of unknown columns: the other columns are still unknown
            typed._column_names = None
        return typed

    def add_column(self, name: str, column: Any) -> IterableDataset:
        """Add a column whose value for example ``i`` is ``column[i]`` (as HF: by the map index).

        As in HF, ``i`` counts the examples of the part being iterated: in a DataLoader worker or a
        rank of ``split_dataset_by_node`` it restarts at 0, so the values no longer line up with
        the dataset's rows there. Add the column to the ``datasets.Dataset`` before
        ``to_iterable_dataset`` (or as a ``map`` of the example) when the dataset is read in parts."""
        # the function is ours and takes Python values: not wrapped for the format, as map() would
        out = self._derive(MapNode(self._node.clone(), AddColumn(name, column), with_indices=True),
                           features=None, column_names=None)
        if self._column_names is not None:
            out._column_names = [*self._column_names, name]
        return out

    def skip(self, n: int) -> IterableDataset:
        """Leave out the first ``n`` examples (of this rank's part after ``split_dataset_by_node``;
        DataLoader workers and ranks split later share the ``n`` between them)."""
        return self._derive(SkipNode(self._node.clone(), n, per_rank=len(self._split)), features=self._features)

    def take(self, n: int) -> IterableDataset:
        """Only the first ``n`` examples (of this rank's part after ``split_dataset_by_node``;
        DataLoader workers and ranks split later share the ``n`` between them)."""
        return self._derive(TakeNode(self._node.clone(), n, per_rank=len(self._split)), features=self._features)

    def repeat(self, num_times: int | None) -> IterableDataset:
        return self._derive(RepeatNode(self._node.clone(), num_times), features=self._features)

    def shuffle(self, seed: int | None = None, generator: Any = None, buffer_size: int | None = 1000,
                max_buffer_input_shards: int = 1, buffer_state: str = "examples",
                worker_positions: bool = True) -> IterableDataset:
        """Shuffle the shard order (per epoch) and mix examples through a buffer of ``buffer_size``.

        ``buffer_state`` chooses what a state keeps of the buffer: ``"examples"`` (exact, the
        default), ``"replay"`` (exact, stores only where each buffered example came from) or
        ``"drop"`` (like HF ``datasets``: smaller, but the buffered examples are lost on resume;
        under ``split_dataset_by_node`` split by example, where every rank reads the same stream
        and keeps one example in ``world_size``, the ranks refill their buffers from different
        places after a resume, so their streams part and an example can then reach two ranks).

        ``worker_positions`` (default ``True``): in DataLoader workers, with ``"examples"``, the
        examples read straight from sources (no ``map``/``filter``/``interleave_datasets`` below
        the shuffle) that are large (arrays, images, files) or come from sources with random
        access (tables, Parquet/Arrow files) are kept in the state as where they came from and
        re-read on resume, instead of being copied to the main process; ``False`` always stores
        them. The examples and their order are the same either way.

        ``max_buffer_input_shards=k`` feeds the buffer from ``k`` groups of shards at a time, taken in
        turn (as HF ``datasets``, whose default is 10; here the default 1 reads one shard at a time).
        The groups are formed after the split among ranks and DataLoader workers.

        ``buffer_size=None`` asks for a *global* shuffle of a random-access source (HF ``Dataset``,
        Arrow table, Parquet/Arrow files): every example once per epoch in a permutation of the whole
        dataset, with a state of a few integers (see the global shuffle docs).

        ``generator`` (a ``numpy.random.Generator``), as in HF, takes precedence over ``seed``: the
        seed is drawn from a copy of it, which leaves the generator itself as it was.
        """
        if generator is not None:
            # as HF: the generator decides (over ``seed``) and is copied, not advanced, so one
            # generator given to several shuffles gives each the same order
            seed = int(copy.deepcopy(generator).integers(2**63))
        if buffer_size is None:
            if buffer_state != "examples":
                raise ValueError("buffer_state applies to the shuffle buffer; a global shuffle (buffer_size=None) "
                                 "has no buffer and its state is always a few integers")
            from .nodes.global_shuffle import make_global_shuffle

            node = make_global_shuffle(self._node.clone(), seed)
        else:
            child = self._node.clone()
            if max_buffer_input_shards != 1:
                child = ShardInterleaveNode(child, max_buffer_input_shards)
            node = ShuffleNode(child, seed=seed, buffer_size=buffer_size, buffer_state=buffer_state,
                               worker_positions=worker_positions)
        return self._derive(node, features=self._features)

    def batch(self, batch_size: int | None = None, by_column: str | list[str] | None = None,
              drop_last_batch: bool = False) -> IterableDataset:
        """Group examples into batches ``{column: [values]}`` of ``batch_size`` examples, or, with
        ``by_column``, one batch per run of successive examples with equal values in that column
        (or columns); ``drop_last_batch`` then drops the final run."""
        if by_column is not None:
            return self._derive(GroupNode(self._node.clone(), by_column, drop_last_batch),
                                features=self._batched_features())
        if batch_size is None:
            raise ValueError("batch() needs batch_size or by_column")
        node = BatchNode(self._node.clone(), batch_size, drop_last_batch, after_format=self._format is not None)
        return self._derive(node, features=self._batched_features())

    def pack(self, seq_len: int, columns: str | list[str] = ("input_ids",), separator: Any = None,
             drop_last: bool = False, mode: str = "concat", position_ids: bool = False,
             document_lengths: bool = False) -> IterableDataset:
        """Pack the token lists of successive examples into chunks of ``seq_len`` tokens.

        ``mode="concat"`` concatenates documents (each followed by ``separator``, e.g. the EOS id)
        and cuts every ``seq_len`` tokens; ``mode="greedy"`` puts whole documents in a chunk while
        they fit. Only ``columns`` are kept; ``position_ids=True`` adds positions that restart at
        each document and ``document_lengths=True`` the lengths of the document pieces in a chunk.
        The partial chunk is part of the state: resuming never loses or repeats a token.
        """
        node = PackNode(self._node.clone(), seq_len, columns=columns, separator=separator, drop_last=drop_last,
                        mode=mode, position_ids=position_ids, document_lengths=document_lengths)
        names = list(node.columns) + ["position_ids"] * node.position_ids + ["document_lengths"] * node.document_lengths
        return self._derive(node, features=None, column_names=names)

    def prefetch(self, n: int) -> IterableDataset:
        """Read up to ``n`` examples ahead in a background thread (e.g. while the model trains).

        The examples read ahead but not yet yielded are part of the state: a resume neither loses
        nor re-reads them. The thread stops when the iteration is closed, on errors (raised to the
        consumer after the examples read before them) and at interpreter exit."""
        return self._derive(PrefetchNode(self._node.clone(), n), features=self._features)

    # ------------------------------------------------------------------ formats and batched iteration
    _format: tuple | None = None  # (format type, format kwargs) set by with_format; owns no state

    def with_format(self, type: str | None = None, **format_kwargs: Any) -> IterableDataset:
        """The same dataset yielding examples (and batches) in format ``type``, as HF ``with_format``:
        ``None``/``"python"``, ``"numpy"``/``"np"``, ``"torch"``/``"pt"``, ``"arrow"``/``"pa"``,
        ``"pandas"``/``"pd"`` (also ``"polars"``, ``"tensorflow"``, ``"jax"`` when installed).
        ``format_kwargs`` go to the formatter (e.g. ``dtype=torch.float16`` for torch); the map-style
        ``Dataset.with_format``'s ``columns`` / ``output_all_columns`` are a ``TypeError``, as in HF's
        ``IterableDataset`` (``select_columns`` first).

        A format does not change the pipeline: fingerprints are the same in every format, and a
        state resumes in any format. The examples between nodes stay Python dicts; under numpy or
        torch, where only the format sees the rows of Arrow-backed sources, their lists of numbers
        of 1 KB or more are read as numpy arrays, which a state then holds (``nodes/format_plan.py``;
        save such states with ``save_state``). As in HF, functions
        given to ``map``/``filter`` after ``with_format`` receive formatted values
        (``nodes/formatted_calls.py``).
        """
        from .nodes.format import check_format

        name = check_format(type, format_kwargs)
        new = self._derive(self._node, features=self._features)
        new._format = (name, dict(format_kwargs)) if name is not None else None
        return new

    @property
    def format(self) -> dict:
        """The output format: ``{"type": None | "numpy" | "torch" | ..., "format_kwargs": {...}}``."""
        name, kwargs = self._format if self._format is not None else (None, {})
        return {"type": name, "format_kwargs": dict(kwargs)}

    def shard(self, num_shards: int, index: int, contiguous: bool = True) -> IterableDataset:
        """The part of this dataset made of shard group ``index`` out of ``num_shards``."""
        num_shards = as_int(num_shards, "num_shards", lo=1)  # index: checked by the sources
        if num_shards > self._node.num_shards:
            raise ValueError(f"cannot split {self._node.num_shards} shards into {num_shards} groups")
        return self._derive(self._node.shard(num_shards, index, contiguous), features=self._features)

    def reshard(self) -> IterableDataset:
        """This dataset with its sources split into more shards where their data allows it, as HF's
        ``reshard``: Parquet files read one row group per shard, so that more DataLoader workers and
        ranks than files all read. Other sources keep their shards. Call it before ``shuffle``."""
        return self._derive(self._node.resharded(), features=self._features)

    def _batched_features(self) -> Any:
        """The features of ``batch()``'s output: each column a list of this dataset's values."""
        return batched_features(self._features)

    # ------------------------------------------------------------------ copies
    def __copy__(self) -> IterableDataset:
        # a shallow copy iterates on its own, as a deep copy or an unpickled one does
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._session = copy.copy(self._session)
        return new


def to_iterable_dataset(dataset: Any, num_shards: int = 1) -> IterableDataset:
    """``datasets.Dataset.to_iterable_dataset`` with exact resumption."""
    return IterableDataset.from_hf(dataset, num_shards=num_shards)


hooks.register_base(IterableDataset)  # torch imported before us: a torch dataset from the start
