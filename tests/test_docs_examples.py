"""Every ```python block of ``README.md`` and ``docs/*.md`` runs, as a user would copy it, so the
guide cannot silently rot.

The blocks of a page run in order in one namespace (a block may use what an earlier one built),
in a temporary working directory. What a block takes for granted - a Hub repo such as
``"user/corpus"``, files such as ``"train.jsonl"``, a ``tokenize`` function, a ``model`` - is made
by the page's set-up below, with small local data of the same kind (a Hub repo is laid out in a
Hugging Face cache and read offline), and the block itself runs unchanged. A block that cannot
run here is listed in ``SKIPPED`` by page, heading and first line, with the reason; every other
block runs, so a new example is run as soon as it is written. Every shell command (``bash``
block) is listed in ``SHELL`` with the test that runs it or why none does, and an unlisted one
fails. The outputs the pages quote (the ``resumable-iterable inspect`` reports of
``docs/cli.md``, the quickstart's prints, what the comments of docs/hub.md say each call gives,
a global shuffle's state) are compared with what the code gives."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
FENCE = re.compile(r"^(#{1,6}) ([^\n]*)$|^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore::DeprecationWarning")

# (page, heading of the section, first line of the block): why it does not run here
SKIPPED = {
    ("docs/pretraining.md", "With the transformers Trainer", "from transformers import Trainer, TrainingArguments"):
        "TrainingArguments(...) is a placeholder and the run is 100 000 steps of a real model; "
        "tests/test_pack.py trains this pipeline through the Trainer callback and resumes it",
    ("docs/trainer.md", "Use", "from transformers import Trainer, TrainingArguments"):
        "trains a real model for 100 000 steps with 4 workers; tests/test_transformers.py runs this recipe "
        "on a tiny model and resumes it from its checkpoints",
    ("docs/trainer.md", "Several processes (`torchrun`, DDP)", "args = TrainingArguments(..., per_device_train_batch_size=32,   # the global batch: split among processes"):
        "TrainingArguments(...) is a placeholder, and the setting needs several processes "
        "(tests/test_trainer_multiprocess.py)",
}


def blocks(page: str) -> list[tuple[str, str, str]]:
    """``(heading, language, code)`` of every fenced block of ``page``, in order."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    out, heading = [], ""
    for m in FENCE.finditer(text):
        if m.group(1):
            heading = m.group(2).strip()
        else:
            out.append((heading, m.group(3), m.group(4)))
    return out


def python_blocks(page: str) -> list[tuple[str, str]]:
    return [(h, code) for h, lang, code in blocks(page) if lang == "python"]


def skip_reason(page: str, heading: str, code: str) -> str | None:
    return SKIPPED.get((page, heading, code.split("\n", 1)[0]))


# the shell commands of the pages (``bash`` blocks, by page, heading and first line): what runs them
# here, or why nothing does
SHELL = {
    ("README.md", "Two commands", "make demo   # creates .venv, installs everything (CPU torch from torch==2.13.0), runs the demo"):
        "installs packages; the demo itself runs in tests/test_demo.py",
    ("docs/index.md", "Install", "make setup                    # creates .venv with every extra (CPU torch), as CI does"):
        "installs packages",
    ("docs/index.md", "Install", 'pip install -e ".[torch,transformers]"    # the extras are optional: the core needs neither'):
        "installs packages",
    ("docs/index.md", "Look inside a state", "resumable-iterable inspect state.json"):
        "test_cli_reports_are_what_the_page_shows (the same state and command)",
    ("docs/cli.md", "Inspecting a state", "resumable-iterable inspect state.json            # a readable report"):
        "test_cli_reports_are_what_the_page_shows",
    ("docs/compat.md", "Compatibility with HF `datasets`' own tests", "PYTHONPATH=src python -m pytest -m compat tests/compat"):
        "the ported suite itself (a minute); its figures are the page's table",
    ("docs/hub.md", "Hub repos, caching and offline use",
     "HF_HUB_OFFLINE=1 python -c \"import resumable_iterable as ri; print(next(iter(ri.load_dataset('user/corpus', split='train'))))\""):
        "test_the_offline_command_of_the_hub_page",
}


def test_every_listed_block_exists_and_every_command_is_listed():
    listed = {(p, h, c.split("\n", 1)[0]) for p in PAGES for h, c in python_blocks(p)}
    assert set(SKIPPED) <= listed, set(SKIPPED) - listed
    commands = {(p, h, c.split("\n", 1)[0]) for p in PAGES for h, lang, c in blocks(p) if lang in ("bash", "sh", "shell")}
    assert commands == set(SHELL), (commands - set(SHELL), set(SHELL) - commands)


# --------------------------------------------------------------------------- local stand-ins


def _write_jsonl(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _texts(lo, hi):
    return [{"text": f"document {i} " + "word " * (i % 7)} for i in range(lo, hi)]


def _write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _image(path, seed):
    import numpy as np
    from PIL import Image

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (4, 5, 3), dtype=np.uint8)).save(path)


def _hub_cache(cache, repo_id, commit, ref, files):
    """``files`` ({path in the repo: local file}) as huggingface_hub lays out a dataset repo
    downloaded at ``commit``, reached through ``refs/<ref>``, with its cached tree listing."""
    from test_hub import populate_hub_cache

    populate_hub_cache(cache, repo_id, commit, ref, files)


def setup_hub(tmp_path, monkeypatch, ns):
    """``user/corpus`` on the Hub (``main`` and tag ``v1.0``, read offline from a cache), a local
    repo-like folder, loose data files, images and zip archives, and a ``tokenize`` function."""
    import zipfile

    import huggingface_hub.constants as constants

    repo = tmp_path / "src-repo"
    files = {}
    for i in range(5):  # data/train-0000[0-3]-* picks 4 of the 5
        name = f"data/train-{i:05d}-of-00005.parquet"
        _write_parquet(str(repo / name), _texts(10 * i, 10 * i + 10))
        files[name] = str(repo / name)
    cache = str(tmp_path / "hf-cache")
    _hub_cache(cache, "user/corpus", "a" * 40, "main", files)
    _hub_cache(cache, "user/corpus", "b" * 40, "v1.0", files)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    ns["_hub_cache"] = cache
    _write_parquet("path/to/folder/train.parquet", _texts(0, 6))
    _write_parquet("path/to/folder/test.parquet", _texts(6, 9))
    _write_parquet("a.parquet", _texts(0, 3))
    _write_parquet("b.parquet", _texts(3, 5))
    os.makedirs("corpus", exist_ok=True)
    (tmp_path / "corpus" / "a.txt").write_text("one line\nanother\n")
    _write_jsonl("train.jsonl", _texts(0, 20))
    _write_jsonl("test.jsonl", _texts(20, 25))
    for split in ("train", "test"):
        for label in ("cat", "dog"):
            _image(f"path/to/images/{label}/{split}{label}.png", 1)
            _image(f"imgs/{split}/{label}/x.png", 2)
    os.makedirs("photos", exist_ok=True)
    _image("photos/a.png", 3)
    _image("photo.png", 4)
    with zipfile.ZipFile("photos/more.zip", "w") as z:
        z.write("photo.png", "b.png")
    with zipfile.ZipFile("corpus.zip", "w") as z:
        z.writestr("part1.jsonl", "".join(json.dumps(r) + "\n" for r in _texts(0, 3)))
        z.writestr("part2.jsonl", "".join(json.dumps(r) + "\n" for r in _texts(3, 5)))
    with zipfile.ZipFile("extra.zip", "w") as z:
        z.writestr("x.csv", "text\nzipped\n")
    (tmp_path / "more.csv").write_text("text\nloose\n")
    exec(textwrap.dedent("""
        def tokenize(batch):
            return {"input_ids": [[len(w) for w in t.split()] for t in batch["text"]]}
    """), ns)


def setup_pretraining(tmp_path, monkeypatch, ns):
    _write_jsonl("corpus/train.jsonl", _texts(0, 400))
    exec(textwrap.dedent("""
        class tokenizer:
            eos_token_id = 0

        def tokenize(example):
            return {"input_ids": [1 + len(w) for w in example["text"].split()] * 20}
    """), ns)


def setup_global_shuffle(tmp_path, monkeypatch, ns):
    exec(textwrap.dedent("""
        import resumable_iterable as ri
        from datasets import Dataset

        hf_dataset = Dataset.from_dict({"id": list(range(300))})
        a = ri.to_iterable_dataset(hf_dataset, num_shards=3)
        b = ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(1000, 1100))}), num_shards=2)
    """), ns)


def setup_torch(tmp_path, monkeypatch, ns):
    pytest.importorskip("torchdata")
    pytest.importorskip("accelerate")
    import torch.distributed as dist

    if not dist.is_initialized():  # "Several ranks": a process group of one
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
        ns["_own_group"] = True
    exec(textwrap.dedent("""
        import glob, os
        import numpy as np
        import torch
        from accelerate import Accelerator
        from datasets import Dataset, Features, Image
        from torch.utils.data import default_collate

        hf = Dataset.from_dict({"input_ids": [[i, i + 1, i + 2] for i in range(128)], "label": [i % 2 for i in range(128)]})
        tokenize = lambda ex: {"n": len(ex["input_ids"])}
        resuming, num_epochs = False, 1
        train_step = lambda batch: None
        mlm_collator = default_collate
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        from PIL import Image as PILImage
        hf_images = Dataset.from_dict({"image": [PILImage.new("RGB", (4, 4), (i, i, i)) for i in range(8)]},
                                      features=Features({"image": Image()}))
        augment = lambda ex: ex
    """), ns)


def before_torch_block(heading, ns):
    """What a section of docs/torch.md continues from: saved states of another worker or rank count."""
    if heading == "Another number of DataLoader workers":
        exec(textwrap.dedent("""
            _dl = ri.StatefulDataLoader(ds, batch_size=32, num_workers=4)
            _it = iter(_dl)
            next(_it)
            state = _dl.state_dict()
            del _it, _dl
        """), ns)
    elif heading == "Another number of ranks":
        exec(textwrap.dedent("""
            old_world, new_world, r = 2, 1, 0
            for _r in range(old_world):
                _dl = ri.StatefulDataLoader(ri.split_dataset_by_node(ds, rank=_r, world_size=old_world), batch_size=32,
                                            num_workers=2)
                _it = iter(_dl)
                next(_it)
                json.dump(_dl.state_dict(), open(f"data_state.rank{_r}.json", "w"))
                del _it, _dl
        """), ns)


def setup_lightning(tmp_path, monkeypatch, ns):
    pytest.importorskip("torchdata")
    pytest.importorskip("lightning")
    exec(textwrap.dedent("""
        import lightning.pytorch as pl
        import torch
        from datasets import Dataset

        hf = Dataset.from_dict({"x": [float(i) for i in range(128)]})

        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(1, 1)

            def training_step(self, batch, batch_idx):
                return (self.lin(batch["x"].float().unsqueeze(-1)) ** 2).mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=1e-6)

        model = Model()
    """), ns)


SETUP = {"docs/hub.md": setup_hub, "docs/pretraining.md": setup_pretraining,
         "docs/global-shuffle.md": setup_global_shuffle, "docs/torch.md": setup_torch,
         "docs/lightning.md": setup_lightning}
BEFORE = {"docs/torch.md": before_torch_block}


def check_global_shuffle(ns, out):
    # "## State": a global shuffle's state is a few integers
    ds = ns["ds"]
    it = iter(ds)
    for _ in range(123):
        next(it)
    state = ds.state_dict()["state"]
    assert state == {"node": "global_shuffle", "seed": 42, "epoch": 0,
                     "children": [{"node": "permuted", "pos": 123}]}, state


def check_index(ns, out):
    assert "10 batches before the checkpoint + 32 after = the uninterrupted run" in out
    assert "['checksum', 'epoch', 'fingerprint', 'format', 'pipeline', 'split', 'state', 'version']" in out
    assert "this state was saved from a different pipeline" in out


def check_hub(ns, out):
    # what the comments of the blocks say each call gives
    assert type(ns["splits"]).__name__ == "IterableDatasetDict" and list(ns["splits"]) == ["train", "test"]
    assert [ex["text"] for ex in ri_load("user/corpus", split="train")] == [r["text"] for r in _texts(0, 50)]
    assert sorted(ex["input_ids"].tolist() for ex in ns["train"]) == sorted(  # tokenized, shuffled, as torch
        [len(w) for w in r["text"].split()] for r in _texts(0, 20))
    assert ns["part"].num_shards == 4 and len(list(ns["part"])) == 40
    assert len(list(ns["old"])) == len(list(ns["same"])) == 50
    assert [ex["text"] for ex in ns["files"]] == [r["text"] for r in _texts(0, 5)]
    assert list(ns["lines"]) == [{"text": "one line"}, {"text": "another"}]
    assert isinstance(ns["state"], dict)
    assert [ex["text"] for ex in ri_load("json", data_files="corpus.zip", split="train")] == [r["text"] for r in _texts(0, 5)]
    assert [ex["text"] for ex in ri_load("csv", data_files=["extra.zip", "more.csv"], split="train")] == ["zipped", "loose"]
    assert sum(1 for _ in ns["ds"]["train"]) == 2  # photos/a.png and photos/more.zip's b.png
    assert type(ns["prep"]).__name__ == "IterableDataset" and ns["prep"].num_shards == 4
    assert [ex["id"] for ex in ns["prep"]] == [i for i in range(100) if i % 3 != 0]
    assert type(ns["both"]).__name__ == "IterableDatasetDict" and list(ns["both"]) == ["train", "test"]


def ri_load(*args, **kwargs):
    import resumable_iterable as ri

    return ri.load_dataset(*args, **kwargs)


def check_pretraining(ns, out):
    chunks = list(ns["train"])
    assert len(chunks) > 2 and all(sorted(c) == ["input_ids", "position_ids"] for c in chunks)
    assert all(len(c["input_ids"]) == len(c["position_ids"]) == 2048 for c in chunks[:-1])


CHECKS = {"docs/global-shuffle.md": check_global_shuffle, "docs/index.md": check_index, "docs/hub.md": check_hub,
          "docs/pretraining.md": check_pretraining}


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)])
def test_page_runs(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the examples write and read files in the working directory
    ns: dict = {"__name__": "__main__"}
    if page in SETUP:
        SETUP[page](tmp_path, monkeypatch, ns)
    try:
        for i, (heading, code) in enumerate(python_blocks(page)):
            if skip_reason(page, heading, code):
                continue
            if page in BEFORE:
                BEFORE[page](heading, ns)
            try:
                exec(compile(code, f"{page}[block {i}, {heading}]", "exec"), ns)
            except Exception as e:  # noqa: BLE001 - name the block that failed
                raise AssertionError(f"{page}: block {i} under {heading!r} failed: {type(e).__name__}: {e}\n{code}") from e
        if page in CHECKS:
            CHECKS[page](ns, capsys.readouterr().out)
    finally:
        if ns.get("_own_group"):
            import torch.distributed as dist

            dist.destroy_process_group()


# --------------------------------------------------------------------------- docs/cli.md, as quoted


def inspect_cli(*args, cwd):
    """``resumable-iterable inspect ARGS`` run in ``cwd``: the console script's ``main``, in this process."""
    import contextlib
    import io

    from resumable_iterable.cli import main

    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["inspect", *args])
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def quoted(page: str, heading: str, lang: str = "text") -> list[str]:
    return [code for h, la, code in blocks(page) if h == heading and la == lang]


def quickstart_state(tmp_path, monkeypatch):
    """``state.json`` as the quickstart of docs/index.md saves it (after 10 batches)."""
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__main__"}
    for _, code in python_blocks("docs/index.md")[:2]:
        exec(code, ns)
    return tmp_path / "state.json"


def test_cli_reports_are_what_the_page_shows(tmp_path, monkeypatch):
    quickstart_state(tmp_path, monkeypatch)
    # "## A pipeline state": the quickstart's state, verbatim
    out = inspect_cli("state.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == quoted("docs/cli.md", "A pipeline state")[0]
    # the commands of the first block (the console script is the same main as ``python -m``)
    cmds = [c for c in quoted("docs/cli.md", "Inspecting a state", "bash")[0].splitlines() if c.strip()]
    assert [c.split("#")[0].split() for c in cmds] == [
        ["resumable-iterable", "inspect", "state.json"], ["resumable-iterable", "inspect", "state.json", "--json"],
        ["python", "-m", "resumable_iterable", "inspect", "state.json"]]
    with open(os.path.join(ROOT, "setup.cfg"), encoding="utf-8") as f:
        assert "resumable-iterable = resumable_iterable.cli:main" in f.read()
    # "## JSON output": the keys and the source entry quoted
    report = json.loads(inspect_cli("state.json", "--json", cwd=tmp_path).stdout)
    assert sorted(report) == sorted(["file", "kind", "info", "loaders", "states", "problems"])
    assert {"path", "label", "epoch", "fingerprint", "split", "tree"} <= set(report["states"][0])
    node = report["states"][0]["tree"]
    assert {"node", "params", "state", "children"} <= set(node)
    shuffle = node["children"][0]
    assert sorted(shuffle["buffer"]) == sorted(["fill", "size", "stored", "draining"])
    source = shuffle["children"][0]["children"][0]["children"][0]["source"]
    shown = json.loads("{" + quoted("docs/cli.md", "JSON output", "json")[0].replace(", ...]", "]") + "}")["source"]
    assert {k: source[k] for k in shown if k != "shards"} == {k: v for k, v in shown.items() if k != "shards"}
    assert source["shards"][:len(shown["shards"])] == shown["shards"]
    # "## Errors": a truncated file, and an edited one that inspect shows but load_state_dict would refuse
    (tmp_path / "truncated.json").write_text((tmp_path / "state.json").read_text()[:5000])
    (cmd, expected), (cmd2, expected2) = [c.strip().splitlines() for c in quoted("docs/cli.md", "Errors")]
    out = inspect_cli("truncated.json", cwd=tmp_path)
    assert cmd == "$ resumable-iterable inspect truncated.json"
    assert (out.returncode, out.stdout, out.stderr.strip()) == (1, "", expected)
    import resumable_iterable as ri
    from datasets import Dataset

    ds = ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(200))}), num_shards=4).shuffle(seed=1, buffer_size=16)
    it = iter(ds)
    for _ in range(20):
        next(it)
    state = ds.state_dict()
    state["state"]["children"][0]["offset"] = 1_000_000_000
    (tmp_path / "edited.json").write_text(json.dumps(state))
    out = inspect_cli("edited.json", cwd=tmp_path)
    assert cmd2 == "$ resumable-iterable inspect edited.json > /dev/null"
    assert (out.returncode, out.stderr.strip()) == (1, expected2) and out.stdout


def test_cli_loader_report_is_what_the_page_shows(tmp_path):
    pytest.importorskip("torchdata")
    import resumable_iterable as ri
    from datasets import Dataset
    from torchdata.stateful_dataloader import StatefulDataLoader

    # "## A DataLoader state": the setting the page describes
    ds = ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(200))}), num_shards=4).shuffle(
        seed=1, buffer_size=16, buffer_state="replay")
    dl = StatefulDataLoader(ds, batch_size=4, num_workers=2)
    it = iter(dl)
    for _ in range(10):
        next(it)
    ri.save_state(dl.state_dict(), str(tmp_path / "loader.json"))
    del it
    out = inspect_cli("loader.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    shown = quoted("docs/cli.md", "A DataLoader state")[0]
    assert shown.endswith("\n...\n")
    assert out.stdout.startswith(shown[:-len("...\n")])


def test_the_offline_command_of_the_hub_page(tmp_path, monkeypatch):
    """docs/hub.md: ``HF_HUB_OFFLINE=1 python -c ...`` reads ``user/corpus`` from the cache."""
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    setup_hub(tmp_path, monkeypatch, ns)
    (cmd,) = quoted("docs/hub.md", "Hub repos, caching and offline use", "bash")
    assignment, python, flag, code = shlex.split(cmd.strip())
    assert (assignment, python, flag) == ("HF_HUB_OFFLINE=1", "python", "-c")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=ns["_hub_cache"], HF_ENDPOINT="http://127.0.0.1:9",
               HF_HOME=str(tmp_path / "hf-home"),
               PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr({"text": "document 0 "})


# --------------------------------------------------------------------------- recipes given inline in the prose


def test_inline_recipes_work_as_written(tmp_path):
    """Recipes the pages give in a sentence, not a block: each is quoted from its page (so an edit of
    the page shows here) and run as a user would fill it in."""
    import resumable_iterable as ri
    from datasets import Dataset, Features, Value
    from datasets import Image as ImageFeature
    from PIL import Image

    def page(name):
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            return " ".join(f.read().split())

    # docs/torch.md, "Large examples ...": a map that does not need the pixels, between files and the shuffle
    assert "`ds.decode(False).map(f, features=...).shuffle(...).decode()`" in page("docs/torch.md")
    hf_images = Dataset.from_dict({"image": [Image.new("RGB", (4, 4), (i, i, i)) for i in range(6)], "id": list(range(6))},
                                  features=Features({"image": ImageFeature(), "id": Value("int64")}))
    ds = ri.to_iterable_dataset(hf_images, num_shards=2)

    def f(ex):
        return {"label": ex["id"] % 2}

    out = list(ds.decode(False).map(f, features=Features({**ds.features, "label": Value("int64")}))
               .shuffle(seed=0, buffer_size=4).decode())
    assert sorted(ex["id"] for ex in out) == list(range(6))
    assert all(isinstance(ex["image"], Image.Image) and ex["label"] == ex["id"] % 2 for ex in out)
    with pytest.raises(ValueError, match="features"):  # what the sentence warns of, as in HF
        ds.decode(False).map(f).shuffle(seed=0, buffer_size=4).decode()

    # docs/global-shuffle.md, "Buffer or global?": both shuffles combined are valid
    assert "`ds.shuffle(seed=1, buffer_size=None).shuffle(seed=2, buffer_size=100)` is valid" in page("docs/global-shuffle.md")
    ds = ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(50))}), num_shards=2)
    assert sorted(ex["id"] for ex in ds.shuffle(seed=1, buffer_size=None).shuffle(seed=2, buffer_size=100)) == list(range(50))
