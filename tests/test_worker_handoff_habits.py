"""The worker handoff of small tensors (``integrations/torch/transport.py``: ``WorkerDict``), run the
way users run it: transformers' collators, numpy/torch formats, images and bytes through a
``collate_fn``, odd values (strings, ``None``, nested containers, 0-d, bool, bfloat16 and a large
tensor among small ones), a ``collate_fn`` that mutates its rows, other start methods, the import
order, copies of the dataset, persistent workers, ``prefetch_factor``, ``pin_memory``,
``in_order=False`` and accelerate. Each compares the main process's batches with torch's own path
(the same pipeline with ``ds.session.small_tensors_by_value = False``): same batches in the same
order, same types, dtypes, shapes and values; and resumes through torchdata's loader at every cut
(the loader's state through ``json.dumps``/``loads``) to that very run."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
from datasets import Dataset, Features, Image, Value  # noqa: E402
from torch.utils.data import DataLoader, default_collate  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader  # noqa: E402

import resumable_iterable as ri  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning"),
              pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning")]

N = 24
ROOT = Path(__file__).resolve().parent.parent


def described(x):
    """``x`` (what the loader gives) as comparable values: container types, dtypes, shapes, values."""
    if isinstance(x, torch.Tensor):
        return "tensor", str(x.dtype), tuple(x.shape), x.float().tolist() if x.dtype == torch.bfloat16 else x.tolist()
    if isinstance(x, np.ndarray):
        return "ndarray", str(x.dtype), x.shape, x.tolist()
    if isinstance(x, (dict,)) or hasattr(x, "items") and hasattr(x, "keys"):
        return type(x).__name__, [(k, described(v)) for k, v in x.items()]
    if isinstance(x, (list, tuple)):
        return type(x).__name__, [described(v) for v in x]
    return type(x).__name__, x


def tensors(x):
    """The tensors in ``x`` (a batch), depth first."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict) or hasattr(x, "items") and hasattr(x, "keys"):
        for v in x.values():
            yield from tensors(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from tensors(v)


def off(ds):
    ds.session.small_tensors_by_value = False
    return ds


def run(build, by_value=True, loader=TorchdataLoader, epochs=1, **kw):
    """The batches of a loader over ``build()``, with the handoff on (``by_value``) or off."""
    ds = build()
    if not by_value:
        off(ds)
    dl = loader(ds, **kw)
    out = []
    for e in range(epochs):
        if epochs > 1:
            ds.set_epoch(e)
        out.extend(dl)
    return out


def same_as_torch(build, *, sort=None, **kw):
    """Run ``build()`` through a loader with the handoff on and off; require the same batches (in the
    same order, or the same after ``sort``); every dict of ours is a plain ``dict``. Returns ours."""
    kw.setdefault("num_workers", 2)
    ours, torchs = run(build, True, **kw), run(build, False, **kw)
    a, b = [described(x) for x in ours], [described(x) for x in torchs]
    if sort is not None:
        a, b = sorted(a, key=sort), sorted(b, key=sort)
    assert a == b
    assert "WorkerDict" not in repr(a)
    return ours


def json_roundtrip(state):
    return json.loads(json.dumps(state))


def resumes_as_torch(build, *, cuts=None, roundtrip=json_roundtrip, **kw):
    """The every-cut check through torchdata's loader (state JSON round-tripped, or through
    ``roundtrip``), with the handoff on, against the uninterrupted run of torch's own path."""
    kw.setdefault("num_workers", 2)
    full = [described(b) for b in run(build, False, **kw)]

    def part(state=None, stop=None):
        dl = TorchdataLoader(build(), **kw)
        if state is not None:
            dl.load_state_dict(state)
        out = []
        for b in dl:
            out.append(described(b))
            if len(out) == stop:
                return out, roundtrip(dl.state_dict())
        return out, None

    for k in (cuts if cuts is not None else range(1, len(full))):
        head, state = part(stop=k)
        tail, _ = part(state=state)
        assert head + tail == full, f"cut after {k} of {len(full)} batches"
    return full


def ids_of(batches, key="id"):
    return [int(i) for b in batches for i in torch.as_tensor(b[key]).reshape(-1).tolist()]


# ---------------------------------------------------------------------------- transformers' collators

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


def make_tokenizer():
    """A word-level tokenizer built here (no download)."""
    vocab = {"[PAD]": 0, "[MASK]": 1, "[UNK]": 2, **{f"w{i}": i + 3 for i in range(40)}}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=model, pad_token="[PAD]", mask_token="[MASK]",
                                                unk_token="[UNK]")


TOKENIZER = make_tokenizer()


def token_rows(same_length: bool) -> ri.IterableDataset:
    n = [6 if same_length else 2 + i % 5 for i in range(N)]
    ids = [[3 + (i * 7 + j) % 40 for j in range(n[i])] for i in range(N)]
    hf = Dataset.from_dict({"id": list(range(N)), "input_ids": ids, "attention_mask": [[1] * k for k in n],
                            "label": [i % 3 for i in range(N)]})
    return ri.to_iterable_dataset(hf, num_shards=4)


def flattening():
    if not hasattr(transformers, "DataCollatorWithFlattening"):
        pytest.skip("transformers has no DataCollatorWithFlattening")
    return transformers.DataCollatorWithFlattening(return_position_ids=True)


COLLATORS = {
    "default_data_collator": (True, lambda: transformers.default_data_collator),
    "padding": (False, lambda: transformers.DataCollatorWithPadding(TOKENIZER)),
    "language_modeling": (False, lambda: transformers.DataCollatorForLanguageModeling(TOKENIZER, mlm=False)),
    "flattening": (False, flattening),
}


@pytest.mark.parametrize("name", COLLATORS)
def test_transformers_collators_give_torchs_batches_and_resume_at_every_cut(name):
    same_length, make = COLLATORS[name]
    collator = make()

    def build():
        ds = token_rows(same_length)
        return ds if name != "flattening" else ds.remove_columns(["attention_mask", "id"])

    kw = dict(batch_size=5, collate_fn=collator)
    ours = same_as_torch(build, **kw)
    # each of the 2 workers collates 12 rows; the collators build new containers (not WorkerDicts),
    # whose tensors cross as torch sends them
    assert len(ours) == 6 and {t.is_shared() for b in ours for t in tensors(b)} == {True}
    resumes_as_torch(build, **kw)


def tokenized():
    hf = Dataset.from_dict({"id": list(range(N)), "text": [" ".join(f"w{(i + j) % 40}" for j in range(1 + i % 6))
                                                           for i in range(N)]})
    return ri.to_iterable_dataset(hf, num_shards=4).map(
        lambda b: TOKENIZER(b["text"], padding="max_length", max_length=8, return_tensors="pt"), batched=True,
        batch_size=4, remove_columns=["text"])


@pytest.mark.parametrize("batch_size", [None, 4])
def test_a_tokenizer_map_returning_tensors(batch_size):
    """``map(tokenizer(..., return_tensors="pt"), batched=True)``: each row's tensors are views into
    its map batch's tensors; they arrive as torch's own path gives them, and resume at every cut."""
    ours = same_as_torch(tokenized, batch_size=batch_size)
    assert sorted(ids_of(ours)) == list(range(N)) and all(b["input_ids"].shape[-1] == 8 for b in ours)
    resumes_as_torch(tokenized, batch_size=batch_size, cuts=[1, 3, len(ours) - 1])


# ---------------------------------------------------------------------------- formats, rows and batches

def numbers(fmt, batched, text=True):
    columns = {"id": np.arange(N), "x": np.random.default_rng(0).random((N, 3), dtype=np.float32)}
    if text:
        columns["text"] = [f"row {i}" for i in range(N)]
    hf = Dataset.from_dict(columns)
    ds = ri.to_iterable_dataset(hf, num_shards=4).with_format(fmt)
    return ds.batch(4) if batched else ds


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("batched", [False, True], ids=["rows", "batch"])
@pytest.mark.parametrize("batch_size", [None, 2])
def test_formats_rows_and_batches_give_torchs_batches(fmt, batched, batch_size):
    # (default_collate refuses the object arrays of a numpy batch's strings, in torch's own path too)
    text = not (batched and batch_size and fmt == "numpy")
    ours = same_as_torch(lambda: numbers(fmt, batched, text), batch_size=batch_size)
    assert sorted(ids_of(ours)) == list(range(N))
    assert all(type(b) is dict for b in ours)
    assert {t.is_shared() for b in ours for t in tensors(b)} == {False}  # the one difference, as documented


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_formatted_rows_collated_by_the_loader_resume_at_every_cut(fmt):
    resumes_as_torch(lambda: numbers(fmt, False).shuffle(seed=2, buffer_size=5), batch_size=5)


# ---------------------------------------------------------------------------- images, bytes and odd values

def pictures():
    from PIL import Image as PILImage

    imgs = [PILImage.fromarray(np.full((4, 5, 3), i, np.uint8)) for i in range(N)]
    hf = Dataset.from_dict({"id": list(range(N)), "img": imgs, "raw": [bytes([65 + i % 26]) * 3 for i in range(N)],
                            "s": [f"s{i}" for i in range(N)], "n": [None if i % 2 else i for i in range(N)]},
                           features=Features({"id": Value("int64"), "img": Image(), "raw": Value("binary"),
                                              "s": Value("string"), "n": Value("int64")}))
    return ri.to_iterable_dataset(hf, num_shards=4)


def images_to_tensors(rows):
    return {"id": torch.tensor([r["id"] for r in rows]),
            "img": torch.stack([torch.from_numpy(np.array(r["img"])) for r in rows]),
            "raw": [r["raw"] for r in rows], "s": [r["s"] for r in rows], "n": [r["n"] for r in rows]}


def test_images_and_bytes_one_example_at_a_time():
    ours = same_as_torch(pictures, batch_size=None)
    assert type(ours[0]) is dict and ours[0]["raw"] == b"AAA" and ours[0]["img"].size == (5, 4)


def test_images_and_bytes_through_a_collate_fn():
    kw = dict(batch_size=5, collate_fn=images_to_tensors)
    ours = same_as_torch(pictures, **kw)
    assert ours[0]["img"].shape == (5, 4, 5, 3) and ours[0]["raw"][0] == b"AAA" and ours[0]["n"][:2] == [0, None]
    resumes_as_torch(pictures, **kw)


def odd(row):
    i = row["id"]
    return {"zero_d": torch.tensor(i), "bf16": torch.full((3,), i / 4, dtype=torch.bfloat16),
            "mask": torch.tensor([i % 2 == 0, i % 3 == 0]), "nested": {"a": [torch.arange(i % 4), torch.ones(2)],
                                                                       "b": {"c": torch.tensor([i])}},
            "view": torch.arange(12).reshape(3, 4).t()[1:], "none": None, "s": f"s{i}",
            "big": torch.full((20_000,), i, dtype=torch.float32)}  # 80 KB: through shared memory


def odd_values(n=N):
    return ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(n))}), num_shards=4).map(odd)


@pytest.mark.parametrize("batch_size", [None, 3])
def test_odd_values_and_a_large_tensor_among_small_ones(batch_size):
    collate = None if batch_size is None else (lambda rows: rows)  # (ragged: the user keeps the rows)
    ours = same_as_torch(odd_values, batch_size=batch_size, collate_fn=collate)
    rows = ours if batch_size is None else [r for b in ours for r in b]
    assert all(type(r) is dict and type(r["nested"]) is dict for r in rows)
    assert all(r["big"].is_shared() and not r["zero_d"].is_shared() for r in rows)
    assert all(r["view"].stride() == (1, 4) and r["view"].storage_offset() == 1 for r in rows)
    assert all(r["bf16"].dtype == torch.bfloat16 and r["mask"].dtype == torch.bool for r in rows)


def test_odd_values_resume_at_every_cut():
    """The shuffle buffer then holds tensors: the state goes through our codec (``json.dumps``
    cannot hold them, as docs/torch.md says)."""
    resumes_as_torch(lambda: odd_values(12).remove_columns(["big"]).shuffle(seed=1, buffer_size=3), batch_size=None,
                     roundtrip=lambda st: ri.loads_state(ri.dumps_state(st)))


# ---------------------------------------------------------------------------- a collate_fn that mutates its rows

def mutating(rows):
    for r in rows:
        r["double"] = r.pop("id") * 2
        r["x"] = r["x"] + 1
    return {"double": torch.tensor([r["double"] for r in rows]), "x": torch.stack([torch.as_tensor(r["x"]) for r in rows])}


def test_a_collate_fn_that_mutates_its_rows():
    """Popping a key of a row and adding one changes nothing of the dataset's: its state and a resume
    are those of torch's own path."""
    def build():
        return numbers("numpy", False).shuffle(seed=4, buffer_size=6)

    ours = same_as_torch(build, batch_size=4, collate_fn=mutating)
    assert sorted(int(i) // 2 for b in ours for i in b["double"].tolist()) == list(range(N))
    resumes_as_torch(build, batch_size=4, collate_fn=mutating, cuts=[1, 3])  # (every cut: the test below)


def mutating_in_place(rows):
    for r in rows:
        r["input_ids"].append(r.pop("label"))  # the row's own list, edited in place
        r["n"] = len(r["input_ids"])
    width = max(r["n"] for r in rows)
    return {"id": torch.tensor([r["id"] for r in rows]), "n": torch.tensor([r["n"] for r in rows]),
            "input_ids": torch.tensor([r["input_ids"] + [0] * (width - r["n"]) for r in rows])}


def test_a_collate_fn_that_edits_its_rows_values_in_place():
    def build():
        return token_rows(False).shuffle(seed=9, buffer_size=5)

    same_as_torch(build, batch_size=4, collate_fn=mutating_in_place)
    resumes_as_torch(build, batch_size=4, collate_fn=mutating_in_place)


def keep_rows(rows):
    return rows


SHARED = torch.arange(5)


def test_rows_kept_as_a_list_are_pickled_each_on_its_own():
    """A ``collate_fn`` that keeps the dataset's rows (a list of ``WorkerDict``s): each row crosses as
    a pickle of its own, so a tensor two rows of one batch hold arrives as two equal tensors (torch's
    own path: one object), as docs/torch.md says; within a row, views still share their storage."""
    def build():
        return ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(N))}), num_shards=4).map(
            lambda r: {"shared": SHARED, "pair": [SHARED, SHARED[1:]]})

    ours = same_as_torch(build, batch_size=4, collate_fn=keep_rows)
    torchs = run(build, False, batch_size=4, num_workers=2, collate_fn=keep_rows)
    assert all(b[0]["shared"] is b[1]["shared"] for b in torchs)
    assert all(b[0]["shared"] is not b[1]["shared"] and torch.equal(b[0]["shared"], b[1]["shared"]) for b in ours)
    assert all(r["pair"][0] is r["shared"] and r["pair"][1].untyped_storage().data_ptr()
               == r["shared"].untyped_storage().data_ptr() for b in ours for r in b)
    # our loader pickles the whole batch at once (its collate_fn wrapper): one object, as in torch
    mine = run(build, True, loader=ri.StatefulDataLoader, batch_size=4, num_workers=2, collate_fn=keep_rows)
    assert [described(b) for b in mine] == [described(b) for b in torchs]
    assert all(b[0]["shared"] is b[1]["shared"] and not b[0]["shared"].is_shared() for b in mine)


def saving(folder, as_dict):
    def collate(rows):
        batch = default_collate(rows)
        torch.save(dict(batch) if as_dict else batch, folder / f"{int(batch['id'][0])}.pt")
        return batch
    return collate


def test_a_batch_saved_in_a_worker(tmp_path):
    """A ``collate_fn`` that ``torch.save``s the batch ``default_collate`` made in the worker saves a
    ``WorkerDict``, which ``torch.load`` (``weights_only``, its default) refuses as a class it does
    not know (pickle cannot write a ``dict`` subclass as a plain ``dict``): ``dict(batch)`` saves
    what torch's own path saved, as docs/torch.md says."""
    files = {}
    for by_value, as_dict in ((True, True), (False, False), (True, False)):
        folder = tmp_path / f"{by_value}{as_dict}"
        folder.mkdir()
        run(lambda: numbers("numpy", False, text=False), by_value, batch_size=4, collate_fn=saving(folder, as_dict),
            num_workers=2)
        files[by_value, as_dict] = sorted(folder.iterdir())
    load = lambda paths: [described(torch.load(p)) for p in paths]  # noqa: E731
    assert len(files[True, True]) == N // 4 and load(files[True, True]) == load(files[False, False])
    with pytest.raises(pickle.UnpicklingError, match="WorkerDict"):
        torch.load(files[True, False][0])
    unsafe = torch.load(files[True, False][0], weights_only=False)
    assert type(unsafe).__name__ == "WorkerDict" and described(dict(unsafe))[1] == load(files[False, False])[0][1]


# ---------------------------------------------------------------------------- start methods, import order

@pytest.mark.slow
@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_other_start_methods(context, soak):
    if not soak:  # (tests/test_worker_handoff.py spawns a worker in every run)
        pytest.skip(f"{context} start method: slow (7-15 s to start), runs with --soak (make soak)")
    ours = same_as_torch(lambda: numbers("numpy", True), batch_size=None, num_workers=1,
                         multiprocessing_context=context)
    assert [b["id"].tolist()[0] for b in ours] == list(range(0, N, 4))
    assert {t.is_shared() for b in ours for t in tensors(b)} == {False}


SCRIPT = """
import sys
import numpy as np
import resumable_iterable as ri
from datasets import Dataset

assert "torch" not in sys.modules
ds = ri.to_iterable_dataset(Dataset.from_dict({"id": np.arange(12)}), num_shards=2).with_format("numpy").batch(3)
import torch
from torch.utils.data import DataLoader

got = list(DataLoader(ds, batch_size=None, num_workers=2))
print(sorted(i for b in got for i in b["id"].tolist()), sorted({type(b).__name__ for b in got}),
      sorted({b["id"].is_shared() for b in got}))
"""


def test_torch_imported_after_the_package():
    """(This process imported torch first.) The dataset is built before torch is imported."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == f"{list(range(12))} ['dict'] [False]"


# ---------------------------------------------------------------------------- copies of the dataset

@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
@pytest.mark.parametrize("by_value", [True, False])
def test_a_copy_of_the_dataset_keeps_the_setting(how, by_value):
    ds = numbers("numpy", True)
    if not by_value:
        off(ds)
    again = {"pickle": lambda: pickle.loads(pickle.dumps(ds)), "deepcopy": lambda: copy.deepcopy(ds),
             "copy": lambda: copy.copy(ds)}[how]()
    assert again.session.small_tensors_by_value is by_value
    got = list(TorchdataLoader(again, batch_size=None, num_workers=2))
    assert sorted(ids_of(got)) == list(range(N)) and all(type(b) is dict for b in got)
    assert {b["id"].is_shared() for b in got} == {not by_value}


# ---------------------------------------------------------------------------- loader settings

def test_persistent_workers_over_two_epochs():
    def build():
        return numbers("numpy", False).shuffle(seed=7, buffer_size=5)

    ours = same_as_torch(build, batch_size=4, persistent_workers=True, epochs=2)
    assert sorted(ids_of(ours[: len(ours) // 2])) == sorted(ids_of(ours[len(ours) // 2:])) == list(range(N))
    assert ids_of(ours[: len(ours) // 2]) != ids_of(ours[len(ours) // 2:])  # set_epoch reached the workers


@pytest.mark.parametrize("prefetch_factor", [1, 4])
def test_prefetch_factor(prefetch_factor):
    same_as_torch(lambda: numbers("torch", False), batch_size=3, prefetch_factor=prefetch_factor)


@pytest.mark.filterwarnings("ignore:.pin_memory. argument is set as true:UserWarning")
def test_pin_memory():
    ours = same_as_torch(lambda: numbers("numpy", True), batch_size=None, pin_memory=True)
    assert all(type(b) is dict for b in ours)


def test_out_of_order():
    import inspect

    if "in_order" not in inspect.signature(TorchdataLoader.__init__).parameters:
        pytest.skip("torchdata's loader has no in_order")
    ours = same_as_torch(lambda: numbers("numpy", True), batch_size=None, in_order=False, sort=repr)
    assert sorted(ids_of(ours)) == list(range(N))


def test_file_system_sharing_strategy():
    strategy = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        ours = same_as_torch(lambda: odd_values(8), batch_size=None)
    finally:
        torch.multiprocessing.set_sharing_strategy(strategy)
    assert all(r["big"].is_shared() and not r["zero_d"].is_shared() for r in ours)


def test_snapshots_every_few_steps_resume_at_every_cut():
    """``snapshot_every_n_steps=3``: torchdata replays the batches since the last snapshot."""
    resumes_as_torch(lambda: numbers("numpy", True, text=False).shuffle(seed=8, buffer_size=3), batch_size=None,
                     snapshot_every_n_steps=3)


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("workers", [(2, 1), (2, 3)])
def test_a_resume_with_another_number_of_workers(workers):
    """A state of 2 workers resumed by 1 or 3 (our loader): the same continuation as on torch's own
    path (``inline_tensor_bytes=0``)."""
    def tail(by_value, k):
        def loader(n):
            ds = numbers("numpy", False, text=False).shuffle(seed=6, buffer_size=5)
            return ri.StatefulDataLoader(ds, batch_size=3, num_workers=n, inline_tensor_bytes=65536 if by_value else 0)

        dl, head = loader(workers[0]), []
        for b in dl:
            head.append(described(b))
            if len(head) == k:
                break
        again = loader(workers[1])
        again.load_state_dict(json.loads(json.dumps(dl.state_dict())))
        return head + [described(b) for b in again]

    for k in (1, 4):
        ours = tail(True, k)
        assert ours == tail(False, k)
        assert sorted(i for b in ours for i in dict(b[1])["id"][3]) == list(range(N))


def plain_rows_only(rows):
    assert {type(r) for r in rows} == {dict}, {type(r) for r in rows}  # raised in the worker, reported here
    return default_collate(rows)


class Touch:
    """A ``worker_init_fn`` of the user's: writes a file per worker."""

    def __init__(self, folder):
        self.folder = folder

    def __call__(self, worker_id):
        (self.folder / str(worker_id)).touch()


def test_turned_off_for_our_datasets_inside_a_dataset_of_the_users(tmp_path):
    """``ri.StatefulDataLoader(inline_tensor_bytes=0)`` and ``ResumableDataCallback(inline_tensor_bytes=0)``
    over a ``ChainDataset`` of ours: the workers' dicts crossed by value all the same (the setting
    reached only a dataset of ours handed to the loader itself), and a collate_fn saw WorkerDicts."""
    from torch.utils.data import ChainDataset

    from resumable_iterable.integrations import trainer_loader

    def chain():
        return ChainDataset([numbers("numpy", False, text=False), numbers("numpy", False, text=False).take(4)])

    dl = ri.StatefulDataLoader(chain(), batch_size=4, num_workers=2, inline_tensor_bytes=0,
                               collate_fn=plain_rows_only, worker_init_fn=Touch(tmp_path))
    mine = list(dl)
    assert {t.is_shared() for b in mine for t in tensors(b)} == {True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1"]  # the user's worker_init_fn still runs
    plain = DataLoader(chain(), batch_size=4, num_workers=2, collate_fn=plain_rows_only)
    trainer_loader.inline_small_tensors(plain, 0)
    torchs = list(plain)
    assert [described(b) for b in mine] == [described(b) for b in torchs]
    assert {t.is_shared() for b in torchs for t in tensors(b)} == {True}
    # by default (and anything but 0) they still cross by value
    assert {t.is_shared() for b in ri.StatefulDataLoader(chain(), batch_size=4, num_workers=2) for t in tensors(b)} \
        == {False}
    assert {t.is_shared() for b in DataLoader(chain(), batch_size=4, num_workers=2) for t in tensors(b)} == {False}


@pytest.mark.parametrize("loader", [DataLoader, ri.StatefulDataLoader], ids=["torch", "ours"])
def test_other_loaders(loader):
    same_as_torch(lambda: numbers("numpy", False), batch_size=4, loader=loader)


# ---------------------------------------------------------------------------- accelerate

@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
def test_accelerate_prepared_loader():
    accelerate = pytest.importorskip("accelerate")

    def through_accelerate(by_value):
        ds = numbers("numpy", False)
        if not by_value:
            off(ds)
        acc = accelerate.Accelerator(cpu=True)
        return list(acc.prepare(DataLoader(ds, batch_size=4, num_workers=2)))

    ours, torchs = through_accelerate(True), through_accelerate(False)
    assert [described(b) for b in ours] == [described(b) for b in torchs]
    assert sorted(ids_of(ours)) == list(range(N)) and all(type(b) is dict for b in ours)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
def test_accelerate_stateful_loader_resumes_at_every_cut():
    """``DataLoaderConfiguration(use_stateful_dataloader=True)``: accelerate's loader is torchdata's;
    its state, JSON round-tripped, resumes the handoff's batches at every cut."""
    accelerate = pytest.importorskip("accelerate")
    from accelerate.utils import DataLoaderConfiguration

    def loader(by_value):
        ds = numbers("numpy", False, text=False).shuffle(seed=5, buffer_size=4)
        if not by_value:
            off(ds)
        acc = accelerate.Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
        return acc.prepare(DataLoader(ds, batch_size=4, num_workers=2))

    full = [described(b) for b in loader(False)]
    assert len(full) == N // 4
    for k in range(1, len(full)):
        dl, head = loader(True), []
        for b in dl:
            head.append(described(b))
            if len(head) == k:
                break
        state = json.loads(json.dumps(dl.state_dict()))
        again = loader(True)
        again.load_state_dict(state)
        assert head + [described(b) for b in again] == full, k
