"""End to end: a real transformers.Trainer, interrupted at a checkpoint and resumed, is fed
exactly the examples (in the same order) as an uninterrupted run - across epoch boundaries,
with DataLoader workers, and without the Trainer re-reading the consumed batches."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

from datasets import Dataset  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from trainer_support import Crash, CrashAfterSave, Recorder  # noqa: E402
from resumable_iterable.integrations.torch import InlineSmallTensors  # noqa: E402

from resumable_iterable.integrations.transformers import (  # noqa: E402
    STATE_FILE,
    ResumableDataCallback,
    find_envelopes,
)

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")]

ROWS, SHARDS, BATCH, MAX_STEPS, BUFFER = 40, 4, 4, 24, 8  # 10 batches per pass: the run crosses two epoch boundaries
READS: list[int] = []  # source rows read in this process (num_workers=0 only)


def _count(ex):
    READS.append(ex["ids"])
    return {}


def build():
    hf = Dataset.from_dict({"ids": list(range(ROWS))})
    return ri.to_iterable_dataset(hf, num_shards=SHARDS).map(_count).shuffle(seed=7, buffer_size=BUFFER)


def make_trainer(out, workers, ds=None, attach=True, **kw):
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=kw.pop("max_steps", MAX_STEPS), per_device_train_batch_size=BATCH, save_steps=kw.pop("save_steps", 1000),
        dataloader_num_workers=workers, report_to="none", use_cpu=True, logging_strategy="no",
        remove_unused_columns=False, disable_tqdm=True, save_only_model=False, **kw)
    model = Recorder()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds if ds is not None else build())
    if attach:
        ResumableDataCallback.attach(trainer)
    return trainer, model


def run_interrupted(tmp_path, workers, crash_at):
    out = tmp_path / "run"
    b, model_b = make_trainer(out, workers, save_steps=crash_at)
    b.add_callback(CrashAfterSave(crash_at))
    with pytest.raises(Crash):
        b.train()
    # shut the crashed run's DataLoader workers down now: left alive while the next loader forks
    # its own workers, they later take torch's join timeout (5 s each) to stop
    del b
    gc.collect()
    ckpt = out / f"checkpoint-{crash_at}"
    assert (ckpt / STATE_FILE).is_file()
    return out, ckpt, model_b.seen


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Run A for each worker count (computed once)."""
    cache = {}

    def get(workers):
        if workers not in cache:
            a, model = make_trainer(tmp_path_factory.mktemp(f"a{workers}"), workers)
            a.train()
            assert len(model.seen) == MAX_STEPS * BATCH
            # with workers the callback wrapped the loader's collate_fn: small tensors come by value
            base = a.callback_handler.train_dataloader.base_dataloader
            assert isinstance(base.collate_fn, InlineSmallTensors) == (workers > 0)
            # the callback released the loader's iterator (and its worker processes) at the end
            assert a.callback_handler.train_dataloader.base_dataloader._iterator is None
            cache[workers] = model.seen
        return cache[workers]

    return get


def check_state_file(ckpt, step, workers):
    payload = ri.load_state(ckpt / STATE_FILE)
    assert payload["format"] == "resumable_iterable.trainer" and payload["global_step"] == step
    envelopes = list(find_envelopes(payload))
    assert len(envelopes) == max(workers, 1)  # one pipeline state per DataLoader worker
    assert all(env["pipeline"]["node"] == "shuffle" for _, env in envelopes)
    # trainer_state.json links the checkpoint to this exact file
    ts = json.loads((ckpt / "trainer_state.json").read_text())
    digest = ts["stateful_callbacks"]["ResumableDataCallback"]["attributes"]["data_state_sha256"]
    assert digest == hashlib.sha256((ckpt / STATE_FILE).read_bytes()).hexdigest()


# crash_at=10: exactly at the end of the first pass; 14: in the middle of the second pass
@pytest.mark.parametrize("workers,crash_at", [(0, 10), (0, 14), (2, 10), (2, 14)])
def test_resume_sees_exactly_the_uninterrupted_ids(tmp_path, monkeypatch, uninterrupted, workers, crash_at):
    full = uninterrupted(workers)
    # the passes are really reshuffled per epoch (otherwise the epoch mapping would go untested)
    assert full[:ROWS] != full[ROWS:2 * ROWS] and sorted(full[:ROWS]) == sorted(full[ROWS:2 * ROWS])

    out, ckpt, head = run_interrupted(tmp_path, workers, crash_at)
    assert head == full[: crash_at * BATCH]
    check_state_file(ckpt, crash_at, workers)

    # the Trainer must not fast-forward the loader itself
    def no_skipping(*a, **k):
        raise AssertionError("the Trainer re-read and skipped batches")

    monkeypatch.setattr(transformers.trainer, "skip_first_batches", no_skipping)
    READS.clear()
    c, model_c = make_trainer(out, workers)
    c.train(resume_from_checkpoint=str(ckpt))
    assert head + model_c.seen == full
    if workers == 0:
        # C read only what it still needed (plus a refill of the shuffle buffer and the batch the
        # loader reads ahead): re-reading the consumed part of the stream would take >= 96 reads
        assert len(READS) <= (MAX_STEPS - crash_at) * BATCH + BUFFER + BATCH


def test_resume_twice_with_resume_true(tmp_path, uninterrupted):
    """B crashes at step 6, C resumes (finding the last checkpoint itself) and crashes at 14, D finishes."""
    full = uninterrupted(0)
    out, _, head = run_interrupted(tmp_path, 0, 6)
    c, model_c = make_trainer(out, 0, save_steps=4)  # checkpoints 8, 12, ... (the step counter resumes at 6)
    c.add_callback(CrashAfterSave(12))
    with pytest.raises(Crash):
        c.train(resume_from_checkpoint=True)
    del c
    gc.collect()
    d, model_d = make_trainer(out, 0)
    d.train(resume_from_checkpoint=True)
    assert head + model_c.seen + model_d.seen == full


class CrashOnSaveBefore(transformers.TrainerCallback):
    """A callback that runs before ours and dies in ``on_save`` of step ``at``: as a process killed
    after the Trainer wrote a checkpoint and deleted the older ones, before ``on_save`` ran."""

    def __init__(self, at: int):
        self.at = at

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise Crash()


def test_the_data_state_is_written_before_older_checkpoints_are_deleted(tmp_path, uninterrupted):
    """With save_total_limit=1 the Trainer deletes the previous checkpoint before ``on_save``; the data
    state, written in ``on_save``, was missing from the only checkpoint left when the process died in
    between (FileNotFoundError on resume). It is written before trainer_state.json now."""
    full = uninterrupted(0)
    out = tmp_path / "run"
    b, model_b = make_trainer(out, 0, save_steps=3, save_total_limit=1)
    b.callback_handler.callbacks.insert(0, CrashOnSaveBefore(6))
    with pytest.raises(Crash):
        b.train()
    del b
    gc.collect()
    assert sorted(os.listdir(out)) == ["checkpoint-6"] and (out / "checkpoint-6" / STATE_FILE).is_file()
    c, model_c = make_trainer(out, 0, save_steps=3, save_total_limit=1)
    c.train(resume_from_checkpoint=True)
    assert model_b.seen[: 6 * BATCH] + model_c.seen == full


def test_the_same_trainer_resumed_after_a_step_raised_keeps_the_checkpoint(tmp_path, uninterrupted):
    """A step raises right after the checkpoint of step 6 (the loader has yielded the next batch);
    train(resume_from_checkpoint=...) on the same Trainer object asks the callback for its state
    when it starts, while the callback still sees the old loader: that must not rewrite the
    checkpoint's data state (the digest in trainer_state.json would no longer match it)."""
    full = uninterrupted(0)
    out = tmp_path / "run"
    t, model = make_trainer(out, 0, save_steps=6)
    forward = model.forward

    def failing_once(*a, **k):
        if len(model.seen) == 6 * BATCH and not getattr(model, "failed", False):
            model.failed = True
            raise Crash()
        return forward(*a, **k)

    model.forward = failing_once
    with pytest.raises(Crash):
        t.train()
    before = (out / "checkpoint-6" / STATE_FILE).read_bytes()
    t.train(resume_from_checkpoint=str(out / "checkpoint-6"))
    assert model.seen == full
    assert (out / "checkpoint-6" / STATE_FILE).read_bytes() == before


def test_checkpoint_outside_output_dir(tmp_path, uninterrupted):
    full = uninterrupted(0)
    out, ckpt, head = run_interrupted(tmp_path, 0, 6)
    moved = tmp_path / "elsewhere" / "checkpoint-6"
    os.makedirs(moved.parent)
    os.rename(ckpt, moved)
    c, model_c = make_trainer(tmp_path / "new_out", 0)
    with pytest.raises(FileNotFoundError, match="resume_from_checkpoint"):
        c.train(resume_from_checkpoint=str(moved))
    c, model_c = make_trainer(tmp_path / "new_out", 0, resume_from_checkpoint=str(moved))
    c.train(resume_from_checkpoint=str(moved))
    assert head + model_c.seen == full


def test_damaged_or_foreign_state_file_is_refused(tmp_path):
    """The refusal says why the file found is not the checkpoint's: a damaged file was said to
    belong to another checkpoint."""
    out, ckpt, _ = run_interrupted(tmp_path, 0, 6)
    path = ckpt / STATE_FILE
    good = path.read_bytes()
    foreign = ri.load_state(path)
    foreign["global_step"] = 7
    ri.save_state(foreign, tmp_path / "foreign.json")
    cases = [(good.replace(b'"global_step": 6', b'"global_step": 7'), "damaged: state checksum does not match"),
             (good[: len(good) // 2], r"damaged: state is not valid JSON \(truncated"),
             ((tmp_path / "foreign.json").read_bytes(), "written at step 7: it belongs to another checkpoint")]
    for data, why in cases:
        path.write_bytes(data)
        c, _ = make_trainer(out, 0, resume_from_checkpoint=str(ckpt))  # also where output_dir says: looked at once
        with pytest.raises(FileNotFoundError, match=why) as e:
            c.train(resume_from_checkpoint=str(ckpt))
        assert str(e.value).count(STATE_FILE) == 1


def test_another_pipeline_is_refused(tmp_path):
    out, ckpt, _ = run_interrupted(tmp_path, 0, 6)
    other = ri.to_iterable_dataset(Dataset.from_dict({"ids": list(range(ROWS))}), num_shards=SHARDS)
    c, _ = make_trainer(out, 0, ds=other)
    with pytest.raises(ValueError, match="different pipeline"):
        c.train(resume_from_checkpoint=str(ckpt))


def test_checkpoint_without_data_state_is_refused(tmp_path):
    out = tmp_path / "run"
    b, _ = make_trainer(out, 0, attach=False, save_steps=6, max_steps=6)
    b.train()
    c, _ = make_trainer(out, 0)
    with pytest.raises(ValueError, match="written without this callback"):
        c.train(resume_from_checkpoint=str(out / "checkpoint-6"))


def test_plain_loader_is_refused_with_instructions(tmp_path):
    t, _ = make_trainer(tmp_path, 0, attach=False)
    t.add_callback(ResumableDataCallback())
    with pytest.raises(ValueError, match="attach"):
        t.train()


def test_callback_passed_at_construction_turns_off_data_skip(tmp_path):
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to="none", use_cpu=True)
    assert args.ignore_data_skip is False
    transformers.Trainer(model=Recorder(), args=args, train_dataset=build(), callbacks=[ResumableDataCallback()])
    assert args.ignore_data_skip is True


@pytest.mark.parametrize("before,after", [(2, 0), (0, 2)])
def test_resume_with_another_worker_count(tmp_path, uninterrupted, before, after):
    """Elastic resume: the rest of the interrupted pass is read exactly once (in another order),
    and the passes after it are those of an uninterrupted run with the new worker count."""
    full_before, full_after = uninterrupted(before), uninterrupted(after)
    crash_at = 14  # 4 batches into the second pass
    out, ckpt, head = run_interrupted(tmp_path, before, crash_at)
    assert head == full_before[: crash_at * BATCH]
    c, model_c = make_trainer(out, after)
    c.train(resume_from_checkpoint=str(ckpt))
    rest_of_pass = 2 * ROWS - crash_at * BATCH  # examples of the second pass not yet seen
    assert sorted(head[ROWS:] + model_c.seen[:rest_of_pass]) == list(range(ROWS))
    # then the third pass, as the new worker count reads it (each worker batches its own examples,
    # so the re-dealt rest of the second pass may take one batch more: C then stops a batch earlier)
    tail = model_c.seen[rest_of_pass:]
    assert len(tail) >= (MAX_STEPS - 20 - 1) * BATCH and tail == full_after[2 * ROWS: 2 * ROWS + len(tail)]


def test_small_tensors_by_value_can_be_turned_off(tmp_path):
    with pytest.raises(ValueError, match="inline_tensor_bytes must be a number of bytes"):
        ResumableDataCallback(inline_tensor_bytes=-1)
    trainer, model = make_trainer(tmp_path, 2, attach=False, max_steps=3)
    ResumableDataCallback.attach(trainer, inline_tensor_bytes=0)
    trainer.train()
    base = trainer.callback_handler.train_dataloader.base_dataloader
    assert not isinstance(base.collate_fn, InlineSmallTensors)
    assert next(iter(base))["ids"].is_shared()  # torch's own path: shared memory
    base.load_state_dict({})  # stop its workers


class LoggingCollator:
    """``default_data_collator`` that notes, in a file, whether ``InlineSmallTensors`` called it
    (DataLoader workers are other processes: the file is how they report)."""

    def __init__(self, path):
        self.path = path

    def __call__(self, features):
        caller = type(sys._getframe(1).f_locals.get("self")).__name__
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}:{caller == 'InlineSmallTensors'}\n")
        return transformers.default_data_collator(features)


@pytest.mark.parametrize("persistent", [False, True])
def test_with_workers_every_training_batch_sends_its_small_tensors_by_value(tmp_path, persistent):
    """From the first batch of a fresh run on (accelerate's early state_dict() had started the
    workers with the collate_fn as it was), with persistent workers too."""
    log = tmp_path / "calls.txt"
    trainer, model = make_trainer(tmp_path, 2, max_steps=14, dataloader_persistent_workers=persistent)
    trainer.data_collator = LoggingCollator(str(log))
    trainer.train()
    calls = [line.split(":") for line in log.read_text().split()]
    # the workers accelerate's state_dict() started collated a batch or two ahead, unwrapped, before
    # they were stopped; every batch trained on came from workers with the wrapped collate_fn
    assert sum(wrapped == "True" for _, wrapped in calls) >= 14
    assert sum(wrapped == "False" for _, wrapped in calls) <= 2 * 2  # at most prefetch_factor per worker
    assert all(len({w for p, w in calls if p == pid}) == 1 for pid, _ in calls)  # a worker is one or the other
    base = trainer.callback_handler.train_dataloader.base_dataloader
    batch = next(iter(base))
    assert not batch["ids"].is_shared() and len(batch["ids"]) == BATCH
    base.load_state_dict({})  # stop its workers


def test_attach_applies_its_arguments_to_a_callback_already_there(tmp_path):
    trainer, _ = make_trainer(tmp_path, 2, attach=False)
    cb = ResumableDataCallback()
    trainer.add_callback(cb)
    assert ResumableDataCallback.attach(trainer, inline_tensor_bytes=0) is cb and cb.inline_tensor_bytes == 0
    with pytest.raises(ValueError, match="already has this callback, with filename"):
        ResumableDataCallback.attach(trainer, filename="other.json")


class OwnLoader(transformers.Trainer):
    """A Trainer whose training loader is a ``ri.StatefulDataLoader`` of the user's."""

    loader_kwargs: dict = {}

    def get_train_dataloader(self):
        self.loader = ri.StatefulDataLoader(self.train_dataset, batch_size=BATCH, **self.loader_kwargs)
        return self.loader


def own_loader_trainer(out, max_steps, **loader_kwargs):
    args = transformers.TrainingArguments(output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=BATCH,
                                          save_steps=ROWS // BATCH, report_to="none", use_cpu=True,
                                          logging_strategy="no", remove_unused_columns=False, disable_tqdm=True,
                                          ignore_data_skip=True, save_only_model=False)
    model = Recorder()
    trainer = OwnLoader(model=model, args=args, train_dataset=build(), callbacks=[ResumableDataCallback()])
    trainer.loader_kwargs = loader_kwargs
    return trainer, model


def test_a_loader_of_ours_keeps_its_own_choice(tmp_path):
    trainer, _ = own_loader_trainer(tmp_path, 2, num_workers=2, inline_tensor_bytes=0)
    trainer.train()
    assert trainer.loader.collate_fn is not None and not isinstance(trainer.loader.collate_fn, InlineSmallTensors)
    trainer.loader.load_state_dict({})


@pytest.mark.parametrize("workers,crash_at", [(0, 10), (2, 10), (2, 6), (2, 12)])
def test_own_loader_resumed_from_the_end_of_a_pass_goes_on_with_the_next(tmp_path, workers, crash_at):
    """A checkpoint after the last batch of a pass (step 10): the loader had not yet seen the pass
    end, so the resumed pass is empty; the Trainer would stop there (an epoch without batches).
    Mid-pass checkpoints (6, 12) resume exactly too, with the epochs the Trainer sets."""
    steps = ROWS // BATCH + 4
    a, model_a = own_loader_trainer(tmp_path / "a", steps, num_workers=workers)
    a.train()
    full = model_a.seen
    # the Trainer sets epochs on the loader, which passes them on: the second pass is reshuffled
    assert full[ROWS:] != full[:len(full) - ROWS]
    b, model_b = own_loader_trainer(tmp_path / "b", steps, num_workers=workers)
    b.args.save_steps = crash_at
    b.add_callback(CrashAfterSave(crash_at))
    with pytest.raises(Crash):
        b.train()
    del b
    gc.collect()
    c, model_c = own_loader_trainer(tmp_path / "b", steps, num_workers=workers)
    c.train(resume_from_checkpoint=str(tmp_path / "b" / f"checkpoint-{crash_at}"))
    assert c.state.global_step == steps
    assert model_b.seen + model_c.seen == full


def random_ids_collator(rows):
    """Draws from the worker's torch generator, as a masking collator does: the model sees
    id * 1000 + a random number."""
    ids = torch.tensor([r["ids"] for r in rows])
    return {"ids": ids * 1000 + torch.randint(0, 1000, ids.shape)}


@pytest.mark.slow  # each case trains twice with 2 workers (4 s): CI runs (True, 14), all three with --soak
@pytest.mark.parametrize("persistent,crash_at", [(True, 14), (False, 14), (True, 10)])
def test_save_worker_rng_gives_a_random_collator_the_uninterrupted_draws(tmp_path, persistent, crash_at, soak):
    """With ``save_worker_rng=True`` the workers' generators are part of the data state: the resumed
    run (crashed in the middle of its second pass) is fed exactly what the uninterrupted run was,
    random draws included, to the end of that pass, and after it too with persistent workers (new
    workers are seeded from the main process's generator, which a resume does not give back
    exactly); without it the ids are the same and the draws are not. Crashed at the end of the
    first pass (10; accelerate saw it end, so no state is loaded), the new persistent workers
    start the next pass with the generators the saved ones ended it with."""
    if not soak and (persistent, crash_at) != (True, 14):
        pytest.skip("more crash points: run with --soak (make soak)")
    seen, end_of_pass = {}, 20 * BATCH

    def trainer(out, **kw):
        t, model = make_trainer(out, 2, attach=False, dataloader_persistent_workers=persistent, **kw)
        t.data_collator = random_ids_collator
        ResumableDataCallback.attach(t, save_worker_rng=save)
        return t, model

    for save in (True, False):
        a, model_a = trainer(tmp_path / f"a{save}")
        a.train()
        out = tmp_path / f"b{save}"
        b, model_b = trainer(out, save_steps=crash_at)
        b.add_callback(CrashAfterSave(crash_at))
        with pytest.raises(Crash):
            b.train()
        del b
        gc.collect()
        c, model_c = trainer(out)
        c.train(resume_from_checkpoint=str(out / f"checkpoint-{crash_at}"))
        assert model_b.seen == model_a.seen[: crash_at * BATCH]
        seen[save] = (model_a.seen, model_b.seen + model_c.seen)
    full, resumed = seen[True]
    if persistent:
        assert resumed == full
    else:
        assert resumed[:end_of_pass] == full[:end_of_pass]
        assert [v // 1000 for v in resumed] == [v // 1000 for v in full]
    full, resumed = seen[False]
    assert [v // 1000 for v in resumed] == [v // 1000 for v in full]
    assert resumed[crash_at * BATCH:end_of_pass] != full[crash_at * BATCH:end_of_pass]


def seedless_build(seed=None):
    hf = Dataset.from_dict({"ids": list(range(ROWS))})
    return ri.to_iterable_dataset(hf, num_shards=SHARDS).shuffle(seed=seed, buffer_size=BUFFER)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pipeline_without_a_seed_resumes_its_later_epochs_too(tmp_path, workers):
    """The shuffle draws its seed when built, so the resumed run builds another one: the checkpoint's
    state records the drawn seed, and the resumed run's later passes are those of the crashed run
    (compared with an uninterrupted run given that seed)."""
    out = tmp_path / "run"
    b, model_b = make_trainer(out, workers, ds=seedless_build(), save_steps=6)
    b.add_callback(CrashAfterSave(6))
    with pytest.raises(Crash):
        b.train()
    del b
    gc.collect()
    ckpt = out / "checkpoint-6"
    seeds = {tuple(map(tuple, env["seeds"])) for _, env in find_envelopes(ri.load_state(ckpt / STATE_FILE))}
    assert len(seeds) == 1
    ((_, seed),) = seeds.pop()
    a, model_a = make_trainer(tmp_path / "a", workers, ds=seedless_build(seed))
    a.train()
    c, model_c = make_trainer(out, workers, ds=seedless_build())
    c.train(resume_from_checkpoint=str(ckpt))
    assert model_b.seen + model_c.seen == model_a.seen


def test_restoring_callback_states_keeps_the_callbacks_settings(tmp_path):
    """With ``restore_callback_states_from_checkpoint=True`` the Trainer replaces each stateful
    callback, when it resumes, by one built from the arguments ``trainer_state.json`` records:
    only ``filename`` was recorded, so the resumed run lost ``save_worker_rng`` and
    ``inline_tensor_bytes`` (its own checkpoints then held no worker generators)."""
    def trainer(**kw):
        t, model = make_trainer(tmp_path / "run", 0, attach=False, max_steps=4, save_steps=2,
                                restore_callback_states_from_checkpoint=True, **kw)
        ResumableDataCallback.attach(t, save_worker_rng=True, inline_tensor_bytes=0)
        return t, model

    b, model_b = trainer()
    b.add_callback(CrashAfterSave(2))
    with pytest.raises(Crash):
        b.train()
    c, model_c = trainer()
    c.train(resume_from_checkpoint=True)
    (cb,) = [cb for cb in c.callback_handler.callbacks if isinstance(cb, ResumableDataCallback)]
    assert (cb.save_worker_rng, cb.inline_tensor_bytes, cb.filename) == (True, 0, STATE_FILE)
    ts = json.loads((tmp_path / "run" / "checkpoint-4" / "trainer_state.json").read_text())
    assert ts["stateful_callbacks"]["ResumableDataCallback"]["args"] == {
        "filename": STATE_FILE, "inline_tensor_bytes": 0, "save_worker_rng": True}
    assert model_b.seen[:2 * BATCH] + model_c.seen == build_seen(tmp_path, 4)


def build_seen(tmp_path, steps):
    a, model = make_trainer(tmp_path / f"a{steps}", 0, max_steps=steps)
    a.train()
    return model.seen


@pytest.mark.parametrize("how", ["constructor", "add_callback"])
def test_a_second_callback_is_refused_when_training_starts(tmp_path, how):
    """Two ResumableDataCallback on one Trainer trained without a word, and the Trainer stored their
    states as a list growing with every checkpoint, whose first entries held no data state: the resume
    failed with "records no data state". It is refused when training starts."""
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=BATCH,
                                          report_to="none", use_cpu=True, remove_unused_columns=False,
                                          disable_tqdm=True)
    first = ResumableDataCallback()
    trainer = transformers.Trainer(model=Recorder(), args=args, train_dataset=build(),
                                   callbacks=[first, ResumableDataCallback()] if how == "constructor" else [first])
    if how == "add_callback":
        trainer.add_callback(ResumableDataCallback())
    assert ResumableDataCallback.attach(trainer) is first
    with pytest.raises(ValueError, match="two ResumableDataCallback"):
        trainer.train()


def test_a_dataset_not_of_ours_is_warned_about(tmp_path, caplog):
    """The callback saves whatever state the loader reports; with a dataset that is not ours the
    resume is as exact as that dataset's own state_dict(): it says so (it said nothing)."""
    hf = Dataset.from_dict({"ids": list(range(ROWS))}).to_iterable_dataset(num_shards=SHARDS)
    with caplog.at_level("WARNING", logger="resumable_iterable"):
        make_trainer(tmp_path / "hf", 0, ds=hf, max_steps=1)[0].train()
    assert "not a resumable_iterable dataset" in caplog.text and "datasets.iterable_dataset.IterableDataset" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="resumable_iterable"):
        make_trainer(tmp_path / "ours", 0, max_steps=1)[0].train()
    assert "not a resumable_iterable dataset" not in caplog.text


def test_ignore_data_skip_given_by_the_user(tmp_path, uninterrupted):
    """``ignore_data_skip=True`` only turns the Trainer's own skipping off, which the callback needs
    (it sets it): with the callback the data position is restored all the same. Resumed without the
    callback, the Trainer starts the stream over from its first example (transformers' meaning of
    ``ignore_data_skip=True``): how to start the data over deliberately."""
    full = uninterrupted(0)
    out, ckpt, head = run_interrupted(tmp_path, 0, 6)
    c, model_c = make_trainer(out, 0, ignore_data_skip=True)
    c.train(resume_from_checkpoint=str(ckpt))
    assert head + model_c.seen == full
    d, model_d = make_trainer(out, 0, attach=False, ignore_data_skip=True)
    d.train(resume_from_checkpoint=str(ckpt))
    assert model_d.seen[:6 * BATCH] == full[:6 * BATCH]


def mutating_collator(rows):
    """Collates, then edits the examples it was given in place (as collators that pop or pad fields do)."""
    assert all(r["tokens"] == [r["ids"], r["ids"]] for r in rows), rows  # as the source holds them
    batch = {"ids": torch.tensor([r["ids"] for r in rows])}
    for r in rows:
        r["tokens"][0] += 1000
        r["tokens"].append(-1)
        r.pop("ids")
        r["extra"] = 1
    return batch


# with 2 workers: three runs starting workers, 10-20 s on a busy machine; run by `make soak`
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_collator_that_edits_its_examples_in_place(tmp_path, workers, soak):
    """The data state never holds an example already handed to the loader, and an in-memory source
    hands out copies: a collator editing its input changes neither the resumed run nor later passes."""
    if workers and not soak:
        pytest.skip("with workers: slow, runs with --soak (make soak)")
    def ds():
        rows = [{"ids": i, "tokens": [i, i]} for i in range(ROWS)]
        return ri.IterableDataset.from_list(rows, num_shards=SHARDS).shuffle(seed=7, buffer_size=BUFFER)

    def trainer(out, **kw):
        t, model = make_trainer(out, workers, ds=ds(), max_steps=14, **kw)
        t.data_collator = mutating_collator
        return t, model

    a, model_a = trainer(tmp_path / "a")
    a.train()
    assert sorted(model_a.seen[:ROWS]) == list(range(ROWS)) and len(model_a.seen) == 14 * BATCH
    b, model_b = trainer(tmp_path / "b", save_steps=12)
    b.add_callback(CrashAfterSave(12))
    with pytest.raises(Crash):
        b.train()
    del b
    gc.collect()
    c, model_c = trainer(tmp_path / "b")
    c.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-12"))
    assert model_b.seen + model_c.seen == model_a.seen


class DrawingRecorder(Recorder):
    """Draws from the global torch generator in forward, as dropout does, and records the draw."""

    def forward(self, ids=None, **_):
        self.draws = getattr(self, "draws", [])
        self.draws.append(torch.rand(1).item())
        return super().forward(ids=ids)


@pytest.mark.parametrize("crash_at", [6, 10, 12])
def test_save_worker_rng_without_workers_gives_the_uninterrupted_draws(tmp_path, crash_at):
    """Without workers the collator draws from the main process's generators, which the Trainer saves
    and restores itself; but accelerate has already read and collated the next batch when the Trainer
    saves them, so the resumed run collated that batch with other draws (and everything after was
    shifted). With save_worker_rng=True the generators as they were when the data position was taken
    are saved with it and used for that batch only: the collator's and the model's draws are the
    uninterrupted run's (checkpoints mid-pass, at the end of a pass, and in the second pass)."""
    def trainer(out, **kw):
        t, _ = make_trainer(out, 0, attach=False, max_steps=14, **kw)
        t.model = model = DrawingRecorder()
        t.model_wrapped = model
        t.data_collator = random_ids_collator
        ResumableDataCallback.attach(t, save_worker_rng=True)
        return t, model

    a, model_a = trainer(tmp_path / "a")
    a.train()
    b, model_b = trainer(tmp_path / "b", save_steps=crash_at)
    b.add_callback(CrashAfterSave(crash_at))
    with pytest.raises(Crash):
        b.train()
    assert "main_rng" in ri.load_state(tmp_path / "b" / f"checkpoint-{crash_at}" / STATE_FILE)
    c, model_c = trainer(tmp_path / "b")
    c.train(resume_from_checkpoint=str(tmp_path / "b" / f"checkpoint-{crash_at}"))
    assert model_b.seen + model_c.seen == model_a.seen
    assert model_b.draws + model_c.draws == model_a.draws



class StepBounds(transformers.TrainerCallback):
    """Notes how many batches the model had been fed at the end of each optimizer step."""

    def __init__(self, model):
        self.model, self.bounds = model, []

    def on_step_end(self, args, state, control, **kwargs):
        self.bounds.append(len(self.model.batches))


class BatchRecorder(Recorder):
    def forward(self, ids=None, **_):
        self.batches = getattr(self, "batches", [])
        self.batches.append(ids.tolist())
        return super().forward(ids=ids)


def per_step(model, bounds):
    return [model.batches[a:b] for a, b in zip([0] + bounds, bounds)]


def ids_collator(rows):
    return {"ids": torch.tensor([r["ids"] for r in rows])}


SETTINGS = {
    # 10 batches a pass: steps of 3 batches straddle the pass ends (the last batch of a pass
    # goes with the first two of the next), and the checkpoint of step 5 is in the second pass
    "gradient_accumulation_steps": dict(gradient_accumulation_steps=3),
    # the model takes only ids: the Trainer wraps the collator to drop the string column
    "remove_unused_columns": dict(remove_unused_columns=True),
    # a dataset of batches, one per loader batch
    "already_batched": dict(per_device_train_batch_size=1, batched=True),
    "no_dispatch": dict(accelerator_config={"dispatch_batches": False}),
    "split_batches": dict(accelerator_config={"split_batches": True}),
}


@pytest.mark.parametrize("workers,setting", [(0, s) for s in SETTINGS] + [
    pytest.param(2, s, marks=pytest.mark.slow) for s in ("gradient_accumulation_steps", "already_batched")])
def test_settings_users_train_with_resume_exactly_per_optimizer_step(tmp_path, workers, setting, soak):
    """Each optimizer step of the interrupted and resumed run is fed the batches of the uninterrupted
    run's, across pass ends (each pass reshuffled), with these TrainingArguments."""
    if workers and not soak:
        pytest.skip("with workers: slow, runs with --soak (make soak)")
    kw = dict(SETTINGS[setting])
    batched = kw.pop("batched", False)
    steps = 8 if "gradient_accumulation_steps" in kw else 14

    def ds():
        hf = Dataset.from_dict({"ids": list(range(ROWS)), "text": [str(i) for i in range(ROWS)]})
        out = ri.to_iterable_dataset(hf, num_shards=SHARDS).shuffle(seed=7, buffer_size=BUFFER)
        return out.batch(BATCH) if batched else out

    def run(out, crash_at=None, resume=None):
        args = dict(output_dir=str(out), max_steps=steps, per_device_train_batch_size=BATCH,
                    save_steps=crash_at or 1000, dataloader_num_workers=workers, report_to="none", use_cpu=True,
                    logging_strategy="no", remove_unused_columns=False, disable_tqdm=True)
        args.update(kw)
        model = BatchRecorder()
        trainer = transformers.Trainer(model=model, args=transformers.TrainingArguments(**args),
                                       train_dataset=ds(), data_collator=None if batched else ids_collator)
        if batched:  # one row holding a batch: its lists become a (1, BATCH) tensor
            trainer.data_collator = lambda rows: {"ids": torch.tensor(rows[0]["ids"])}
        bounds = StepBounds(model)
        trainer.add_callback(bounds)
        ResumableDataCallback.attach(trainer)
        if crash_at:
            trainer.add_callback(CrashAfterSave(crash_at))
            with pytest.raises(Crash):
                trainer.train()
        else:
            trainer.train(resume_from_checkpoint=resume)
        del trainer
        gc.collect()
        return per_step(model, bounds.bounds)

    full = run(tmp_path / "a")
    seen = [x for step in full for batch in step for x in batch]
    assert len(full) == steps and sorted(seen[:ROWS]) == list(range(ROWS))
    assert seen[ROWS:] != seen[:len(seen) - ROWS]  # the second pass is reshuffled
    head = run(tmp_path / "b", crash_at=5)
    assert head == full[:5]
    assert head + run(tmp_path / "b", resume=str(tmp_path / "b" / "checkpoint-5")) == full
