"""Saving and loading a state whose shuffle buffer holds large numpy arrays.

A pipeline ``from_generator -> shuffle(buffer_size=N)`` whose examples each hold a 1 MB float32
array is stopped after one example, with N examples buffered. Its state is saved and loaded:

* with ``ri.save_state`` / ``ri.load_state``: a binary state file (JSON document + raw blobs);
* as JSON text (``ri.dumps_state`` + ``write_atomic``, ``ri.loads_state``): the only format
  before binary state files, binary values in base64;
* the reference: the same arrays written with numpy alone (``np.save`` of each array into one
  open file, then ``fsync``) and read back with ``np.load``.

Every save includes ``fsync`` (and starts after an ``os.sync()``, so that it flushes only its own
data); loads read from the page cache (the file was just written). Ours and numpy's runs
alternate, and each figure is the best of ``--repeats`` runs (JSON text: one run, it is slow).

A second section does the same with a buffer of PIL images (``--images``, 256x256 RGB), which a
binary state file stores as raw pixels; beside it, the time PNG-encoding those images takes (what
saving them cost before: a few milliseconds per image).

    python benchmarks/bench_save_state.py [--examples 1000] [--mb 1] [--images 1000] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time

import numpy as np

from common import Result, print_section  # noqa: F401 (common also puts src/ on sys.path)


def buffered_state(n: int, nbytes: int) -> tuple[dict, list[np.ndarray]]:
    """The state of ``shuffle(buffer_size=n)`` over examples ``{"id", "x": float32[nbytes/4]}``,
    taken with ``n`` examples buffered, and the buffered arrays."""
    import resumable_iterable as ri

    rng = np.random.default_rng(0)
    pool = [rng.standard_normal(nbytes // 4, dtype=np.float32) for _ in range(n + 1)]

    def gen(rows):
        for i in range(rows):
            yield {"id": i, "x": pool[i]}

    ds = ri.IterableDataset.from_generator(gen, gen_kwargs={"rows": n + 1}).shuffle(seed=0, buffer_size=n)
    it = iter(ds)
    first = next(it)
    state = ds.state_dict()
    arrays = [p for p in pool if p is not first["x"]]
    return state, arrays


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        os.sync()  # no dirty pages of an earlier write left for this run's fsync to flush
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _best_of_pairs(a, b, repeats: int) -> tuple[float, float]:
    """Best times of ``a`` and ``b``, run alternately (so both see the same machine load)."""
    ta = tb = float("inf")
    for _ in range(repeats):
        ta = min(ta, _best(a, 1))
        tb = min(tb, _best(b, 1))
    return ta, tb


def numpy_save(arrays: list[np.ndarray], path: str) -> None:
    with open(path, "wb") as f:
        for a in arrays:
            np.save(f, a)
        f.flush()
        os.fsync(f.fileno())


def numpy_save_no_fsync(arrays: list[np.ndarray], path: str) -> None:
    with open(path, "wb") as f:
        for a in arrays:
            np.save(f, a)


def save_no_fsync(state: dict, path: str) -> None:
    """What ``save_state`` does, but for the ``fsync`` (and the rename): encode, write."""
    from resumable_iterable.state_files import encode_state

    with open(path, "wb") as f:
        for chunk in encode_state(state).chunks():
            f.write(chunk)


def numpy_load(path: str, count: int) -> list[np.ndarray]:
    with open(path, "rb") as f:
        return [np.load(f) for _ in range(count)]


def run(examples: int = 1000, mb: float = 1.0, repeats: int = 5, with_json: bool = True,
        folder: str | None = None) -> list[Result]:
    import resumable_iterable as ri
    from resumable_iterable.atomic_files import write_atomic

    nbytes = int(mb * (1 << 20))
    state, arrays = buffered_state(examples, nbytes)
    raw = sum(a.nbytes for a in arrays)
    tmp = tempfile.mkdtemp(dir=folder)
    try:
        p_np, p_ri, p_json = (os.path.join(tmp, n) for n in ("arrays.npy", "state.ri", "state.json"))
        t_np_save, t_save = _best_of_pairs(lambda: numpy_save(arrays, p_np), lambda: ri.save_state(state, p_ri), repeats)
        t_np_write, t_write = _best_of_pairs(lambda: numpy_save_no_fsync(arrays, p_np),
                                             lambda: save_no_fsync(state, p_ri + ".nofsync"), repeats)
        os.unlink(p_ri + ".nofsync")
        t_np_load, t_load = _best_of_pairs(lambda: numpy_load(p_np, len(arrays)), lambda: ri.load_state(p_ri), repeats)
        size = os.path.getsize(p_ri)
        back = ri.load_state(p_ri)
        got = [ex["x"] for chunk in back["state"]["buffer"] for ex in chunk]
        assert len(got) == len(arrays) and all(g.flags.writeable for g in got)
        want = [ex["x"] for chunk in state["state"]["buffer"] for ex in chunk]
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
        del back, got
        mib = raw / (1 << 20)
        label = f"{examples} x {mb:g} MB buffered"
        out = [
            Result(f"save_state, {label}", t_save * 1e3, t_np_save * 1e3, "ms", ref_label="np.save",
                   target="≤ 3x np.save", check=f"{t_save / t_np_save:.2f}x", met=t_save <= 3 * t_np_save,
                   note=f"{mib / t_save:.0f} MB/s; np.save {mib / t_np_save:.0f} MB/s (both with fsync)"),
            Result(f"save without fsync, {label}", t_write * 1e3, t_np_write * 1e3, "ms", ref_label="np.save",
                   target="≤ 3x np.save", check=f"{t_write / t_np_write:.2f}x", met=t_write <= 3 * t_np_write,
                   note=f"into the page cache: the CPU cost; {mib / t_write:.0f} MB/s, np.save {mib / t_np_write:.0f} MB/s"),
            Result(f"load_state, {label}", t_load * 1e3, t_np_load * 1e3, "ms", ref_label="np.load",
                   target="≤ 1.5x np.load", check=f"{t_load / t_np_load:.2f}x", met=t_load <= 1.5 * t_np_load,
                   note=f"{mib / t_load:.0f} MB/s; np.load {mib / t_np_load:.0f} MB/s (page cache)"),
            Result(f"file size, {label}", size / (1 << 20), mib, "MB", ref_label="raw array bytes",
                   target="≤ 1.1x raw bytes", check=f"{size / raw:.3f}x", met=size <= 1.1 * raw),
        ]
        if with_json:
            text: list[str] = []

            def save_json():
                text[:] = [ri.dumps_state(state)]
                write_atomic(p_json, text[0])

            t_jsave = _best(save_json, 1)
            jsize = os.path.getsize(p_json)
            del text[:]
            t_jload = _best(lambda: ri.loads_state(open(p_json, encoding="utf-8").read()), 1)
            out += [
                Result(f"JSON text save (base64), {label}", t_jsave * 1e3, t_save * 1e3, "ms",
                       ref_label="save_state", note="the format before binary state files; speed-up = its time / ours"),
                Result(f"JSON text load (base64), {label}", t_jload * 1e3, t_load * 1e3, "ms", ref_label="load_state"),
                Result(f"JSON text size, {label}", jsize / (1 << 20), size / (1 << 20), "MB", ref_label="save_state",
                       note=f"{jsize / raw:.2f}x the raw bytes"),
            ]
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def buffered_images(n: int, side: int) -> tuple[dict, list]:
    """The state of ``shuffle(buffer_size=n)`` over examples ``{"id", "image": PIL RGB side x side}``
    (photo-like: smooth gradients and noise), taken with ``n`` examples buffered, and the images."""
    from PIL import Image

    import resumable_iterable as ri

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:side, 0:side]
    base = np.stack([(x + y) % 256, (2 * x) % 256, (3 * y) % 256], -1).astype(np.int16)

    def gen(rows):
        for i in range(rows):
            noise = rng.integers(-12, 13, base.shape, dtype=np.int16)
            yield {"id": i, "image": Image.fromarray(np.clip(np.roll(base, i, 0) + noise, 0, 255).astype(np.uint8))}

    ds = ri.IterableDataset.from_generator(gen, gen_kwargs={"rows": n + 1}).shuffle(seed=0, buffer_size=n)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    return state, [ex["image"] for chunk in state["state"]["buffer"] for ex in chunk]


def run_images(examples: int = 1000, side: int = 256, repeats: int = 5, folder: str | None = None) -> list[Result]:
    import io

    import resumable_iterable as ri

    state, images = buffered_images(examples, side)
    pixels = [np.asarray(img) for img in images]
    raw = sum(p.nbytes for p in pixels)
    tmp = tempfile.mkdtemp(dir=folder)
    try:
        p_np, p_ri = os.path.join(tmp, "pixels.npy"), os.path.join(tmp, "state.ri")
        t_np_save, t_save = _best_of_pairs(lambda: numpy_save(pixels, p_np), lambda: ri.save_state(state, p_ri), repeats)
        t_np_load, t_load = _best_of_pairs(lambda: numpy_load(p_np, len(pixels)), lambda: ri.load_state(p_ri), repeats)
        size = os.path.getsize(p_ri)
        back = [ex["image"] for chunk in ri.load_state(p_ri)["state"]["buffer"] for ex in chunk]
        assert [b.tobytes() for b in back] == [img.tobytes() for img in images]

        def png():
            for img in images:
                img.save(io.BytesIO(), format="PNG", compress_level=1)

        t_png = _best(png, 1)
        mib = raw / (1 << 20)
        label = f"{examples} x {side}x{side} PIL images buffered"
        return [
            Result(f"save_state, {label}", t_save * 1e3, t_np_save * 1e3, "ms", ref_label="np.save of the pixels",
                   note=f"{mib / t_save:.0f} MB/s; np.save {mib / t_np_save:.0f} MB/s (both with fsync)"),
            Result(f"load_state, {label}", t_load * 1e3, t_np_load * 1e3, "ms", ref_label="np.load of the pixels"),
            Result(f"file size, {label}", size / (1 << 20), mib, "MB", ref_label="raw pixel bytes",
                   note=f"{size / raw:.3f}x"),
            Result(f"save_state vs PNG-encoding the images, {label}", t_save * 1e3, t_png * 1e3, "ms",
                   ref_label="PNG encoding alone", note="what each save cost at least before large images were "
                                                        "stored as raw pixels"),
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=1000, help="buffered examples (default 1000)")
    ap.add_argument("--mb", type=float, default=1.0, help="MB per example's array (default 1)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-json", action="store_true", help="skip the (slow) JSON text format")
    ap.add_argument("--images", type=int, default=1000, help="buffered PIL images (default 1000; 0: skip)")
    ap.add_argument("--dir", default=None, help="folder for the files (default: the temp folder)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: only checks that everything runs")
    a = ap.parse_args()
    side = 256
    if a.quick:
        a.examples, a.mb, a.repeats, a.images, side = 20, 0.01, 1, min(a.images, 8), 32
    results = run(a.examples, a.mb, a.repeats, with_json=not a.no_json, folder=a.dir)
    print_section(f"save/load of a state with {a.examples} buffered arrays of {a.mb:g} MB", results)
    if a.images:
        print_section(f"save/load of a state with {a.images} buffered {side}x{side} PIL images",
                      run_images(a.images, side, a.repeats, folder=a.dir))


if __name__ == "__main__":
    main()
