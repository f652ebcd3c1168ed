"""Splitting a pipeline among ranks (``split_dataset_by_node``) and DataLoader workers.

A dataset records its rank splits (``dataset.rank_splits``, one ``(rank, world_size)`` pair per
``split_dataset_by_node`` call) and applies them, then the DataLoader worker split, when it
builds the pipeline a process iterates (:func:`split_for_process`). The same function rebuilds
the pipeline of *another* process (a worker or rank of a saved run) from a split description,
which is what elastic resume (``loader/elastic.py``) needs. This layer sits on the nodes and
under the loader layer (``loader/``); it never imports the dataset facade.

A split description is plain JSON stored in every state::

    {"base": "<fingerprint of the unsplit pipeline>",
     "ranks": [[rank, world_size], ...],         # one per split_dataset_by_node; [rank, world_size,
                                                 # strategy] for strategy "shards" / "examples"
     "worker": [worker_id, num_workers] | null,   # null: not in a DataLoader worker
     "deal": 1}                                   # only when the shards are dealt by epoch (below)

How shards are dealt: a split lists the shards and gives group ``i`` of ``n`` the positions
``i, i + n, ...`` of that list (rank ``i`` of ``n`` with the ``"shards"`` strategy, DataLoader
worker ``i`` of ``n``). Without a ``shuffle`` the list is the natural order. Under a ``shuffle``
(:meth:`~.nodes.base.Node.deals_by_epoch`) the list is drawn from the epoch before each split,
as HF shuffles its shards before dealing them: every epoch, each worker and rank reads other
shards. The draw depends on the epoch only, not on a seed: ranks are separate processes, and a
``shuffle()`` without a seed draws another seed in each of them (and in a resumed run), while
every process must deal alike. States record it (``"deal": 1``); a state without it was dealt
in the natural order by an earlier version, and resumes so.

A split into one part, ``split_dataset_by_node(ds, 0, 1)`` or one DataLoader worker, is no split:
the process reads what the unsplit dataset reads, in its order (as in HF), and their states load
into each other. Earlier versions applied a rank split of world size 1 like any other: under a
shuffle it dealt the shards once more, and it listed a concatenation's inputs as one-shard
pieces. A state they saved there still resumes its epoch as it was read, in that split
(:func:`split_ranks` with ``as_before=True``, tried when the state does not match today's).
"""

from __future__ import annotations

import logging
import sys
import weakref
from typing import Any

from .nodes.base import Node
from .nodes.prefetch import reading_ahead
from .nodes.seeds import rng_from_seed
from .nodes.slicing import CountNode
from .nodes.step import StepNode

logger = logging.getLogger("resumable_iterable")


STRATEGIES = ("auto", "shards", "examples")


def check_strategy(strategy) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown split strategy {strategy!r}; expected one of {list(STRATEGIES)}")
    return strategy


def split_dataset_by_node(dataset, rank: int, world_size: int, strategy: str = "auto"):
    """The part of ``dataset`` for ``rank`` out of ``world_size`` (as HF ``split_dataset_by_node``).

    ``strategy`` (as HF's):

    * ``"shards"``: each rank reads a disjoint set of shards (shard ``i`` goes to rank
      ``i % world_size``; ``ValueError`` if there are fewer shards than ranks);
    * ``"examples"``: every rank reads all shards and keeps one example in ``world_size``
      (example ``j`` goes to rank ``j % world_size``);
    * ``"auto"`` (default): ``"shards"`` if the number of shards is a multiple of ``world_size``,
      else ``"examples"``.

    The part's ``num_shards`` counts the shards it reads, as HF's. Under a ``shuffle`` the shards
    are dealt from a list drawn anew every epoch (see the module doc). Either way each rank's part
    is resumable on its own, and :func:`resumable_iterable.redistribute_states` moves saved
    progress to another world size. Random draws the ranks must share need a seed (every rank is
    its own process): ``ValueError`` for a ``shuffle()`` or ``interleave_datasets(probabilities=)``
    without one when splitting by example, and for a global shuffle without one.
    """
    check_strategy(strategy)
    if isinstance(dataset, dict):  # an IterableDatasetDict (HF: AttributeError '_distributed')
        raise TypeError(f"split_dataset_by_node takes one dataset, got a dict of the splits {list(dataset)}: split "
                        f"each one you read, e.g. split_dataset_by_node(ds[{(list(dataset) or ['train'])[0]!r}], ...)")
    if getattr(dataset, "rank_splits", None) is None:  # a HF datasets.Dataset / IterableDataset: HF's own split
        from datasets.distributed import split_dataset_by_node as hf_split

        return hf_split(dataset, rank=rank, world_size=world_size, **({"strategy": strategy} if strategy != "auto" else {}))
    # like HF, the part keeps the dataset's format and info (derive checks rank and world_size)
    return dataset.derive(dataset.pipeline, features=dataset.features, column_names=dataset.column_names,
                          split_by_node=(rank, world_size, strategy))


def _worker_info():
    if "torch" not in sys.modules:
        return None
    import torch.utils.data

    return torch.utils.data.get_worker_info()


#: the generators of the passes started in this DataLoader worker (see :func:`note_pass`)
_PASSES: "weakref.WeakSet" = weakref.WeakSet()


def note_pass(iterator: Any) -> None:
    """Record ``iterator``, the generator of a pass that a DataLoader worker started on its own
    part, so that :func:`current_worker` can tell a dataset iterated *inside* that pass."""
    _PASSES.add(iterator)


def current_worker() -> tuple[int, int] | None:
    """``(worker_id, num_workers)`` inside a DataLoader worker, ``None`` elsewhere.

    Also ``None`` while a pass of the worker's own part is producing an example (a dataset
    iterated from a ``from_generator`` generator or a ``map`` function of the pipeline the worker
    reads): that pass is the worker's share already, so a dataset iterated inside it is read
    whole, as it is without workers. Splitting it again among the workers would lose the other
    workers' parts of it: with one shard outside, the other workers read nothing of it at all.
    So also in the thread of a ``prefetch`` of that pass, which reads ahead meanwhile.
    (A dataset of the user's that iterates ours in each worker still has ours split.)"""
    info = _worker_info()
    if info is None:
        return None
    if _PASSES and (any(g.gi_running for g in list(_PASSES)) or reading_ahead()):
        return None  # (a prefetch thread reads ahead while the worker's own thread is elsewhere)
    return (info.id, info.num_workers)


def effective_worker(worker) -> tuple[int, int] | None:
    """The worker split that changes the pipeline: one worker reads everything, like no worker."""
    if worker is None:
        return None
    w, n = worker
    return (int(w), int(n)) if n > 1 else None


def ranks_of(split: tuple) -> list[list]:
    """The ``"ranks"`` entry of a split description from a dataset's ``("rank", rank, world_size[,
    strategy])`` splits: ``[rank, world_size]``, with the strategy only when it is not ``"auto"``."""
    return [[int(r), int(n), *(s for s in rest if s != "auto")] for _, r, n, *rest in split]


def rank_strategy(n: int, entry) -> str:
    """``"shards"`` or ``"examples"``: how the rank split ``entry`` (``[rank, world_size[, strategy]]``)
    splits a pipeline of ``n`` shards. ``ValueError`` if ``"shards"`` leaves a rank without a shard."""
    world_size, strategy = entry[1], (entry[2] if len(entry) > 2 else "auto")
    if strategy == "auto":
        return "shards" if n % world_size == 0 else "examples"
    if strategy == "shards" and n < world_size:
        raise ValueError(f"cannot split a dataset of {n} shard(s) among {world_size} ranks with strategy='shards': "
                         f"some ranks would get no shard (use strategy='examples' or 'auto', or more shards)")
    return strategy


def _rank_steps(num_shards: int, ranks):
    """``(entry, strategy, shards)`` for each rank split of ``ranks`` in turn: how it splits, and how
    many of ``num_shards`` shards the rank reads after it (checking it, see :func:`rank_strategy`)."""
    n = num_shards
    for entry in ranks:
        strategy = rank_strategy(n, entry)
        if strategy == "shards":
            n = len(range(entry[0], n, entry[1]))
        yield entry, strategy, n


def rank_shards(num_shards: int, ranks) -> int:
    """How many of ``num_shards`` shards a rank reads after the rank splits ``ranks`` (checking them)."""
    n = num_shards
    for _, _, n in _rank_steps(num_shards, ranks):
        pass
    return n


_warned: set = set()


def too_many_workers_message(num_workers: int, num_shards: int) -> str:
    return (f"too many dataloader workers: {num_workers} workers for {num_shards} shard(s); "
            f"{num_workers - num_shards} worker(s) will yield nothing (every example is still yielded once). "
            f"Use at most {num_shards} workers, or more shards (reshard() splits Parquet files into "
            f"a shard per row group; load_dataset('imagefolder', ..., num_shards=n) and "
            f"to_iterable_dataset(..., num_shards=n) split a folder of images or a table).")


def warn_too_many_workers(num_workers: int, num_shards: int) -> bool:
    """Log the too-many-workers warning once per process and configuration; ``True`` if logged now.

    Forked DataLoader workers inherit the set of warnings already given, so a warning given in
    the main process before the workers start is not repeated by them.
    """
    key = ("workers", num_workers, num_shards)
    if key in _warned:
        return False
    _warned.add(key)
    logger.warning(too_many_workers_message(num_workers, num_shards))
    return True


def _enter_rank_split(node: Node, world_size: int) -> Node:
    """A copy of ``node`` whose ``skip`` / ``take`` made after this rank split count the whole
    dataset (see ``nodes/slicing.py``); ``node`` itself when it has none."""
    if not any(isinstance(n, CountNode) and n.per_rank for n in node.walk()):
        return node
    node = node.clone()
    node.forget_fingerprint()
    for n in node.walk():
        if isinstance(n, CountNode):
            n.enter_rank_split(world_size)
    return node


#: the ``"deal"`` of states whose shards are dealt in an order drawn by epoch (see the module doc);
#: 0 (no ``"deal"``): the natural order, as states of earlier versions were
DEAL_BY_EPOCH = 1


def deal_of(split: dict | None, where: str = "state") -> int:
    """How the shards of the process that saved a state were dealt: its split's ``"deal"`` (0 if
    absent). ``ValueError`` for a rule this version does not know."""
    deal = split.get("deal", 0) if isinstance(split, dict) else 0
    if type(deal) is not int or deal not in (0, DEAL_BY_EPOCH):
        raise ValueError(f"{where}: 'split.deal' is {deal!r}: this version deals shards by rule {DEAL_BY_EPOCH} "
                         "(or 0, the natural order); was the state saved by a newer version, or edited?")
    return deal


def has_world_size_1(ranks) -> bool:
    """Whether rank splits ``[[rank, world_size], ...]`` hold one of world size 1 (no split today,
    one that changed the pipeline in earlier versions: see the module doc)."""
    return any(isinstance(r, (list, tuple)) and len(r) > 1 and r[1] == 1 for r in ranks or ())


def split_deal(node: Node, ranks, worker) -> int:
    """The ``"deal"`` a process with these splits records: :data:`DEAL_BY_EPOCH` when a split deals
    the shards of a shuffled pipeline, else 0 (nothing changes with the epoch)."""
    if all(r[1] == 1 for r in ranks) and effective_worker(worker) is None:
        return 0  # no split into more than one part
    return DEAL_BY_EPOCH if node.deals_by_epoch() else 0


def _dealt(node: Node, epoch: int, deal: int) -> Node:
    """``node`` with its shards listed in the order a split deals them at ``epoch`` (module doc)."""
    if deal != DEAL_BY_EPOCH or node.num_shards < 2 or not node.deals_by_epoch():
        return node
    return node.dealt_shards(int(rng_from_seed(0xDEA1, epoch).integers(2**63)))


def check_rank_splits(node: Node, ranks) -> None:
    """``ValueError`` if the rank splits ``ranks`` cannot split pipeline ``node``: too few shards for
    ``"shards"`` (:func:`rank_strategy`), or random draws the ranks must share made by a node built
    without a seed (ranks are separate processes: each would draw another seed, and together they
    would read some examples twice and others never; HF refused the same for ``shuffle()``)."""
    for entry, strategy, _ in _rank_steps(node.num_shards, ranks):
        if entry[1] == 1:
            continue
        by_examples = strategy == "examples"
        problem = next((p for p in (c.drawn_seed_problem(by_examples) for c in node.walk()) if p), None)
        if problem is not None:
            raise ValueError(
                f"a dataset split among {entry[1]} ranks by split_dataset_by_node cannot hold {problem}: every rank "
                "is its own process and would draw another seed, so the ranks would not share one "
                f"{'stream to split by example' if by_examples else 'permutation to split'} (examples read twice or "
                "never). Pass a seed, e.g. seed=42, the same on every rank.")


def split_ranks(node: Node, ranks, epoch: int = 0, deal: int = 0, as_before: bool = False) -> Node:
    """Apply rank splits ``[[rank, world_size], ...]`` to a pipeline template.

    A ``skip(n)`` / ``take(n)`` below the split is divided among the ranks with the shards (or
    read by every rank before the one-in-``world_size`` step), so the ranks together skip / take
    ``n``, as in HF ``datasets``; one made after ``split_dataset_by_node`` skips / takes ``n`` of
    each rank's part. A split of world size 1 changes nothing (``as_before``: as earlier versions
    applied it, for their states; see the module doc).
    """
    for entry in ranks:
        rank, world_size = entry[0], entry[1]
        node = _enter_rank_split(node, world_size)
        if world_size == 1 and not as_before:
            continue
        if rank_strategy(node.num_shards, entry) == "shards":
            node = _dealt(node, epoch, deal).shard(world_size, rank, contiguous=False)
        else:
            node = StepNode(node.clone(), world_size, rank)
    return node


def split_workers(node: Node, worker, epoch: int = 0, deal: int = 0) -> Node:
    """Apply the worker split ``(worker_id, num_workers)`` (or none) to a pipeline template; the
    shards are dealt as ``deal`` says for ``epoch`` (see the module doc)."""
    worker = effective_worker(worker)
    if worker is None:
        return node
    w, num_workers = worker
    n = node.num_shards
    if w >= n:
        return _Empty(node)
    return _dealt(node, epoch, deal).shard(min(num_workers, n), w, contiguous=False)


def matching_split(build, fingerprint: str, ranks) -> Node:
    """``build(as_before)``: the pipeline split as today (``as_before=False``), unless ``ranks`` hold
    a split of world size 1 and only the pipeline split as earlier versions split it has the saved
    ``fingerprint`` (a state they saved: it resumes as it was read; see the module doc)."""
    node = build(False)
    if has_world_size_1(ranks) and node.fingerprinted_shape()[1] != fingerprint:
        before = build(True)
        if before.fingerprinted_shape()[1] == fingerprint:
            return before
    return node


def split_for_process(node: Node, split: tuple, worker="current", epoch: int = 0, deal: int = 0,
                      as_before: bool = False) -> Node:
    """Apply the rank splits recorded on a dataset, then the DataLoader worker split.

    ``worker`` is ``"current"`` (the DataLoader worker this code runs in, if any), ``None`` (no
    worker split) or ``(worker_id, num_workers)``. The shards are dealt for ``epoch`` as ``deal``
    says (a fresh pass: :func:`split_deal`; a loaded state: its own); ``as_before``: see
    :func:`split_ranks`.
    """
    here = worker == "current"
    if here:
        worker = current_worker()
    node = split_ranks(node, ranks_of(split), epoch, deal, as_before)
    eff = effective_worker(worker)
    if here and eff is not None and eff[1] > node.num_shards and eff[0] == 0:
        # the first worker speaks for all; a main process that already warned (ri.StatefulDataLoader)
        # has put the key in `_warned`, which forked workers inherit
        warn_too_many_workers(eff[1], node.num_shards)
    return split_workers(node, worker, epoch, deal)


class _Empty(Node):
    """A worker without shards: yields nothing (keeps the pipeline below for the fingerprint)."""

    kind = "empty"

    def __init__(self, child: Node):
        super().__init__([child])

    def _iter(self):
        return iter(())
