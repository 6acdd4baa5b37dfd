"""Pareto frontiers of results tables (``simllm frontier``; :func:`simllm.pareto` in Python).

::

    rows = read_rows("results.csv")                  # or a sweep's table, or OptimizeResult.rows()
    idx = pareto(rows)                               # throughput per GPU vs per-user speed
    print(format_frontier(rows, frontier_rows(rows)))

:func:`pareto` returns the non-dominated rows of a table (a numpy structured array, such as a
sweep's, or a list of dicts such as summaries or :meth:`simllm.search.optimize.OptimizeResult.rows`): row
``a`` dominates ``b`` when it is at least as good in every objective and strictly better in one.
Duplicates (rows equal in every objective) do not dominate each other, so all copies of a
non-dominated point are kept. Rows with an ``error``, or a missing or NaN objective, are never on
the frontier. Two objectives take an exact O(n log n) sort-and-sweep; one or three and more the
O(n^2) pairwise check. Columns the table lacks are derived where they can be (:func:`column`):
``output_throughput_per_user`` = 1000 / ``mean_tpot_ms`` (output tokens/s one user sees) and
``output_throughput_per_gpu`` = ``output_throughput`` / GPUs, GPUs being ``gpus`` or
``tensor_parallel_size`` x ``data_parallel_size`` (also under ``serving.``-prefixed names).
:data:`FRONTIERS` names the usual pairs: ``speed`` (throughput per GPU vs per-user speed, both
maximised) and ``ttft`` (throughput per GPU maximised vs P99 TTFT minimised).
"""
import csv
import json
import math
import re
from pathlib import Path

import numpy as np

from simllm.errors import ConfigError
from simllm.text import as_float, format_number, jsonable, table

CLI = "command line"

# ----------------------------------------------------------------------------- columns

#: Named frontiers: (maximize, minimize).
FRONTIERS = {
    "speed": (("output_throughput_per_gpu", "output_throughput_per_user"), ()),
    "ttft": (("output_throughput_per_gpu",), ("p99_ttft_ms",)),
}
#: Metrics where lower is better, beyond every ``*_ms`` key.
LOWER_IS_BETTER = frozenset({"error_rate", "cost_per_million_tokens", "num_preemptions", "num_rejected",
                             "num_timed_out", "failed", "duration", "gpus", "kv_cache_usage_mean",
                             "kv_cache_usage_peak"})
#: Units of the columns, for axes and tables.
UNITS = {
    "output_throughput_per_user": "output tokens/s per user (1000 / mean TPOT ms)",
    "output_throughput_per_gpu": "output tokens/s per GPU",
    "output_throughput": "output tokens/s",
    "total_token_throughput": "tokens/s",
    "request_throughput": "requests/s",
    "request_goodput": "requests/s meeting the SLOs",
    "goodput_per_gpu": "requests/s per GPU meeting the SLOs",
    "cost_per_million_tokens": "USD per million output tokens",
    "error_rate": "fraction of requests failed",
}


def lower_is_better(name):
    """Whether a smaller value of column ``name`` is better (latencies in ms, error rate, cost)."""
    return name.endswith("_ms") or name in LOWER_IS_BETTER


def axis_label(name):
    """An axis label with the unit: ``P99 TTFT (ms)``, ``output tokens/s per GPU``, ..."""
    if name in UNITS:
        return UNITS[name]
    m = re.fullmatch(r"(mean|median|std|p[\d.]+)_(ttft|tpot|itl|e2el|queue)_ms", name)
    if m:
        stat = {"mean": "mean", "median": "median", "std": "std"}.get(m.group(1), m.group(1).upper())
        metric = {"e2el": "E2E latency", "queue": "queueing"}.get(m.group(2), m.group(2).upper())
        return f"{stat} {metric} (ms)"
    return name.replace("_", " ")


def cell(row, name, default=None):
    """Field ``name`` of one row: a dict, a numpy structured-array record or an object with a
    ``summary`` dict."""
    if hasattr(row, "summary") and isinstance(row.summary, dict):
        row = row.summary
    if isinstance(row, dict):
        return row.get(name, default)
    names = getattr(getattr(row, "dtype", None), "names", None)
    if names and name in names:
        return row[name]
    return default


def _first(row, names, default=None):
    for n in names:
        v = cell(row, n)
        if v is not None and not (isinstance(v, str) and v == ""):
            return v
    return default


def gpus_of(row):
    """GPUs of one row: ``gpus``, else ``tensor_parallel_size`` x ``pipeline_parallel_size`` x
    ``data_parallel_size`` (1 each when absent; ``serving.``-prefixed names accepted)."""
    g = as_float(cell(row, "gpus"))
    if math.isfinite(g) and g > 0:
        return g
    tp = as_float(_first(row, ("tensor_parallel_size", "serving.tensor_parallel_size", "tp"), 1))
    dp = as_float(_first(row, ("data_parallel_size", "serving.data_parallel_size", "replicas"), 1))
    pp = as_float(_first(row, ("pipeline_parallel_size", "serving.pipeline_parallel_size", "pp"), 1))
    tp = tp if math.isfinite(tp) and tp > 0 else 1.0
    dp = dp if math.isfinite(dp) and dp > 0 else 1.0
    pp = pp if math.isfinite(pp) and pp > 0 else 1.0
    return tp * pp * dp


def per_user_speed(row):
    """Output tokens/s one user sees: 1000 / ``mean_tpot_ms`` (NaN when TPOT is missing or not
    positive)."""
    tpot = as_float(cell(row, "mean_tpot_ms"))
    return 1000.0 / tpot if math.isfinite(tpot) and tpot > 0 else math.nan


def per_gpu(row):
    """Output tokens/s per GPU: ``output_throughput`` / GPUs (see :func:`gpus_of`)."""
    return as_float(cell(row, "output_throughput")) / gpus_of(row)


DERIVED = {"output_throughput_per_user": per_user_speed, "output_throughput_per_gpu": per_gpu,
            "gpus": gpus_of}


def has_column(rows, name):
    """Whether ``rows`` (a structured array or a sequence of rows) has column ``name`` in any row."""
    names = getattr(getattr(rows, "dtype", None), "names", None)
    if names is not None:
        return name in names
    return any(cell(r, name) is not None for r in rows)


def _failed(row):
    err = cell(row, "error")
    if isinstance(err, bytes):
        err = err.decode(errors="replace")
    if isinstance(err, (str, np.str_)):
        return bool(str(err).strip())
    return bool(err) if err is not None and not isinstance(err, float) else False


def column(rows, name):
    """Column ``name`` of ``rows`` as a float array (NaN where missing, not a number, or in a
    row with an ``error``). Derived columns (:data:`DERIVED`) are computed when the table lacks
    them."""
    names = getattr(getattr(rows, "dtype", None), "names", None)
    if names is not None:  # a structured array: whole columns at once
        n = len(rows)
        bad = np.zeros(n, dtype=bool)
        if "error" in names:
            bad = np.array([_failed(r) for r in rows], dtype=bool)
        if name in names and rows.dtype[name].kind in "biuf":
            out = rows[name].astype(float)
        elif name in names:
            out = np.array([as_float(v) for v in rows[name]], dtype=float)
        elif name in DERIVED:
            out = np.array([DERIVED[name](r) for r in rows], dtype=float)
        else:
            out = np.full(n, np.nan)
        out = np.where(bad, np.nan, out)
        return out
    rows = list(rows)
    out = np.empty(len(rows))
    for i, r in enumerate(rows):
        v = cell(r, name)
        if v is None and name in DERIVED:
            v = DERIVED[name](r)
        out[i] = math.nan if _failed(r) else as_float(v)
    return out


# ----------------------------------------------------------------------------- Pareto

def _pareto_2d(v):
    """Indices of the non-dominated rows of ``v`` (n x 2, both maximised, all finite or inf):
    sort by x then y, both descending, and sweep the groups of equal x keeping the best y seen."""
    x, y = v[:, 0], v[:, 1]
    order = np.lexsort((-y, -x))  # x descending, then y descending
    xs, ys = x[order], y[order]
    starts = np.ones(len(xs), dtype=bool)
    starts[1:] = xs[1:] != xs[:-1]
    group = np.cumsum(starts) - 1
    group_best = ys[starts]  # the first of each group has its largest y
    best_before = np.empty_like(group_best)
    best_before[0] = -np.inf
    if len(group_best) > 1:
        best_before[1:] = np.maximum.accumulate(group_best)[:-1]
    first_group = group == 0
    keep = (ys == group_best[group]) & (first_group | (group_best[group] > best_before[group]))
    return order[keep]


def _pareto_nd(v, chunk=512):
    """Indices of the non-dominated rows of ``v`` (n x k, all maximised), by the pairwise check."""
    n = len(v)
    dominated = np.zeros(n, dtype=bool)
    for lo in range(0, n, chunk):
        block = v[lo:lo + chunk]  # is row i (in block) dominated by some row j?
        ge = (v[None, :, :] >= block[:, None, :]).all(axis=2)
        gt = (v[None, :, :] > block[:, None, :]).any(axis=2)
        dominated[lo:lo + chunk] = (ge & gt).any(axis=1)
    return np.nonzero(~dominated)[0]


def pareto(rows, maximize=FRONTIERS["speed"][0], minimize=()):
    """Indices of the Pareto-optimal (non-dominated) rows.

    Parameters
    ----------
    rows : numpy structured array, or sequence of dict / record / object with ``summary``
    maximize, minimize : sequence of str
        Column names (derived ones included, see :func:`column`). The default is the
        throughput-per-GPU vs per-user-speed frontier; ``maximize=("output_throughput_per_gpu",),
        minimize=("p99_ttft_ms",)`` is the throughput vs P99 TTFT one (:data:`FRONTIERS`).

    Returns
    -------
    numpy.ndarray of int
        Row indices, sorted by the first objective's value ascending, then by index. All copies
        of a duplicated non-dominated point are included. Rows with an ``error`` or a missing
        or NaN objective are left out.

    Raises
    ------
    ConfigError
        When no objective is given.
    """
    maximize, minimize = _names(maximize), _names(minimize)
    objectives = [(n, 1.0) for n in maximize] + [(n, -1.0) for n in minimize]
    if not objectives:
        raise ConfigError("at least one column to maximize or minimize", key="pareto objectives")
    cols = [column(rows, n) * sign for n, sign in objectives]
    v = np.column_stack(cols) if cols[0].size else np.empty((0, len(cols)))
    valid = ~np.isnan(v).any(axis=1)
    where = np.nonzero(valid)[0]
    if not where.size:
        return np.empty(0, dtype=np.int64)
    sub = v[where]
    found = _pareto_2d(sub) if sub.shape[1] == 2 else _pareto_nd(sub)
    idx = where[found]
    first = cols[0][idx] * objectives[0][1]  # the raw value of the first objective
    return idx[np.lexsort((idx, first))].astype(np.int64)


def _names(x):
    return (x,) if isinstance(x, str) else tuple(x)


def frontier(rows, kind="speed"):
    """:func:`pareto` of a named frontier of :data:`FRONTIERS` (``speed`` or ``ttft``)."""
    if kind not in FRONTIERS:
        raise ConfigError("one of " + ", ".join(FRONTIERS), key="frontier", value=kind)
    maximize, minimize = FRONTIERS[kind]
    return pareto(rows, maximize, minimize)


# ----------------------------------------------------------------------------- rendering

# ----------------------------------------------------------------------------- simllm frontier

def _csv_value(value):
    if value is None:
        return None
    text = str(value).strip()
    if text == "":
        return ""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        f = float(text)
    except ValueError:
        return text
    return int(f) if re.fullmatch(r"[-+]?\d+", text) else f


def read_rows(path):
    """Rows of a results file for :func:`pareto`: a CSV with a header (numbers parsed, empty
    cells kept as ""), or a JSON list of objects (or an object with ``rows`` or ``candidates``,
    as :func:`simllm.search.optimize.optimize_to_dict` writes: their ``summary`` merged in).

    Raises
    ------
    ConfigError
        A missing or unreadable file, or one with no rows.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"a readable results file ({exc.strerror})", source=CLI, key="RESULTS", value=str(path)) from None
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"valid JSON ({exc.msg})", source=str(path), line=exc.lineno) from None
        if isinstance(data, dict):
            data = data.get("rows") or data.get("candidates") or []
        rows = []
        for r in data if isinstance(data, list) else []:
            if isinstance(r, dict):
                row = {k: v for k, v in r.items() if k != "summary"}
                row.update(r.get("summary") or {})
                if "label" in row and "config" not in row:
                    row["config"] = row["label"]
                rows.append(row)
    else:
        reader = csv.DictReader(text.splitlines())
        rows = [{k: _csv_value(v) for k, v in r.items() if k is not None} for r in reader]
    if not rows:
        raise ConfigError("a CSV with a header and rows, or a JSON list of objects", source=str(path))
    return rows


#: Columns that describe a configuration rather than measure it (besides dotted paths).
CONFIG_COLUMNS = ("model", "hardware", "tp", "replicas", "seed", "tensor_parallel_size", "data_parallel_size",
                  "max_num_seqs", "max_num_batched_tokens", "dtype", "kv_cache_dtype")


def config_items(row):
    """``(short_name, value)`` of the configuration columns of a row: dotted paths such as
    ``serving.max_num_seqs`` (shown without the prefix) first, then :data:`CONFIG_COLUMNS`; a
    short name once."""
    keys = list(row.keys()) if isinstance(row, dict) else list(getattr(row.dtype, "names", None) or ())
    out = {}
    for k in [k for k in keys if "." in k] + [k for k in keys if k in CONFIG_COLUMNS]:
        short = k.rsplit(".", 1)[-1]
        short = {"tensor_parallel_size": "tp", "data_parallel_size": "replicas"}.get(short, short)
        v = cell(row, k)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        if isinstance(v, (np.generic,)):
            v = v.item()
        if short not in out and v not in (None, ""):
            out[short] = v
    return out


def config_label(row, names=None):
    """A short name for a row: its ``config`` (or ``label``), else ``name=value`` of its
    configuration columns (see :func:`config_labels`), or of ``names`` of them."""
    for k in ("config", "label"):
        v = cell(row, k)
        if v not in (None, ""):
            return str(v)
    items = config_items(row)
    if names is not None:
        items = {k: v for k, v in items.items() if k in names}
    return " ".join(f"{k}={v}" for k, v in items.items()) or "-"


def config_labels(rows):
    """:func:`config_label` of every row, naming only the configuration columns whose values
    differ between rows (all of them when none differs)."""
    items = [config_items(r) for r in rows]
    varying = None
    if len(items) > 1:
        keys = {k for it in items for k in it}
        varying = {k for k in keys if len({repr(it.get(k)) for it in items}) > 1} or None
    return [config_label(r, varying) for r in rows]


def numeric_columns(rows):
    """Names of the columns holding a finite number in some row, in first-seen order."""
    names = getattr(getattr(rows, "dtype", None), "names", None)
    if names is not None:
        return [n for n in names if np.isfinite(column(rows, n)).any()]
    seen = {}
    for r in rows:
        for k, v in (r.items() if isinstance(r, dict) else ()):
            if k not in seen or not seen[k]:
                seen[k] = not isinstance(v, bool) and math.isfinite(as_float(v))
    return [k for k, ok in seen.items() if ok]


def frontier_rows(rows, x="output_throughput_per_user", y="output_throughput_per_gpu"):
    """The frontier of ``y`` against ``x``, each maximised unless :func:`lower_is_better`;
    indices sorted along ``x``."""
    for flag, name in (("--x", x), ("--y", y)):
        if not np.isfinite(column(rows, name)).any():
            known = numeric_columns(rows)
            known += [d for d in DERIVED if d not in known]
            raise ConfigError(f"a column with numbers in some row: {', '.join(known)}", source=CLI, key=flag,
                              value=name)
    maximize = [n for n in (y, x) if not lower_is_better(n)]
    minimize = [n for n in (y, x) if lower_is_better(n)]
    idx = pareto(rows, maximize, minimize)
    xs = column(rows, x)
    return idx[np.lexsort((idx, xs[idx]))] if idx.size else idx


def aggregate_seeds(rows, x="output_throughput_per_user", y="output_throughput_per_gpu"):
    """One row per configuration of a table that holds several seeds of it (a sweep's
    configuration x seed rows): its ``x`` and ``y`` the means over the seeds that ran, with
    ``seeds`` (rows of the configuration), ``ran`` (of them without an error) and the spread
    ``<x>_min``, ``<x>_max``, ``<y>_min``, ``<y>_max``. Configurations are told apart by
    ``config_id`` where the table has it, else by their configuration columns but ``seed``. A
    table with one row per configuration comes back as it is (a list of rows), so a frontier
    point is a configuration, never one draw of it.

    Returns
    -------
    (rows, aggregated) : (list, bool)
    """
    rows = list(rows)
    has_id = any(cell(r, "config_id") is not None for r in rows)

    def key(r):
        if has_id:
            return repr(cell(r, "config_id"))
        return repr(sorted((k, repr(v)) for k, v in config_items(r).items() if k != "seed"))

    groups = {}
    for i, r in enumerate(rows):
        groups.setdefault(key(r), []).append(i)
    if all(len(g) == 1 for g in groups.values()):
        return rows, False
    xs, ys = column(rows, x), column(rows, y)
    out = []
    for members in groups.values():
        first = rows[members[0]]
        row = dict(first) if isinstance(first, dict) else {n: first[n] for n in first.dtype.names}
        row.pop("seed", None)
        ok = [i for i in members if np.isfinite(xs[i]) and np.isfinite(ys[i])]
        row["gpus"] = gpus_of(first)
        row["seeds"], row["ran"] = len(members), len(ok)
        for name, vals in ((x, xs), (y, ys)):
            v = vals[ok]
            row[name] = float(v.mean()) if ok else math.nan
            row[f"{name}_min"] = float(v.min()) if ok else math.nan
            row[f"{name}_max"] = float(v.max()) if ok else math.nan
        if ok:
            row["error"] = ""
        out.append(row)
    return out, True


def format_frontier(rows, idx, x="output_throughput_per_user", y="output_throughput_per_gpu"):
    """The frontier rows ``idx`` as a table: configuration, GPUs, ``x`` and ``y``."""

    xs, ys, gs = column(rows, x), column(rows, y), column(rows, "gpus")
    valid = int((~np.isnan(xs) & ~np.isnan(ys)).sum())
    labels = config_labels(rows)
    seeds = has_column(rows, "seeds")

    def shown(name, vals, j):
        text = format_number(vals[j])
        lo, hi = as_float(cell(rows[j], f"{name}_min")), as_float(cell(rows[j], f"{name}_max"))
        return f"{text} ({format_number(lo)}-{format_number(hi)})" if seeds and math.isfinite(lo) else text

    body = [[i + 1, int(j), labels[int(j)], format_number(gs[j], 0)]
            + ([f"{cell(rows[j], 'ran')}/{cell(rows[j], 'seeds')}"] if seeds else [])
            + [shown(x, xs, j), shown(y, ys, j)] for i, j in enumerate(idx)]
    head = (f"Pareto frontier: {axis_label(y)} ({'min' if lower_is_better(y) else 'max'}) vs {axis_label(x)} "
            f"({'min' if lower_is_better(x) else 'max'}): {len(idx)} of {valid} configurations"
            + (" (each the mean over its seeds, min-max in brackets)" if seeds else ""))
    names = ["#", "row", "configuration", "GPUs"] + (["seeds"] if seeds else []) + [x, y]
    return head + "\n" + table(names, body, "rrlr" + ("r" if seeds else "") + "rr")


def frontier_to_dict(rows, idx, x="output_throughput_per_user", y="output_throughput_per_gpu"):
    """JSON-ready: ``x``, ``y`` and ``frontier``: per frontier row its ``row`` index, ``config``
    label, ``gpus`` and the two values."""

    xs, ys, gs = column(rows, x), column(rows, y), column(rows, "gpus")
    labels = config_labels(rows)
    spread = (f"{x}_min", f"{x}_max", f"{y}_min", f"{y}_max", "seeds", "ran") if has_column(rows, "seeds") else ()
    return jsonable({"x": x, "y": y, "frontier": [
        {"row": int(j), "config": labels[int(j)], "gpus": int(gs[j]) if float(gs[j]).is_integer() else gs[j],
         x: xs[j], y: ys[j], **{k: cell(rows[int(j)], k) for k in spread}} for j in idx]})
