"""PIL images in states, exactly: the pixels (PNG bytes for the modes PNG stores exactly, raw
pixels for the others and for large images in a binary state file), the image's class (PIL's own
classes only: a decoded JPEG stays a ``JpegImageFile``), its ``info`` (encoded by the codec, a
TIFF's ``IFDRational`` and a PNG's ``iTXt`` included) and the extra state the class pickles.

An image is rebuilt as pickle rebuilds it (``__setstate__``), from a class looked up among the
modules already loaded and Pillow's own file plugins: a state never makes us import a module by
its name, and decoding runs no code of the state's choosing.
"""

from __future__ import annotations

import io
import sys
from typing import Any, Callable

_PNG_MODES = frozenset(("1", "L", "LA", "P", "RGB", "RGBA", "I;16"))


def pil_image_class() -> type | None:
    """``PIL.Image.Image`` if PIL is loaded (a PIL image can only exist if PIL was imported)."""
    mod = sys.modules.get("PIL.Image")
    return getattr(mod, "Image", None) if mod is not None else None


def encode_image(img: Any, raw: bool = False, pixels: bytes | None = None) -> dict:
    """A lossless description of a PIL image's pixels: PNG bytes for the modes PNG stores exactly
    (as HF ``datasets`` stores images without a source file; not a palette with alpha, which PNG
    keeps apart, nor one shorter than the indices its pixels use), raw pixels (``pixels`` if
    given) for the others and when ``raw`` (no encoding: a binary state file writes them at disk
    speed)."""
    if not raw and _png_stores(img):
        buf = io.BytesIO()
        img.save(buf, format="PNG", compress_level=1)  # lossless at any level; 1 is the fastest
        return {"png": buf.getvalue()}
    out: dict[str, Any] = {"mode": img.mode, "size": list(img.size), "raw": img.tobytes() if pixels is None else pixels}
    if img.palette is not None and "P" in img.mode:
        pmode = img.palette.mode
        out["palette"] = [pmode, bytes(img.getpalette(pmode))]
    return out


def _png_stores(img: Any) -> bool:
    """Whether PNG stores ``img`` exactly. A palette image needs an RGB palette (PNG keeps alpha
    apart) with an entry for every index its pixels use: PNG writes only the palette's entries, in
    as few bits as they need, so the pixels of an image whose palette is shorter (``Image.new("P")``
    has an empty one: a segmentation mask of class indices) would lose their high bits. One
    without a palette at all (an empty palette does not survive pickling: a DataLoader worker
    sends such images) is one PNG cannot write."""
    if img.mode not in _PNG_MODES:
        return False
    if img.mode != "P":
        return img.palette is None or img.palette.mode == "RGB"
    if img.palette is None or img.palette.mode != "RGB":
        return False
    colors = len(img.getpalette("RGB") or ()) // 3
    return colors > 0 and (img.width * img.height == 0 or img.getextrema()[1] < colors)


def ifd_rational_class() -> type | None:
    """PIL's ``IFDRational`` (a TIFF image's resolution, in its ``info``) if PIL's TIFF plugin is loaded."""
    mod = sys.modules.get("PIL.TiffImagePlugin")
    return getattr(mod, "IFDRational", None) if mod is not None else None


def png_text_class() -> type | None:
    """PIL's ``iTXt`` (a ``str`` with a language and translated key: a PNG's international text,
    e.g. its XMP metadata, in its ``info``) if PIL's PNG plugin is loaded."""
    mod = sys.modules.get("PIL.PngImagePlugin")
    return getattr(mod, "iTXt", None) if mod is not None else None


def decode_png_text(v: Any) -> Any:
    text, lang, tkey = v
    if type(text) is not str or any(x is not None and type(x) is not str for x in (lang, tkey)):
        raise ValueError(f"bad PNG text {v!r}")
    from PIL.PngImagePlugin import iTXt

    return iTXt(text, lang, tkey)


def decode_ifd_rational(v: Any) -> Any:
    num, den = v
    if type(num) not in (int, float) or type(den) is not int:
        raise ValueError(f"bad rational {v!r}")
    from PIL.TiffImagePlugin import IFDRational

    return IFDRational(num, den)


def image_class(name: Any, image: type) -> type:
    """The PIL image class ``name`` (``"PIL.JpegImagePlugin:JpegImageFile"``) stands for: one of
    PIL's own classes only, whose pickled state (``__getstate__``) is plain data, in a module
    already loaded or one of the file plugins Pillow loads itself (``Image.init()``): a state
    never makes us import a module by its name."""
    module, _, qualname = name.partition(":") if type(name) is str else ("", "", "")
    if not (module.startswith("PIL.") and qualname.isidentifier()):
        raise ValueError(f"bad image class {name!r}")
    if module not in sys.modules:
        sys.modules["PIL.Image"].init()  # Pillow's registered file plugins, as Image.open loads them
    cls = getattr(sys.modules.get(module), qualname, None)
    if not (isinstance(cls, type) and issubclass(cls, image)):
        raise ValueError(f"unknown image class {name!r}")
    return cls


def decode_image(obj: dict, data: Callable[[Any], Any], info: dict, extra: list) -> Any:
    """The image ``obj`` describes, of its class, with its ``info`` (and the class's ``extra``
    state, e.g. an image file's name), built as pickle builds it: PIL's ``__setstate__`` reads
    the pixels."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is installed with datasets[vision]
        raise ValueError("the state holds a PIL image; install Pillow to load it") from None
    try:
        cls = image_class(obj["class"], Image.Image) if "class" in obj else Image.Image
        palette = None
        if "png" in obj:
            png = data(obj["png"])
            if type(png) is not bytes:
                raise ValueError("image data must be bytes")
            img = Image.open(io.BytesIO(png), formats=["PNG"])
            img.load()
            mode, size, raw = img.mode, list(img.size), img.tobytes()
            if img.palette is not None and "P" in mode:
                palette = [img.palette.mode, img.getpalette(img.palette.mode)]
        else:
            mode, size, raw = obj["mode"], obj["size"], data(obj["raw"])
            if (type(mode) is not str or type(size) is not list or len(size) != 2
                    or not all(type(n) is int and n >= 0 for n in size) or type(raw) is not bytes):
                raise ValueError("bad raw image")
            if size[0] * size[1] > 8 * len(raw):  # more pixels than the data can hold
                raise ValueError("image size does not match its data")
            if "palette" in obj:
                palette = [obj["palette"][0], data(obj["palette"][1])]
        out = cls.__new__(cls)
        out.__setstate__([info, mode, tuple(size), None, raw, *extra])
        if palette is not None:
            out.putpalette(palette[1], palette[0])
        return out
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of Pillow on damaged data
        raise ValueError(f"bad image: {type(e).__name__}: {e}") from None
