"""Source over a Python generator function, sharded by the list values of ``gen_kwargs``.

As in HF ``IterableDataset.from_generator``: every list in ``gen_kwargs`` must have the same
length *n*, and shard *i* calls ``generator(**kwargs)`` with each list replaced by ``[lst[i]]``.
A generator cannot seek, so resuming inside a shard re-runs the generator and discards the
``offset`` examples already yielded (with a progress bar when that is long); shards already
finished are not re-run to resume the source itself. A shuffle buffer whose state holds
positions (``buffer_state="replay"``, or a DataLoader worker's buffer of large examples) re-runs
each shard its buffered rows came from, finished or not, up to the last of them (``read_rows``).

The state also holds a digest of what defines the shards (``shards``, see :func:`shards_digest`)
when the lists of ``gen_kwargs`` hold names or plain values (the usual list of files): a state
loads only into a source over the same shards in the same order, since positions count shards by
their place (a list of files in another order, e.g. from an unsorted glob, would re-read some
shards and skip others).
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable, Iterator

from ..progress import fast_forward, progress
from ..state import fingerprint as digest
from .base import add_context
from .files import names_digest
from .source import SourceNode


def split_gen_kwargs(gen_kwargs: dict) -> list[dict]:
    lists = {k: v for k, v in gen_kwargs.items() if isinstance(v, list)}
    lengths = {len(v) for v in lists.values()}
    if len(lengths) > 1:
        raise ValueError(
            "gen_kwargs lists define the shards and must all have the same length, got "
            + ", ".join(f"{k}: {len(v)}" for k, v in lists.items())
        )
    n = lengths.pop() if lengths else 1
    if lists and n == 0:
        raise ValueError("gen_kwargs lists are empty: there is no shard to read")
    return [{k: ([v[i]] if k in lists else v) for k, v in gen_kwargs.items()} for i in range(n)]


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON data (so that its digest is the same in every process)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


#: query parameters of signed URLs (S3, GCS, Azure SAS, CloudFront, tokens): credentials and expiry
#: that change between runs without naming other data
_SIGNING = {"signature", "expires", "key-pair-id", "policy", "sig", "se", "st", "sp", "sv", "sr", "spr", "skoid",
            "sktid", "skt", "ske", "sks", "skv", "token", "access_token", "awsaccesskeyid", "googleaccessid"}


def _unsigned(url: str) -> str:
    """``url`` without the query parameters that sign it: other parameters (``?file=A``) name data."""
    base, _, query = url.partition("?")
    kept = [p for p in query.split("&") if p and not (
        (name := p.split("=", 1)[0].lower()) in _SIGNING or name.startswith(("x-amz-", "x-goog-")))]
    return base + ("?" + "&".join(kept) if kept else "")


def shards_digest(gen_kwargs: dict) -> str | None:
    """A short hash of the list values of ``gen_kwargs`` (what defines the shards), in shard order:
    a list of names (strings, paths) relative to the folder they share, as a file source's names
    (the same files moved to another folder or machine still match; URLs without the query parameters
    that hold the access tokens of signed URLs, see ``_unsigned``), a list of other plain values
    as they are; lists of other objects are left out. ``None`` when nothing is left."""
    parts = {}
    for key, value in gen_kwargs.items():
        if not isinstance(value, list) or not isinstance(key, str):
            continue
        names = [os.fspath(v) if isinstance(v, os.PathLike) else v for v in value]
        if all(isinstance(v, str) for v in names):
            # a signed URL's access tokens change between runs and name no other data
            parts[key] = names_digest([_unsigned(v) if "://" in v else v for v in names])
        elif _plain(value):
            parts[key] = digest(value)
    return digest(parts) if parts else None


class GeneratorSource(SourceNode):
    kind = "generator"
    added_fields = frozenset(("shards",))  # ``shards``: absent from states of earlier releases

    def __init__(self, generator: Callable[..., Iterator[dict]], gen_kwargs: dict | None = None,
                 shard_ids: list[int] | None = None):
        if not callable(generator):
            raise TypeError(f"generator must be callable, got {type(generator).__name__}")
        self.generator = generator
        self.gen_kwargs = dict(gen_kwargs or {})
        self.shard_kwargs = split_gen_kwargs(self.gen_kwargs)
        self.shards_digest = shards_digest(self.gen_kwargs)  # before the fresh state, which holds it
        super().__init__(len(self.shard_kwargs), shard_ids)

    def _own_state(self) -> dict:
        own = super()._own_state()
        return own if self.shards_digest is None else {**own, "shards": self.shards_digest}

    def _validate_own(self, state: dict, where: str) -> None:
        if "shards" in state and state["shards"] != self.shards_digest:  # before the offsets, which count its shards
            raise ValueError(f"{where}: the generator's shards are not those the state was saved with (the lists "
                             f"of gen_kwargs hold other values, or the same in another order: 'shards' is "
                             f"{state['shards']!r} in the state, {self.shards_digest!r} here); resuming would read "
                             "other rows than the saved run. Pass the same lists in the same order (sort a glob); if "
                             "they name the same data otherwise (e.g. URLs with new tokens), remove 'shards' from "
                             "the state's source to resume anyway")
        super()._validate_own(state, where)

    def _iter(self) -> Iterator[Any]:
        # ``SourceNode._iter`` with each shard's generator run in the same loop (in place of
        # ``_iter_shard``): one generator of ours resumed an example, not two
        st = self._state_dict
        order = self.shard_order()
        while st["shard_pos"] < (len(order) if st["stop"] is None else st["stop"]):
            shard_id = order[st["shard_pos"]]
            it = iter(self.generator(**self.shard_kwargs[shard_id]))
            if st["offset"]:
                got = fast_forward(it, st["offset"], f"re-reading generator shard {shard_id}")
                if got < st["offset"]:
                    raise ValueError(
                        f"cannot resume generator shard {shard_id}: the state says {st['offset']} examples were "
                        f"read but the generator now yields only {got} (did its input change?)"
                    )
            try:
                for ex in it:
                    st["offset"] += 1
                    yield ex
            except BaseException as e:  # noqa: BLE001 - add where it happened, keep the type
                if not isinstance(e, GeneratorExit):
                    add_context(e, f"raised by generator shard {shard_id} after {st['offset']} examples")
                raise
            st["shard_pos"] += 1
            st["offset"] = 0

    def read_rows(self, shard_id: int, rows: list[int]) -> list[dict]:
        """The given rows of a shard: a generator cannot seek, so it is re-run up to the last one
        (with progress reporting when that is long)."""
        if not rows:
            return []
        want = set(rows)
        last = max(want)
        found: dict[int, Any] = {}
        it = iter(self.generator(**self.shard_kwargs[shard_id]))
        with progress(last + 1, f"re-running generator shard {shard_id} to replay the shuffle buffer") as bar:
            for i, ex in enumerate(itertools.islice(it, last + 1)):
                if i in want:
                    found[i] = ex
                if i % 4096 == 4095:
                    bar.update(4096)
        if len(found) < len(want):
            missing = min(want - found.keys())
            raise ValueError(f"the generator now yields fewer rows than the state says were read "
                             f"(row {missing} is missing; did its input change?)")
        return [found[r] for r in rows]
