"""What the integrations leave behind in a training process: nothing of ours for Python's cyclic
garbage collector (which a training process with a large heap runs rarely) once a Trainer is
done. The loader-level and pipeline-level checks of the same kind are in ``test_long_runs.py``."""

from __future__ import annotations

import gc
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

from datasets import Dataset  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from resumable_iterable.integrations.transformers import ResumableDataCallback  # noqa: E402
from trainer_support import Recorder  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore")]


def ours_left(garbage: list) -> list:
    return sorted({type(o).__qualname__ if not hasattr(o, "__code__") else o.__qualname__ for o in garbage
                   if type(o).__module__.startswith("resumable_iterable")
                   or "resumable_iterable" in getattr(getattr(o, "__code__", None), "co_filename", "")})


def make_trainer(out, max_steps, save_worker_rng=False):
    hf = Dataset.from_dict({"ids": list(range(40))})
    ds = ri.to_iterable_dataset(hf, num_shards=4).shuffle(seed=7, buffer_size=8)
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=4, save_steps=6,
        dataloader_num_workers=0, report_to="none", use_cpu=True, logging_strategy="no",
        remove_unused_columns=False, disable_tqdm=True, save_only_model=False)
    trainer = transformers.Trainer(model=Recorder(), args=args, train_dataset=ds)
    ResumableDataCallback.attach(trainer, save_worker_rng=save_worker_rng)
    return trainer


@pytest.mark.parametrize("save_worker_rng", [False, True])
def test_a_resumed_trainer_leaves_its_loader_to_no_cyclic_collector(tmp_path, save_worker_rng):
    """A ``transformers.Trainer`` resumed from a checkpoint, trained on and dropped: its loader and
    dataset go with it. Before, the resume replaced the loader's ``set_epoch`` (to keep the
    dataset's epoch numbering) with a function that held the loader, a reference cycle: every
    resumed ``train()`` left the loader, the dataset and its shared-memory epoch slot to the
    cyclic collector; with ``save_worker_rng=True`` (and no workers) so did the replacement of the
    loader's ``state_dict`` that notes the generators, on every run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make_trainer(tmp_path, 12, save_worker_rng).train()
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            trainer = make_trainer(tmp_path, 18, save_worker_rng)
            trainer.train(resume_from_checkpoint=True)
            del trainer
            gc.collect()
            left = ours_left(gc.garbage)
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            gc.enable()
    assert left == [], f"left for the cyclic garbage collector: {left}"
