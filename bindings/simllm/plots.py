"""Figures of simllm results, written as PNG files.

matplotlib is an optional dependency (``pip install "simllm[plot]"``); it is imported only when a
figure is drawn. Figures are built with :class:`matplotlib.figure.Figure` on the non-interactive
Agg canvas, never through ``pyplot``, so no global figure registry is touched and each figure is
freed as soon as it is saved.
"""
import math
from pathlib import Path

import numpy as np

from simllm.accuracy import METRICS
from simllm.errors import ConfigError

#: How each metric is named on an axis.
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
#: Markers told apart at a glance; models get one each when there are no more models than these.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
#: Relative error of the shaded band and of the dashed lines around y = x.
BAND, LINES = 0.10, 0.20
DPI = 150


def _matplotlib():
    """The ``Figure`` class and the Agg canvas class.

    Raises
    ------
    ConfigError
        When matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError('plotting needs matplotlib, which is not installed: pip install "simllm[plot]"') from None
    return Figure, FigureCanvasAgg


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
    figure_cls, canvas_cls = _matplotlib()
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
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
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

    For every metric of :data:`simllm.accuracy.METRICS` with at least one point that has both a
    measured and a predicted value, ``validation_<metric>.png`` is written into ``directory``:
    predicted (y) against measured (x) in ms on log-log axes, with the y = x line, a shaded
    +/-10% band and dashed +/-20% lines; points are coloured by hardware and, when there are
    few models, marked by model. The title gives the number of points and the median absolute
    percentage error. Skipped points (``predicted`` None) and values that are missing, zero or
    not finite are not drawn.

    Parameters
    ----------
    points : iterable of simllm.accuracy.Point
        What :func:`simllm.accuracy.validate` returns.
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
    _matplotlib()
    points = list(points)
    directory = Path(directory)
    written = []
    for metric in METRICS:
        pairs = _pairs(points, metric)
        if pairs:
            written.append(_save(_validation_figure(metric, pairs), directory / f"validation_{metric}.png"))
    return written
