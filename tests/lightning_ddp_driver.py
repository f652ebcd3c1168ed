"""Run by tests/test_lightning.py in a subprocess: a Lightning Trainer with two CPU processes
(``strategy="ddp"``, which launches this script again as rank 1), each rank reading its part of a
``resumable_iterable`` dataset through ``ri.StatefulDataLoader``. One uninterrupted run saves a
checkpoint at every step; then a run resumed from each step given. Each rank writes what each of
its training steps saw, one JSON line per step, to ``<out>/<run>.rank<r>``.

Usage: python lightning_ddp_driver.py OUT STEP [STEP ...]"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import lightning.pytorch as pl

import resumable_iterable as ri
from resumable_iterable.integrations.lightning import ResumableDataCallback

warnings.filterwarnings("ignore")
OUT, STEPS = sys.argv[1], [int(s) for s in sys.argv[2:]]


def rows(shards):
    for s in shards:
        for i in range(6):
            yield {"id": s * 100 + i}


class Data(pl.LightningDataModule):
    def train_dataloader(self):
        ds = ri.IterableDataset.from_generator(rows, gen_kwargs={"shards": list(range(4))})
        ds = ri.split_dataset_by_node(ds.shuffle(seed=7, buffer_size=5), rank=self.trainer.global_rank,
                                      world_size=self.trainer.world_size)
        return ri.StatefulDataLoader(ds, batch_size=3)


class Model(pl.LightningModule):
    def __init__(self, run):
        super().__init__()
        self.lin = torch.nn.Linear(1, 1)
        self.run = run

    def training_step(self, batch, batch_idx):
        with open(os.path.join(OUT, f"{self.run}.rank{self.global_rank}"), "a") as f:
            f.write(json.dumps([self.current_epoch, batch["id"].tolist()]) + "\n")
        return (self.lin(batch["id"].float().unsqueeze(-1)) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-9)


def fit(run, ckpt=None):
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=os.path.join(OUT, run), filename="{step}",
                                               every_n_train_steps=1, save_top_k=-1)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, enable_progress_bar=False,
                         logger=False, enable_model_summary=False, callbacks=[ResumableDataCallback(), checkpoints])
    trainer.fit(Model(run), datamodule=Data(), ckpt_path=ckpt)


if __name__ == "__main__":
    fit("full")
    for step in STEPS:
        fit(f"from{step}", os.path.join(OUT, "full", f"step={step}.ckpt"))
