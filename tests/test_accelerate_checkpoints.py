"""The accelerate recipe of docs/torch.md ("With accelerate"): a new folder per checkpoint, the
data state of every rank beside ``accelerator.save_state``, and a ``complete.json`` marker written
last. A job that dies at any point of a save resumes from the last complete checkpoint: the
examples and the model are those of the uninterrupted run. Saving over one folder instead mixes
the model of one step with the data state of another, which nothing in the files reveals."""

from __future__ import annotations

import glob
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")
pytest.importorskip("torchdata")
from accelerate import Accelerator  # noqa: E402
from datasets import Dataset  # noqa: E402

import resumable_iterable as ri  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

ROWS, BATCH, EPOCHS, EVERY = 24, 2, 2, 2  # 12 steps per epoch, a checkpoint every 2 steps


class Died(Exception):
    pass


def build():
    return ri.to_iterable_dataset(Dataset.from_dict({"ids": list(range(ROWS))}), num_shards=4).shuffle(
        seed=5, buffer_size=6)


def train(ckpt, die_at=None, where=None, one_folder=False):
    """The docs' loop (one process). Dies (raises) at step ``die_at`` at point ``where`` of the save.
    Returns the batches trained on and the model's weights."""
    acc = Accelerator(cpu=True)
    rank = acc.process_index
    loader = ri.StatefulDataLoader(ri.split_dataset_by_node(build(), rank=rank, world_size=acc.num_processes),
                                   batch_size=BATCH)
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    model, optimizer = acc.prepare(model, optimizer)
    step, start_epoch = 0, 0
    if one_folder:
        if os.path.exists(f"{ckpt}/one/complete.json"):
            acc.load_state(f"{ckpt}/one")
            mark = ri.load_state(f"{ckpt}/one/complete.json")
            step, start_epoch = mark["step"], mark["epoch"]
            loader.load_state_dict(ri.load_state(f"{ckpt}/one/data_state.rank{rank}.json"))
    else:
        complete = [d for d in glob.glob(f"{ckpt}/step-*") if os.path.exists(f"{d}/complete.json")]
        if complete:
            d = max(complete, key=lambda d: int(d.rsplit("-", 1)[1]))
            acc.load_state(d)
            mark = ri.load_state(f"{d}/complete.json")
            step, start_epoch = mark["step"], mark["epoch"]
            loader.load_state_dict(ri.load_state(f"{d}/data_state.rank{rank}.json"))
    seen = []
    for epoch in range(start_epoch, EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            seen.append(batch["ids"].tolist())
            loss = model(batch["ids"].float().unsqueeze(-1)).pow(2).mean()
            acc.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step % EVERY == 0:
                d = f"{ckpt}/one" if one_folder else f"{ckpt}/step-{step}"
                acc.save_state(d)
                if (die_at, where) == (step, "after the model"):
                    raise Died()
                ri.save_state(loader.state_dict(), f"{d}/data_state.rank{rank}.json")
                acc.wait_for_everyone()
                if (die_at, where) == (step, "after the data state"):
                    raise Died()
                if acc.is_main_process:
                    ri.save_state({"step": step, "epoch": epoch}, f"{d}/complete.json")
    return seen, [p.detach().tolist() for p in acc.unwrap_model(model).parameters()]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return train(str(tmp_path_factory.mktemp("full")))


# 6: mid-epoch; 12: the last batch of the first pass (the resume goes on with the second)
@pytest.mark.parametrize("die_at", [6, 12])
@pytest.mark.parametrize("where", ["after the model", "after the data state"])
def test_a_job_dying_while_it_saves_resumes_from_the_last_complete_checkpoint(tmp_path, uninterrupted, die_at,
                                                                             where):
    full, weights = uninterrupted
    ckpt = str(tmp_path)
    with pytest.raises(Died):
        train(ckpt, die_at, where)
    tail, resumed_weights = train(ckpt)  # from step die_at - EVERY: the checkpoint of die_at is incomplete
    assert full[:die_at - EVERY] + tail == full
    assert resumed_weights == weights


def test_saving_over_one_folder_mixes_two_steps(tmp_path, uninterrupted):
    """Why the docs ask for a folder per checkpoint: killed between the model and the data state, one
    folder holds the model of step 6 and the marker and data state of step 4, and the resume trains
    again on batches 5 and 6, silently."""
    full, weights = uninterrupted
    ckpt = str(tmp_path)
    with pytest.raises(Died):
        train(ckpt, 6, "after the model", one_folder=True)
    tail, resumed_weights = train(ckpt, one_folder=True)
    assert full[:4] + tail == full  # the data state of step 4, consistent with its marker...
    assert resumed_weights != weights  # ...but the model had already trained on steps 5 and 6
