"""The streaming cases of HF ``datasets``' feature tests (``tests/features/test_image.py``,
``test_audio.py``, ``test_video.py``: ``load_dataset(..., streaming=True)`` of files whose column is
an ``Image`` / ``Audio`` / ``Video``), ported to ``resumable_iterable.load_dataset``.

Upstream: https://github.com/huggingface/datasets, commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8,
files ``tests/features/test_image.py``, ``test_audio.py`` and ``test_video.py``. Test names are
upstream's; upstream's ``streaming=[False, True]`` parametrizations run as the streaming case. The
media files of upstream's ``tests/features/data`` are built here (a 640x480 RGB JPEG, a stereo
44.1 kHz WAV); the audio and video cases need ``torchcodec`` to decode, which is not installed
(upstream skips them then too), and the video file is not built. The rest of those files tests HF's
feature classes on map-style datasets (not ported; see ``docs/compat.md``).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from datasets import Audio, Features, Value, Video

import resumable_iterable as ri

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def shared_datadir(tmp_path_factory):
    """Upstream's ``tests/features/data``, built: ``test_image_rgb.jpg`` (640x480 RGB) and
    ``test_audio_44100.wav`` (2 channels, 44 100 Hz, 202 311 frames)."""
    import wave

    import PIL.Image

    d = tmp_path_factory.mktemp("features_data")
    rng = np.random.default_rng(0)
    PIL.Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)).save(d / "test_image_rgb.jpg")
    with wave.open(str(d / "test_audio_44100.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(44100)
        w.writeframes(rng.integers(-2000, 2000, (202311, 2), dtype=np.int16).tobytes())
    return d


@pytest.fixture
def img_dataset_dir(shared_datadir, tmp_path):
    data_dir = tmp_path / "dummy_img_dataset_data"
    data_dir.mkdir()
    shutil.copy(str(shared_datadir / "test_image_rgb.jpg"), str(data_dir / "image_rgb.jpg"))
    with open(data_dir / "metadata.jsonl", "w") as f:
        f.write('{"file_name": "image_rgb.jpg", "caption": "Two cats sleeping"}\n')
    return str(data_dir)


def test_load_dataset_with_image_feature(shared_datadir, img_dataset_dir):
    import PIL.Image

    image_path = os.path.join(img_dataset_dir, "image_rgb.jpg")
    dset = ri.load_dataset(img_dataset_dir, split="train", streaming=True)
    item = next(iter(dset))
    assert item.keys() == {"image", "caption"}
    assert isinstance(item["image"], PIL.Image.Image)
    assert os.path.samefile(item["image"].filename, image_path)
    assert item["image"].format == "JPEG"
    assert item["image"].size == (640, 480)
    assert item["image"].mode == "RGB"


@pytest.fixture
def jsonl_audio_dataset_path(shared_datadir, tmp_path_factory):
    audio_path = str(shared_datadir / "test_audio_44100.wav")
    data = [{"audio": audio_path, "text": "Hello world!"}]
    path = str(tmp_path_factory.mktemp("data") / "audio_dataset.jsonl")
    with open(path, "w") as f:
        for item in data:
            f.write(json.dumps(item) + "\n")
    return path


def test_load_dataset_with_audio_feature(jsonl_audio_dataset_path, shared_datadir):
    pytest.importorskip("torchcodec", reason="needs torchcodec to decode audio (upstream skips too)")
    from torchcodec.decoders import AudioDecoder

    audio_path = str(shared_datadir / "test_audio_44100.wav")
    data_files = jsonl_audio_dataset_path
    features = Features({"audio": Audio(), "text": Value("string")})
    dset = ri.load_dataset("json", split="train", data_files=data_files, features=features, streaming=True)
    item = next(iter(dset))
    assert item.keys() == {"audio", "text"}
    assert isinstance(item["audio"], AudioDecoder)
    samples = item["audio"].get_all_samples()
    assert samples.sample_rate == 44100
    assert samples.data.shape == (2, 202311)
    assert item["audio"].metadata.path == audio_path


def test_load_dataset_with_video_feature(shared_datadir, tmp_path):
    pytest.importorskip("torchcodec", reason="needs torchcodec to decode video (upstream skips too)")
    from torchcodec.decoders import VideoDecoder

    video_path = str(shared_datadir / "test_video_66x50.mov")
    if not os.path.exists(video_path):
        pytest.skip("upstream's test_video_66x50.mov is not built here")
    data_files = str(tmp_path / "video_dataset.jsonl")
    with open(data_files, "w") as f:
        f.write(json.dumps({"video": video_path, "text": "Hello world!"}) + "\n")
    features = Features({"video": Video(), "text": Value("string")})
    dset = ri.load_dataset("json", split="train", data_files=data_files, features=features, streaming=True)
    item = next(iter(dset))
    assert item.keys() == {"video", "text"}
    assert isinstance(item["video"], VideoDecoder)
    assert item["video"].get_frame_at(0).data.shape == (3, 50, 66)
    assert item["video"].metadata.path == video_path
