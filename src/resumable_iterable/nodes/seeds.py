"""The random generators of the nodes that draw (shuffles, interleaves, shard orders): seeds,
PCG64 generators made from them, and the seed of each DataLoader worker's / rank's share."""

from __future__ import annotations

import numpy as np

from .checks import as_int


class DrawnSeed:
    """For a node kind that draws from ``self.seed``, which it drew at random when built without
    one (``seed_drawn``): the node capabilities ``drawn_seed`` and ``adopt_seed`` (see ``Node``).
    Listed before ``Node`` among the kind's bases."""

    seed: int
    #: the seed was drawn at random when the node was built (no seed given): see also the kind's
    #: ``drawn_seed_problem``
    seed_drawn = False

    def drawn_seed(self) -> int | None:
        return self.seed if self.seed_drawn else None

    def adopt_seed(self, seed: int) -> None:
        self.seed = seed
        self._state_dict.update(self._own_state())  # type: ignore[attr-defined]


def resolve_seed(seed: int | None) -> int:
    """``seed`` (any integer type) as a plain ``int`` checked to be in [0, 2**64), or a fresh
    random one when it is ``None`` (a state records the seed it was drawn with, so a resume does
    not depend on drawing it again)."""
    if seed is None:
        return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
    return as_int(seed, "seed", hi=2**64 - 1)


def rng_from_seed(*words: int) -> np.random.Generator:
    """A PCG64 generator seeded from several integers (seed, epoch, ...)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(w) for w in words])))


def split_seed(seed: int, num_shards: int, index: int) -> int:
    """The seed of shard group ``index`` of ``num_shards`` of a random node seeded ``seed``: each
    DataLoader worker and rank draws its own stream, fixed by the seed and the split (a random node
    overrides :meth:`Node.shard` with it). One group (``num_shards == 1``) keeps ``seed``."""
    if num_shards == 1:
        return seed
    return int(np.random.SeedSequence([int(seed), 0x5B11, int(num_shards), int(index)]).generate_state(1, np.uint64)[0])


def rng_from_state(state: dict) -> np.random.Generator:
    g = np.random.Generator(np.random.PCG64())
    g.bit_generator.state = state
    return g
