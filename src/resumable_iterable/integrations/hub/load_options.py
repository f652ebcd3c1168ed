"""The arguments of HF's ``load_dataset`` that say how to load rather than what (``load.py``): a
split's name (HF's ``Split`` values; slices refused, as HF's streaming refuses them), HF's
``download_mode`` / ``verification_mode`` values, and the token to read the Hub with, given
``token``, ``download_config`` and ``storage_options`` (options for the Hub's files that HF would
apply through fsspec are refused when the Hub is read, the others ignored as HF ignores them)."""

from __future__ import annotations

import os
from typing import Any

from .patterns import normalize_data_files
from .repo import is_hub_repo_id

def split_name(split: Any) -> str:
    """A split name: a string, or HF's ``datasets.Split.TRAIN``... (its name); slices are refused, as
    HF's streaming refuses them, saying what to do instead."""
    if not isinstance(split, str):
        if not type(split).__module__.startswith("datasets"):
            raise TypeError(f"split: expected a split name, or a list of them, got {split!r}")
        split = str(split)
    if "[" in split or "]" in split:
        raise ValueError(f"split={split!r}: slices of a split are not supported when streaming (HF's streaming "
                         "load_dataset refuses them too: 'Bad split'); load the split and use .take(n) / .skip(n)")
    return split


def check_mode(arg: str, value: Any) -> None:
    """HF's check of ``download_mode`` / ``verification_mode``: one of its enum's values (or ``None``)."""
    if value is None:
        return
    from datasets import DownloadMode, VerificationMode

    enum = DownloadMode if arg == "download_mode" else VerificationMode
    try:
        enum(value)
    except ValueError:
        raise ValueError(f"{arg}={value!r} is not one of {[m.value for m in enum]}") from None


def _reads_hub(path: Any, data_files: Any) -> bool:
    """Whether ``load_dataset(path, data_files=...)`` reads files of a Hub repo."""
    path = os.fspath(path)
    if path.startswith("hf://") or (is_hub_repo_id(path) and not os.path.exists(path)):
        return True
    patterns = [] if data_files is None or not isinstance(data_files, (str, os.PathLike, list, tuple, dict)) else [
        p for ps in normalize_data_files(data_files).values() for p in ps]
    return any(p.startswith("hf://") for p in patterns)


def options_token(path: Any, data_files: Any, token: Any, download_config: Any, storage_options: Any) -> Any:
    """The token to read the Hub with, given HF's ``download_config`` and ``storage_options``: HF's
    storage options by fsspec protocol (``{"hf": {...}, "s3": {...}}``; options not under a protocol
    apply to every one). Files are read locally or from the Hub through ``huggingface_hub``: options
    for other protocols are ignored (HF uses them only for files of that protocol, which are not
    read here), the ``"hf"`` token is used, and any other option HF would apply to the Hub's files
    is refused when the Hub is read rather than ignored."""
    if download_config is not None and not hasattr(download_config, "storage_options"):
        raise TypeError(f"download_config must be a datasets.DownloadConfig, got {type(download_config).__name__}")
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    if token is None and download_config is not None:
        token = download_config.token
    options = dict(download_config.storage_options) if download_config is not None else {}
    options.update(storage_options or {})
    if not options:
        return token
    import fsspec
    from datasets import config

    protocols = set(fsspec.available_protocols())
    hub = dict(options.get("hf") or {})
    if token is None:
        token = hub.get("token")
    hub.pop("token", None)
    if hub.get("endpoint") == config.HF_ENDPOINT:
        hub.pop("endpoint")
    hub.update({k: v for k, v in options.items() if k not in protocols})
    if hub and _reads_hub(path, data_files):
        raise ValueError(f"storage_options {sorted(hub)} for the Hub's files are not used here: Hub files are "
                         "downloaded with huggingface_hub (pass token=, set HF_ENDPOINT), not read through fsspec "
                         "as HF's streaming reads them")
    return token
