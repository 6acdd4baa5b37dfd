"""simllm's own tables of a simulated result: the summary as one row and the per-request rows,
as CSV or Parquet (through :func:`simllm.fileio.write_table`).

- summary: :func:`summary_row`, the summary's keys as columns (nested dicts as dotted keys,
  NaN and infinities as empty cells / nulls);
- requests: one row per request, :meth:`SimResult.save_detailed`'s columns (``request``, the
  per-request arrays, ``status`` by name).
"""
from pathlib import Path

import numpy as np

from simcore import codes
from simllm.fileio import csv_text, output_path, write_table
from simllm.formats.common import require_requests
from simllm.text import jsonable


def summary_row(result):
    """The summary as one flat row: nested dicts (``memory``) become dotted keys
    (``memory.weight_bytes``); NaN and infinities become ``None``."""
    row = {}

    def put(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            row[prefix] = jsonable(value)

    put("", result.summary)
    return row


def summary_csv(result):
    """:func:`summary_row` as CSV text: a header line and one row (``None`` as an empty cell)."""
    row = summary_row(result)
    return csv_text(list(row), [list(row.values())])


def request_columns(result):
    """Per-request columns as :meth:`SimResult.save_detailed` writes them (status by name)."""
    cols = {"request": np.arange(len(result.requests["status"]))}
    for name, values in result.requests.items():
        if name == "status":
            names = np.array(codes.STATUS_NAMES, dtype=object)
            cols[name] = names[np.asarray(values, dtype=np.int64)]
        else:
            cols[name] = np.asarray(values)
    return cols


def write_summary(result, path):
    """:func:`summary_row` to ``path`` (``.csv`` or ``.parquet``), atomically; returns the path."""
    return write_table(path, {k: [v] for k, v in summary_row(result).items()})


def write_requests(result, path):
    """The per-request rows to ``path`` (``.csv`` by :meth:`SimResult.save_detailed`, or
    ``.parquet``), atomically; returns the path."""
    require_requests(result, "a per-request export")
    path = Path(path)
    if path.suffix.lower() == ".csv":
        with output_path(path) as tmp:
            result.save_detailed(tmp)
        return path
    return write_table(path, request_columns(result))
