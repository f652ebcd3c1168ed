"""Which of HF's folder builders reads a folder (``load_dataset(folder)`` without a builder named):
HF counts the extensions of each split's files (metadata files aside; ties go to Parquet, ...,
CSV, then by name) and picks ``imagefolder`` when the most common is an image extension, or is
``.zip`` and the most common extension of the files in the split's first archives is. The files
each folder builder reads (``FOLDER_BUILDERS``, ``METADATA_FILENAMES``) are named here too; reading
such a folder is ``folder.py``."""

from __future__ import annotations

from typing import Any

from ...nodes.archives import zip_members
from .splits import is_candidate, infer_splits

METADATA_FILENAMES = ("metadata.csv", "metadata.jsonl", "metadata.parquet")
#: the zip archives of a split whose files HF counts to choose its builder
#: (``config.ARCHIVES_MAX_NUMBER_FOR_MODULE_INFERENCE``)
ARCHIVES_LOOKED_INTO = 10

# HF's ImageFolder.EXTENSIONS: the extensions Pillow opens (fixed, so that the files chosen do
# not depend on the Pillow installed)
IMAGE_EXTENSIONS = frozenset((
    ".blp", ".bmp", ".dib", ".bufr", ".cur", ".pcx", ".dcx", ".dds", ".ps", ".eps", ".fit", ".fits", ".fli",
    ".flc", ".ftc", ".ftu", ".gbr", ".gif", ".grib", ".png", ".apng", ".jp2", ".j2k", ".jpc", ".jpf", ".jpx",
    ".j2c", ".icns", ".ico", ".im", ".iim", ".tif", ".tiff", ".jfif", ".jpe", ".jpg", ".jpeg", ".mpg", ".mpeg",
    ".msp", ".pcd", ".pxr", ".pbm", ".pgm", ".ppm", ".pnm", ".psd", ".bw", ".rgb", ".rgba", ".sgi", ".ras",
    ".tga", ".icb", ".vda", ".vst", ".webp", ".wmf", ".emf", ".xbm", ".xpm",
))

#: the folder builders read here: name -> (base column, HF feature class name, extensions)
FOLDER_BUILDERS = {"imagefolder": ("image", "Image", IMAGE_EXTENSIONS)}

# the extensions by which HF picks a builder other than imagefolder for a folder (HF's
# ``_EXTENSION_TO_MODULE``; ".mpg" and ".mpeg" go to its audio and video builders)
_AUDIO_VIDEO = (".3g2 .3gp .aiff .asf .au .avr .caf .f4v .flac .flv .htk .ircam .m4v .mat4 .mat5 .mp3 .mpc2k "
                ".mpg .mxf .nist .nut .ogg .ogm .opus .paf .pvf .raw .rf64 .sd2 .sds .svx .voc .w64 .wav .wavex "
                ".webm .wma .wmv .wve .xi .avi .mkv .mov .mp4 .mpeg")
_OTHER_BUILDER_EXTENSIONS = frozenset((
    ".csv .tsv .json .jsonl .ndjson .geoparquet .gpq .parquet .arrow .txt .conll .conllu .tar .xml .h5 .hdf5 "
    ".eval .md .toml .lance .tsfile .vortex .afa .fa .faa .fasta .ffn .fna .frn .gb .gbk .genbank .fastq .fq "
    ".ent .pdb .cif .mmcif .glb .gltf .ply .stl .pdf .nii .zip " + _AUDIO_VIDEO).split())
_PREFERRED = (".parquet", ".lance", ".vortex", ".arrow", ".jsonl", ".json", ".csv")


def builder_of(files: list[str], members: Any = None) -> str | None:
    """``"imagefolder"`` when HF's ``load_dataset(folder)`` reads ``files`` (the files of a split)
    with its imagefolder builder: their most common extension (metadata files aside; ties go to
    Parquet, ..., CSV, then by name) is an image extension, or is ``.zip`` and the most common
    extension of the files in the archives is (``members(zips)``: their names; ``None``: not
    looked into). ``None`` otherwise."""
    counts: dict[tuple[str, bool], int] = {}
    for f in files:
        name = f.rsplit("/", 1)[-1]
        for suffix in name.split(".")[1:]:
            k = ("." + suffix.lower(), name in METADATA_FILENAMES)
            counts[k] = counts.get(k, 0) + 1

    def rank(item):
        (ext, is_metadata), count = item
        return (not is_metadata, count, *(ext == p for p in _PREFERRED), ext)

    for (ext, _), _ in sorted(counts.items(), key=rank, reverse=True):
        if ext == ".zip" and members is not None:  # HF looks into the archives
            return _archives_builder(members([f for f in files if f.lower().endswith(".zip")]))
        if ext in _OTHER_BUILDER_EXTENSIONS:
            return None
        if ext in IMAGE_EXTENSIONS:
            return "imagefolder"
    return None


def _archives_builder(names: list[str]) -> str | None:
    """``"imagefolder"`` when the most common extension of the files in a split's archives (HF's
    count: every suffix of each name) is an image extension."""
    counts: dict[str, int] = {}
    for name in names:
        for suffix in name.rsplit("/", 1)[-1].split(".")[1:]:
            counts["." + suffix.lower()] = counts.get("." + suffix.lower(), 0) + 1
    if not counts:
        return None
    top = max(counts.values())
    ext = next(e for e, n in counts.items() if n == top)  # HF's Counter.most_common: the first seen
    return "imagefolder" if ext in IMAGE_EXTENSIONS else None


def folder_builder(files: list[str], data_dir: str | None, locate: Any = None) -> str | None:
    """The folder builder that HF would read a folder with (its files ``files``, posix, relative),
    found without ``data_files`` nor a dataset card config: the same for every split, else ``None``.
    ``locate``: a function giving the local paths of files (a list of them, relative to the folder or
    repo), by which a split's zip archives are looked into as HF does: the first
    ``ARCHIVES_LOOKED_INTO`` of them, downloaded from a Hub repo (``None``: not looked into)."""
    prefix = data_dir.strip("/") + "/" if data_dir else ""
    files = [f[len(prefix):] for f in files if f.startswith(prefix) and is_candidate(f)]
    if not files:
        return None
    members = None
    if locate is not None:
        def members(zips: list[str]) -> list[str]:
            local = locate([prefix + z for z in zips[:ARCHIVES_LOOKED_INTO]])
            return [m for z in local for m in zip_members(z)]
    found = {builder_of(fs, members) for fs in infer_splits(files).values()}
    return found.pop() if len(found) == 1 else None
