"""``interleave_datasets`` and ``concatenate_datasets``: new datasets over several datasets'
pipelines (the layer above the ``dataset.py`` facade; it only builds nodes and datasets, through
the facade's public ``pipeline``, ``rank_splits`` and constructor)."""

from __future__ import annotations

import json
from typing import Any

from .dataset import IterableDataset
from .distributed import split_dataset_by_node
from .nodes.seeds import resolve_seed
from .nodes.column_types import FirstRowCheck, aligned_features
from .nodes.concat import ConcatNode
from .nodes.interleave import InterleaveNode
from .nodes.map import MapNode


def _check(datasets: list, what: str) -> list[IterableDataset]:
    if isinstance(datasets, dict):  # an IterableDatasetDict: its keys would be read as the datasets
        raise TypeError(f"{what} takes a list of datasets, got a dict of the splits {list(datasets)}: pass "
                        f"list(ds.values()) or [ds[split], ...]")
    if isinstance(datasets, IterableDataset):  # list() would read every example of it
        raise TypeError(f"{what} takes a list of datasets, got one IterableDataset: pass [ds, ...]")
    if datasets is None or isinstance(datasets, (str, bytes)) or not hasattr(datasets, "__iter__"):
        raise TypeError(f"{what} takes a list of datasets, got {type(datasets).__name__} {datasets!r:.60}")
    datasets = list(datasets)
    if not datasets:
        raise ValueError(f"{what} needs at least one dataset")
    for i, d in enumerate(datasets):
        if not isinstance(d, IterableDataset):
            kind = f"{type(d).__module__.split('.')[0]}.{type(d).__qualname__}"
            hint = ("build it with resumable_iterable.load_dataset(..., streaming=True) instead of HF's"
                    if kind == "datasets.IterableDataset" else
                    "wrap a datasets.Dataset with resumable_iterable.to_iterable_dataset")
            raise TypeError(f"{what}: dataset {i} is a {kind}, not a resumable_iterable.IterableDataset ({hint})")
        if d.rank_splits != datasets[0].rank_splits:
            raise ValueError(f"{what}: datasets must be split by node identically before combining")
    return datasets


def _merged_features(features: list, what: str) -> Any:
    """The aligned union of the datasets' features (``aligned_features``), or ``None`` if any is
    unknown; the known ones are aligned then too (two of them that cannot be are refused at once)."""
    known = [(i, f) for i, f in enumerate(features) if f is not None]
    merged = aligned_features([f for _, f in known], what, inputs=[i for i, _ in known])
    if len(known) < len(features):
        return None
    return type(features[0])(merged)


def _first_row_check(datasets: list[IterableDataset], what: str) -> FirstRowCheck | None:
    """The check of the first rows of the inputs whose features are unknown (``nodes/column_types.py``),
    if any input's are and there is another input to compare them with."""
    features = [d.features for d in datasets]
    if len(features) < 2 or all(f is not None for f in features):
        return None
    return FirstRowCheck(what, features)


def _common_column_names(datasets: list[IterableDataset]) -> list[str] | None:
    """The column names of the first dataset if every dataset has the same (in any order), else ``None``."""
    names = datasets[0].column_names
    if names is None or any(d.column_names is None or sorted(d.column_names) != sorted(names) for d in datasets[1:]):
        return None
    return names


def _fill_missing_columns(example: dict, columns: list[str]) -> None:
    """Moves ``columns`` (the merged features' columns from the first one the dataset lacks or has
    elsewhere) to the end of the example, in that order, ``None`` for those it lacks: HF fills the
    columns a dataset lacks so, and yields every row in its features' order. Edited in place (a map
    puts a returned dict onto the example in the example's order); the map's parameters, and so
    the pipeline's fingerprint, are those of the earlier fill, which added the missing columns
    last: its states still load (an example they hold keeps that order)."""
    for c in columns:
        example[c] = example.pop(c, None)


# HF aligns the columns on its Arrow path (a null in the table), so the rows stay Arrow-backed for
# formatting (``nodes/arrow_batches.arrow_rooted``): numpy scalars, NaN for a missing number
_fill_missing_columns.keeps_arrow_rows = True  # type: ignore[attr-defined]


def _row_shape(features: Any) -> dict:
    """The shape HF's cast gives the rows of ``features`` (see ``nodes/column_order.py``): the columns in
    order, each a struct's shape (a dict), a list of structs' (``[shape]``) or ``None``."""
    from datasets import LargeList, List

    def sub(f: Any) -> Any:
        if isinstance(f, dict):
            return _row_shape(f)
        if isinstance(f, (List, LargeList)) and isinstance(f.feature, dict):
            return [_row_shape(f.feature)]
        return None

    return {k: sub(v) for k, v in features.items()}


def _aligned_nodes(datasets: list[IterableDataset], merged: Any) -> tuple[list, list]:
    """The datasets' pipelines, each one lacking columns of ``merged`` followed by a map adding them
    as ``None``, so that every example of the combination has every column, in ``merged``'s order;
    and, per dataset, the shape the combining node puts its rows in (``nodes/column_order.py``):
    ``merged``'s where the dataset's rows would differ from it (a column, or a struct's field, in
    another order, a struct lacking a field: HF casts its rows to the merged features), ``None``
    for the others. Unknown features, but the same column names in every dataset: the first's
    order (that of HF's features, inferred from the rows)."""
    nodes, shapes = [], []
    if merged is not None:
        names = list(merged)
        target = _row_shape(merged)
    else:
        names = _common_column_names(datasets)
        target = None if names is None else dict.fromkeys(names)
    for d in datasets:
        node = d.pipeline.clone()
        if merged is not None:
            own = _row_shape(d.features)
            if any(c not in d.features for c in merged):
                same = next((i for i, (a, b) in enumerate(zip(own, names)) if a != b), min(len(own), len(names)))
                node = MapNode(node, _fill_missing_columns, fn_kwargs={"columns": names[same:]})
                own = {c: own[c] if c in own else target[c] for c in names}  # filled in their places
        else:
            own = None if d.column_names is None else dict.fromkeys(d.column_names)
        # dicts compare regardless of order: their JSON texts tell it
        shape = target if target is not None and json.dumps(own) != json.dumps(target) else None
        nodes.append(node)
        shapes.append(shape)
    return nodes, shapes


def _merged_info(datasets: list[IterableDataset], info: Any = None) -> Any:
    """The info of a combination: ``info`` when given (HF's ``info=``: its features give way to the
    combination's), else as HF merges it: the inputs' when they are all equal (the splits of one
    ``load_dataset``: its builder's), else their descriptions, citations... joined."""
    from datasets import DatasetInfo

    if info is not None:
        if not isinstance(info, DatasetInfo):  # e.g. an argument given in this library's former order
            raise TypeError(f"info must be a datasets.DatasetInfo, got {type(info).__name__} {info!r:.60} (the "
                            "arguments are HF's, in HF's order: give the others by name)")
        return info
    return DatasetInfo.from_merge([d.info for d in datasets])


def _split_like(combined: IterableDataset, first: IterableDataset) -> IterableDataset:
    """``combined`` split by node as ``first`` (and every other input, see :func:`_check`) is, and at
    its epoch: a pipeline over datasets split by node is split the same way when it is iterated."""
    for entry in first.rank_splits:  # (rank, world_size[, strategy])
        combined = split_dataset_by_node(combined, *entry)
    if combined.epoch != first.epoch:  # not at 0: that would count as the user's set_epoch, so a state
        combined.set_epoch(first.epoch)  # loaded later would not give its epoch to the passes after it
    return combined


def interleave_datasets(datasets: list[IterableDataset], probabilities: list[float] | None = None,
                        seed: int | None = None, info: Any = None, split: Any = None,
                        stopping_strategy: str = "first_exhausted") -> IterableDataset:
    """Alternate between datasets: in turn, or at random with ``probabilities`` (seeded by ``seed``).

    When every dataset's features are known (sources with a schema, ``cast``, ``features=``, or
    :meth:`IterableDataset.resolve_features`), the result has their union and the columns a
    dataset lacks are yielded as ``None``, each row in the union's column order (as HF). Unlike HF ``datasets``, building the pipeline never
    reads examples (which would run the user's functions): call ``resolve_features()`` on a
    dataset whose features are unknown to get HF's behaviour. A probability of 0 is refused with
    the ``all_exhausted`` strategies (that dataset would never be exhausted), as HF's map-style
    ``interleave_datasets`` refuses it. ``info`` (a ``datasets.DatasetInfo``) and ``split`` (a split
    name) describe the result, as HF's: by default the inputs' infos merged, and no split name. The
    arguments are HF's, in HF's order.
    """
    info = _merged_info([], info) if info is not None else None  # checked before the datasets are
    datasets = _check(datasets, "interleave_datasets")
    if seed is not None:
        seed = resolve_seed(seed)  # any integer type, stored as a plain int
    merged = _merged_features([d.features for d in datasets], "interleave_datasets")
    nodes, shapes = _aligned_nodes(datasets, merged)
    node = InterleaveNode(nodes, probabilities=probabilities, seed=seed, stopping_strategy=stopping_strategy,
                          column_shapes=shapes, first_rows=_first_row_check(datasets, "interleave_datasets"))
    combined = IterableDataset(node, features=merged, info=_merged_info(datasets, info), split=split,
                               column_names=None if merged is not None else _common_column_names(datasets))
    return _split_like(combined, datasets[0])


def concatenate_datasets(dsets: list[IterableDataset], info: Any = None, split: Any = None,
                         axis: int = 0) -> IterableDataset:
    """One dataset after the other (``axis=0``) or their columns side by side (``axis=1``). ``info``
    (a ``datasets.DatasetInfo``) and ``split`` (a split name) describe the result, as HF's: by
    default the inputs' infos merged, and no split name. The arguments are HF's, in HF's order.

    With ``axis=0``, when every dataset's features are known the columns a dataset lacks are
    yielded as ``None``, every row in the union's column order (as HF); with ``axis=1``, a column name found in two datasets raises
    ``ValueError`` here, when the column names are known. As for :func:`interleave_datasets`,
    building the pipeline reads no example (HF infers unknown features from the first examples:
    call :meth:`IterableDataset.resolve_features` for that). As in HF, the result keeps the format
    (``with_format``) that every dataset has; none if they differ.
    """
    info = _merged_info([], info) if info is not None else None
    datasets = _check(dsets, "concatenate_datasets")
    if axis not in (0, 1):
        raise ValueError(f"concatenate_datasets: axis must be 0 or 1, got {axis!r}")
    merged = _merged_features([d.features for d in datasets], "concatenate_datasets")
    names = None
    if axis == 0:
        nodes, shapes = _aligned_nodes(datasets, merged)
        node = ConcatNode(nodes, axis=0, column_shapes=shapes,
                          first_rows=_first_row_check(datasets, "concatenate_datasets"))
        names = None if merged is not None else _common_column_names(datasets)
    else:
        if all(d.column_names is not None for d in datasets):
            names = [c for d in datasets for c in d.column_names]
            if len(set(names)) != len(names):
                duplicated = sorted({c for c in names if names.count(c) > 1})
                raise ValueError(f"concatenate_datasets(axis=1): columns {duplicated} are duplicated: they are in "
                                 f"more than one dataset (columns: {names}); remove or rename them first")
        node = ConcatNode([d.pipeline.clone() for d in datasets], axis=1)
    out = _split_like(IterableDataset(node, features=merged, column_names=None if merged is not None else names,
                                      split=split, info=_merged_info(datasets, info)), datasets[0])
    format_types = {d.format["type"] for d in datasets}
    if len(format_types) == 1 and None not in format_types:  # as HF: a format every dataset has is kept
        kept = datasets[0].format
        out = out.with_format(kept["type"], **kept["format_kwargs"])
    return out
