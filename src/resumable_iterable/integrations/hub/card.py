"""The ``configs`` section of a dataset card (the YAML front matter of ``README.md``): which config
to use (``name=``, else the one marked ``default``, else the one called ``default``, else the only
one) and the ``data_files`` / ``data_dir`` it declares.
"""

from __future__ import annotations

import os

from .patterns import normalize_data_files


def card_configs(readme: str | None) -> list[dict]:
    """The configs the card at ``readme`` declares (none without a card)."""
    if readme is None or not os.path.isfile(readme):
        return []
    from huggingface_hub.repocard import metadata_load

    try:
        meta = metadata_load(readme) or {}
    except Exception as e:  # noqa: BLE001 - a broken card must not hide the data
        raise ValueError(f"cannot read the YAML header of {readme}: {e}") from None
    configs = meta.get("configs") or []
    return [c for c in configs if isinstance(c, dict)]


def config_data_files(configs: list[dict], name: str | None) -> tuple[dict[str, list[str]], str | None] | None:
    """``(data_files, data_dir)`` of the chosen card config, or ``None`` when the card has none."""
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
    data_files = chosen.get("data_files")
    data_dir = chosen.get("data_dir")
    if data_files is None:
        return ({}, data_dir) if data_dir else None
    if isinstance(data_files, list) and all(isinstance(e, dict) for e in data_files):
        return {str(e["split"]): e["path"] if isinstance(e["path"], list) else [e["path"]] for e in data_files}, data_dir
    return normalize_data_files(data_files), data_dir
