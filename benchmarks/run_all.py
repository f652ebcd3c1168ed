"""Every benchmark, side by side with HF ``datasets``, in one run (``make bench``).

    python benchmarks/run_all.py                   # the full run (a few minutes)
    python benchmarks/run_all.py --markdown out.md # also write the table as Markdown
    python benchmarks/run_all.py --quick           # tiny sizes: checks that everything runs

Prints one table per benchmark, then the summary: each target MET / NOT MET. Timings are noisy
on a shared machine: rerun before quoting figures, and compare ratios rather than absolutes.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_arrow_lists  # noqa: E402
import bench_dataloader  # noqa: E402
import bench_formatted  # noqa: E402
import bench_json_documents  # noqa: E402
import bench_loader_shuffle  # noqa: E402
import bench_memory  # noqa: E402
import bench_pack  # noqa: E402
import bench_pipelines  # noqa: E402
import bench_state  # noqa: E402
import bench_throughput  # noqa: E402
import bench_user_pipelines  # noqa: E402
from common import N_ROWS, NUM_SHARDS, Result, environment, make_hf_dataset, print_section, table  # noqa: E402


def run_all(quick: bool = False, loader: bool = True, memory: bool = True) -> list[tuple[str, list[Result]]]:
    n_rows = 4_000 if quick else N_ROWS
    hf_ds = make_hf_dataset(n_rows)
    hf_ds_b = make_hf_dataset(n_rows, offset=10 * n_rows)
    sections = []

    def section(title: str, results: list[Result]) -> None:
        sections.append((title, results))
        print_section(title, results)

    section(f"throughput: {n_rows} rows {{int, str}} in {NUM_SHARDS} shards, one process",
            bench_throughput.run(n_rows=n_rows, repeats=1 if quick else 3, hf_scale=0.02 if quick else 1.0,
                                 hf_ds=hf_ds, hf_ds_b=hf_ds_b))
    section("state_dict() and resume",
            bench_state.run(n_rows=n_rows, hf_ds=hf_ds, number=20 if quick else 2000, repeats=1 if quick else 5))
    if memory:
        section("memory (fresh subprocess per measure)",
                bench_memory.run(n_rows=n_rows, buffer=500 if quick else bench_memory.BUFFER)
                + bench_memory.run(n_rows=n_rows, buffer=500 if quick else bench_memory.BUFFER, repeat=1,
                                   label=" (50-byte text)"))
    if loader:
        section(f"StatefulDataLoader: {bench_dataloader.WORKERS} workers, batch_size={bench_dataloader.BATCH_SIZE}",
                bench_dataloader.run(n_rows=n_rows, hf_ds=hf_ds, hf_ds_b=hf_ds_b, scale=0.02 if quick else 1.0,
                                     names=["plain iteration"] if quick else None))
        section("exact shuffle through StatefulDataLoader (2 workers): 256 KB arrays, images, file bytes, text rows",
                bench_loader_shuffle.run(quick=quick))
        section("formatted batches through StatefulDataLoader (2 workers, batch 32)",
                bench_formatted.run(n_rows=n_rows, scale=0.002 if quick else 1.0))
        section("realistic pipelines from files (JSON Lines LLM packing, imagefolder, Parquet mixture), "
                "one process and StatefulDataLoader (2 workers)",
                bench_pipelines.run(quick=quick, repeats=1))
        section("user pipelines through StatefulDataLoader (2 workers, a state after every batch): tokenizer, "
                "images in torch format, interleave, JSON Lines .gz, split by node, batch(32) torch",
                bench_user_pipelines.run(quick=quick, scale=0.5, repeats=1))
    section(f"JSON documents (a list of objects, field=\"data\"): {2_000 if quick else bench_json_documents.N_ROWS} rows",
            bench_json_documents.run(2_000 if quick else bench_json_documents.N_ROWS, repeats=1 if quick else 3,
                                     memory=memory and not quick))
    section("packing into 2048-token chunks", bench_pack.run(500 if quick else 20_000, repeats=1 if quick else 5))
    section("lists of numbers from Arrow sources, numpy / torch format (informative)",
            bench_arrow_lists.run(n_rows=40 if quick else bench_arrow_lists.N_ROWS,
                                  width=1_024 if quick else bench_arrow_lists.WIDTH, repeats=1 if quick else 2,
                                  token_rows=200 if quick else bench_arrow_lists.TOKEN_ROWS, loader=loader))
    # benchmarks/bench_save_state.py writes several GB: run it on its own
    return sections


def summary(sections: list[tuple[str, list[Result]]]) -> tuple[list[Result], int, int]:
    targets = [r for _, results in sections for r in results if r.met is not None]
    met = sum(1 for r in targets if r.met)
    return targets, met, len(targets) - met


def markdown(sections: list[tuple[str, list[Result]]], elapsed: float) -> str:
    _, met, missed = summary(sections)
    lines = [f"Measured {datetime.date.today().isoformat()} with `make bench` "
             f"(`python benchmarks/run_all.py`, {elapsed:.0f} s) on {environment()}.", "",
             f"**Targets: {met} met, {missed} not met.** Speed-up = how many times faster than HF "
             "(throughput ratio ours / HF; for times, HF's time / ours).", ""]
    for title, results in sections:
        lines += [f"### {title}", "", table(results, markdown=True), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, to check that everything runs")
    ap.add_argument("--no-loader", action="store_true", help="skip the StatefulDataLoader benchmarks")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory benchmarks")
    ap.add_argument("--markdown", metavar="PATH", help="also write the tables as Markdown to PATH")
    args = ap.parse_args()

    print(f"resumable_iterable vs HF datasets - {environment()}")
    t0 = time.perf_counter()
    sections = run_all(quick=args.quick, loader=not args.no_loader, memory=not args.no_memory)
    elapsed = time.perf_counter() - t0
    targets, met, missed = summary(sections)
    print("\n== targets")
    print(table(targets))
    print(f"\n{met} met, {missed} not met ({elapsed:.0f} s)")
    if args.quick:
        print("(--quick: tiny sizes, the figures and statuses above are not meaningful)")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown(sections, elapsed) + "\n")
        print(f"Markdown written to {args.markdown}")


if __name__ == "__main__":
    main()
