"""Plain text out, for people and machines: aligned text tables, number cells, strict JSON.

A foundation module like :mod:`simllm.errors` and :mod:`simllm.fileio`: every layer may import it,
it imports nothing of simllm.
"""
import json
import math

import numpy as np


def as_float(value):
    """``value`` as a float: NaN for None, text that is not a number, and anything else that
    does not convert (a results table's cell, a summary value)."""
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        if isinstance(value, (str, bytes)):
            try:
                return float(value)
            except ValueError:
                return math.nan
        return math.nan if value is None else float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def format_number(v, digits=2):
    """A table cell: ``-`` for None or NaN, ``inf``, no decimals from 100 up (``1,234``), else
    ``digits`` decimals."""
    if v is None:
        return "-"
    v = float(v)
    if math.isnan(v):
        return "-"
    if math.isinf(v):
        return "inf"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def fixed(x, digits=2):
    """``x`` with thousands separators and ``digits`` decimals (``1,234.50``)."""
    return f"{x:,.{digits}f}"


def table(headers, rows, align=None):
    """Plain-text table; ``align`` is a string of ``l``/``r`` per column (default: first left)."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(row):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)).rstrip()

    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells[1:]]
    return "\n".join(lines)


def markdown_table(headers, rows):
    """A Markdown (GitHub) table: a header row, the separator, a row per item; ``|`` in a cell is
    escaped."""
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(headers), "| " + " | ".join("---" for _ in headers) + " |", *(line(r) for r in rows)])


def jsonable(obj):
    """``obj`` with numpy scalars and arrays as Python numbers and lists, and NaN or infinite
    floats as ``None`` (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj


def to_json(obj):
    """Strict, indented JSON of ``obj`` (see :func:`jsonable`), ending in a newline."""
    return json.dumps(jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
