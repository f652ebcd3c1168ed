"""A real multi-process ``transformers.Trainer`` (2 processes, torch.distributed with gloo on
loopback, CPU): interrupted right after a checkpoint and resumed, every process is fed exactly
what the uninterrupted run fed it; resumed with one process instead of two, the global stream of
batches continues exactly. accelerate dispatches an iterable dataset's batches from process 0;
with ``split_batches=True`` the state it reports is exact, and without it the callback refuses
to run (the reported state would be one batch ahead)."""

from __future__ import annotations

import json
import os
import socket

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("torchdata")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from datasets import Dataset  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from resumable_iterable.integrations.transformers import ResumableDataCallback  # noqa: E402
from trainer_support import Crash, CrashAfterSave, Recorder  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::UserWarning")]

if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

ROWS, SHARDS, GLOBAL_BATCH, MAX_STEPS, CRASH_AT = 64, 4, 4, 12, 5


def build():
    return ri.to_iterable_dataset(Dataset.from_dict({"ids": list(range(ROWS))}), num_shards=SHARDS).shuffle(
        seed=7, buffer_size=8)


def trainer(out, split_batches=True, save_steps=CRASH_AT):
    args = transformers.TrainingArguments(
        output_dir=out, max_steps=MAX_STEPS, per_device_train_batch_size=GLOBAL_BATCH, save_steps=save_steps,
        report_to="none", use_cpu=True, ddp_backend="gloo", logging_strategy="no", remove_unused_columns=False,
        disable_tqdm=True, accelerator_config={"split_batches": split_batches})
    model = Recorder()
    t = transformers.Trainer(model=model, args=args, train_dataset=build())
    ResumableDataCallback.attach(t)
    return t, model


def _job(rank, world, port, out, what):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    result = {}
    if what == "refuse":
        t, _ = trainer(f"{out}/refuse", split_batches=False)
        try:
            t.train()
        except ValueError as e:
            result["error"] = str(e)
    if what == "run":
        t, m = trainer(f"{out}/full")
        t.train()
        result["full"] = m.seen
        t, m = trainer(f"{out}/cut")
        t.add_callback(CrashAfterSave(CRASH_AT))
        try:
            t.train()
        except Crash:
            pass
        result["head"] = m.seen
        # a job dies whole and restarts once every process has stopped: process 1 may leave its
        # on_save before process 0 has written trainer_state.json (seen under load)
        dist.barrier()
        t, m = trainer(f"{out}/cut")
        t.train(resume_from_checkpoint=True)
        result["tail"] = m.seen
    if what == "full-one":
        t, m = trainer(f"{out}/full-one")
        t.train()
        result["full"] = m.seen
    if what == "one":  # one process, interrupted after the checkpoint of CRASH_AT
        t, m = trainer(f"{out}/one")
        t.add_callback(CrashAfterSave(CRASH_AT))
        try:
            t.train()
        except Crash:
            pass
        result["head"] = m.seen
    if what == "resume-two":  # that checkpoint, written by one process, resumed by two
        t, m = trainer(f"{out}/one")
        t.train(resume_from_checkpoint=True)
        result["tail"] = m.seen
    if what == "resume-alone":  # the 2-process checkpoint of step CRASH_AT resumed by one process
        t, m = trainer(f"{out}/alone")
        t.args.resume_from_checkpoint = f"{out}/cut/checkpoint-{CRASH_AT}"  # outside output_dir: say where
        t.train(resume_from_checkpoint=t.args.resume_from_checkpoint)
        result["tail"] = m.seen
    with open(f"{out}/{what}.{world}.{rank}.json", "w") as f:
        json.dump(result, f)


def _spawn(world, out, what):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_job, args=(world, port, out, what), nprocs=world, start_method="fork")
    out_files = [f"{out}/{what}.{world}.{r}.json" for r in range(world)]
    return [json.load(open(p)) for p in out_files]


def test_two_processes_resume_exactly_on_every_rank_and_with_one_process(tmp_path):
    out = str(tmp_path)
    ranks = _spawn(2, out, "run")
    for r in ranks:
        per_step = GLOBAL_BATCH // 2
        assert len(r["full"]) == MAX_STEPS * per_step
        assert r["head"][:CRASH_AT * per_step] + r["tail"] == r["full"]
    # the global stream: each step's batch is split rank 0 first, then rank 1
    per_step = GLOBAL_BATCH // 2
    stream = [i for s in range(MAX_STEPS) for r in ranks for i in r["full"][s * per_step:(s + 1) * per_step]]
    assert len(set(stream)) == len(stream)
    alone = _spawn(1, out, "resume-alone")[0]["tail"]
    assert stream[:CRASH_AT * GLOBAL_BATCH] + alone == stream


def test_a_checkpoint_of_one_process_resumes_with_two(tmp_path):
    """Process 1 found no data state of its own in a checkpoint written by one process (or by two,
    when the job died after process 0 had completed the checkpoint and before process 1 wrote its
    file) and raised FileNotFoundError; dispatching, its loader is never read: nothing is missing."""
    out = str(tmp_path)
    head = _spawn(1, out, "one")[0]["head"]
    ranks = _spawn(2, out, "resume-two")
    per_step = GLOBAL_BATCH // 2
    steps = MAX_STEPS - CRASH_AT
    tail = [i for s in range(steps) for r in ranks for i in r["tail"][s * per_step:(s + 1) * per_step]]
    full = _spawn(1, out, "full-one")[0]["full"]
    assert head == full[:CRASH_AT * GLOBAL_BATCH] and head + tail == full


def test_dispatch_without_split_batches_is_refused(tmp_path):
    ranks = _spawn(2, str(tmp_path), "refuse")
    assert all("split_batches" in r.get("error", "") for r in ranks)
