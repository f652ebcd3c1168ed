"""Images and encoded bytes in a DataLoader worker's exact shuffle buffer.

PIL pickles an image's pixels in band, and pickle keeps ``bytes`` in band: so without help, every
buffered image or encoded file (HF's ``Image(decode=False)`` / ``Audio`` layout ``{"bytes",
"path"}``) went to the main process through the pipe, several copies each. The worker's records
put their pixels and large ``bytes`` in its shared-memory arena like numpy buffers, and the main
process rebuilds the same objects: same class, mode, size, palette, info and pixels.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
Image = pytest.importorskip("PIL.Image")

import resumable_iterable as ri  # noqa: E402
from resumable_iterable.state import ExampleChunks, is_position  # noqa: E402
from test_shuffle_positions import worker_buffers  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

BIG = 1 << 15  # over the arena's threshold (16 KB)


def rgb(k: int, side: int = 96) -> "Image.Image":
    """An RGB image of side x side pixels (27 KB at 96) that differs with ``k``."""
    grid = np.arange(side * side * 3, dtype=np.int64).reshape(side, side, 3)
    return Image.fromarray(((grid * 7 + k * 31) % 251).astype(np.uint8))


def palette(k: int) -> "Image.Image":
    img = Image.fromarray((np.arange(200 * 200, dtype=np.int64).reshape(200, 200) % 16).astype(np.uint8), "P")
    img.putpalette([(i * 16 + k) % 256 for i in range(48)])
    return img


def opened(k: int, fmt: str) -> "Image.Image":
    """An image as ``Image.open`` returns it (a ``PngImageFile``, a ``JpegImageFile``, ...: each
    plugin's class, some with pickled state of their own), loaded, with ``info`` set."""
    buf = io.BytesIO()
    rgb(k).save(buf, fmt, dpi=(72, 72))
    img = Image.open(io.BytesIO(buf.getvalue()))
    img.load()
    return img


def blob(k: int, n: int = BIG) -> bytes:
    return bytes((np.arange(n, dtype=np.int64) * 13 + k) % 256)


def same_image(a, b) -> bool:
    return (type(a) is type(b) and a.mode == b.mode and a.size == b.size and a.info == b.info
            and a.getpalette() == b.getpalette() and a.tobytes() == b.tobytes())


def logged(examples: list) -> ExampleChunks:
    """A worker buffer holding ``examples``, written since its last log."""
    buf = ExampleChunks([list(examples)])
    buf.owned.append(1)
    buf.recording = True
    for i, ex in enumerate(examples):
        buf.pending[i] = ex
    return buf


def test_images_and_bytes_cross_through_shared_memory_and_arrive_the_same():
    import resumable_iterable.integrations.torch.arena as ri_arena

    examples = [
        {"id": 0, "image": rgb(0)},
        {"id": 1, "image": palette(1)},
        {"id": 2, "image": opened(2, "PNG")},
        {"id": 3, "audio": {"bytes": blob(3), "path": "a.flac"}},  # HF's undecoded layout
        {"id": 4, "file": blob(4)},
        {"id": 5, "image": rgb(5, side=8), "file": blob(5, 100)},  # small: in band
        {"id": 6, "frames": [blob(6), blob(7)], "meta": ("x", blob(8))},
        {"id": 7, "image": opened(7, "JPEG")},
    ]
    large = [True, True, True, True, True, False, True, True]
    log = logged(examples).log()
    assert [type(r) is ri_arena.Record for r in log.refs] == large
    message = ForkingPickler.dumps(log)
    assert len(message) < 4_000  # the pixels and bytes are in shared memory, not in the message
    got = pickle.loads(message)
    for before, after in zip(examples, got):
        assert before.keys() == after.keys()
        for k in before:
            if isinstance(before[k], Image.Image):
                assert same_image(before[k], after[k]), (before["id"], k)
            else:
                assert before[k] == after[k], (before["id"], k)
    assert type(got[2]["image"]).__name__ == "PngImageFile" and got[2]["image"].format == "PNG"
    assert type(got[7]["image"]).__name__ == "JpegImageFile" and got[7]["image"].layers == 3
    own = log.entries()  # read in the worker itself (its own copies)
    assert own[6] == examples[6] and own[3] == examples[3]
    assert all(same_image(own[i]["image"], examples[i]["image"]) for i in (0, 1, 2, 7))


@pytest.mark.parametrize("example", [
    {"id": 0, "frames": [blob(0), blob(1)]},
    {"id": 0, "views": (rgb(0), rgb(1))},
    {"id": 0, "audio": {"array": np.zeros(BIG // 4, dtype=np.float32), "sampling_rate": 16_000}},
], ids=["bytes in a list", "images in a tuple", "array in a dict"])
def test_a_log_of_examples_with_large_parts_one_level_down_goes_through_shared_memory(example):
    import resumable_iterable.integrations.torch.arena as ri_arena

    log = logged([example, dict(example, id=1)]).log()
    assert all(type(r) is ri_arena.Record for r in log.refs)
    message = ForkingPickler.dumps(log)
    assert len(message) < 3_000
    got = pickle.loads(message)
    assert [e["id"] for e in got] == [0, 1]


class Tagged(Image.Image):
    """An image class with a pickled state of its own."""

    def __getstate__(self):
        return [*super().__getstate__(), "a-tag"]

    def __setstate__(self, state):
        super().__setstate__(state[:5])
        self.tag = state[5]


def test_an_image_class_that_pickles_itself_keeps_its_own_way():
    import resumable_iterable.integrations.torch.arena as ri_arena

    img = Tagged()
    img.__setstate__([*rgb(1).__getstate__(), "a-tag"])
    data = ri_arena.dumps(img, lambda b: True)
    assert b"a-tag" in data and len(data) > 96 * 96 * 3  # its pixels in band, its own state whole
    again = pickle.loads(data)
    assert type(again) is Tagged and again.tag == "a-tag" and again.tobytes() == img.tobytes()


# ---------------------------------------------------------------------- through the loader


def media_rows(shards, n=14):
    for s in shards:
        for i in range(n):
            k = s * 100 + i
            yield {"id": k, "image": rgb(k), "file": {"bytes": blob(k), "path": f"{k}.jpg"}}


def paint_in_place(ex):
    ex["image"].paste((255, 0, 0), (0, 0, 10, 10))  # edits the image the shuffle handed out
    return ex


def digest(ex) -> tuple:
    return (ex["id"], hashlib.sha1(ex["image"].tobytes()).hexdigest(),
            hashlib.sha1(ex["file"]["bytes"]).hexdigest())


def collate_digests(batch):
    return [digest(e) for e in batch]


@pytest.mark.parametrize("loader", ["resumable_iterable", "torchdata"])
def test_loader_resumes_exactly_with_images_and_bytes_despite_in_place_edits(loader):
    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    cls = ri.StatefulDataLoader if loader == "resumable_iterable" else TorchdataLoader

    def make():
        ds = (ri.IterableDataset.from_generator(media_rows, gen_kwargs={"shards": [0, 1, 2, 3]})
              .shuffle(seed=7, buffer_size=6).map(paint_in_place))
        return cls(ds, batch_size=3, num_workers=2, collate_fn=collate_digests)

    dl = make()
    batches, states, kept = [], [ri.dumps_state(dl.state_dict())], []
    for b in dl:
        batches.append(b)
        kept.append((dl.state_dict(), ri.dumps_state(dl.state_dict())))
        states.append(kept[-1][1])
    for state, text in kept:  # the edits after a state was taken did not reach it
        assert ri.dumps_state(state) == text
    flat = [d for b in batches for d in b]
    assert sorted(d[0] for d in flat) == sorted(r["id"] for r in media_rows([0, 1, 2, 3]))
    for cut in (0, 1, 4, 9, len(batches) // 2, len(batches) - 1):
        again = make()
        again.load_state_dict(ri.loads_state(states[cut]))
        assert [d for b in again for d in b] == [d for b in batches[cut:] for d in b], cut


# ---------------------------------------------------------------------- files in the buffer


def jpeg_files(n: int):
    from datasets import Dataset, Features, Value
    from datasets import Image as ImageFeature

    files = []
    for k in range(n):
        out = io.BytesIO()
        rgb(k, side=48).save(out, "JPEG", quality=90)
        files.append({"bytes": out.getvalue(), "path": None})
    return Dataset.from_dict({"id": list(range(n)), "image": files},
                             features=Features({"id": Value("int64"), "image": ImageFeature()}))


def image_digests(batch):
    return [(e["id"], type(e["image"]).__name__, hashlib.sha1(e["image"].tobytes()).hexdigest()) for e in batch]


@pytest.mark.parametrize("worker_positions", [False, True])
def test_an_image_dataset_shuffled_as_files_yields_the_same_and_resumes_exactly(worker_positions):
    """``decode(False).shuffle(...).decode()``: the buffer (and a worker's state) holds the image
    files, decoded after the shuffle as HF decodes (what ``shuffle()`` right above the source does
    by itself, ``test_shuffle_deferred_decoding.py``), or, by default, a worker's state holds their
    positions in the table; the examples are those of a shuffle decoding in the source."""
    hf = jpeg_files(40)

    def files_in_buffer():
        return ri.to_iterable_dataset(hf, num_shards=4).decode(False).shuffle(
            seed=3, buffer_size=8, worker_positions=worker_positions).decode()

    # replay-mode shuffles decode in the source
    decoded = [image_digests([e])[0] for e in ri.to_iterable_dataset(hf, num_shards=4).shuffle(
        seed=3, buffer_size=8, buffer_state="replay")]
    assert [image_digests([e])[0] for e in files_in_buffer()] == decoded

    def make():
        return ri.StatefulDataLoader(files_in_buffer(), batch_size=3, num_workers=2, collate_fn=image_digests)

    dl = make()
    batches, states = [], [ri.dumps_state(dl.state_dict())]
    for b in dl:
        batches.append(b)
        states.append(ri.dumps_state(dl.state_dict()))
    assert sorted(d[0] for b in batches for d in b) == list(range(40))
    assert all(d[1] == "JpegImageFile" for b in batches for d in b)
    held = worker_buffers(ri.loads_state(states[3]))[0]  # a derived buffer of positions worked out
    if not worker_positions:
        assert held and all(type(ex["image"]) is dict and type(ex["image"]["bytes"]) is bytes for ex in held)
    else:
        assert held and all(is_position(ex) for ex in held)
    for cut in (0, 2, 5, len(batches) - 1):
        again = make()
        again.load_state_dict(ri.loads_state(states[cut]))
        assert [d for b in again for d in b] == [d for b in batches[cut:] for d in b], cut
