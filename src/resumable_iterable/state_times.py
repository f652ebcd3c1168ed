"""Dates and times in states, exactly: ``datetime`` / ``date`` / ``time`` / ``timedelta``, their
time zones (``datetime.timezone``, named or not, and ``zoneinfo.ZoneInfo``), ``fold``, and
pandas' ``Timestamp`` / ``Timedelta`` / ``NaT`` (what HF ``datasets`` yields for Arrow
``timestamp[ns]`` and ``duration[ns]`` columns: nanoseconds that a ``datetime`` cannot hold).

A value is rebuilt as the very type it was, with the same fields: a ``ZoneInfo`` by its key, a
pandas value from its integer count of its own unit. A time zone of another kind (``pytz``,
``dateutil``...) cannot be rebuilt without running its code: :func:`encode_time` refuses it with a
``TypeError``, as it refuses subclasses of these types.
"""

from __future__ import annotations

import datetime as _dt
import sys
from typing import Any

import numpy as np

#: the kinds of tagged objects this module decodes
TIME_KINDS = frozenset(("datetime", "date", "time", "timedelta", "pd_timestamp", "pd_timedelta", "pd_nat"))
_UNITS = frozenset(("s", "ms", "us", "ns"))


def _pandas_types() -> tuple:
    """``(Timestamp, Timedelta, NaT)`` if pandas is loaded (a pandas value exists only then)."""
    pd = sys.modules.get("pandas")
    if pd is None or not hasattr(pd, "Timestamp"):
        return (None, None, None)
    return (pd.Timestamp, pd.Timedelta, pd.NaT)


def _zone(tz: Any, what: str) -> dict:
    """The fields that rebuild ``tz`` (not ``None``): ``{}`` for a ``datetime.timezone`` without a
    name of its own (the ISO text holds its offset), its name, or a ``ZoneInfo``'s key."""
    if type(tz) is _dt.timezone:
        name = tz.tzname(None)
        return {} if name == _dt.timezone(tz.utcoffset(None)).tzname(None) else {"tzname": name}
    zi = sys.modules.get("zoneinfo")
    if zi is not None and type(tz) is zi.ZoneInfo and tz.key is not None:
        return {"zone": tz.key}
    raise TypeError(f"cannot store a {what} whose time zone is a {type(tz).__module__}.{type(tz).__name__} in a "
                    "state: only datetime.timezone and zoneinfo.ZoneInfo (with a key) are stored exactly")


def encode_time(obj: Any, tag: str) -> dict | None:
    """The tagged object for a date or time value, ``None`` if ``obj`` is not one."""
    t = type(obj)
    if t is _dt.datetime:
        tz = obj.tzinfo
        zone = {} if tz is None else _zone(tz, "datetime")
        local = obj.replace(tzinfo=None) if "zone" in zone else obj  # a ZoneInfo's offset follows from it
        out = {tag: "datetime", "v": local.isoformat(), **zone}
        if obj.fold:
            out["fold"] = 1
        return out
    if t is _dt.date:
        return {tag: "date", "v": obj.isoformat()}
    if t is _dt.time:
        if obj.tzinfo is not None and type(obj.tzinfo) is not _dt.timezone:
            raise TypeError(f"cannot store a time whose time zone is a {type(obj.tzinfo).__name__} in a state: "
                            "only datetime.timezone is stored exactly")
        out = {tag: "time", "v": obj.isoformat(), **({} if obj.tzinfo is None else _zone(obj.tzinfo, "time"))}
        if obj.fold:
            out["fold"] = 1
        return out
    if t is _dt.timedelta:
        return {tag: "timedelta", "v": [obj.days, obj.seconds, obj.microseconds]}
    timestamp, timedelta, nat = _pandas_types()
    if timestamp is None:
        return None
    if obj is nat:
        return {tag: "pd_nat"}
    if t is timestamp:
        tz = obj.tzinfo
        return {tag: "pd_timestamp", "v": int(obj.asm8.view("i8")), "unit": obj.unit,  # UTC when tz-aware
                **({} if tz is None else {"offset": _offset(tz.utcoffset(obj)), **_zone(tz, "pandas Timestamp")})}
    if t is timedelta:
        return {tag: "pd_timedelta", "v": int(obj.asm8.view("i8")), "unit": obj.unit}
    return None


def _offset(delta: _dt.timedelta) -> list:
    return [delta.days, delta.seconds, delta.microseconds]


def _tz(obj: dict, offset: Any) -> Any:
    """The time zone ``obj`` names (``None`` if none): its ``ZoneInfo`` or ``datetime.timezone``."""
    if "zone" in obj:
        key = obj["zone"]
        if type(key) is not str:
            raise ValueError(f"bad time zone key {key!r}")
        import zoneinfo

        try:
            return zoneinfo.ZoneInfo(key)
        except Exception as e:  # noqa: BLE001 - an unknown or malformed key
            raise ValueError(f"unknown time zone {key!r}: {e}") from None
    if "tzname" in obj:
        if type(obj["tzname"]) is not str:
            raise ValueError("bad time zone name")
        return _dt.timezone(offset, obj["tzname"])
    return None


def decode_time(kind: str, obj: dict) -> Any:
    """The value of a tagged object of one of :data:`TIME_KINDS`; raises ``ValueError`` (or the
    ``KeyError``/``TypeError`` the codec turns into one) for a malformed one."""
    fold = obj.get("fold", 0)
    if fold not in (0, 1) or type(fold) is not int:
        raise ValueError(f"bad fold {fold!r}")
    if kind in ("datetime", "time"):
        value = (_dt.datetime if kind == "datetime" else _dt.time).fromisoformat(obj["v"])
        tz = _tz(obj, value.utcoffset())
        if tz is not None:
            value = value.replace(tzinfo=tz)
        return value.replace(fold=fold) if fold else value
    if kind == "date":
        return _dt.date.fromisoformat(obj["v"])
    if kind == "timedelta":
        days, s, us = obj["v"]
        return _dt.timedelta(days=days, seconds=s, microseconds=us)
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas comes with datasets
        raise ValueError(f"the state holds a pandas value ({kind}); install pandas to load it") from None
    if kind == "pd_nat":
        return pd.NaT
    v, unit = obj["v"], obj["unit"]
    if type(v) is not int or unit not in _UNITS:
        raise ValueError(f"bad {kind} {v!r} {unit!r}")
    if kind == "pd_timedelta":
        return pd.Timedelta(np.timedelta64(v, unit))
    value = pd.Timestamp(np.datetime64(v, unit))
    if "offset" in obj:
        days, s, us = obj["offset"]
        offset = _dt.timedelta(days=days, seconds=s, microseconds=us)
        value = value.tz_localize("UTC").tz_convert(_tz(obj, offset) or _dt.timezone(offset))
    return value
