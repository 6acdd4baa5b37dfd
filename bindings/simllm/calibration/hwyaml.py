"""Editing hardware- and framework-profile YAML files in place: fitted factors replace or join
the keys of the ``hardware:`` (or ``framework:``) block, every other line (and its source
comment) stays as it is; files are written atomically. Used by ``simllm calibrate`` and
``simllm profile``; files are written with :func:`simllm.fileio.write_text_atomic`."""
import math
import re
from pathlib import Path

import yaml

from simllm.config import presets
from simllm.config.hardware import HardwareConfig
from simllm.errors import ConfigError

_KEY_LINE = re.compile(r"^(?P<indent>[ ]*)(?P<key>[A-Za-z_][A-Za-z0-9_]*)[ ]*:")
_COMMENT_COLUMN = 35  # where the presets' value comments start


def yaml_number(x):
    """``x`` as a YAML scalar that reads back as the same float (YAML 1.1 wants ``1.0e-05``, not ``1e-05``)."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"not a finite number: {x}")
    text = repr(x)
    if "e" in text:
        mantissa, exponent = text.split("e")
        if "." not in mantissa:
            mantissa += ".0"
        if exponent[0] not in "+-":
            exponent = "+" + exponent
        text = f"{mantissa}e{exponent}"
    return text


def yaml_scalar(value):
    """A number as :func:`yaml_number` writes it; a string as a plain (or, when needed, quoted)
    YAML scalar that reads back as the same string."""
    if isinstance(value, str):
        return yaml.safe_dump([value], default_flow_style=True, width=10**6).strip()[1:-1]
    return yaml_number(value)


def value_line(indent, key, value, comment, column):
    head = f"{indent}{key}: {yaml_scalar(value)}"
    return f"{head:<{max(column, len(head) + 1)}}# {comment}"


def edit_hardware_yaml(text, updates):
    """Replace or add ``key: value  # comment`` lines in the ``hardware:`` block of ``text``,
    keeping every other line (datasheet keys and their source comments) as it is.

    Returns None when the file is not a block mapping this can edit (JSON, flow style).
    """
    return edit_section_yaml(text, updates, "hardware")


def drop_keys(text, keys):
    """``text`` without the top-level-of-block lines ``key: ...`` of ``keys`` (and their own
    comment-only continuation lines)."""
    if not keys:
        return text
    out, skip = [], None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if skip is not None and line.strip().startswith("#") and indent > skip:
            continue
        skip = None
        match = _KEY_LINE.match(line)
        if match and match["key"] in keys:
            skip = len(match["indent"])
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def edit_section_yaml(text, updates, section):
    """:func:`edit_hardware_yaml` for the ``section:`` block (``"hardware"``, ``"framework"``)."""
    top_section = re.compile(rf"^{section}[ ]*:[ ]*(#.*)?$")
    lines = text.splitlines()
    tops = [i for i, line in enumerate(lines) if top_section.match(line)]
    if tops:
        start, end = tops[0] + 1, len(lines)
        for i in range(start, len(lines)):
            line = lines[i]
            if line.strip() and not line.startswith((" ", "#")):
                end = i
                break
    elif any(re.match(rf"^{section}[ ]*:", line) for line in lines):
        return None
    else:
        start, end = 0, len(lines)
    keys = {}
    indent = None
    for i in range(start, end):
        match = _KEY_LINE.match(lines[i])
        if match and (indent is None or match["indent"] == indent):
            indent = match["indent"]
            keys[match["key"]] = i
    if indent is None or (tops and not indent):
        return None

    def extent(i):
        """Index past line ``i`` and its own comment-only continuation lines."""
        j = i + 1
        while j < end and lines[j].strip().startswith("#") and len(lines[j]) - len(lines[j].lstrip()) > len(indent):
            j += 1
        return j

    replace, append = {}, []
    for key, value, comment in updates:
        if key in keys:
            i = keys[key]
            old = lines[i]
            column = old.find(" #") + 1 if " #" in old else _COMMENT_COLUMN
            replace[i] = (extent(i), value_line(indent, key, value, comment, column))
        else:
            append.append(value_line(indent, key, value, comment, _COMMENT_COLUMN))
    last = extent(max(keys.values()))
    out = []
    i = 0
    while i < len(lines):
        if i == last:
            out.extend(append)
        if i in replace:
            i, new = replace[i]
            out.append(new)
            continue
        out.append(lines[i])
        i += 1
    if last >= len(lines):
        out.extend(append)
    return "\n".join(out) + "\n"


def generate_hardware_yaml(data, updates):
    """A fresh block YAML of ``data``'s hardware mapping with ``updates`` (when the base cannot be
    edited line by line)."""
    mapping = dict(data.get("hardware", data))
    lines = ["hardware:"]
    comments = {key: (value, comment) for key, value, comment in updates}
    for key in list(mapping) + [k for k in comments if k not in mapping]:
        if key in comments:
            lines.append(value_line("  ", key, *comments[key], _COMMENT_COLUMN))
        else:
            dumped = yaml.safe_dump({key: mapping[key]}, default_flow_style=True, width=10**6).strip()[1:-1]
            lines.append(f"  {dumped}")
    return "\n".join(lines) + "\n"


def base_path_of(base):
    if isinstance(base, HardwareConfig):
        if not Path(base.source).is_file():
            raise ConfigError("a base hardware profile loaded from a file (its text is copied)", key="base",
                              value=base.source)
        return Path(base.source)
    return Path(presets.resolve("hardware", base, flag="--hardware"))


