"""The shapes users give a seeded collator in: ``collate_fn=lambda b: collator(b)``, a closure, a
default argument, a global the function reads, a bound method of their own class holding the
collator, a callable object with it in some attribute (two levels deep too), a ``torch`` / numpy
``Generator`` held directly, and several generators at once. ``save_worker_rng=True`` finds the
generators in all of them without calling anything and saves them with the data state: the
draws after a resume at every cut (JSON round-trip, 0 and 2 workers, the Trainer callback) are the
uninterrupted run's. What it cannot save (a numpy ``MT19937`` Generator, a ``random.Random``) and a
seeded collator with ``save_worker_rng=False`` are named in a ``CollatorRngWarning``."""

from __future__ import annotations

import copy
import gc
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("torchdata")
pytest.importorskip("accelerate")
pytest.importorskip("tokenizers")

import resumable_iterable as ri  # noqa: E402
from harness import json_roundtrip  # noqa: E402
from resumable_iterable.integrations.torch import CollatorRngWarning  # noqa: E402
from resumable_iterable.integrations.torch.worker_rng import CollatorRng  # noqa: E402
from resumable_iterable.integrations.transformers import ResumableDataCallback  # noqa: E402
from test_collator_rng import WIDTH, build, collator_entries, mlm, plain, rows, run_with_states  # noqa: E402
from trainer_support import Crash, CrashAfterSave, Recorder  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")]


def ids_of(batch: list) -> torch.Tensor:
    return torch.tensor([r["input_ids"] for r in batch])


def masked(ids: torch.Tensor, draws: torch.Tensor) -> dict:
    ids = ids.clone()
    ids[draws < 0.3] = 1  # [MASK]
    return {"input_ids": ids}


# ---------------------------------------------------------------------------- the shapes (fresh each call)

GLOBAL_MLM = mlm()


def global_collate(batch):
    return GLOBAL_MLM(batch)


def by_global():
    GLOBAL_MLM.generator = None  # as in a new process: made from its seed at its first batch
    return global_collate


class ReadsAGlobal:
    """A callable object whose __call__ reads the collator from its module."""

    def __call__(self, batch):
        return GLOBAL_MLM(batch)


def by_call_reading_a_global():
    GLOBAL_MLM.generator = None
    return ReadsAGlobal()


def by_lambda():
    collator = mlm()
    return lambda b: collator(b)


def by_closure():
    collator = mlm()

    def collate(batch):
        out = collator(batch, return_tensors="pt")
        return {"input_ids": out["input_ids"], "labels": out["labels"]}
    return collate


def by_default_argument():
    def collate(batch, collator=mlm()):
        return collator(batch)
    return collate


class Pipeline:
    """The user's own class: a method of it is the collate_fn."""

    def __init__(self):
        self.tokenizer_name = "w"
        self.collator = mlm()

    def collate(self, batch):
        return self.collator(batch)


class Collate:
    """A callable object with the collator in an attribute of its own name."""

    def __init__(self):
        self.mlm_collator = mlm()
        self.width = WIDTH

    def __call__(self, batch):
        return self.mlm_collator(batch)


class Parts:
    def __init__(self):
        self.masker = mlm()


class Deep:
    """The collator two attributes deep."""

    def __init__(self):
        self.parts = Parts()

    def __call__(self, batch):
        return self.parts.masker(batch)


def by_torch_generator():
    gen = torch.Generator().manual_seed(7)

    def collate(batch):
        ids = ids_of(batch)
        return masked(ids, torch.rand(ids.shape, generator=gen))
    return collate


def by_dict_of_generators():
    rngs = {"mask": torch.Generator().manual_seed(3), "name": "masking"}

    def collate(batch):
        ids = ids_of(batch)
        return masked(ids, torch.rand(ids.shape, generator=rngs["mask"]))
    return collate


class NumpyNoise:
    """Its own numpy generator, under a name of its own."""

    def __init__(self):
        self.rng = np.random.default_rng(11)

    def __call__(self, batch):
        ids = ids_of(batch)
        return masked(ids, torch.from_numpy(self.rng.random(tuple(ids.shape))))


class Several:
    """An MLM collator and a numpy generator that shuffles the rows of each batch."""

    def __init__(self):
        self.collator = mlm()
        self.rng = np.random.default_rng(4)

    def __call__(self, batch):
        out = self.collator(batch)
        order = torch.from_numpy(self.rng.permutation(len(batch)))
        return {k: v[order] for k, v in out.items()}


SHAPES = {"lambda": by_lambda, "closure": by_closure, "default argument": by_default_argument,
          "global": by_global, "__call__ reads a global": by_call_reading_a_global, "bound method": lambda: Pipeline().collate, "callable object": Collate,
          "two levels deep": Deep, "torch generator": by_torch_generator, "in a dict": by_dict_of_generators,
          "numpy generator": NumpyNoise,
          "several": Several}


def loader(shape: str, workers: int, save: bool = True) -> ri.StatefulDataLoader:
    return ri.StatefulDataLoader(build(), batch_size=3, num_workers=workers, collate_fn=SHAPES[shape](),
                                 save_worker_rng=save)


# ---------------------------------------------------------------------------- our loader


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_cut_resumes_the_draws_of_each_shape(shape, workers, soak):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CollatorRngWarning)  # found and saved: nothing to warn about
        full, states = run_with_states(loader(shape, workers))
    entries = collator_entries(states[-1])
    assert all(e is not None for e in entries)
    if shape == "several":
        assert all(set(e) == {"several"} and len(e["several"]) == 2 for e in entries)
    cuts = range(len(states)) if workers == 0 or soak else (0, 3, len(states) - 2)  # every cut with --soak
    for k in cuts:
        dl = loader(shape, workers)
        dl.load_state_dict(json_roundtrip(states[k]))
        assert [plain(b) for b in dl] == full[k + 1:], f"{shape}, {workers} workers: cut after batch {k}"


@pytest.mark.slow  # a spawned worker imports torch and transformers afresh: 20-25 s each; run by `make soak`
@pytest.mark.parametrize("shape", ["global", "bound method", "several"])
def test_spawned_workers_find_the_generators_of_their_own_collate_fn(shape, soak):
    """A spawned worker unpickles the collate_fn and its wrapper together: the generators it sets
    back are those its collate_fn draws from (a global: its own module's)."""
    if not soak:
        pytest.skip("spawn start method: slow, runs with --soak (make soak)")

    def make():
        return ri.StatefulDataLoader(build(), batch_size=3, num_workers=2, collate_fn=SHAPES[shape](),
                                     save_worker_rng=True, multiprocessing_context="spawn")

    full, states = run_with_states(make())
    dl = make()
    dl.load_state_dict(states[4])
    assert [plain(b) for b in dl] == full[5:]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_without_save_worker_rng_the_user_is_told_once_what_to_do(shape):
    with pytest.warns(CollatorRngWarning, match="save_worker_rng=False does not save.*Pass save_worker_rng=True") as rec:
        loader(shape, 0, save=False)
    ours = [str(w.message) for w in rec if issubclass(w.category, CollatorRngWarning)]
    assert len(ours) == 1
    message = ours[0]
    if shape in ("lambda", "closure", "torch generator"):
        assert "closure variable" in message
    if shape == "two levels deep":
        assert "Deep.parts.masker" in message
    if shape == "global":
        assert "global 'GLOBAL_MLM'" in message


def test_nothing_to_warn_about_for_a_collate_fn_without_a_generator_of_its_own():
    unseeded = transformers.DataCollatorForLanguageModeling(mlm().tokenizer)  # draws from torch's global generator
    with warnings.catch_warnings():
        warnings.simplefilter("error", CollatorRngWarning)
        for collate_fn in (None, unseeded, lambda b: unseeded(b), lambda b: b):
            ri.StatefulDataLoader(build(), batch_size=3, collate_fn=collate_fn)
            dl = ri.StatefulDataLoader(build(), batch_size=3, collate_fn=collate_fn, save_worker_rng=True)
            assert not isinstance(dl.collate_fn, CollatorRng)


class Unsaveable:
    def __init__(self, rng):
        self.rng = rng

    def __call__(self, batch):
        ids = ids_of(batch)
        return masked(ids, torch.tensor(np.asarray([[self.rng.random() for _ in r] for r in ids.tolist()])))


@pytest.mark.parametrize("rng,named", [(np.random.Generator(np.random.MT19937(1)), "numpy Generator of MT19937"),
                                       (np.random.RandomState(1), "numpy.random.mtrand.RandomState"),
                                       (__import__("random").Random(1), "random.Random")])
def test_a_generator_that_cannot_be_saved_is_named_in_a_warning(rng, named):
    with pytest.warns(CollatorRngWarning, match=rf"cannot save .*Unsaveable\.rng: a {named}"):
        dl = ri.StatefulDataLoader(build(), batch_size=3, collate_fn=Unsaveable(copy.deepcopy(rng)), save_worker_rng=True)
    assert not isinstance(dl.collate_fn, CollatorRng)
    assert len(run_with_states(dl)[0]) == 10  # iterates as before; nothing of it in the state


class Deeper:
    def __init__(self):
        self.inner = Deep()

    def collate(self, batch):
        return self.inner.parts.masker(batch)


def test_a_collator_deeper_than_the_search_saves_is_named_in_a_warning():
    with pytest.warns(CollatorRngWarning, match=r"cannot save .*Deeper.collate.__self__.inner.parts.masker: 4 references "
                                                r"from the collate_fn, deeper than the 3"):
        dl = ri.StatefulDataLoader(build(), batch_size=3, collate_fn=Deeper().collate, save_worker_rng=True)
    assert not isinstance(dl.collate_fn, CollatorRng)


def test_one_generator_reached_by_two_paths_counts_once():
    pipe = Pipeline()
    pipe.again = pipe.collator
    dl = ri.StatefulDataLoader(build(), batch_size=3, collate_fn=lambda b: pipe.collate(b), save_worker_rng=True)
    assert isinstance(dl.collate_fn, CollatorRng) and len(dl.collate_fn.targets) == 1


class WithData(Pipeline):
    """Holds the datasets too: their shuffles' generators are the data's, not the collator's."""

    def __init__(self):
        super().__init__()
        datasets = pytest.importorskip("datasets")
        self.ours = build()
        self.hf = datasets.Dataset.from_dict(rows(6)).to_iterable_dataset().shuffle(seed=1, buffer_size=2)
        self.both = [self.ours, self.hf]


def test_the_generators_of_datasets_within_reach_are_left_alone():
    dl = ri.StatefulDataLoader(build(), batch_size=3, collate_fn=WithData().collate, save_worker_rng=True)
    assert [slot.path for _, slot in dl.collate_fn.targets] == ["Pipeline.collate.__self__.collator"]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_of_another_number_of_generators_is_refused_when_loaded(workers):
    _, states = run_with_states(loader("several", workers))
    dl = loader("callable object", workers)
    with pytest.raises(ValueError, match=r"holds 2 generator\(s\) of the collate_fn, but it now draws from 1 "
                                         r"\(Collate.mlm_collator\)"):
        dl.load_state_dict(states[2])
    assert len([plain(b) for b in dl]) == 10  # nothing of it was applied: a whole pass
    if workers == 0:
        with pytest.raises(ValueError, match=r"holds 2 generator\(s\)"):  # given to the dataset itself
            dl.dataset.load_state_dict(states[2]["dataset_state"])
        bad = copy.deepcopy(states[2])
        bad["dataset_state"]["rng"]["collator"]["several"] = [None]
        with pytest.raises(ValueError, match="'several' must be a list of two or more entries"):
            loader("several", 0).load_state_dict(bad)


# ---------------------------------------------------------------------------- the Trainer

BATCH, STEPS = 3, 14  # 10 batches a pass: the run crosses a pass end


def trainer(out, shape, workers, save_steps=1000):
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=BATCH, save_steps=save_steps,
        dataloader_num_workers=workers, dataloader_persistent_workers=workers > 0, report_to="none", use_cpu=True,
        logging_strategy="no", remove_unused_columns=False, disable_tqdm=True)
    model = Recorder(width=WIDTH)  # records the masked input_ids it is fed
    t = transformers.Trainer(model=model, args=args, train_dataset=build(), data_collator=SHAPES[shape]())
    ResumableDataCallback.attach(t, save_worker_rng=True)
    return t, model


TRAINER_CASES = [(s, w, c) for s in ("lambda", "bound method", "torch generator", "several") for w in (0, 2)
                 for c in (4, 10, 12)]
TRAINER_CASES += [("closure", w, c) for w in (0, 2) for c in range(1, STEPS)]  # every cut (--soak)
FAST = {("lambda", 2, 4), ("bound method", 0, 10), ("torch generator", 2, 12), ("several", 0, 4)}


@pytest.mark.slow  # four of the 50 in CI (about 3 s each), all with --soak
@pytest.mark.parametrize("shape,workers,crash_at", TRAINER_CASES)
def test_a_trainer_resumed_draws_as_the_uninterrupted_run(tmp_path, shape, workers, crash_at, soak):
    """Crashed mid-pass (4), at the pass end (10) and in the second pass (12) - a closure at every
    step - and resumed from the checkpoint (the data state is JSON in it): the model is fed the
    uninterrupted run's masked input_ids to the end."""
    if not soak and (shape, workers, crash_at) not in FAST:
        pytest.skip("more shapes and cuts: run with --soak (make soak)")
    a, model_a = trainer(tmp_path / "a", shape, workers)
    a.train()
    b, model_b = trainer(tmp_path / "b", shape, workers, save_steps=crash_at)
    b.add_callback(CrashAfterSave(crash_at))
    with pytest.raises(Crash):
        b.train()
    del b
    gc.collect()
    c, model_c = trainer(tmp_path / "b", shape, workers)
    c.train(resume_from_checkpoint=str(tmp_path / "b" / f"checkpoint-{crash_at}"))
    assert model_b.seen + model_c.seen == model_a.seen


def test_the_trainer_callback_without_save_worker_rng_tells_the_user(tmp_path):
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=BATCH,
                                          report_to="none", use_cpu=True, logging_strategy="no", save_strategy="no",
                                          remove_unused_columns=False, disable_tqdm=True)
    t = transformers.Trainer(model=Recorder(width=WIDTH), args=args, train_dataset=build(),
                             data_collator=SHAPES["bound method"]())
    ResumableDataCallback.attach(t)
    with pytest.warns(CollatorRngWarning, match=r"ResumableDataCallback: .*Pipeline.collate.*"
                                                r"attach\(trainer, save_worker_rng=True\)"):
        t.train()
