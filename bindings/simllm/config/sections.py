"""Typed reads from config mappings: each failure is a :class:`ConfigError` naming the file,
line, dotted key, value and what was expected."""
import difflib
import math
import os
from pathlib import Path

from simllm.config.yamlio import line_of
from simllm.errors import ConfigError

_MISSING = object()
#: Every number a config file gives is at most this large in magnitude (products the engine forms
#: from them stay finite in float64), and a strictly positive one is at least MIN_STEP above its
#: bound (1 / value stays finite); fields declare tighter ranges where physics gives one.
MAX_MAGNITUDE = 1e15
MIN_STEP = 1e-12
#: Set (to anything but "" or "0") to let a spec file name files outside its own folder
#: (``simllm ... --allow-outside-paths`` sets it).
ALLOW_OUTSIDE_ENV = "SIMLLM_ALLOW_OUTSIDE_PATHS"


def outside_paths_allowed():
    return os.environ.get(ALLOW_OUTSIDE_ENV, "") not in ("", "0")


def spec_path(name, source, *, key, line=None):
    """The file ``name`` that a spec file ``source`` names at ``key``: relative to the spec's folder,
    and inside it (subfolders too) unless :func:`outside_paths_allowed`. A mapping given in Python
    (``source`` not a file) names paths relative to the working directory, unchecked."""
    path = Path(name)
    src = Path(source)
    if not src.is_file():
        return path
    folder = src.resolve().parent
    path = path if path.is_absolute() else folder / path
    if not outside_paths_allowed() and not path.resolve().is_relative_to(folder):
        raise ConfigError(f"a path inside {folder} (the spec's folder); pass --allow-outside-paths or set "
                          f"{ALLOW_OUTSIDE_ENV}=1 to use files elsewhere", source=source, key=key, value=name, line=line)
    return path


class Section:
    """A mapping from a config file, read key by key with validation.

    Parameters
    ----------
    data : dict
        The mapping (a :class:`simllm.config.yamlio.LineDict` when it came from YAML).
    source : str
        File name (or ``"<dict>"``) for messages.
    prefix : str
        Dotted path of this mapping in the file (``"model"``), prepended to keys in messages.
    """

    def __init__(self, data, source, prefix=""):
        if not isinstance(data, dict):
            raise ConfigError("a mapping of keys to values", source=source, key=prefix or "(top level)", value=data)
        self.data = data
        self.source = source
        self.prefix = prefix
        self.used = set()

    def path(self, key):
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key, value, expected):
        return ConfigError(expected, source=self.source, key=self.path(key), value=value, line=line_of(self.data, key))

    def has(self, key):
        return key in self.data and self.data[key] is not None

    def raw(self, key, default=_MISSING):
        self.used.add(key)
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is _MISSING:
            raise ConfigError("missing required key", source=self.source, key=self.path(key))
        return default

    def number(self, key, default=_MISSING, *, integer=False, minimum=None, exclusive_minimum=None, maximum=None):
        if default is not _MISSING and not self.has(key):
            self.used.add(key)
            return default
        value = self.raw(key)
        kind = "an integer" if integer else "a number"
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_MAGNITUDE:
            raise self.error(key, value, f"{kind} of magnitude at most {MAX_MAGNITUDE:.0e}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    value = float(value.strip())
                except ValueError:
                    raise self.error(key, self.data[key], kind) from None
            else:
                raise self.error(key, value, kind)
        if not math.isfinite(value):
            raise self.error(key, value, f"{kind}, finite")
        if abs(value) > MAX_MAGNITUDE:
            raise self.error(key, self.data[key], f"{kind} of magnitude at most {MAX_MAGNITUDE:.0e}")
        if exclusive_minimum is not None and value > exclusive_minimum and value - exclusive_minimum < MIN_STEP:
            raise self.error(key, self.data[key], f"{kind} > {exclusive_minimum} by at least {MIN_STEP:.0e}")
        if integer:
            if value != int(value):
                raise self.error(key, value, kind)
            value = int(value)
        limits = [
            (exclusive_minimum, "> ", lambda v, b: v > b),
            (minimum, ">= ", lambda v, b: v >= b),
            (maximum, "<= ", lambda v, b: v <= b),
        ]
        if not all(ok(value, bound) for bound, _, ok in limits if bound is not None):
            text = " and ".join(f"{op}{bound}" for bound, op, _ in limits if bound is not None)
            raise self.error(key, self.data[key], f"{kind} {text}")
        return value

    def positive_int(self, key, default=_MISSING):
        return self.number(key, default, integer=True, minimum=1)

    def boolean(self, key, default=_MISSING):
        value = self.raw(key, default)
        if isinstance(value, bool):
            return value
        raise self.error(key, value, "true or false")

    def string(self, key, default=_MISSING):
        value = self.raw(key, default)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise self.error(key, value, "a string")

    def choice(self, key, choices, default=_MISSING, aliases=None):
        value = self.raw(key, default)
        name = str(value).strip().lower() if isinstance(value, str) else value
        if aliases and name in aliases:
            name = aliases[name]
        if name in choices:
            return name
        raise self.error(key, value, "one of " + ", ".join(choices))

    def file(self, key):
        """The file named at ``key`` (:func:`spec_path`)."""
        return spec_path(self.string(key), self.source, key=self.path(key), line=line_of(self.data, key))

    def section(self, key):
        """The nested mapping under ``key`` (an empty section when absent)."""
        value = self.raw(key, {})
        return Section(value, self.source, self.path(key))

    def reject_unknown(self, known):
        """Raise for keys not in ``known``, suggesting the nearest known name."""
        for key in self.data:
            if key not in known:
                near = difflib.get_close_matches(str(key), list(known), n=2, cutoff=0.6)
                hint = f" (did you mean {' or '.join(near)}?)" if near else ""
                raise ConfigError(
                    f"unknown key{hint}; known keys: {', '.join(sorted(known))}",
                    source=self.source,
                    key=self.path(key),
                    line=line_of(self.data, key),
                )
