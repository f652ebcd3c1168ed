"""PyTorch Lightning: a Trainer fed by ``resumable_iterable.StatefulDataLoader`` and resumed from a
mid-epoch checkpoint (``ModelCheckpoint(every_n_train_steps=...)``, ``trainer.fit(ckpt_path=...)``)
trains on exactly the batches the uninterrupted run trained on after that step, and the next
epoch is a full one with its own shuffle order - with ``ResumableDataCallback``.

Without it (Lightning's own loader checkpointing) a resume loses a batch: the Trainer reads one
batch ahead of the one it trains on and saves the loader's state after that one; and a resume
from an epoch's last batch gives the next epoch the saved epoch's order. Those are pinned too,
so that the docs stay true when Lightning changes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
pl = pytest.importorskip("lightning.pytorch")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from resumable_iterable.integrations.lightning import ResumableDataCallback  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore")]

SHARDS, ROWS, BATCH = 4, 6, 4  # 24 examples: 6 batches per epoch, 12 steps in 2 epochs


def _rows(shards):
    for s in shards:
        for i in range(ROWS):
            yield {"id": s * 100 + i}


def gen_ds():
    ds = ri.IterableDataset.from_generator(_rows, gen_kwargs={"shards": list(range(SHARDS))})
    return ds.shuffle(seed=7, buffer_size=5).map(lambda e: {"x": float(e["id"])})


def parquet_ds(folder):
    files = []
    for s in range(SHARDS):
        path = os.path.join(folder, f"part-{s}.parquet")
        if not os.path.exists(path):
            pq.write_table(pa.table({"id": [s * 100 + i for i in range(ROWS)]}), path)
        files.append(path)
    ds = ri.load_dataset("parquet", data_files=files, split="train")
    return ds.shuffle(seed=3, buffer_size=5).map(lambda e: {"x": float(e["id"])})


class Recorder(pl.LightningModule):
    """Records, per training_step, (epoch, ids of the batch)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(1, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append((self.current_epoch, [int(i) for i in batch["id"]]))
        return (self.lin(torch.as_tensor(batch["x"], dtype=torch.float32).reshape(-1, 1)) ** 2).mean()

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-6)


class Stop(Exception):
    pass


class KillAfter(pl.Callback):
    """A run killed after the checkpoint of step ``step`` is written, as the next batch starts
    (Lightning runs ``ModelCheckpoint`` after every other callback's ``on_train_batch_end``)."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise Stop()


def fit(tmp_path, *, make_ds=gen_ds, loader=ri.StatefulDataLoader, workers=0, callback=True, ckpt=None,
        kill_at=None, datamodule=False, dataset_batches=False, checkpoint=None, **trainer_kw):
    """One ``trainer.fit`` (a fresh loader and model, as a new process would); returns what each
    training_step saw. Checkpoints of every step go to ``tmp_path / "ck"``."""
    ds = make_ds()
    kw = dict(batch_size=BATCH, num_workers=workers)
    if dataset_batches:
        ds, kw["batch_size"] = ds.batch(BATCH), None
    callbacks = [pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", filename="{step}", save_top_k=-1,
                                              **(checkpoint or {"every_n_train_steps": 1}))]
    if callback:
        callbacks.append(ResumableDataCallback())
    if kill_at is not None:
        callbacks.append(KillAfter(kill_at))
    model = Recorder()
    val = torch.utils.data.DataLoader([{"id": 0, "x": 0.0}] * 2, batch_size=2)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False, logger=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=callbacks, **trainer_kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if datamodule:
                class Data(pl.LightningDataModule):
                    def train_dataloader(self):
                        return loader(ds, **kw)

                    def val_dataloader(self):
                        return val

                trainer.fit(model, datamodule=Data(), ckpt_path=ckpt)
            else:
                trainer.fit(model, train_dataloaders=loader(ds, **kw), val_dataloaders=val, ckpt_path=ckpt)
        except Stop:
            pass
    return model.seen


def ckpt(tmp_path, step):
    return str(tmp_path / "ck" / f"step={step}.ckpt")


def check_resumes(tmp_path, steps, accumulate=1, resume_kw=None, **kw):
    """The uninterrupted run, then a resume from the checkpoint of each of ``steps``: the batches
    trained on after it are those of the uninterrupted run from the step after it."""
    full = fit(tmp_path, accumulate_grad_batches=accumulate, **kw)
    assert len(full) == 2 * SHARDS * ROWS // BATCH
    assert sorted(i for e, b in full if e == 0 for i in b) == sorted(i for e, b in full if e == 1 for i in b)
    assert [b for e, b in full if e == 0] != [b for e, b in full if e == 1]  # each epoch its own order
    for step in steps:
        resumed = fit(tmp_path / str(step), ckpt=ckpt(tmp_path, step), accumulate_grad_batches=accumulate,
                      **{**kw, **(resume_kw or {})})
        assert resumed == full[step * accumulate:], step
    return full


def test_resume_at_every_step(tmp_path):
    """Every cut point of two epochs: mid-epoch, the last step of epoch 0, the first of epoch 1."""
    check_resumes(tmp_path, steps=range(1, 12))


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_with_workers_across_the_epoch_boundary(tmp_path, workers):
    check_resumes(tmp_path, steps=[2, 6, 7], workers=workers)


def test_resume_persistent_workers_and_dataset_batches(tmp_path):
    check_resumes(tmp_path, steps=[3, 6], workers=2, dataset_batches=True,
                  loader=lambda ds, **kw: ri.StatefulDataLoader(ds, persistent_workers=True, **kw))


def test_resume_parquet_shards_from_a_datamodule(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    check_resumes(tmp_path, steps=[1, 6, 8], make_ds=lambda: parquet_ds(str(folder)), datamodule=True)


def test_resume_with_a_new_loader_every_epoch(tmp_path):
    """``reload_dataloaders_every_n_epochs=1``: the DataModule builds another loader each epoch.
    Resumed from an epoch's last batch, Lightning builds the next epoch's loader and reads from it
    without a hook in between: refused with an error saying so."""
    check_resumes(tmp_path, steps=[3, 8], datamodule=True, reload_dataloaders_every_n_epochs=1)
    with pytest.raises(RuntimeError, match="reload_dataloaders_every_n_epochs"):
        fit(tmp_path / "6", ckpt=ckpt(tmp_path, 6), datamodule=True, reload_dataloaders_every_n_epochs=1)


def test_resume_with_gradient_accumulation(tmp_path):
    """``accumulate_grad_batches=2``: checkpoints at optimizer steps (3 per epoch)."""
    check_resumes(tmp_path, steps=[1, 3, 4], accumulate=2)


def test_resume_with_limit_train_batches(tmp_path):
    """``limit_train_batches=4``: an epoch ends before the loader's pass does, and the next epoch
    is a new pass (the loader has a length then, and the Trainer reads no batch ahead)."""
    full = fit(tmp_path, limit_train_batches=4)
    assert len(full) == 8
    for step in (2, 4, 5):
        assert fit(tmp_path / str(step), ckpt=ckpt(tmp_path, step), limit_train_batches=4) == full[step:], step


AT_VALIDATION = {"every_n_epochs": 1, "save_on_train_epoch_end": False}  # after each validation


def test_resume_from_checkpoints_at_validation_ends(tmp_path):
    """``val_check_interval=3`` and a ModelCheckpoint that saves after each validation: mid-epoch
    (steps 3, 9) and at the epoch's end (step 6)."""
    full = fit(tmp_path, checkpoint=AT_VALIDATION, val_check_interval=3)
    assert sorted(os.listdir(tmp_path / "ck")) == ["step=12.ckpt", "step=3.ckpt", "step=6.ckpt", "step=9.ckpt"]
    for step in (3, 6, 9):
        resumed = fit(tmp_path / str(step), ckpt=ckpt(tmp_path, step), checkpoint=AT_VALIDATION, val_check_interval=3)
        assert resumed == full[step:], step


def test_resume_after_a_kill_with_another_worker_count(tmp_path):
    """A run killed after step 3 (2 workers), resumed without workers: the rest of the epoch is
    each remaining example exactly once (re-dealt, see elastic resume), then a full epoch 1 as a
    run without workers has it."""
    full = fit(tmp_path, workers=2)
    killed = fit(tmp_path / "killed", workers=2, kill_at=3)
    assert killed == full[:3]
    resumed = fit(tmp_path / "resumed", ckpt=str(tmp_path / "killed" / "ck" / "step=3.ckpt"), workers=0)
    rest0 = sorted(i for e, b in full[3:] if e == 0 for i in b)
    assert sorted(i for e, b in resumed if e == 0 for i in b) == rest0
    without_workers = fit(tmp_path / "w0", workers=0)  # epoch 1 is that of a run with the new worker count
    assert [b for e, b in resumed if e == 1] == [b for e, b in without_workers if e == 1]


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_a_run_stopped_by_max_steps(tmp_path, workers):
    """A run stopped mid-epoch by ``max_steps=4``, resumed for the full two epochs."""
    full = fit(tmp_path, workers=workers)
    assert fit(tmp_path / "stopped", workers=workers, max_steps=4) == full[:4]
    resumed = fit(tmp_path / "resumed", ckpt=str(tmp_path / "stopped" / "ck" / "step=4.ckpt"), workers=workers)
    assert resumed == full[4:]


class SaveAtEpochStart(pl.Callback):
    def __init__(self, folder):
        self.folder = folder

    def on_train_epoch_start(self, trainer, pl_module):
        trainer.save_checkpoint(str(self.folder / f"start-{trainer.current_epoch}.ckpt"))


@pytest.mark.parametrize("first", [True, False])
def test_a_checkpoint_at_an_epoch_start_marks_that_epoch(tmp_path, first):
    """A checkpoint written in on_train_epoch_start, by a callback before or after ours (Lightning's
    batch counts still describe the previous epoch then): its loader state starts that epoch in
    full. (Lightning 2.6 itself trains nothing more when resumed from such a checkpoint, with any
    loader: its epoch counters say the epoch is ready but not started; so the loader state is
    checked directly.)"""
    full = fit(tmp_path)
    saver = SaveAtEpochStart(tmp_path)
    model = Recorder()
    callbacks = [saver, ResumableDataCallback()] if first else [ResumableDataCallback(), saver]
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False, logger=False,
                         enable_model_summary=False, callbacks=callbacks, enable_checkpointing=False)
    trainer.fit(model, train_dataloaders=ri.StatefulDataLoader(gen_ds(), batch_size=BATCH))
    assert model.seen == full
    state = torch.load(tmp_path / "start-1.ckpt", weights_only=False)["loops"]["fit_loop"]["state_dict"]
    (loader_state,) = state["combined_loader"]
    assert loader_state["next_pass_epoch"] == 1
    resumed = ri.StatefulDataLoader(gen_ds(), batch_size=BATCH)
    resumed.load_state_dict(loader_state)
    assert [(1, b["id"].tolist()) for b in resumed] == full[6:]


def test_a_checkpoint_of_a_resumed_run_resumes_too(tmp_path):
    """Resumed from the end of epoch 0 (Lightning then counts epoch 1's batches on from epoch 0's
    end), checkpointed again mid-epoch 1, resumed again."""
    full = fit(tmp_path)
    first = fit(tmp_path / "a", ckpt=ckpt(tmp_path, 6))
    assert first == full[6:]
    second = fit(tmp_path / "b", ckpt=str(tmp_path / "a" / "ck" / "step=8.ckpt"))
    assert second == full[8:]


def test_one_callback_for_several_fits(tmp_path):
    """The same callback object in a run resumed from an epoch's last batch (where it counts the
    batches of the next epoch from Lightning's count at the epoch's end), then in a run resumed from
    a checkpoint written without it: nothing of the first fit leaks into the second, whose own
    checkpoints resume exactly."""
    fit(tmp_path)
    fit(tmp_path / "without", callback=False)
    callback = ResumableDataCallback()
    seen = []
    for folder, ckpt_path in ((tmp_path / "one", ckpt(tmp_path, 6)),
                              (tmp_path / "two", str(tmp_path / "without" / "ck" / "step=3.ckpt"))):
        model = Recorder()
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False, logger=False,
                             enable_model_summary=False, callbacks=[callback, pl.callbacks.ModelCheckpoint(
                                 dirpath=folder, filename="{step}", every_n_train_steps=1, save_top_k=-1)])
        trainer.fit(model, train_dataloaders=ri.StatefulDataLoader(gen_ds(), batch_size=BATCH), ckpt_path=ckpt_path)
        seen.append(model.seen)
    # the second fit began at step 3 (one batch lost: its checkpoint was Lightning's own)
    assert fit(tmp_path / "three", ckpt=str(tmp_path / "two" / "step=5.ckpt")) == seen[1][2:]
    assert fit(tmp_path / "four", ckpt=str(tmp_path / "three" / "ck" / "step=7.ckpt")) == seen[1][4:]


@pytest.mark.parametrize("step", [3, 6])
def test_resume_from_a_checkpoint_written_without_the_callback(tmp_path, caplog, step):
    """A run that adds the callback when it resumes from a checkpoint written without it: the batch
    Lightning had read ahead is lost (said in a warning), after an epoch's last batch the next epoch
    has the saved epoch's order (said too), and the checkpoints written from then on resume exactly."""
    fit(tmp_path, callback=False)
    with caplog.at_level(logging.WARNING, logger="resumable_iterable"):
        resumed = fit(tmp_path / "a", ckpt=ckpt(tmp_path, step))
    assert "written without this callback" in caplog.text
    assert len(resumed) == 12 - step - (1 if step == 3 else 0)
    later = step + 2
    assert fit(tmp_path / "b", ckpt=str(tmp_path / "a" / "ck" / f"step={later}.ckpt")) == resumed[2:]


def test_a_loader_of_another_kind_is_named(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="resumable_iterable"):
        fit(tmp_path, loader=TorchdataLoader, max_steps=1)
    assert "not a resumable_iterable.StatefulDataLoader" in caplog.text


@pytest.mark.slow
def test_two_ranks_resume_each_its_own_part(tmp_path, soak):
    """``strategy="ddp"`` on two CPU processes, each rank reading its part
    (``split_dataset_by_node``): Lightning writes rank 0's checkpoint only, so without the
    callback rank 1 was given rank 0's loader state (refused: "saved by rank 0 of 2 ... loaded in
    rank 1"). The callback gathers every rank's loader states into the checkpoint and gives each
    rank its own: resumed mid-epoch 0 and after its last batch, each rank trains on exactly what it
    did in the uninterrupted run (``--soak``: from every step). Run in a subprocess
    (``tests/lightning_ddp_driver.py``), about 20 s."""
    steps = list(range(1, 8)) if soak else [2, 4]
    driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lightning_ddp_driver.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [os.path.join(os.path.dirname(driver), "..", "src"),
                                                                   os.environ.get("PYTHONPATH", "")] if p))
    done = subprocess.run([sys.executable, driver, str(tmp_path), *map(str, steps)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    def seen(run, rank):
        with open(tmp_path / f"{run}.rank{rank}") as f:
            return [json.loads(line) for line in f]

    for rank in (0, 1):
        full = seen("full", rank)
        assert len(full) == 8 and sorted(i for e, b in full if e == 0 for i in b) != sorted(
            i for e, b in seen("full", 1 - rank) if e == 0 for i in b)
        for step in steps:
            assert seen(f"from{step}", rank) == full[step:], (rank, step)
    with pytest.raises(ValueError, match="loader states of 2 ranks, and it is resumed with 1"):
        fit(tmp_path / "one", ckpt=str(tmp_path / "full" / "step=2.ckpt"))


class TwoLoaders(Recorder):
    def training_step(self, batch, batch_idx):
        ids = torch.cat([batch["a"]["id"], batch["b"]["id"]])
        return super().training_step({"id": ids, "x": batch["a"]["x"]}, batch_idx)


def two_loaders(b_shards):
    def loaders():
        b = ri.IterableDataset.from_generator(_rows, gen_kwargs={"shards": list(range(10, 10 + b_shards))})
        b = b.shuffle(seed=1, buffer_size=3)
        return {"a": ri.StatefulDataLoader(gen_ds(), batch_size=BATCH), "b": ri.StatefulDataLoader(b, batch_size=BATCH)}
    return loaders


def fit_two(tmp_path, loaders, ckpt=None):
    model = TwoLoaders()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False, logger=False,
                         enable_model_summary=False, callbacks=[ResumableDataCallback(), pl.callbacks.ModelCheckpoint(
                             dirpath=tmp_path / "ck", filename="{step}", every_n_train_steps=1, save_top_k=-1)])
    trainer.fit(model, train_dataloaders=loaders(), ckpt_path=ckpt)
    return model.seen


def test_two_training_loaders_of_the_same_length(tmp_path):
    full = fit_two(tmp_path, two_loaders(SHARDS))
    assert len(full) == 12
    for step in (2, 6, 8):
        assert fit_two(tmp_path / str(step), two_loaders(SHARDS), ckpt=ckpt(tmp_path, step)) == full[step:], step


def test_two_training_loaders_of_different_lengths_are_refused(tmp_path):
    """Under CombinedLoader's "max_size_cycle" the shorter loader starts a new pass within the
    Trainer's epoch: its state cannot follow the Trainer's count; refused when a checkpoint is written."""
    with pytest.raises(RuntimeError, match="began a new pass within the Trainer's epoch"):
        fit_two(tmp_path, two_loaders(2))


def test_the_standalone_pytorch_lightning_package(tmp_path):
    """``import pytorch_lightning as pl`` (the package without the ``lightning`` namespace) takes
    the same callback: resumed mid-epoch and after an epoch's last batch, exactly."""
    ptl = pytest.importorskip("pytorch_lightning")

    class Model(ptl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(1, 1)
            self.seen = []

        training_step = Recorder.training_step
        configure_optimizers = Recorder.configure_optimizers

    def run(folder, ckpt_path=None):
        model = Model()
        checkpoints = ptl.callbacks.ModelCheckpoint(dirpath=folder, filename="{step}", every_n_train_steps=1,
                                                    save_top_k=-1)
        trainer = ptl.Trainer(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False, logger=False,
                              enable_model_summary=False, callbacks=[ResumableDataCallback(), checkpoints])
        trainer.fit(model, train_dataloaders=ri.StatefulDataLoader(gen_ds(), batch_size=BATCH), ckpt_path=ckpt_path)
        return model.seen

    full = run(tmp_path / "ck")
    assert full == fit(tmp_path / "lightning")
    for step in (3, 6):
        assert run(tmp_path / str(step), ckpt(tmp_path, step)) == full[step:], step


# ------------------------------------------------------------------ what Lightning does on its own


def test_without_the_callback_a_resume_skips_the_batch_read_ahead(tmp_path):
    full = fit(tmp_path, callback=False)
    for loader in (ri.StatefulDataLoader, TorchdataLoader):
        resumed = fit(tmp_path / loader.__module__, ckpt=ckpt(tmp_path, 3), callback=False, loader=loader)
        assert resumed == full[4:]  # batch 4 (full[3]) is lost


def test_a_plain_dataloader_restarts_the_epoch(tmp_path):
    """A ``torch.utils.data.DataLoader`` has no state: Lightning restarts the interrupted epoch
    from its first batch (it does not even warn, the length of an iterable dataset being unknown)."""
    full = fit(tmp_path, callback=False, loader=torch.utils.data.DataLoader)
    resumed = fit(tmp_path / "r", ckpt=ckpt(tmp_path, 3), callback=False, loader=torch.utils.data.DataLoader)
    assert resumed == [(e, b) for e, b in full if e == 0] + full[6:]
