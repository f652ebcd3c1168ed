"""A collator with a generator of its own (``DataCollatorForLanguageModeling(seed=...)``: a torch
``Generator`` with ``return_tensors="pt"``, a numpy one with ``"np"``) makes it from its seed in
every new process, so a resume masked from the seed again. With ``save_worker_rng=True``
(``ri.StatefulDataLoader``, ``ResumableDataCallback.attach``) that generator is saved with the
data state (``"collator"`` in ``"rng"``, plain JSON) and set back before the collator's next batch:
the masks after a resume are the uninterrupted run's - at every cut, with 0 and 2 workers,
persistent workers across epochs, and through a Trainer stopped mid-pass, at a pass end and in the
second pass. Another worker count starts the collators again from their seeds (exactly-once
stays)."""

from __future__ import annotations

import copy
import functools
import gc
import pickle
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("torchdata")
pytest.importorskip("accelerate")
tokenizers = pytest.importorskip("tokenizers")

import resumable_iterable as ri  # noqa: E402
from harness import json_roundtrip, take  # noqa: E402
from resumable_iterable.integrations.torch.worker_rng import CollatorRng  # noqa: E402
from resumable_iterable.integrations.transformers import STATE_FILE, ResumableDataCallback  # noqa: E402
from trainer_support import Crash, CrashAfterSave, Recorder  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")]

ROWS, WIDTH, VOCAB = 30, 8, 50


def make_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer built here (no download): what the MLM collator needs of one."""
    vocab = {"[PAD]": 0, "[MASK]": 1, "[UNK]": 2, **{f"w{i}": i + 3 for i in range(VOCAB)}}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=model, pad_token="[PAD]", mask_token="[MASK]",
                                                unk_token="[UNK]")


TOKENIZER = make_tokenizer()


def mlm(return_tensors: str = "pt") -> transformers.DataCollatorForLanguageModeling:
    return transformers.DataCollatorForLanguageModeling(TOKENIZER, seed=5, mlm_probability=0.3,
                                                        return_tensors=return_tensors)


def rows(n: int = ROWS) -> dict:
    return {"input_ids": [[3 + (i * 7 + j) % VOCAB for j in range(WIDTH)] for i in range(n)]}


def build() -> ri.IterableDataset:
    return ri.IterableDataset.from_dict(rows(), num_shards=4).shuffle(seed=3, buffer_size=4)


def loader(workers: int, return_tensors: str = "pt", save: bool = True, **kwargs) -> ri.StatefulDataLoader:
    return ri.StatefulDataLoader(build(), batch_size=3, num_workers=workers, collate_fn=mlm(return_tensors),
                                 save_worker_rng=save, **kwargs)


def plain(batch: dict) -> dict:
    return {k: np.asarray(v).tolist() for k, v in batch.items()}


def run_with_states(dl) -> tuple[list, list]:
    batches, states = [], []
    for b in dl:
        batches.append(plain(b))
        states.append(json_roundtrip(dl.state_dict()))
    return batches, states


def collator_entries(state: dict) -> list:
    if "dataset_state" in state:
        return [state["dataset_state"].get("rng", {}).get("collator")]
    return [ws["dataset_state"].get("rng", {}).get("collator") for ws in state["_snapshot"]["_worker_snapshots"].values()]


# ---------------------------------------------------------------------------- our loader


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("return_tensors", ["pt", "np"])
def test_every_cut_resumes_the_collators_masks(workers, return_tensors):
    full, states = run_with_states(loader(workers, return_tensors))
    kind = "torch" if return_tensors == "pt" else "numpy"
    assert all(e is not None and set(e) == {kind} for e in collator_entries(states[-1]))
    if workers == 0:  # the main process's global generators are the loop's: only the collator's
        assert set(states[0]["dataset_state"]["rng"]) == {"collator"}
    for k in range(len(states)):
        dl = loader(workers, return_tensors)
        dl.load_state_dict(states[k])
        assert [plain(b) for b in dl] == full[k + 1:], f"cut after batch {k}"


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.filterwarnings("ignore:.*save_worker_rng=False does not save")  # test_collator_rng_shapes.py
def test_without_it_the_masks_start_again_from_the_seed(workers):
    full, states = run_with_states(loader(workers, save=False))
    dl = loader(workers, save=False)
    dl.load_state_dict(states[3])
    rest = [plain(b) for b in dl]
    assert [b["labels"] for b in rest] != [b["labels"] for b in full[4:]]


def two_epochs(dl, cut=None) -> tuple[list, list, dict | None]:
    out, state = [[], []], None
    for epoch in range(2):
        dl.set_epoch(epoch)
        for i, b in enumerate(dl):
            out[epoch].append(plain(b))
            if (epoch, i) == cut:
                state = json_roundtrip(dl.state_dict())
    return out[0], out[1], state


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, True), (2, False)])
@pytest.mark.parametrize("where", ["mid-pass", "pass end", "second pass"])
def test_the_epochs_after_a_resume_mask_as_uninterrupted(workers, persistent, where):
    """Mid-pass, after the last batch of a pass (which the loader has not yet seen end), and in the
    second pass. Without persistent workers each pass's new workers make their collator's generator
    from the seed again, in both runs."""
    kw = dict(persistent_workers=True) if persistent else {}
    first, second, _ = two_epochs(loader(workers, **kw))
    assert first != second
    cut = {"mid-pass": (0, 4), "pass end": (0, len(first) - 1), "second pass": (1, 2)}[where]
    first, second, state = two_epochs(loader(workers, **kw), cut=cut)
    dl = loader(workers, **kw)
    dl.load_state_dict(state)
    rest = []
    for epoch in range(cut[0], 2):
        dl.set_epoch(epoch)
        rest += [plain(b) for b in dl]
    assert rest == (first + second)[cut[0] * len(first) + cut[1] + 1:]


def test_a_state_taken_before_the_collators_next_batch_keeps_its_generator():
    """Resumed, a worker has loaded its collator's generator but not collated yet: a state taken
    then (the loader's first, before any batch) still holds it, and a second resume from it masks
    as the uninterrupted run."""
    full, states = run_with_states(loader(2))
    dl = loader(2)
    dl.load_state_dict(states[3])
    early = json_roundtrip(dl.state_dict())
    assert collator_entries(early) == collator_entries(states[3])
    it = iter(dl)
    assert [plain(b) for b in take(it, 2)] == full[4:6]
    dl2 = loader(2)
    dl2.load_state_dict(json_roundtrip(dl.state_dict()))
    assert [plain(b) for b in dl2] == full[6:]


@pytest.mark.parametrize("before,after", [(2, 3), (2, 0), (0, 2)])
def test_another_worker_count_starts_the_collators_from_their_seed(before, after):
    """The examples stay exactly-once; each collator makes its generator from its seed (+ its new
    worker id) again, as in a new run with that worker count."""
    def originals(batches):  # the rows masked: labels hold the masked tokens, input_ids the others
        return [tuple(np.where(np.asarray(lab) == -100, inp, lab).tolist()) for b in batches
                for inp, lab in zip(b["input_ids"], b["labels"])]

    full, _ = run_with_states(loader(after))
    dl = loader(before)
    it = iter(dl)
    head = [plain(b) for b in take(it, 4)]
    dl2 = loader(after)
    dl2.load_state_dict(json_roundtrip(dl.state_dict()))
    rest = [plain(b) for b in dl2]
    assert Counter(originals(head + rest)) == Counter(tuple(r) for r in rows()["input_ids"])
    if after == 0:  # one collator, from its seed: the first rest batch masks as a new run's first
        assert rest[0]["labels"] != full[0]["labels"] or rest[0]["input_ids"] != full[0]["input_ids"]


def test_the_state_is_json_and_a_damaged_entry_is_refused_before_anything_loads(tmp_path):
    _, states = run_with_states(loader(2))
    ri.save_state(states[2], tmp_path / "s.json")
    assert ri.load_state(tmp_path / "s.json") == states[2]
    _, np_states = run_with_states(loader(0, "np"))
    for state, edit, message in [
        (states[2], lambda r: r["collator"].update(torch="AAAA"), r"'rng' 'collator' 'torch' holds 3 bytes"),
        (states[2], lambda r: r.update(collator={"jax": 1}), r"'rng' 'collator' must be an object with one key"),
        (states[2], lambda r: r.pop("random"), r"'rng' must be an object with keys \['torch', 'numpy', 'random'\]"),
        (np_states[2], lambda r: r["collator"]["numpy"].update(has_uint32=2), r"'rng' 'collator': 'numpy' is not a valid PCG64 generator state"),
    ]:
        bad = copy.deepcopy(state)
        where = bad["dataset_state"] if "dataset_state" in bad else bad["_snapshot"]["_worker_snapshots"]["worker_1"]["dataset_state"]
        edit(where["rng"])
        dl = loader(0 if "dataset_state" in bad else 2, "np" if state is np_states[2] else "pt")
        with pytest.raises(ValueError, match=message):
            dl.load_state_dict(bad)


def test_a_collator_without_its_own_generator_is_not_wrapped_and_copies_leave_it_out():
    dl = ri.StatefulDataLoader(build(), batch_size=3, collate_fn=transformers.DataCollatorForLanguageModeling(
        TOKENIZER), save_worker_rng=True)
    assert not isinstance(dl.collate_fn, CollatorRng)
    dl = loader(0)
    assert isinstance(dl.collate_fn, CollatorRng) and dl.dataset.session.collator_rng is dl.collate_fn
    # a copy of the dataset is a fresh one, not tied to that loader's collator
    assert copy.deepcopy(dl.dataset).session.collator_rng is None
    assert pickle.loads(pickle.dumps(dl.dataset)).session.collator_rng is None


class NoisyCollator:
    """A collator of the user's own that keeps a numpy generator made when it is built."""

    def __init__(self):
        self.generator = np.random.default_rng(9)

    def __call__(self, rows, scale=1):
        return {"input_ids": [r["input_ids"][0] for r in rows],
                "noise": (scale * self.generator.random(len(rows))).tolist()}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_collator_of_ones_own_with_a_generator_inside_a_partial(workers):
    def make():
        return ri.StatefulDataLoader(build(), batch_size=3, num_workers=workers, save_worker_rng=True,
                                     collate_fn=functools.partial(NoisyCollator(), scale=2))

    full, states = run_with_states(make())
    for k in (0, 3, len(states) - 2):
        dl = make()
        dl.load_state_dict(states[k])
        assert [plain(b) for b in dl] == full[k + 1:], f"cut after batch {k}"


@pytest.mark.slow  # a spawned worker imports torch and transformers afresh: 20-25 s; run by `make soak`
def test_spawned_workers_save_and_restore_it_too(soak):
    """A spawned worker gets the dataset and the collate_fn in one pickle: its dataset's session holds
    its own collate_fn's wrapper."""
    if not soak:
        pytest.skip("spawn start method: slow, runs with --soak (make soak)")
    full, states = run_with_states(loader(2, multiprocessing_context="spawn"))
    dl = loader(2, multiprocessing_context="spawn")
    dl.load_state_dict(states[4])
    assert [plain(b) for b in dl] == full[5:]


# ---------------------------------------------------------------------------- the Trainer

BATCH, STEPS = 3, 24  # 10 batches a pass: the runs cross two pass ends


class OwnLoaderTrainer(transformers.Trainer):
    """Trains from a ``ri.StatefulDataLoader`` of its own (no accelerate wrapper: nothing read ahead)."""

    def get_train_dataloader(self):
        return ri.StatefulDataLoader(self.train_dataset, batch_size=BATCH, collate_fn=self.data_collator,
                                     save_worker_rng=True)


def trainer(out, workers, persistent=False, save=True, remove_unused_columns=False, eval_steps=None, own=False,
            **kw):
    evaluating = dict(eval_strategy="steps", eval_steps=eval_steps, per_device_eval_batch_size=4) if eval_steps else {}
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=BATCH, save_steps=kw.pop("save_steps", 1000),
        dataloader_num_workers=workers, dataloader_persistent_workers=persistent, report_to="none", use_cpu=True,
        logging_strategy="no", remove_unused_columns=remove_unused_columns, disable_tqdm=True, **evaluating)
    model = Recorder(width=WIDTH)  # records the masked input_ids it is fed
    eval_dataset = ri.IterableDataset.from_dict(rows(6)) if eval_steps else None
    t = (OwnLoaderTrainer if own else transformers.Trainer)(model=model, args=args, train_dataset=build(),
                                                            data_collator=mlm(), eval_dataset=eval_dataset)
    ResumableDataCallback.attach(t, save_worker_rng=save)
    return t, model


@pytest.mark.parametrize("workers,persistent,remove,crash_at", [
    (w, p, False, c) for w, p in [(0, False), (2, True)] for c in (6, 10, 14)] + [(0, False, True, 6), (2, False, False, 14)])
@pytest.mark.slow  # cuts at 6/10/14, 0 and 2 workers: three of the eight cases in CI, all with --soak
def test_a_trainer_resumed_masks_as_the_uninterrupted_run(tmp_path, workers, persistent, remove, crash_at, soak):
    """Crashed mid-pass (6), at the end of the first pass (10: accelerate has seen the pass end, no
    state is loaded) and in the second pass (14), and resumed: the model is fed the uninterrupted
    run's masked input_ids to the end. Without workers accelerate has collated the next batch when
    the checkpoint is saved: the generator saved is the one from before that batch. With
    ``remove_unused_columns`` the Trainer wraps the collator (``RemoveColumnsCollator``). Without
    persistent workers each pass starts new workers, whose collators start from their seeds in both
    runs."""
    if not soak and (workers, persistent, remove, crash_at) not in ((0, False, True, 6), (2, True, False, 10),
                                                                    (2, False, False, 14)):
        pytest.skip("more cuts: run with --soak (make soak)")
    a, model_a = trainer(tmp_path / "a", workers, persistent, remove_unused_columns=remove)
    a.train()
    wrapped = a.callback_handler.train_dataloader.base_dataloader.collate_fn
    while not isinstance(wrapped, CollatorRng):
        wrapped = wrapped.collate_fn  # InlineSmallTensors with workers
    assert (type(wrapped.collate_fn).__name__ == "RemoveColumnsCollator") == remove
    b, model_b = trainer(tmp_path / "b", workers, persistent, remove_unused_columns=remove, save_steps=crash_at)
    b.add_callback(CrashAfterSave(crash_at))
    with pytest.raises(Crash):
        b.train()
    del b
    gc.collect()
    ckpt = tmp_path / "b" / f"checkpoint-{crash_at}"
    assert any(collator_entries(ri.load_state(ckpt / STATE_FILE)["loader_state"]))
    c, model_c = trainer(tmp_path / "b", workers, persistent, remove_unused_columns=remove)
    c.train(resume_from_checkpoint=str(ckpt))
    assert model_b.seen + model_c.seen == model_a.seen


@pytest.mark.parametrize("own,crash_at", [(False, 6), (False, 10), (True, 6)])
def test_an_evaluation_drawing_from_the_same_collator_before_the_checkpoint(tmp_path, own, crash_at):
    """Without workers the evaluation loader collates with the Trainer's same collator, in the main
    process, after accelerate has read the next training batch ahead and before the checkpoint is
    saved: its draws move the collator's generator between the data position and the checkpoint.
    The resumed run collates the batch read ahead with the generator of the data position, then goes
    on with the generator of the checkpoint, as the uninterrupted run did (also when the checkpoint
    is at a pass end, where nothing was collated ahead). A loader of the Trainer's own reads nothing
    ahead: its state is taken at the end of the step, before the evaluation, and the resumed run
    goes on with the generator of the checkpoint at once."""
    a, model_a = trainer(tmp_path / "a", 0, eval_steps=crash_at, own=own)
    a.train()
    b, model_b = trainer(tmp_path / "b", 0, eval_steps=crash_at, own=own, save_steps=crash_at)
    b.add_callback(CrashAfterSave(crash_at))
    with pytest.raises(Crash):
        b.train()
    c, model_c = trainer(tmp_path / "b", 0, eval_steps=crash_at, own=own)
    c.train(resume_from_checkpoint=str(tmp_path / "b" / f"checkpoint-{crash_at}"))
    assert model_b.seen + model_c.seen == model_a.seen


class Unmasking(Recorder):
    """Records the rows it is fed as they were before masking (labels hold the masked tokens)."""

    def forward(self, input_ids=None, labels=None, **_):
        self.rows = getattr(self, "rows", [])
        self.rows += torch.where(labels == -100, input_ids, labels).tolist()
        return super().forward(input_ids=input_ids)


@pytest.mark.parametrize("before,after", [(2, 0), (0, 2)])
def test_a_trainer_resumed_with_another_worker_count(tmp_path, before, after):
    """The rest of the pass is re-dealt (elastic resume): every row is still trained on exactly once
    per pass, and the collators start again from their seeds."""
    def make(out, workers, **kw):
        t, _ = trainer(out, workers, **kw)
        t.model = t.model_wrapped = model = Unmasking(width=WIDTH)
        return t, model

    b, model_b = make(tmp_path / "b", before, save_steps=4)
    b.add_callback(CrashAfterSave(4))
    with pytest.raises(Crash):
        b.train()
    del b
    gc.collect()
    c, model_c = make(tmp_path / "b", after)
    c.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-4"))
    first_pass = (model_b.rows + model_c.rows)[:ROWS]
    assert Counter(map(tuple, first_pass)) == Counter(map(tuple, rows()["input_ids"]))
