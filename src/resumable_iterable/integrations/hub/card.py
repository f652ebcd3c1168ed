"""The ``configs`` section of a dataset card (the YAML front matter of ``README.md``): which config
to use (``name=``, else the one marked ``default``, else the one called ``default``, else the only
one) and the ``data_files`` / ``data_dir`` it declares; and the info its ``dataset_info`` declares
for that config (description, splits...), whose features HF casts the data to.
"""

from __future__ import annotations

import os
from typing import Any

from .patterns import normalize_data_files


def _card_metadata(readme: str | None) -> dict:
    if readme is None or not os.path.isfile(readme):
        return {}
    from huggingface_hub.repocard import metadata_load

    try:
        return metadata_load(readme) or {}
    except Exception as e:  # noqa: BLE001 - a broken card must not hide the data
        raise ValueError(f"cannot read the YAML header of {readme}: {e}") from None


def card_configs(readme: str | None) -> list[dict]:
    """The configs the card at ``readme`` declares (none without a card)."""
    configs = _card_metadata(readme).get("configs") or []
    return [c for c in configs if isinstance(c, dict)]


def card_config_name(readme: str | None, name: str | None) -> str:
    """The name of the config HF reads (its ``info.config_name``): ``name``, else the card's chosen
    config, else the only config the card's ``dataset_info`` describes, else ``"default"``."""
    chosen = _chosen(card_configs(readme), name)
    if chosen is not None:
        return chosen.get("config_name", "default")
    if name is not None:
        return name
    infos = _card_infos(readme)
    return next(iter(infos)) if infos is not None and len(infos) == 1 else "default"


def card_info(readme: str | None, name: str | None) -> Any:
    """The ``datasets.DatasetInfo`` the card's ``dataset_info`` gives the chosen config (``None``:
    none), read as HF reads it."""
    infos = _card_infos(readme)
    return None if infos is None else infos.get(card_config_name(readme, name))


def _card_infos(readme: str | None) -> Any:
    meta = _card_metadata(readme)
    if not meta.get("dataset_info"):
        return None
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCardData

    try:
        return DatasetInfosDict.from_dataset_card_data(DatasetCardData(**meta))
    except Exception as e:  # noqa: BLE001 - name the card, whatever HF's parser raised
        raise ValueError(f"cannot read the features of the dataset card {readme}: {e}") from None


def config_data_files(configs: list[dict], name: str | None) -> tuple[dict[str, list[str]], str | None] | None:
    """``(data_files, data_dir)`` of the chosen card config, or ``None`` when the card has none."""
    chosen = _chosen(configs, name)
    if chosen is None:
        return None
    data_files = chosen.get("data_files")
    data_dir = chosen.get("data_dir")
    if data_files is None:
        return ({}, data_dir) if data_dir else None
    if isinstance(data_files, list) and all(isinstance(e, dict) for e in data_files):
        return {str(e["split"]): e["path"] if isinstance(e["path"], list) else [e["path"]] for e in data_files}, data_dir
    return normalize_data_files(data_files), data_dir


def _chosen(configs: list[dict], name: str | None) -> dict | None:
    """The card config ``name`` picks (see the module doc), or ``None`` when the card has none."""
    if not configs:
        if name not in (None, "default"):
            raise ValueError(f"config {name!r} not found: the dataset card declares no configs")
        return None
    names = [c.get("config_name", "default") for c in configs]
    if name is None:
        chosen = next((c for c in configs if c.get("default")), None)
        if chosen is None:
            if len(configs) > 1 and "default" not in names:
                raise ValueError(f"this dataset has several configs {names}: pick one with name=...")
            chosen = configs[names.index("default")] if "default" in names else configs[0]
    else:
        if name not in names:
            raise ValueError(f"config {name!r} not found; available configs: {names}")
        chosen = configs[names.index(name)]
    return chosen
