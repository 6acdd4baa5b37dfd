"""Figures of simllm results, written as PNG files.

matplotlib is an optional dependency (``pip install "simllm[plot]"``); it is imported only when a
figure is drawn. Figures are built with :class:`matplotlib.figure.Figure` on the non-interactive
Agg canvas, never through ``pyplot``, so no global figure registry is touched and each figure is
freed as soon as it is saved.
"""
import math
from pathlib import Path

import numpy as np

from simllm.analysis.compare import build_comparison
from simllm.calibration.validate import METRICS
from simllm.errors import ConfigError, optional_import
from simllm.fileio import output_path
from simllm.search import pareto as fr
from simllm.search.sweep import format_cell
from simllm.sim.stats import percentiles_inplace

#: How each metric is named on an axis.
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
#: Markers told apart at a glance; models get one each when there are no more models than these.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
#: Relative error of the shaded band and of the dashed lines around y = x.
BAND, LINES = 0.10, 0.20
DPI = 150


def require_matplotlib():
    """The ``Figure`` class and the Agg canvas class.

    Raises
    ------
    ConfigError
        When matplotlib is not installed.
    """
    agg = optional_import("matplotlib.backends.backend_agg", "plotting", package="matplotlib", install='"simllm[plot]"')
    figure = optional_import("matplotlib.figure", "plotting", package="matplotlib", install='"simllm[plot]"')
    return figure.Figure, agg.FigureCanvasAgg


def _figure(title, xlabel, ylabel, size=(6.4, 6.0)):
    """A new labelled figure with one set of axes, on the Agg canvas.

    Parameters
    ----------
    title, xlabel, ylabel : str
        Texts of the axes.
    size : tuple of float, optional
        Width and height in inches.

    Returns
    -------
    fig : matplotlib.figure.Figure
    ax : matplotlib.axes.Axes
    """
    figure_cls, canvas_cls = require_matplotlib()
    fig = figure_cls(figsize=size, layout="constrained")
    canvas_cls(fig)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _save(fig, path):
    """Write ``fig`` to ``path`` (creating its folder) and release it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or Path
        The file; its suffix picks the format.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    with output_path(path) as tmp:  # a killed run leaves no half-written image under the name
        fig.savefig(tmp, dpi=DPI, format=path.suffix.lstrip(".").lower() or None)
    fig.clear()
    return path


def _pairs(points, metric):
    """The drawable points of ``metric``: measured and predicted both finite and positive.

    Returns
    -------
    list of tuple
        ``(measured_ms, predicted_ms, hardware, model)`` per point.
    """
    out = []
    for p in points:
        if p.predicted is None:
            continue
        measured = getattr(p.measurement, f"{metric}_ms")
        predicted = p.predicted.get(metric, math.nan)
        if measured is None or predicted is None:
            continue
        if math.isfinite(measured) and math.isfinite(predicted) and measured > 0 and predicted > 0:
            out.append((float(measured), float(predicted), p.hardware or "(unknown)", p.model or "(unknown)"))
    return out


def _reference(ax, lo, hi):
    """Draw y = x, the shaded +/-BAND band and the dashed +/-LINES lines over [lo, hi]."""
    x = np.geomspace(lo, hi, 64)
    ax.fill_between(x, x * (1 - BAND), x * (1 + BAND), color="0.85", linewidth=0, label=f"±{BAND:.0%}")
    ax.plot(x, x * (1 - LINES), color="0.5", linestyle="--", linewidth=0.8, label=f"±{LINES:.0%}")
    ax.plot(x, x * (1 + LINES), color="0.5", linestyle="--", linewidth=0.8)
    ax.plot(x, x, color="0.2", linewidth=1.0, label="y = x")


def _scatter(ax, pairs):
    """Scatter ``pairs``: colour by hardware, marker by model when there are few models.

    Returns
    -------
    list
        Legend proxy handles (one per hardware, then one per model when markers tell models apart).
    """
    from matplotlib.lines import Line2D

    hardware = sorted({h for _, _, h, _ in pairs})
    models = sorted({m for _, _, _, m in pairs})
    colour = {h: f"C{i % 10}" for i, h in enumerate(hardware)}
    by_model = len(models) <= len(MARKERS)
    marker = {m: MARKERS[i] if by_model else "o" for i, m in enumerate(models)}
    for h in hardware:
        for m in models:
            group = [(x, y) for x, y, hh, mm in pairs if hh == h and mm == m]
            if group:
                xs, ys = zip(*group, strict=True)
                ax.scatter(xs, ys, s=36, color=colour[h], marker=marker[m], edgecolors="black",
                           linewidths=0.4, alpha=0.85, zorder=3)
    handles = [Line2D([], [], color=colour[h], marker="o", linestyle="", markeredgecolor="black",
                      markeredgewidth=0.4, label=h) for h in hardware]
    if by_model and len(models) > 1:
        handles += [Line2D([], [], color="0.6", marker=marker[m], linestyle="", markeredgecolor="black",
                           markeredgewidth=0.4, label=m) for m in models]
    return handles


def _validation_figure(metric, pairs):
    """The predicted-vs-measured figure of one metric (log-log, equal ranges)."""
    measured = np.array([x for x, _, _, _ in pairs])
    predicted = np.array([y for _, y, _, _ in pairs])
    median = float(np.median(np.abs(predicted / measured - 1.0)) * 100)
    name = LABELS.get(metric, metric.upper())
    n = len(pairs)
    title = f"{name}: {n} point{'s' if n != 1 else ''}, median |error| {median:.1f}%"
    fig, ax = _figure(title, f"measured {name} (ms)", f"predicted {name} (ms)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    lo = min(measured.min(), predicted.min()) / 1.5
    hi = max(measured.max(), predicted.max()) * 1.5
    _reference(ax, lo, hi)
    points = _scatter(ax, pairs)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    references, _ = ax.get_legend_handles_labels()
    ax.legend(handles=points + references, loc="upper left", fontsize="small", framealpha=0.9)
    return fig


def plot_validation(points, directory):
    """Write one predicted-vs-measured scatter per metric of ``simllm validate``.

    For every metric of :data:`simllm.calibration.validate.METRICS` with at least one point that has both a
    measured and a predicted value, ``validation_<metric>.png`` is written into ``directory``:
    predicted (y) against measured (x) in ms on log-log axes, with the y = x line, a shaded
    +/-10% band and dashed +/-20% lines; points are coloured by hardware and, when there are
    few models, marked by model. The title gives the number of points and the median absolute
    percentage error. Skipped points (``predicted`` None) and values that are missing, zero or
    not finite are not drawn.

    Parameters
    ----------
    points : iterable of simllm.calibration.validate.Point
        What :func:`simllm.calibration.validate.validate` returns.
    directory : str or Path
        The folder to write into; created when missing.

    Returns
    -------
    list of Path
        The files written, in the order of ``METRICS`` (empty when no metric has data).

    Raises
    ------
    ConfigError
        When matplotlib is not installed.
    """
    require_matplotlib()
    points = list(points)
    directory = Path(directory)
    written = []
    for metric in METRICS:
        pairs = _pairs(points, metric)
        if pairs:
            written.append(_save(_validation_figure(metric, pairs), directory / f"validation_{metric}.png"))
    return written


# ----------------------------------------------------------------------------- simllm run

#: Points drawn per CDF at most (quantiles of the sorted values beyond that).
CDF_POINTS = 2000


def _cdf_points(values):
    """``(x, y)`` of the empirical CDF of the finite ``values``, thinned to ``CDF_POINTS``."""
    v = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
    if v.size == 0:
        return v, v
    y = np.arange(1, v.size + 1) / v.size
    if v.size > CDF_POINTS:
        idx = np.unique(np.linspace(0, v.size - 1, CDF_POINTS).round().astype(np.int64))
        v, y = v[idx], y[idx]
    return v, y


def _run_title(summary, what):
    model, hardware = summary.get("model", "?"), summary.get("hardware", "?")
    tp, dp = summary.get("tensor_parallel_size", 1), summary.get("data_parallel_size", 1)
    layout = f" (TP={tp}, DP={dp})" if (tp, dp) != (1, 1) else ""
    return f"{what}: {model} on {hardware}{layout}"


def _cdf_figure(values_ms, name, summary):
    x, y = _cdf_points(values_ms)
    finite = np.asarray(values_ms)[np.isfinite(values_ms)]
    fig, ax = _figure(_run_title(summary, f"{name} CDF"), f"{name} (ms)", "fraction of requests")
    ax.step(x, y, where="post", color="C0", linewidth=1.5, label=f"{finite.size:,} requests")
    if finite.size:
        for q, style in ((50, ":"), (99, "--")):
            v = float(percentiles_inplace(finite.copy(), (q,))[0])
            ax.axvline(v, color="0.3", linestyle=style, linewidth=1.0, label=f"P{q} {v:,.2f} ms")
    ax.set_ylim(0.0, 1.02)
    ax.legend(loc="lower right", fontsize="small", framealpha=0.9)
    return fig


def _series_figure(result, key, name, ylabel, scale=1.0):
    ts = result.timeseries
    t = np.asarray(ts["t_s"], dtype=float)
    width = float(ts.get("window_s", 0.0) or 0.0)
    values = np.asarray(ts[key], dtype=float) * scale
    fig, ax = _figure(_run_title(result.summary, name), "time (s)", ylabel, size=(8.0, 4.5))
    if t.size:
        ax.plot(t + width / 2, values, color="C0", linewidth=1.2, marker="o" if t.size < 30 else None,
                markersize=3)
        ax.set_xlim(0.0, float(t[-1] + width))
    ax.set_ylim(bottom=0.0)
    return fig


def plot_run(result, directory):
    """Write the figures of one simulation (``simllm run --plot``) into ``directory``.

    - ``run_ttft_cdf.png`` and ``run_tpot_cdf.png``: the CDF of the successful requests' TTFT and
      TPOT (ms), with P50 and P99 marked;
    - ``run_kv_cache.png``: KV-cache occupancy (% of blocks) over time;
    - ``run_throughput.png``: output tokens/s over time.

    The time series come from ``result.timeseries`` (one point per window, drawn at its middle).

    Parameters
    ----------
    result : SimResult
        Simulated with ``keep_requests=True`` (the CDFs need the per-request values).
    directory : str or Path
        Created when missing.

    Returns
    -------
    list of Path
        The files written, in the order above.

    Raises
    ------
    ConfigError
        When matplotlib is not installed or the result kept no per-request data.
    """
    require_matplotlib()
    if result.requests is None:
        raise ConfigError("the TTFT/TPOT CDFs need per-request data: simulate with keep_requests=True")
    directory = Path(directory)
    s = result.summary
    req = result.requests
    return [
        _save(_cdf_figure(np.asarray(req["ttft_s"], dtype=float) * 1e3, "TTFT", s), directory / "run_ttft_cdf.png"),
        _save(_cdf_figure(np.asarray(req["tpot_s"], dtype=float) * 1e3, "TPOT", s), directory / "run_tpot_cdf.png"),
        _save(_series_figure(result, "kv_cache_usage", "KV cache occupancy", "KV cache blocks in use (%)", 100.0),
              directory / "run_kv_cache.png"),
        _save(_series_figure(result, "output_throughput", "Output throughput", "output throughput (tok/s)"),
              directory / "run_throughput.png"),
    ]


# ----------------------------------------------------------------------------- load test

#: Keys :func:`plot_loadtest` reads from each row, with the alternatives it accepts (the first
#: present wins): vLLM's summary names, then :class:`simllm.analysis.loadtest.LoadTestRow`'s.
LOADTEST_KEYS = {
    "concurrency": ("concurrency", "max_concurrency"),
    "request_rate": ("request_rate", "request_rate_rps"),
    "output_throughput": ("output_throughput", "output_throughput_tok_s"),
    "mean_tpot_ms": ("mean_tpot_ms",),
    "p99_e2el_ms": ("p99_e2el_ms", "p99_latency_ms"),
    "mean_e2el_ms": ("mean_e2el_ms", "avg_latency_ms"),
}


def _number_or_none(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)  # "inf" too
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _loadtest_rows(rows):
    """The rows as dicts of floats (None where missing) under the names of ``LOADTEST_KEYS``."""
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            row = row.to_dict() if hasattr(row, "to_dict") else None
        if row is None:
            raise ConfigError("a dict (or an object with to_dict()) per load-test row", key=f"rows[{i}]")
        picked = {}
        for name, keys in LOADTEST_KEYS.items():
            picked[name] = next((_number_or_none(row[k]) for k in keys if _number_or_none(row.get(k)) is not None),
                                None)
        out.append(picked)
    return out


def _need(rows, name):
    for i, r in enumerate(rows):
        if r[name] is None or not math.isfinite(r[name]):
            raise ConfigError(f"a finite number under {' or '.join(LOADTEST_KEYS[name])}", key=f"rows[{i}]")


def plot_loadtest(rows, directory):
    """Write the figures of a load test into ``directory``.

    - ``loadtest_throughput.png``: output tokens/s against the load;
    - ``loadtest_latency.png``: P99 (and, when given, mean) end-to-end latency against the load;
    - ``loadtest_frontier.png``: the throughput / interactivity frontier, total output tokens/s
      against output tokens/s per user (1000 / mean TPOT in ms), each point labelled with its
      load.

    The load is the concurrency when every row has a positive one (a closed loop), else the
    request rate (an open loop).

    Parameters
    ----------
    rows : sequence of dict
        One per load point, with vLLM summary keys: ``concurrency`` (or ``max_concurrency``;
        0 or absent for an open loop), ``request_rate`` (req/s; ``"inf"`` or absent for a closed
        loop), ``output_throughput`` (tok/s), ``mean_tpot_ms``, ``p99_e2el_ms`` and optionally
        ``mean_e2el_ms``. :class:`simllm.analysis.loadtest.LoadTestRow` objects or their ``to_dict()``
        (``request_rate_rps``, ``output_throughput_tok_s``, ``p99_latency_ms``,
        ``avg_latency_ms``) are accepted too.
    directory : str or Path
        Created when missing.

    Returns
    -------
    list of Path
        The files written, in the order above (none for no rows).

    Raises
    ------
    ConfigError
        When matplotlib is not installed, or a row lacks the load or a metric.
    """
    require_matplotlib()
    rows = _loadtest_rows(rows)
    if not rows:
        return []
    closed = all((r["concurrency"] or 0) > 0 for r in rows)
    load_key = "concurrency" if closed else "request_rate"
    _need(rows, load_key)
    for name in ("output_throughput", "p99_e2el_ms", "mean_tpot_ms"):
        _need(rows, name)
    rows = sorted(rows, key=lambda r: r[load_key])
    load = np.array([r[load_key] for r in rows])
    xlabel = "concurrency (clients)" if closed else "request rate (req/s)"
    directory = Path(directory)
    thr = np.array([r["output_throughput"] for r in rows])
    written = []

    fig, ax = _figure("Output throughput vs load", xlabel, "output throughput (tok/s)", size=(7.0, 4.8))
    ax.plot(load, thr, marker="o", color="C0")
    ax.set_ylim(bottom=0.0)
    written.append(_save(fig, directory / "loadtest_throughput.png"))

    fig, ax = _figure("End-to-end latency vs load", xlabel, "E2E latency (ms)", size=(7.0, 4.8))
    ax.plot(load, [r["p99_e2el_ms"] for r in rows], marker="o", color="C3", label="P99")
    if all(r["mean_e2el_ms"] is not None for r in rows):
        ax.plot(load, [r["mean_e2el_ms"] for r in rows], marker="s", color="C0", label="mean")
    ax.set_ylim(bottom=0.0)
    ax.legend(loc="upper left", fontsize="small")
    written.append(_save(fig, directory / "loadtest_latency.png"))

    per_user = np.array([1000.0 / r["mean_tpot_ms"] if r["mean_tpot_ms"] > 0 else np.nan for r in rows])
    fig, ax = _figure("Throughput vs per-user speed", "output tokens/s per user (1000 / mean TPOT ms)",
                      "total output throughput (tok/s)", size=(7.0, 5.2))
    ax.plot(per_user, thr, marker="o", color="C2")
    for x, y, v in zip(per_user, thr, load):
        if math.isfinite(x):
            ax.annotate(f"c={v:g}" if closed else f"{v:g}/s", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize="small")
    ax.set_xlim(left=0.0)
    ax.set_ylim(bottom=0.0)
    written.append(_save(fig, directory / "loadtest_frontier.png"))
    return written


# ----------------------------------------------------------------------------- compare

def _bar_figure(comparison, key, title, ylabel):
    """Bars of metric ``key`` per column; failed columns marked by their error kind."""
    labels = [c.label for c in comparison.columns]
    values = [None if not c.ok else v for c, v in zip(comparison.columns, comparison.row(key).values)]
    width = max(6.4, 1.3 * len(labels) + 2.0)
    fig, ax = _figure(title, "", ylabel, size=(width, 5.0))
    x = np.arange(len(labels))
    heights = [v if v is not None else 0.0 for v in values]
    bars = ax.bar(x, heights, color=[f"C{i % 10}" for i in range(len(labels))], edgecolor="black", linewidth=0.4)
    top = max(heights) if any(heights) else 1.0
    for i, (bar, v) in enumerate(zip(bars, values)):
        c = comparison.columns[i]
        text = ("OOM" if c.oom else "error") if not c.ok else (f"{v:,.0f}" if v >= 100 else f"{v:,.2f}") if v is not None else "-"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize="small")
    ax.set_xticks(x, labels, rotation=20 if len(labels) > 2 else 0, ha="right" if len(labels) > 2 else "center")
    ax.set_ylim(0.0, top * 1.15)
    ax.grid(True, axis="y", alpha=0.3)
    ax.grid(False, axis="x")
    return fig


def plot_compare(comparison, directory):
    """Write the bar charts of a :func:`simllm.analysis.compare.compare` into ``directory``:
    ``compare_throughput_per_gpu.png`` (output tokens/s per GPU), ``compare_ttft.png`` and
    ``compare_tpot.png`` (mean TTFT and TPOT, ms). A failed column has no bar, only ``OOM`` or
    ``error``. The metrics are computed from the columns' summaries, whatever rows the
    comparison was built with.

    Returns
    -------
    list of Path
        The files written, in the order above.

    Raises
    ------
    ConfigError
        When matplotlib is not installed.
    """
    require_matplotlib()
    keys = ("output_throughput_per_gpu", "mean_ttft_ms", "mean_tpot_ms")
    full = build_comparison(comparison.columns, keys)
    directory = Path(directory)
    return [
        _save(_bar_figure(full, "output_throughput_per_gpu", "Output throughput per GPU", "output tok/s per GPU"),
              directory / "compare_throughput_per_gpu.png"),
        _save(_bar_figure(full, "mean_ttft_ms", "Mean time to first token", "mean TTFT (ms)"),
              directory / "compare_ttft.png"),
        _save(_bar_figure(full, "mean_tpot_ms", "Mean time per output token", "mean TPOT (ms)"),
              directory / "compare_tpot.png"),
    ]


# ----------------------------------------------------------------------------- Pareto frontier
# (simllm frontier / simllm optimize; the columns and the frontier come from simllm.search.pareto)

#: Configurations labelled on the frontier figure at most (beyond that only the chosen one).
FRONTIER_LABELS = 12


def plot_frontier(rows, frontier_idx, directory, chosen=None, x="output_throughput_per_user",
                  y="output_throughput_per_gpu", filename=None, title=None):
    """Write the Pareto-frontier figure of a set of configurations into ``directory``.

    Every configuration with finite ``x`` and ``y`` is a point (hollow grey crosses for those
    whose ``meets_slo`` column is false, when the rows have one); the frontier rows are joined
    by a line in the order of ``x`` (and labelled by configuration when there are at most
    :data:`FRONTIER_LABELS` of them); the ``chosen`` row is a large star with its label.

    Parameters
    ----------
    rows : numpy structured array or sequence of dict
        Configurations with metric columns (a sweep's table, :meth:`OptimizeResult.rows`, a
        CSV read by :func:`simllm.search.pareto.read_rows`); derived columns such as
        ``output_throughput_per_user`` (1000 / mean TPOT ms) and ``output_throughput_per_gpu``
        are computed when absent (:func:`simllm.search.pareto.column`).
    frontier_idx : sequence of int, dict or None
        Indices of the frontier rows (:func:`simllm.search.pareto.pareto`); None computes the
        frontier of ``y`` vs ``x`` (each maximised unless lower is better, e.g. ``*_ms``). A dict
        ``{name: indices}`` draws several frontiers, each its own line (``optimize``'s
        aggregated and disaggregated grids).
    directory : str or Path
        Created when missing.
    chosen : int, optional
        Index of the configuration picked (:func:`simllm.search.optimize.optimize`'s answer).
    x, y : str
        Columns on the axes (default output tokens/s per user and output tokens/s per GPU; the
        TTFT variant is ``x="p99_ttft_ms"``).
    filename : str, optional
        Default ``frontier.png`` for the default axes, else ``frontier_<y>_vs_<x>.png``.
    title : str, optional

    Returns
    -------
    Path
        The file written.

    Raises
    ------
    ConfigError
        When matplotlib is not installed.
    """
    require_matplotlib()
    xs, ys = fr.column(rows, x), fr.column(rows, y)
    if frontier_idx is None:
        frontier_idx = fr.frontier_rows(rows, x, y)
    lines = frontier_idx if isinstance(frontier_idx, dict) else {"Pareto frontier": frontier_idx}

    def ordered(members):
        i = np.asarray(members, dtype=np.int64).reshape(-1)
        i = i[np.isfinite(xs[i]) & np.isfinite(ys[i])] if i.size else i
        return i[np.lexsort((i, xs[i]))] if i.size else i

    lines = {name: ordered(members) for name, members in lines.items()}
    idx = np.unique(np.concatenate([np.zeros(0, dtype=np.int64), *lines.values()]))
    idx = idx[np.lexsort((idx, xs[idx]))] if idx.size else idx
    finite = np.isfinite(xs) & np.isfinite(ys)
    has_slo = fr.has_column(rows, "meets_slo")
    meets = fr.column(rows, "meets_slo") if has_slo else np.ones(len(xs))
    ok = finite & (meets > 0)
    bad = finite & ~(meets > 0)
    n = int(finite.sum())
    fig, ax = _figure(title or f"Pareto frontier{'s' if len(lines) > 1 else ''}: {len(idx)} of {n} "
                      f"configuration{'s' if n != 1 else ''}",
                      fr.axis_label(x), fr.axis_label(y), size=(7.5, 5.6))
    if ok.any():
        ax.scatter(xs[ok], ys[ok], s=30, color="C0", edgecolors="black", linewidths=0.4, alpha=0.8, zorder=3,
                   label="meets the SLOs" if has_slo else "configuration")
    if bad.any():
        ax.scatter(xs[bad], ys[bad], s=30, color="0.55", marker="x", linewidths=1.0, alpha=0.8, zorder=2,
                   label="fails the SLOs")
    # Configurations with identical coordinates share one label ("+N identical").
    same = {}
    for j in idx:
        same.setdefault((float(xs[j]), float(ys[j])), []).append(int(j))
    chosen_ok = chosen is not None and bool(np.isfinite(xs[chosen]) and np.isfinite(ys[chosen]))
    chosen_at = (float(xs[chosen]), float(ys[chosen])) if chosen_ok else None

    names = fr.config_labels(rows)

    def label(members):
        extra = f" (+{len(members) - 1} identical)" if len(members) > 1 else ""
        return names[members[0]] + extra

    for colour, (name, members) in enumerate(lines.items(), 1):
        if members.size:
            ax.plot(xs[members], ys[members], color=f"C{colour}", linewidth=1.6, marker="o", markersize=5, zorder=4,
                    label=f"{name} ({members.size})")
    if idx.size:
        if len(same) <= FRONTIER_LABELS:
            for point, members in same.items():
                if point != chosen_at:
                    ax.annotate(label(members), point, textcoords="offset points", xytext=(4, 4),
                                fontsize="x-small", color="0.25")
    if chosen_ok:
        members = [int(chosen)] + [j for j in same.get(chosen_at, []) if j != int(chosen)]
        ax.scatter([xs[chosen]], [ys[chosen]], s=220, marker="*", color="C3", edgecolors="black", linewidths=0.6,
                   zorder=5, label="chosen")
        ax.annotate(label(members), chosen_at, textcoords="offset points", xytext=(6, -12), fontsize="small",
                    color="C3", fontweight="bold")
    if n:
        for values, setter in ((xs, ax.set_xlim), (ys, ax.set_ylim)):
            if float(np.min(values[finite])) >= 0 and float(np.max(values[finite])) > 0:
                setter(0.0, float(np.max(values[finite])) * 1.15)
        ax.legend(loc="best", fontsize="small", framealpha=0.9)
    default = (x, y) == ("output_throughput_per_user", "output_throughput_per_gpu")
    name = filename or ("frontier.png" if default else f"frontier_{y}_vs_{x}.png")
    return _save(fig, Path(directory) / name)


# ----------------------------------------------------------------------------- sweeps
# (simllm sweep --plot; the result and its per-grid-point band come from simllm.search.sweep)

def plot_sweep(result, directory, metrics=("output_throughput", "p99_ttft_ms", "p99_tpot_ms", "mean_e2el_ms")):
    """PNGs of ``metrics`` against the first numeric grid path (one line per combination of the
    other grid paths, the P5-P95 band over seeds and draws shaded); without a numeric grid path,
    histograms over all rows. Needs matplotlib."""
    require_matplotlib()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    t = result.table
    numeric = [p for p in result.grid_paths if t[p].dtype.kind in "if"]
    written = []
    agg = result.aggregate(by="grid") if result.grid_paths else None
    for m in metrics:
        title = f"simllm sweep: {m}"
        if numeric and agg is not None and len(agg):
            x = numeric[0]
            fig, ax = _figure(title, x, m, size=(6.4, 4.8))
            others = [p for p in result.grid_paths if p != x]
            labels = [" ".join(f"{p}={format_cell(g[p], 4)}" for p in others) for g in agg]
            for label in dict.fromkeys(labels):
                sel = np.array([lab == label for lab in labels])
                g = agg[sel]
                order = np.argsort(g[x])
                xs = g[x][order].astype(float)
                ax.plot(xs, g[f"{m}_mean"][order], marker="o", label=label or None)
                ax.fill_between(xs, g[f"{m}_p5"][order], g[f"{m}_p95"][order], alpha=0.2)
            if xs.size and xs.min() > 0 and xs.max() / xs.min() >= 16:
                ax.set_xscale("log", base=2)
            if len(set(labels)) > 1:
                ax.legend(fontsize="small")
        else:
            fig, ax = _figure(title, m, "simulations", size=(6.4, 4.8))
            vals = t[m][~np.isnan(t[m])]
            ax.hist(vals, bins=min(50, max(5, int(math.sqrt(max(len(vals), 1))))))
        written.append(_save(fig, directory / f"sweep_{m}.png"))
    return written
