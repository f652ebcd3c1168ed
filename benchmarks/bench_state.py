"""Cost of taking a state and of resuming from one, HF ``datasets`` beside ``resumable_iterable``.

* ``state_dict()`` of ``source -> shuffle(buffer B)`` for B = 100 and B = 10 000, taken in the
  middle of a pass. Ours holds the buffered examples (copied shallowly); HF's does not hold them
  (a resumed HF pipeline loses them), so HF's figure is a reference, not the same work.
* first example after ``load_state_dict`` at position 100 and at position 190 000 of the plain
  200 k-row stream: ours seeks (slices the Arrow table at the saved offset), so both cost the same.

    python benchmarks/bench_state.py [--rows N]
"""

from __future__ import annotations

import itertools
import time

from common import N_ROWS, NUM_SHARDS, Result, arg_parser, make_hf_dataset, print_section, time_call

SMALL_BUFFER, LARGE_BUFFER = 100, 10_000


def _advance(ds, k: int):
    it = iter(ds)
    for _ in itertools.islice(it, k):
        pass
    return it


def state_dict_cost(make, buffer_size: int, consumed: int, number: int = 2000) -> float:
    """Microseconds per ``state_dict()`` call after ``consumed`` examples of ``make().shuffle(buffer_size)``."""
    ds = make().shuffle(seed=42, buffer_size=buffer_size)
    it = _advance(ds, consumed)  # keep the iterator alive: the state is taken mid-pass
    cost = time_call(ds.state_dict, number=number) * 1e6
    del it
    return cost


def first_example_after_resume(make, position: int, repeats: int = 5) -> float:
    """Milliseconds from ``load_state_dict`` to the first example, for a state taken at ``position``."""
    ds = make()
    it = _advance(ds, position)
    state = ds.state_dict()
    del it
    best = float("inf")
    for _ in range(repeats):
        fresh = make()  # building the pipeline is not part of the measure
        t0 = time.perf_counter()
        fresh.load_state_dict(state)
        next(iter(fresh))
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def run(n_rows: int = N_ROWS, hf_ds=None, number: int = 2000, repeats: int = 5, with_hf: bool = True) -> list[Result]:
    import resumable_iterable as ri

    hf_ds = hf_ds if hf_ds is not None else make_hf_dataset(n_rows)
    shards = min(NUM_SHARDS, len(hf_ds))
    ours = lambda: ri.to_iterable_dataset(hf_ds, num_shards=shards)  # noqa: E731
    theirs = lambda: hf_ds.to_iterable_dataset(num_shards=shards)  # noqa: E731

    # mid-pass: the large buffer is full and has turned over a few times
    consumed = min(len(hf_ds) - 1, 3 * LARGE_BUFFER + 123)
    results = []

    # -- state_dict() of the plain source (no buffer): the fixed cost of a state
    o_plain = ours()
    it = _advance(o_plain, 1000)
    plain = time_call(o_plain.state_dict, number=number) * 1e6
    del it
    h_plain = None
    if with_hf:
        h = theirs()
        it = _advance(h, 1000)
        h_plain = time_call(h.state_dict, number=max(1, number // 10)) * 1e6
        del it
    results.append(Result("state_dict(), no shuffle", plain, h_plain, "µs"))

    small = state_dict_cost(ours, SMALL_BUFFER, consumed, number)
    large = state_dict_cost(ours, LARGE_BUFFER, consumed, max(1, number // 4))
    h_small = h_large = None
    if with_hf:
        h_small = state_dict_cost(theirs, SMALL_BUFFER, consumed, max(1, number // 10))
        h_large = state_dict_cost(theirs, LARGE_BUFFER, consumed, max(1, number // 10))
    results.append(Result(f"state_dict(), shuffle buffer {SMALL_BUFFER}", small, h_small, "µs",
                          note="HF's state leaves the buffered examples out (they are lost on resume)"))
    ratio = large / small
    results.append(Result(f"state_dict(), shuffle buffer {LARGE_BUFFER // 1000}k", large, h_large, "µs",
                          target=f"≤ 5x buffer {SMALL_BUFFER} (aim ≤ 20 µs)",
                          check=f"{ratio:.1f}x", met=ratio <= 5.0,
                          note=f"{ratio:.2f}x the cost with buffer {SMALL_BUFFER}; "
                               f"{'meets' if large <= 20 else 'misses'} the 20 µs aim"))

    # -- resume: first example after load_state_dict, near the start and near the end
    near, far = min(100, len(hf_ds) - 1), max(0, len(hf_ds) - len(hf_ds) // 20)  # 100 and 190 k for 200 k rows
    t_near = first_example_after_resume(ours, near, repeats)
    t_far = first_example_after_resume(ours, far, repeats)
    h_near = h_far = None
    if with_hf:
        h_near = first_example_after_resume(theirs, near, max(1, repeats // 2))
        h_far = first_example_after_resume(theirs, far, max(1, repeats // 2))
    results.append(Result(f"first example after resume at {near}", t_near, h_near, "ms"))
    limit = 3 * t_near + 5
    results.append(Result(f"first example after resume at {far // 1000}k", t_far, h_far, "ms",
                          target=f"≤ 3x at {near} + 5 ms", check=f"{t_far / t_near:.1f}x",
                          met=t_far <= limit,
                          note=f"limit {limit:.1f} ms; {t_far / t_near:.2f}x the cost at position {near}"))
    return results


def main() -> None:
    args = arg_parser(__doc__).parse_args()
    print_section("state_dict() and resume", run(n_rows=args.rows))


if __name__ == "__main__":
    main()
