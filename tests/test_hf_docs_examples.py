"""Examples of HF ``datasets``' streaming guides (``stream.mdx``, ``use_with_pytorch.mdx``,
``image_process.mdx``...) run offline against local files, with ``resumable_iterable`` swapped in
as the README says: the same examples as HF's streaming ``IterableDataset``, and exact resumes."""

from __future__ import annotations

import io
import wave

import datasets
import numpy as np
import pytest

import resumable_iterable as ri
from harness import assert_resumes_exactly, codec_roundtrip


def _png(shade: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((4, 5, 3), shade, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def _wav(tmp_path, i: int) -> str:
    path = str(tmp_path / f"a{i}.wav")
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(8000)
        f.writeframes((np.arange(100 + i) % 50).astype(np.int16).tobytes())
    return path


def _hf_streamed(files: list[str]) -> datasets.IterableDataset:
    ds = datasets.load_dataset("parquet", data_files={"train": files}, split="train", streaming=True)
    return ds


@pytest.fixture
def image_parquet(tmp_path):
    """A Parquet file of an ``Image`` column holding each image's bytes and file name (as HF's
    ``push_to_hub`` writes them)."""
    from datasets import Dataset, Image

    rows = [{"bytes": _png(10 * i), "path": f"img{i}.png"} for i in range(6)]
    path = str(tmp_path / "images.parquet")
    Dataset.from_dict({"image": rows, "i": list(range(6))}).cast_column("image", Image()).to_parquet(path)
    return path


@pytest.fixture
def audio_parquet(tmp_path):
    """A Parquet file of an ``Audio`` column of file paths (HF casts them on its Arrow path: no
    audio library needed to write it)."""
    from datasets import Audio, Dataset

    path = str(tmp_path / "audio.parquet")
    paths = [_wav(tmp_path, i) for i in range(4)]
    Dataset.from_dict({"audio": paths, "t": [f"hello {i}" for i in range(4)]}).cast_column("audio", Audio()).to_parquet(path)
    return path


@pytest.mark.parametrize("feature", ["Image(mode='L', decode=False)", "Image(mode='L')", "Image(decode=False)"])
def test_cast_column_of_a_stored_image_keeps_its_bytes_and_path_as_hf(image_parquet, feature):
    # stream.mdx / use_dataset.mdx: dataset.cast_column("image", Image(mode="RGB")); HF casts the
    # stored {bytes, path} and decodes them once with the new feature. Ours decoded them with the
    # old feature, then encoded the image again: the stored file name was lost (path None)
    from datasets import Image  # noqa: F401 - used by eval

    cast = eval(feature)
    hf = list(_hf_streamed([image_parquet]).cast_column("image", cast))
    ours = list(ri.load_dataset("parquet", data_files={"train": [image_parquet]}, split="train").cast_column("image", cast))
    if cast.decode:
        assert [(ex["image"].mode, ex["image"].tobytes(), ex["i"]) for ex in ours] == \
               [(ex["image"].mode, ex["image"].tobytes(), ex["i"]) for ex in hf]
    else:
        assert ours == hf
        assert [ex["image"]["path"] for ex in ours] == [f"img{i}.png" for i in range(6)]


def test_cast_column_audio_sampling_rate_without_decoding_as_hf(audio_parquet):
    # stream.mdx: dataset.cast_column("audio", Audio(sampling_rate=16000)); with decode=False HF
    # yields the stored {bytes, path}: ours decoded the audio first (torchcodec needed) and encoded it again
    from datasets import Audio

    cast = Audio(sampling_rate=16000, decode=False)
    hf = list(_hf_streamed([audio_parquet]).cast_column("audio", cast))
    ds = ri.load_dataset("parquet", data_files={"train": [audio_parquet]}, split="train").cast_column("audio", cast)
    assert ds.features["audio"] == cast
    assert list(ds) == hf


def test_cast_media_column_resumes_exactly(image_parquet):
    from datasets import Image

    def build():
        return (ri.load_dataset("parquet", data_files={"train": [image_parquet]}, split="train")
                .cast_column("image", Image(mode="L", decode=False)).shuffle(seed=3, buffer_size=3))

    assert_resumes_exactly(build, roundtrip=codec_roundtrip)


@pytest.mark.parametrize("kind", ["paths", "bytes"])
@pytest.mark.parametrize("source", ["to_iterable_dataset", "from_dict"])
def test_cast_column_audio_of_paths_or_bytes_without_decoding_as_hf(tmp_path, kind, source):
    # HF casts a column of file paths (or bytes) to Audio(decode=False) on its Arrow path, with no
    # audio library; ours encoded each value with Audio.encode_example, which imports torchcodec
    from datasets import Audio, Dataset

    paths = [_wav(tmp_path, i) for i in range(4)]
    values = paths if kind == "paths" else [open(p, "rb").read() for p in paths]
    cast = Audio(sampling_rate=16000, decode=False)
    if source == "to_iterable_dataset":
        hf = Dataset.from_dict({"audio": values, "i": list(range(4))}).to_iterable_dataset(num_shards=2)
        ours = ri.to_iterable_dataset(Dataset.from_dict({"audio": values, "i": list(range(4))}), num_shards=2)
    else:
        hf = datasets.IterableDataset.from_dict({"audio": values, "i": list(range(4))})
        ours = ri.IterableDataset.from_dict({"audio": values, "i": list(range(4))})
    expected = list(hf.cast_column("audio", cast))
    assert list(ours.cast_column("audio", cast)) == expected
    assert expected[0]["audio"] == ({"bytes": None, "path": paths[0]} if kind == "paths" else {"bytes": values[0], "path": None})


def test_cast_error_still_names_the_column_next_to_an_audio_column(tmp_path):
    from datasets import Audio, ClassLabel, Features

    ds = ri.IterableDataset.from_dict({"audio": [_wav(tmp_path, 0)], "label": ["nope"]})
    ds = ds.cast(Features({"audio": Audio(decode=False), "label": ClassLabel(names=["a", "b"])}))
    with pytest.raises(ValueError, match="column 'label'"):
        list(ds)


# ---------------------------------------------------------------- stream.mdx, as written there


def test_stream_guide_resume_snippet_runs_unchanged():
    # "Save a dataset checkpoint and resume iteration": the same object loads its own state
    from datasets import Dataset

    out = []
    iterable_dataset = ri.to_iterable_dataset(Dataset.from_dict({"a": range(6)}), num_shards=3)
    for idx, example in enumerate(iterable_dataset):
        out.append(example)
        if idx == 2:
            state_dict = iterable_dataset.state_dict()
            out.append("checkpoint")
            break
    iterable_dataset.load_state_dict(state_dict)
    out.append("restart from checkpoint")
    for example in iterable_dataset:
        out.append(example)
    assert out == [{"a": 0}, {"a": 1}, {"a": 2}, "checkpoint", "restart from checkpoint", {"a": 3}, {"a": 4}, {"a": 5}]


def _tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = "the a of and to in is san francisco golden".split()
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                                model_max_length=12)


@pytest.fixture
def c4_like(tmp_path):
    """JSON Lines files shaped as allenai/c4 (text, timestamp, url)."""
    import json

    words = "the a of and to in is san francisco golden".split()
    files = []
    for f in range(3):
        path = tmp_path / f"c4-train.{f:05d}.json"
        with open(path, "w") as fh:
            for j in range(40):
                k = 40 * f + j
                text = " ".join(words[(k * 7 + i) % len(words)] for i in range(3 + k % 9))
                fh.write(json.dumps({"text": text, "timestamp": f"2019-04-25 12:57:{k % 60:02d}",
                                     "url": f"https://x/{k}"}) + "\n")
        files.append(str(path))
    return files


def test_stream_guide_map_filter_and_tokenization_as_hf(c4_like):
    tokenizer = _tokenizer()

    def add_prefix(example):
        example["text"] = "My text: " + example["text"]
        return example

    def encode(examples):
        return tokenizer(examples["text"], truncation=True, padding="max_length")

    steps = {
        "map": lambda d: d.map(add_prefix, remove_columns=["timestamp", "url"]),
        "tokenize": lambda d: d.map(encode, batched=True, remove_columns=["text", "timestamp", "url"]),
        "filter_indices": lambda d: d.filter(lambda example, idx: idx % 2 == 0, with_indices=True).take(30),
        "filter_columns": lambda d: d.filter(lambda t, i: "golden" in t and i % 3 != 1, input_columns="text",
                                             with_indices=True, batched=False),
        "columns": lambda d: d.rename_column("text", "content").remove_columns("timestamp").select_columns(["url", "content"]),
        "batch": lambda d: d.select_columns(["text"]).batch(batch_size=32, drop_last_batch=True),
        "torch": lambda d: d.map(encode, batched=True, remove_columns=["text", "timestamp", "url"]).with_format("torch"),
    }
    files = {"train": c4_like}
    for name, step in steps.items():
        hf = step(datasets.load_dataset("json", data_files=files, split="train", streaming=True))
        ours = step(ri.load_dataset("json", data_files=files, split="train"))
        got, want = list(ours), list(hf)
        if name == "torch":
            got = [{k: v.tolist() for k, v in ex.items()} for ex in got]
            want = [{k: v.tolist() for k, v in ex.items()} for ex in want]
        assert got == want, name
        if name != "torch":
            assert_resumes_exactly(lambda: step(ri.load_dataset("json", data_files=files, split="train")
                                                .shuffle(seed=42, buffer_size=10)), max_cuts=8,
                                   roundtrip=codec_roundtrip)


# ------------------------------------------------- interleave / concatenate datasets of other columns


def _typed(value):
    """A value with its type, NaN comparable (dict keys in any order)."""
    if isinstance(value, dict):
        return sorted((k, _typed(v)) for k, v in value.items())
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy scalar / array, tensor
        items = value.tolist()
        return (type(value).__name__, str(value.dtype), repr(items))
    return (type(value).__name__, repr(value))


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("combine", ["interleave_datasets", "concatenate_datasets"])
def test_combined_datasets_of_other_columns_format_as_hf(fmt, combine):
    # stream.mdx: datasets of other columns are combined with the missing columns as None; HF does
    # it on its Arrow path, so formatted rows keep its Arrow types (numpy scalars, NaN for a missing
    # number). Ours filled them with a map that left the Arrow path: 0-d arrays, None
    from datasets import Dataset

    a = Dataset.from_dict({"x": [1, 2, 3, 4], "y": ["a", "b", "c", "d"]})
    b = Dataset.from_dict({"x": [10, 20, 30], "z": [0.5, 0.25, 0.125]})
    hf = getattr(datasets, combine)([b.to_iterable_dataset(), a.to_iterable_dataset()]).with_format(fmt)
    ours = getattr(ri, combine)([ri.to_iterable_dataset(b), ri.to_iterable_dataset(a)]).with_format(fmt)
    assert [_typed(ex) for ex in ours] == [_typed(ex) for ex in hf]

    def build():
        return getattr(ri, combine)([ri.to_iterable_dataset(b), ri.to_iterable_dataset(a)]).shuffle(
            seed=1, buffer_size=3).with_format(fmt)

    full = [_typed(ex) for ex in build()]
    for k in range(len(full) + 1):  # (NaN: compared by repr, not with the harness's ==)
        ds = build()
        it = iter(ds)
        head = [_typed(next(it)) for _ in range(k)]
        resumed = build()
        resumed.load_state_dict(codec_roundtrip(ds.state_dict()))
        assert head + [_typed(ex) for ex in resumed] == full, k
