"""Driver of ``test_trainer_kills.py``, run in a fresh interpreter: imports torch and transformers
once, then forks one child per run. A child training with ``ResumableDataCallback`` is killed
(``SIGKILL``, no cleanup) just before its k-th file-system call within the save of step
``KILL_STEP``; another child resumes with ``resume_from_checkpoint=True`` (if the Trainer refuses
the incomplete last checkpoint, the folder is deleted, as a user would, and the resume is tried
again). Prints one JSON document: the calls of the save, and per kill point the errors met and
whether the examples trained on, kept up to the checkpoint resumed, then resumed, equal the
uninterrupted run's.

Usage: python trainer_kill_driver.py OUT WORKERS POINTS   (POINTS: "all" or names such as
"replace,trainer_state,rmtree,on_save": the first call of each kind)"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import signal
import sys
import traceback

import torch

torch.set_num_threads(1)
import transformers  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers.trainer_utils import get_last_checkpoint  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from resumable_iterable.integrations.transformers import ResumableDataCallback  # noqa: E402

ROWS, SHARDS, BATCH, MAX_STEPS, SAVE_STEPS, KILL_STEP = 40, 4, 4, 8, 2, 4
CALLS = {"on": False, "n": 0, "kill": None, "names": []}


def _count(name, fn):
    def call(*a, **k):
        if CALLS["on"]:
            if name == "open" and not any(c in (a[1] if len(a) > 1 else k.get("mode", "r")) for c in "wax+"):
                return fn(*a, **k)
            if name == "os.open" and not a[1] & (os.O_WRONLY | os.O_RDWR):
                return fn(*a, **k)
            target = a[1] if name in ("replace", "rename") else a[0] if a else ""  # a rename: where to
            _reached(f"{name} {os.path.basename(str(target)) if isinstance(target, (str, os.PathLike)) else ''}")
        return fn(*a, **k)
    return call


def _reached(what):
    CALLS["n"] += 1
    CALLS["names"].append(what.strip())
    if CALLS["kill"] == CALLS["n"]:
        os.kill(os.getpid(), signal.SIGKILL)


def _patch():
    import safetensors.torch
    import transformers.modeling_utils as mu
    torch.save = _count("torch.save", torch.save)
    mu.safe_save_file = _count("safetensors", mu.safe_save_file)
    safetensors.torch.save_file = _count("safetensors", safetensors.torch.save_file)
    for mod, name, label in [(os, "replace", "replace"), (os, "rename", "rename"), (os, "fsync", "fsync"),
                             (os, "makedirs", "makedirs"), (os, "unlink", "unlink"), (shutil, "rmtree", "rmtree"),
                             (builtins, "open", "open"), (os, "open", "os.open")]:
        setattr(mod, name, _count(label, getattr(mod, name)))


class Window(transformers.TrainerCallback):
    """Counts the calls made while the checkpoint of KILL_STEP is written, on_save included."""

    def on_step_end(self, args, state, control, **kwargs):
        CALLS["on"] = state.global_step == KILL_STEP

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == KILL_STEP:
            _reached("on_save")
        CALLS["on"] = False


class Recorder(torch.nn.Module):
    def __init__(self, log):
        super().__init__()
        self.lin = torch.nn.Linear(1, 1)
        self.fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def forward(self, ids=None, **_):
        os.write(self.fd, (json.dumps(ids.tolist()) + "\n").encode())
        return {"loss": (self.lin(ids.float().unsqueeze(-1)) ** 2).mean()}


def trainer(out, log, workers):
    ds = ri.to_iterable_dataset(Dataset.from_dict({"ids": list(range(ROWS))}), num_shards=SHARDS).shuffle(
        seed=7, buffer_size=8)
    args = transformers.TrainingArguments(
        output_dir=out, max_steps=MAX_STEPS, per_device_train_batch_size=BATCH, save_steps=SAVE_STEPS,
        save_total_limit=1, dataloader_num_workers=workers, report_to="none", use_cpu=True, logging_strategy="no",
        remove_unused_columns=False, disable_tqdm=True)
    t = transformers.Trainer(model=Recorder(log), args=args, train_dataset=ds)
    ResumableDataCallback.attach(t)
    t.add_callback(Window())
    return t


def in_child(fn, err_file):
    """Run ``fn`` in a forked child; returns its wait status."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn()
        except BaseException:
            with open(err_file, "w") as f:
                traceback.print_exc(file=f)
            code = 3
        os._exit(code)
    return os.waitpid(pid, 0)[1]


def read(log):
    return [json.loads(line) for line in open(log).read().splitlines()] if os.path.exists(log) else []


def main(out, workers, points):
    _patch()
    err = os.path.join(out, "err")

    def full():
        trainer(f"{out}/full", f"{out}/full.log", workers).train()
        json.dump(CALLS["names"], open(f"{out}/calls.json", "w"))

    assert in_child(full, err) == 0, open(err).read()
    full_log, calls = read(f"{out}/full.log"), json.load(open(f"{out}/calls.json"))
    if points == "all":
        ks = list(range(1, len(calls) + 1))
    else:
        ks = [next(i + 1 for i, c in enumerate(calls) if c.startswith(p) or p in c) for p in points.split(",")]
    trials = []
    for k in ks:
        d = f"{out}/k{k}"
        os.makedirs(d)

        def killed():
            CALLS["kill"] = k
            trainer(f"{d}/ckpt", f"{d}/head.log", workers).train()

        status = in_child(killed, err)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, status)
        errors, tail, start = [], None, None
        for attempt in range(3):
            last = get_last_checkpoint(f"{d}/ckpt")
            log = f"{d}/tail{attempt}.log"
            if os.path.exists(err):
                os.unlink(err)
            status = in_child(lambda: trainer(f"{d}/ckpt", log, workers).train(resume_from_checkpoint=True), err)
            if status == 0:
                start, tail = int(last.rsplit("-", 1)[1]), read(log)
                break
            errors.append(open(err).read().strip().splitlines()[-1])
            shutil.rmtree(last)  # the user deletes the incomplete checkpoint and resumes again
        head = read(f"{d}/head.log")
        exact = tail is not None and head[:start] == full_log[:start] and tail == full_log[start:]
        trials.append({"k": k, "call": calls[k - 1], "errors": errors, "resumed_from": start, "exact": exact})
    print(json.dumps({"calls": calls, "trials": trials}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
