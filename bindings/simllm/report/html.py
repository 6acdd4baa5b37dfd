"""Interactive HTML reports: one self-contained file per command (``--report FILE.html``).

Each report is a single HTML page that opens offline, without a server or a network: plotly.js
(MIT licence) is inlined from the installed ``plotly`` package (``pip install "simllm[report]"``;
only its JavaScript is used, the figures are plain JSON built here), the figures' data sits in one
``<script type="application/json">`` block with ``<``, ``>`` and ``&`` escaped, and every text
from a file or a flag (model names, configuration labels, measured sources) is HTML-escaped.

One public function per report kind returns the page's text: :func:`run_report`,
:func:`loadtest_report`, :func:`compare_report`, :func:`sweep_report`, :func:`frontier_report`,
:func:`optimize_report` and :func:`validate_report`; :func:`write_report` writes it atomically.
:func:`frontier_figure` is the Pareto frontier with the configuration of each point in its hover
text, which the sweep, frontier and optimize reports share.
"""
import html
import json
import math
import re

import numpy as np

from simllm.analysis.compare import build_comparison, format_ratio, format_value
from simllm.calibration.record import simllm_version
from simllm.calibration.validate import METRICS as VALIDATION_METRICS
from simllm.errors import CLI, ConfigError, optional_import
from simllm.fileio import write_output
from simllm.report.text import BAND_COLUMNS, band_range, domain_warning
from simllm.search import pareto as fr
from simllm.search.optimize import MODES, STATUSES
from simllm.search.sweep import REPORT_METRICS, format_cell
from simllm.sim.results import percentile_key
from simllm.text import format_number, jsonable

#: The file suffixes ``--report`` accepts.
SUFFIXES = (".html", ".htm")
#: Bins of the TTFT/TPOT/E2E latency histograms.
HISTOGRAM_BINS = 60
#: Bins of the ITL histogram at most (the run's log-spaced bins merged in neighbouring groups).
ITL_BINS = 120
#: Configurations the sweep report's table lists at most (the figures show them all).
MAX_TABLE_ROWS = 50
#: Relative error of the shaded band and of the dashed lines around y = x (as the PNG plots).
BAND, LINES = 0.10, 0.20
#: Colours of traces, in order (plotly's default cycle).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
#: How each latency metric is named in titles.
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:16px 24px;
color:#222;background:#fff}
h1{font-size:1.5em;margin:0.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:4px}
p.sub{color:#555;margin:0.2em 0 1em}p.note{color:#555;font-size:0.9em}p.warn{color:#8a5300;background:#fff6e5;
padding:6px 10px;border-left:3px solid #e0a030}
table{border-collapse:collapse;font-size:0.9em;margin:8px 0}th,td{padding:3px 10px;border-bottom:1px solid #eee}
th{background:#f4f4f4;text-align:left}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
tr.hl td{background:#eaf3ff;font-weight:600}code{background:#f4f4f4;padding:1px 4px;border-radius:3px}
.grid{display:flex;flex-wrap:wrap;gap:12px}.plot{flex:1 1 540px;min-width:420px;height:420px}
footer{color:#888;font-size:0.8em;margin-top:2em}
"""

#: What may not appear inside a ``<script>`` element's text (HTML's script data states).
SCRIPT_HAZARD = re.compile(r"</script|<!--", re.IGNORECASE)
#: Draws every figure, then marks the body ``data-plots-rendered`` (what the browser tests wait for).
SCRIPT = """
(function () {
  var figures = JSON.parse(document.getElementById("simllm-figures").textContent);
  var config = {displaylogo: false, responsive: true};
  Promise.all(figures.map(function (f) { return Plotly.newPlot(f.id, f.data, f.layout, config); }))
    .then(function () { document.body.setAttribute("data-plots-rendered", String(figures.length)); });
})();
"""


# ----------------------------------------------------------------------------- the page

def require_plotly(**where):
    """The ``plotly`` module (its JavaScript is inlined into reports).

    Parameters
    ----------
    **where
        ``source``, ``key`` ... of the error (the flag that asked for a report).

    Raises
    ------
    ConfigError
        One line naming the extra to install when plotly is missing.
    """
    return optional_import("plotly", "an HTML report", package="plotly", install='"simllm[report]"', **where)


def plotly_js():
    """plotly.js, minified, from the installed ``plotly`` package (its MIT licence header
    included), safe to put in a ``<script>`` element: the two sequences that could end or
    derail the element, ``</script`` and ``<!--``, get their ``<`` written ``\\x3C``, which
    JavaScript reads as the same character in strings, templates and regular expressions (the
    only places they can occur; plotly.js 4 has neither)."""
    offline = optional_import("plotly.offline", "an HTML report", package="plotly", install='"simllm[report]"')
    return SCRIPT_HAZARD.sub(lambda m: "\\x3C" + m.group(0)[1:], offline.get_plotlyjs())


def script_json(obj):
    """``obj`` as strict JSON (NaN and infinities as null) that cannot end the ``<script>``
    element holding it nor open a comment: ``<``, ``>``, ``&`` and the JavaScript line separators
    are ``\\u`` escapes, which ``JSON.parse`` reads back as the same characters."""
    text = json.dumps(jsonable(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def esc(value):
    """``value`` as HTML text (``&``, ``<``, ``>`` and quotes escaped)."""
    return html.escape(str(value), quote=True)


class Page:
    """An HTML report being built: sections of headings, paragraphs, tables and figures.

    Parameters
    ----------
    title : str
        The page's title and top heading.
    subtitle : str, optional
        One line under the heading (what was simulated).
    """

    def __init__(self, title, subtitle=""):
        self.title, self.subtitle = title, subtitle
        self.parts = []
        self.figures = []
        self._grid = None

    def heading(self, text):
        self._close_grid()
        self.parts.append(f"<h2>{esc(text)}</h2>")

    def paragraph(self, text, kind="note"):
        """A paragraph of plain text; ``kind`` ``note`` (grey), ``warn`` (highlighted) or ``""``."""
        if text:
            self._close_grid()
            self.parts.append(f'<p class="{kind}">{esc(text)}</p>' if kind else f"<p>{esc(text)}</p>")

    def code(self, text):
        self._close_grid()
        self.parts.append(f"<p><code>{esc(text)}</code></p>")

    def table(self, header, rows, align=None, highlight=(), table_id=None):
        """A table of plain-text cells; ``align`` a string of ``l``/``r`` per column (default
        first left, others right); the rows whose index is in ``highlight`` stand out."""
        self._close_grid()
        align = align or "l" + "r" * (len(header) - 1)
        cls = ['' if a == "l" else ' class="r"' for a in align]
        head = "".join(f"<th{c}>{esc(h)}</th>" for h, c in zip(header, cls))
        body = []
        for i, row in enumerate(rows):
            cells = "".join(f"<td{c}>{esc(v)}</td>" for v, c in zip(row, cls))
            body.append(f'<tr class="hl">{cells}</tr>' if i in highlight else f"<tr>{cells}</tr>")
        ident = f' id="{esc(table_id)}"' if table_id else ""
        self.parts.append(f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    def figure(self, data, layout):
        """A plotly figure (``data``: list of trace dicts, ``layout``: dict), laid out in a grid
        with the figures that follow it directly."""
        ident = f"plot-{len(self.figures) + 1}"
        self.figures.append({"id": ident, "data": data, "layout": layout})
        if self._grid is None:
            self._grid = []
            self.parts.append(self._grid)
        self._grid.append(f'<div class="plot" id="{ident}"></div>')

    def _close_grid(self):
        self._grid = None

    def render(self):
        """The whole page: HTML, the figures' JSON and plotly.js inlined."""
        body = "\n".join('<div class="grid">' + "".join(p) + "</div>" if isinstance(p, list) else p
                         for p in self.parts)
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(self.title)}</title><style>{CSS}</style></head>\n"
            f"<body><h1>{esc(self.title)}</h1>"
            + (f'<p class="sub">{esc(self.subtitle)}</p>' if self.subtitle else "")
            + f"\n{body}\n"
            f"<footer>simllm {esc(simllm_version())}: simulated, not measured. Figures drawn with plotly.js (MIT), "
            "inlined: this file needs no network.</footer>\n"
            f'<script id="simllm-figures" type="application/json">{script_json(self.figures)}</script>\n'
            f"<script>{plotly_js()}</script>\n<script>{SCRIPT}</script>\n</body></html>\n")


def write_report(path, text):
    """Write a report's text to ``path`` atomically (a temporary file renamed); one-line
    :class:`ConfigError` when it cannot be written. Returns the path."""
    return write_output(path, text)


def check_report_path(path, key="--report"):
    """Raise a one-line :class:`ConfigError` unless ``path`` ends in ``.html`` or ``.htm``."""
    if not str(path).lower().endswith(SUFFIXES):
        raise ConfigError("a file name ending in .html", source=CLI, key=key, value=str(path))


# ----------------------------------------------------------------------------- figure pieces

def layout(title, xtitle, ytitle, *, xlog=False, ylog=False, **extra):
    """A figure's layout: titled axes (their type, linear or categories, from the data unless
    logarithmic), hover on the nearest point, legend below the plot."""
    out = {
        "title": {"text": esc(title), "font": {"size": 15}},
        "xaxis": {"title": {"text": esc(xtitle)}, "type": "log" if xlog else "-", "zeroline": False,
                  "gridcolor": "#e5e5e5"},
        "yaxis": {"title": {"text": esc(ytitle)}, "type": "log" if ylog else "-", "zeroline": False,
                  "gridcolor": "#e5e5e5", "rangemode": "normal" if ylog else "tozero"},
        "hovermode": "closest",
        "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "legend": {"orientation": "h", "y": -0.2},
        "plot_bgcolor": "#fcfcfc",
        "paper_bgcolor": "#ffffff",
    }
    out.update(extra)
    return out


def _floats(values):
    return np.asarray(values, dtype=float)


def _hover(lines):
    """Hover text: escaped lines joined by ``<br>`` (plotly's line break)."""
    return "<br>".join(esc(line) for line in lines if line)


def histogram_trace(values, name, unit="ms", bins=HISTOGRAM_BINS, colour=COLOURS[0]):
    """A step histogram of the finite ``values`` as the share of them per bin.

    Bins are log-spaced when the values are positive and span more than 20x (the axis is then
    logarithmic), else even. Returns ``(trace, log_axis, counts)``; ``(None, False, None)``
    without finite values.
    """
    v = _floats(values)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None, False, None
    lo, hi = float(v.min()), float(v.max())
    log = lo > 0 and hi / lo > 20
    if hi <= lo:
        pad = abs(lo) * 0.05 or 0.5
        edges = np.array([lo - pad, hi + pad])
    else:
        edges = np.geomspace(lo, hi, bins + 1) if log else np.linspace(lo, hi, bins + 1)
    counts = np.histogram(v, edges)[0]
    return _step_trace(edges, counts, name, unit, colour), log, counts


def _step_trace(edges, counts, name, unit, colour):
    """The step line of a histogram (``counts`` over ``edges``), hover per bin."""
    total = max(int(counts.sum()), 1)
    share = counts / total
    text = [f"{format_number(a)}–{format_number(b)} {unit}: {int(c):,} ({s:.1%})"
            for a, b, c, s in zip(edges[:-1], edges[1:], counts, share)]
    return {"type": "scatter", "mode": "lines", "name": name, "x": edges.tolist(),
            "y": share.tolist() + [float(share[-1])], "line": {"shape": "hv", "color": colour, "width": 1.5},
            "fill": "tozeroy", "hovertext": text + [text[-1]], "hoverinfo": "text"}


def vertical_line(x, top, name, dash="dash", colour="#444"):
    """A vertical line at ``x`` from 0 to ``top`` as a trace (in data coordinates, so it holds on
    logarithmic axes too)."""
    return {"type": "scatter", "mode": "lines", "name": name, "x": [x, x], "y": [0.0, top],
            "line": {"dash": dash, "color": colour, "width": 1.2}, "hoverinfo": "name"}


def queue_depth_series(requests, t_s, window_s):
    """The mean number of requests waiting in the engine's queue over each window: the integral
    of the queue length over ``[t, t + window_s)`` divided by ``window_s``, exact from the
    per-request rows (a request waits from ``first_scheduled_s - queue_s`` to
    ``first_scheduled_s``; one never scheduled does not count).

    Parameters
    ----------
    requests : dict of ndarray
        :attr:`SimResult.requests`.
    t_s : ndarray
        Window starts.
    window_s : float

    Returns
    -------
    ndarray
        One value per window.
    """
    end = _floats(requests["first_scheduled_s"])
    wait = _floats(requests["queue_s"])
    ok = np.isfinite(end) & np.isfinite(wait) & (wait > 0)
    start, end = np.sort(end[ok] - wait[ok]), np.sort(end[ok])
    cs, ce = np.concatenate([[0.0], np.cumsum(start)]), np.concatenate([[0.0], np.cumsum(end)])

    def area(t):  # integral of the queue length from 0 to t: sum of clip(t - s, 0) - clip(t - e, 0)
        ns, ne = np.searchsorted(start, t, "right"), np.searchsorted(end, t, "right")
        return (ns * t - cs[ns]) - (ne * t - ce[ne])

    t = _floats(t_s)
    if not window_s or t.size == 0:
        return np.zeros(t.size)
    return (area(t + window_s) - area(t)) / window_s


# ----------------------------------------------------------------------------- simllm run

def _run_subtitle(s):
    tp, dp = s.get("tensor_parallel_size", 1), s.get("data_parallel_size", 1)
    pp = s.get("pipeline_parallel_size", 1)
    layout_ = f"TP={tp}" + (f", PP={pp}" if pp > 1 else "") + f", DP={dp}"
    load = (f"{s['max_concurrency']} concurrent clients" if s.get("max_concurrency") else
            f"request rate {s.get('request_rate', 'inf')} req/s")
    return (f"{s.get('model', '?')} on {s.get('hardware', '?')} ({layout_}, {s.get('dtype', '?')}), "
            f"{s.get('num_requests', 0):,} requests, {load}")


def _band_cells(bands, key):
    band = (bands or {}).get(key)
    return band_range(band) if band else ""


def _headline(page, s, percentiles, bands, reasons):
    """The headline table of a run's summary: throughputs and latency percentiles with bands."""
    rows = [["Successful requests", f"{s['completed']:,}", ""], ["Failed requests", f"{s['failed']:,}", ""],
            ["Benchmark duration (s)", format_number(s["duration"]), ""]]
    for key, label in (("request_throughput", "Request throughput (req/s)"),
                       ("output_throughput", "Output token throughput (tok/s)"),
                       ("total_token_throughput", "Total token throughput (tok/s)")):
        rows.append([label, format_number(s[key]), _band_cells(bands, key)])
    if "request_goodput" in s:
        rows.append(["Request goodput (req/s)", format_number(s["request_goodput"]), ""])
    for name in ("ttft", "tpot", "itl", "e2el"):
        label = LABELS[name]
        keys = [("Mean", f"mean_{name}_ms"), ("Median", f"median_{name}_ms")]
        keys += [(f"P{percentile_key(p)[1:]}", f"{percentile_key(p)}_{name}_ms") for p in percentiles if p != 50]
        for what, key in keys:
            if key in s:
                rows.append([f"{what} {label} (ms)", format_number(s[key]), _band_cells(bands, key)])
    if bands:
        coverage = next(iter(bands.values())).coverage
        page.table(["metric", "simulated", f"{coverage:.0%} error band"], rows, "lrr", table_id="headline")
    else:  # --no-error-band, or a disaggregated run's (the bands are calibrated on aggregated runs)
        page.table(["metric", "simulated"], [r[:2] for r in rows], "lr", table_id="headline")
    if bands:
        some = next(iter(bands.values()))
        page.paragraph(f"{some.coverage:.0%} error band: where the measured value lay, relative to the prediction, "
                       f"for {some.coverage:.0%} of the {some.points} nearest calibrated cases.")
    page.paragraph(domain_warning(reasons), "warn")


def _engine_table(page, s):
    rows = [["Mean queueing time (ms)", format_number(s.get("mean_queue_ms"))],
            ["Compute utilization (MFU)", f"{s.get('compute_utilization', math.nan):.1%}"],
            ["Memory bandwidth utilization", f"{s.get('bandwidth_utilization', math.nan):.1%}"],
            ["GPU busy", f"{s.get('gpu_busy_fraction', math.nan):.1%}"]]
    if s.get("kv_cache_usage_peak") is not None:
        rows.append(["KV cache usage mean / peak", f"{s['kv_cache_usage_mean']:.1%} / {s['kv_cache_usage_peak']:.1%} "
                     f"of {s['kv_cache_capacity_tokens']:,} tokens"])
    rows += [["Mean / max batch size", f"{s.get('mean_batch_size', math.nan):.1f} / {s.get('max_batch_size', '-')}"],
             ["Preemptions", str(s.get("num_preemptions", "-"))],
             ["Errors (rejected / timed out)", f"{s.get('num_rejected', 0)} / {s.get('num_timed_out', 0)}"]]
    if "kv_transfer" in s:  # a disaggregated run: its pools and the KV transfers between them
        for role in ("prefill", "decode"):
            pool = s[f"{role}_pool"]
            rows.append([f"{role.capitalize()} pool", f"{pool['instances']} x {pool['hardware']} "
                         f"(TP={pool['tensor_parallel_size']}, DP={pool['data_parallel_size']}), {pool['num_gpus']} GPUs"])
            rows.append([f"{role.capitalize()} busy / MFU / KV cache peak",
                         f"{pool['gpu_busy_fraction']:.1%} / {pool['compute_utilization']:.1%} / "
                         f"{pool['kv_cache_usage_peak']:.1%}, mean batch {pool['mean_batch_size']:.1f}"])
        kv = s["kv_transfer"]
        rows.append(["KV transfer link", f"{kv['link']}, {kv['bandwidth_gbps']:.0f} GB/s, {kv['latency_us']:.0f} us; "
                     f"first token from the {kv['first_token']} pool"])
        rows.append(["KV transfer mean / P99 (ms)", f"{kv['mean_transfer_ms']:.2f} / {kv['p99_transfer_ms']:.2f}, "
                     f"link {kv['link_utilization']:.1%} busy"])
    page.table(["engine", "value"], rows, "lr", table_id="engine")


def _distribution(page, values_ms, s, name, unit="ms"):
    """One latency histogram with the summary's median and P99 marked (from the summary, so the
    lines agree with the headline table)."""
    label = LABELS[name]
    trace, log, counts = histogram_trace(values_ms, label, unit)
    if trace is None:
        page.paragraph(f"No {label} values (no request completed).")
        return
    top = float(max(trace["y"]))
    data = [trace]
    for key, what, dash in ((f"median_{name}_ms", "median", "dot"), (f"p99_{name}_ms", "P99", "dash")):
        v = s.get(key)
        if v is not None and math.isfinite(v) and (not log or v > 0):
            data.append(vertical_line(v, top, f"{what} {format_number(v)} {unit}", dash))
    page.figure(data, layout(f"{label} distribution ({int(counts.sum()):,} values)", f"{label} ({unit})",
                             "share of values per bin", xlog=log))


def _itl_distribution(page, result):
    """The inter-token latencies from the run's ITL histogram (every token, log-spaced bins)."""
    counts = np.asarray(result.itl_histogram, dtype=float)
    edges = _floats(result.itl_bin_edges_s) * 1e3
    if counts.sum() <= 0 or edges.size != counts.size + 1:
        page.paragraph("No inter-token latencies (no request produced two tokens).")
        return
    used = np.nonzero(counts)[0]
    lo, hi = int(used[0]), int(used[-1]) + 1
    counts, edges = counts[lo:hi], edges[lo:hi + 1].copy()
    if edges[0] <= 0:  # the underflow bin starts at 0: half its upper edge on a log axis
        edges[0] = edges[1] / 2
    merge = -(-counts.size // ITL_BINS)  # neighbouring bins merged to at most ITL_BINS
    if merge > 1:
        pad = -counts.size % merge
        counts = np.concatenate([counts, np.zeros(pad)]).reshape(-1, merge).sum(axis=1)
        edges = np.concatenate([edges[:-1:merge], edges[-1:]])  # each group's left edge, then the last right one
    trace = _step_trace(edges, counts, "ITL", "ms", COLOURS[0])
    top = float(max(trace["y"]))
    data = [trace]
    for key, what, dash in (("median_itl_ms", "median", "dot"), ("p99_itl_ms", "P99", "dash")):
        v = result.summary.get(key)
        if v is not None and math.isfinite(v) and v > 0:
            data.append(vertical_line(v, top, f"{what} {format_number(v)} ms", dash))
    page.figure(data, layout(f"ITL distribution ({int(counts.sum()):,} tokens)", "ITL (ms)",
                             "share of tokens per bin", xlog=True))


def _series(page, t, values, title, ytitle, name, *, hover_unit="", extra=()):
    data = [{"type": "scatter", "mode": "lines+markers" if t.size < 40 else "lines", "name": name,
             "x": t.tolist(), "y": values.tolist(), "line": {"color": COLOURS[0], "width": 1.5},
             "hovertemplate": f"t=%{{x:.2f}} s<br>{esc(name)}: %{{y:,.2f}}{esc(hover_unit)}<extra></extra>"}]
    data += list(extra)
    page.figure(data, layout(title, "time (s)", ytitle))


def run_report(result, *, bands=None, reasons=(), percentiles=(50, 90, 95, 99), title="simllm run"):
    """The report of one simulation (``simllm run --report``).

    Sections: the headline table (vllm bench serve's figures, each headline figure's error band
    beside it when ``bands`` are given, and the calibrated-domain warning), the engine's figures,
    the TTFT, TPOT, ITL and end-to-end latency distributions (median and P99 marked), and the time
    series per window of the run: output throughput, mean batch size, KV-cache use and the queue
    (requests waiting, with the arrival and completion rates).

    Parameters
    ----------
    result : SimResult
        The per-request distributions need ``keep_requests=True`` (without, they are left out).
    bands : dict, optional
        ``{summary key: Band}`` (:func:`simllm.calibration.bands.summary_bands`).
    reasons : tuple of str
        Why the run lies outside the calibrated domain.
    percentiles : tuple of float
        The percentiles the headline lists.
    title : str

    Returns
    -------
    str
        The HTML page.
    """
    s = result.summary
    page = Page(title, _run_subtitle(s))
    page.heading("Headline")
    _headline(page, s, percentiles, bands or {}, reasons)
    for w in result.warnings:
        page.paragraph(f"warning: {w}", "warn")
    page.heading("Simulated engine")
    _engine_table(page, s)
    page.heading("Latency distributions")
    req = result.requests
    if req is None:
        page.paragraph("The TTFT, TPOT and E2E latency distributions need the per-request rows "
                       "(simulate with keep_requests=True).")
    else:
        for name in ("ttft", "tpot"):
            _distribution(page, _floats(req[f"{name}_s"]) * 1e3, s, name)
    _itl_distribution(page, result)
    if req is not None:
        _distribution(page, _floats(req["e2el_s"]) * 1e3, s, "e2el")
    ts = result.timeseries
    t = _floats(ts.get("t_s", ()))
    page.heading("Over time")
    if t.size == 0:
        page.paragraph("No time series (nothing ran).")
        return page.render()
    window = float(ts.get("window_s", 0.0) or 0.0)
    mid = t + window / 2
    page.paragraph(f"Each point is one window of {window:g} s of simulated time, drawn at its middle.")
    _series(page, mid, _floats(ts["output_throughput"]), "Output throughput", "output tokens/s", "output tok/s")
    _series(page, mid, _floats(ts["mean_batch_size"]), "Batch size", "mean sequences per iteration", "batch size")
    kv = _floats(ts["kv_cache_usage"]) * 100
    if np.isfinite(kv).any():
        _series(page, mid, kv, "KV cache use", "KV cache blocks in use (%)", "KV cache", hover_unit=" %")
    rates = [{"type": "scatter", "mode": "lines", "name": name, "x": mid.tolist(), "y": _floats(ts[key]).tolist(),
              "yaxis": "y2", "line": {"color": colour, "width": 1, "dash": "dot"},
              "hovertemplate": f"t=%{{x:.2f}} s<br>{name}: %{{y:,.2f}} req/s<extra></extra>"}
             for key, name, colour in (("arrival_rate", "arrivals", COLOURS[1]),
                                       ("request_throughput", "completions", COLOURS[2]))]
    queue_layout = layout("Queue", "time (s)", "requests waiting (window mean)",
                          yaxis2={"title": {"text": "requests/s"}, "overlaying": "y", "side": "right",
                                  "rangemode": "tozero", "showgrid": False},
                          margin={"l": 70, "r": 70, "t": 50, "b": 60})
    if req is not None:
        queue = queue_depth_series(req, t, window)
        data = [{"type": "scatter", "mode": "lines", "name": "waiting", "x": mid.tolist(), "y": queue.tolist(),
                 "line": {"color": COLOURS[0], "width": 1.5}, "fill": "tozeroy",
                 "hovertemplate": "t=%{x:.2f} s<br>waiting: %{y:,.2f}<extra></extra>"}] + rates
    else:
        data = rates
    page.figure(data, queue_layout)
    return page.render()


# ----------------------------------------------------------------------------- simllm loadtest

def _load_axis(rows):
    closed = all(r.concurrency > 0 for r in rows)
    load = _floats([r.concurrency if closed else r.request_rate_rps for r in rows])
    finite = load[np.isfinite(load) & (load > 0)]
    log = finite.size > 1 and finite.max() / finite.min() >= 16
    return closed, load, log, "concurrency (clients)" if closed else "request rate (req/s)"


def _row_hover(r):
    return _hover([r.label(), f"output {format_number(r.output_throughput_tok_s)} tok/s",
                   f"requests {format_number(r.request_throughput_rps)} /s",
                   f"TTFT mean {format_number(r.mean_ttft_ms)} ms, P99 {format_number(r.p99_ttft_ms)} ms",
                   f"TPOT mean {format_number(r.mean_tpot_ms)} ms",
                   f"E2E mean {format_number(r.avg_latency_ms)} ms, P99 {format_number(r.p99_latency_ms)} ms",
                   f"errors {r.error_rate:.1%}" if math.isfinite(r.error_rate) else ""])


def _knee_trace(x, y, text):
    return {"type": "scatter", "mode": "markers+text", "name": "knee (recommended)", "x": [x], "y": [y],
            "text": [esc(text)], "textposition": "top left",
            "marker": {"symbol": "star", "size": 18, "color": COLOURS[3], "line": {"color": "black", "width": 1}},
            "hoverinfo": "text", "hovertext": [esc(f"recommended: {text}")]}


def loadtest_report(result, bands=None, title="simllm loadtest"):
    """The report of a load test (``simllm loadtest --report``): the table of load points with
    the recommended one (the knee) highlighted and the reason, then output throughput against the
    load with the knee marked, end-to-end latency (P99 and mean, and the SLO) against the load, and
    total throughput against per-user speed (1000 / mean TPOT ms), each point labelled with its load.

    Parameters
    ----------
    result : LoadTestResult
    bands : list of (dict, tuple), optional
        Per load point ``({key: Band}, reasons)`` (:func:`simllm.calibration.bands.summary_bands`),
        shown as a table under the load points.

    Returns
    -------
    str
        The HTML page.
    """
    rows = list(result.rows)
    page = Page(title, result.title)
    page.heading("Load points")
    header = ["load", "requests", "output tok/s", "req/s", "TTFT mean (ms)", "TTFT P99 (ms)", "TPOT mean (ms)",
              "E2E mean (ms)", "E2E P99 (ms)", "KV peak", "errors"]
    body = [[r.label(), r.num_prompts, format_number(r.output_throughput_tok_s),
             format_number(r.request_throughput_rps), format_number(r.mean_ttft_ms), format_number(r.p99_ttft_ms),
             format_number(r.mean_tpot_ms), format_number(r.avg_latency_ms), format_number(r.p99_latency_ms),
             f"{r.kv_cache_usage_peak:.0%}" if math.isfinite(r.kv_cache_usage_peak) else "-",
             f"{r.error_rate:.1%}" if math.isfinite(r.error_rate) else "-"] for r in rows]
    knee = result.recommended
    page.table(header, body, highlight={knee} if knee is not None else (), table_id="headline")
    page.paragraph(("recommended: " if knee is not None else "no recommendation: ") + result.reason, "")
    if bands:
        band_table(page, [(r.label(), b, why) for r, (b, why) in zip(rows, bands)], first="load")
    if not rows:
        return page.render()
    closed, load, log, xtitle = _load_axis(rows)
    order = np.argsort(load, kind="stable")
    ordered = [rows[i] for i in order]
    hover = [_row_hover(r) for r in ordered]
    x = load[order].tolist()
    thr = [r.output_throughput_tok_s for r in ordered]
    knee_text = None
    if knee is not None:
        k = rows[knee]
        knee_text = f"c={k.concurrency}" if closed else f"{k.request_rate_rps:g} req/s"
    page.heading("Throughput and latency against the load")
    data = [{"type": "scatter", "mode": "lines+markers", "name": "output tok/s", "x": x, "y": thr,
             "hovertext": hover, "hoverinfo": "text", "line": {"color": COLOURS[0]}}]
    if knee is not None:
        data.append(_knee_trace(float(load[knee]), rows[knee].output_throughput_tok_s, knee_text))
    page.figure(data, layout("Output throughput vs load", xtitle, "output throughput (tok/s)", xlog=log))
    data = [{"type": "scatter", "mode": "lines+markers", "name": "P99 E2E", "x": x,
             "y": [r.p99_latency_ms for r in ordered], "hovertext": hover, "hoverinfo": "text",
             "line": {"color": COLOURS[3]}},
            {"type": "scatter", "mode": "lines+markers", "name": "mean E2E", "x": x,
             "y": [r.avg_latency_ms for r in ordered], "hovertext": hover, "hoverinfo": "text",
             "line": {"color": COLOURS[0]}}]
    if result.slo_p99_latency_ms is not None:
        data.append({"type": "scatter", "mode": "lines", "name": f"SLO P99 {result.slo_p99_latency_ms:g} ms",
                     "x": [min(x), max(x)], "y": [result.slo_p99_latency_ms] * 2, "hoverinfo": "name",
                     "line": {"color": "#888", "dash": "dash"}})
    if knee is not None:
        data.append(_knee_trace(float(load[knee]), rows[knee].p99_latency_ms, knee_text))
    page.figure(data, layout("End-to-end latency vs load", xtitle, "E2E latency (ms)", xlog=log))
    per_user = [1000.0 / r.mean_tpot_ms if r.mean_tpot_ms > 0 else None for r in ordered]
    labels = [f"c={r.concurrency}" if closed else f"{r.request_rate_rps:g}/s" for r in ordered]
    data = [{"type": "scatter", "mode": "lines+markers+text", "name": "load points", "x": per_user, "y": thr,
             "text": [esc(t) for t in labels], "textposition": "top right", "hovertext": hover, "hoverinfo": "text",
             "line": {"color": COLOURS[2]}}]
    if knee is not None and rows[knee].mean_tpot_ms > 0:
        data.append(_knee_trace(1000.0 / rows[knee].mean_tpot_ms, rows[knee].output_throughput_tok_s, knee_text))
    page.figure(data, layout("Throughput vs per-user speed", "output tokens/s per user (1000 / mean TPOT ms)",
                             "total output throughput (tok/s)"))
    return page.render()


# ----------------------------------------------------------------------------- simllm compare

def band_table(page, rows, first="configuration"):
    """The error bands of several configurations as a table: ``rows`` of ``(label, {key: Band},
    reasons)`` (as :func:`simllm.report.text.format_band_table`), then the domain warnings."""
    coverage = next((b.coverage for _, bands, _ in rows for b in bands.values()), None)
    if coverage is None:
        return
    body = [[label] + [band_range(bands[key]) if key in bands else "-" for key, _ in BAND_COLUMNS]
            for label, bands, _ in rows if bands]
    page.paragraph(f"{coverage:.0%} error bands: where the measured value lay, relative to the prediction, for "
                   f"{coverage:.0%} of the nearest calibrated cases.", "")
    page.table([first] + [h for _, h in BAND_COLUMNS], body, table_id="bands")
    groups = {}  # the same reasons are said once, for all the configurations they apply to
    for label, _, reasons in rows:
        if reasons:
            groups.setdefault(tuple(reasons), []).append(label)
    for reasons, labels in groups.items():
        who = "all" if len(labels) == len(rows) > 1 else ", ".join(labels)
        page.paragraph(f"{who}: {domain_warning(reasons)}", "warn")


def _bar_figure(page, comparison, key, title, ytitle, bands, scale_band=None):
    cols = comparison.columns
    values = [v if c.ok else None for c, v in zip(cols, comparison.row(key).values)]
    labels = [esc(c.label) for c in cols]
    lo, hi, hover = [], [], []
    for c, v, (b, _) in zip(cols, values, bands):
        band = b.get(scale_band or key) if b else None
        if band is not None and v is not None:
            factor = v / band.value if scale_band and band.value else 1.0
            lo.append(max(v - band.lo * factor, 0.0))
            hi.append(max(band.hi * factor - v, 0.0))
        else:
            lo.append(0.0)
            hi.append(0.0)
        if not c.ok:
            hover.append(_hover([c.label, "OOM" if c.oom else "error", c.error]))
        else:
            text = [c.label, f"{ytitle}: {format_number(v)}"]
            if band is not None and v is not None:
                text.append(f"{band.coverage:.0%} band {format_number(v - lo[-1])}–{format_number(v + hi[-1])}")
            hover.append(_hover(text))
    trace = {"type": "bar", "name": ytitle, "x": labels, "y": values, "hovertext": hover, "hoverinfo": "text",
             "marker": {"color": [COLOURS[i % len(COLOURS)] for i in range(len(cols))],
                        "line": {"color": "black", "width": 0.5}},
             "text": [("OOM" if c.oom else "error") if not c.ok else format_number(v) for c, v in zip(cols, values)],
             "textposition": "outside"}
    if any(lo) or any(hi):
        trace["error_y"] = {"type": "data", "symmetric": False, "array": hi, "arrayminus": lo, "color": "#333"}
    fig_layout = layout(title, "", ytitle, showlegend=False)
    fig_layout["xaxis"]["type"] = "category"  # labels that look like numbers stay names
    page.figure([trace], fig_layout)


def compare_report(comparison, bands=None, title="simllm compare", subtitle=""):
    """The report of a comparison (``simllm compare --report``): every metric of every column with
    its ratio to the first column that ran, the error bands, and bar charts of output tokens/s per
    GPU, mean TTFT and mean TPOT (error bars: the bands), hover per bar.

    Parameters
    ----------
    comparison : Comparison
    bands : list of (dict, tuple), optional
        Per column ``({key: Band}, reasons)`` (:func:`simllm.calibration.bands.summary_bands`).
    title, subtitle : str

    Returns
    -------
    str
        The HTML page.
    """
    cols = comparison.columns
    bands = list(bands) if bands else [({}, ())] * len(cols)
    page = Page(title, subtitle)
    page.heading("Side by side")
    header = ["metric"] + [c.label for c in cols]
    body = []
    for row in comparison.rows:
        cells = [f"{row.metric.label} ({row.metric.unit})" if row.metric.unit else row.metric.label]
        for i, c in enumerate(cols):
            if not c.ok:
                cells.append("OOM" if c.oom else "error")
                continue
            v = row.values[i]
            ratio = row.ratios[i]
            text = format_value(row.metric, v)
            cells.append(text + (f" {format_ratio(ratio)}" if ratio is not None and i != comparison.baseline else ""))
        body.append(cells)
    page.table(header, body, table_id="headline")
    for c in cols:
        if not c.ok:
            page.paragraph(f"{c.label}: {c.error}", "warn")
    band_table(page, [(c.label, b, r) for c, (b, r) in zip(cols, bands)], first="column")
    full = build_comparison(cols, ("output_throughput_per_gpu", "mean_ttft_ms", "mean_tpot_ms"))
    page.heading("Charts")
    _bar_figure(page, full, "output_throughput_per_gpu", "Output throughput per GPU", "output tok/s per GPU", bands,
                scale_band="output_throughput")
    _bar_figure(page, full, "mean_ttft_ms", "Mean time to first token", "mean TTFT (ms)", bands)
    _bar_figure(page, full, "mean_tpot_ms", "Mean time per output token", "mean TPOT (ms)", bands)
    return page.render()


# ----------------------------------------------------------------------------- Pareto frontiers

def _value_text(name, value):
    """``P99 TTFT (ms): 1,234`` (the axis label, then the value)."""
    return f"{fr.axis_label(name)}: {format_number(value)}"


def point_details(rows):
    """Per row, the lines of its configuration as hover text shows them: ``config`` (or
    ``label``) when the row has one, then ``name=value`` of every configuration column
    (:func:`simllm.search.pareto.config_items`)."""
    out = []
    for r in rows:
        lines = []
        for k in ("config", "label"):
            v = fr.cell(r, k)
            if v not in (None, ""):
                lines.append(str(v))
                break
        lines += [f"{k}={v}" for k, v in fr.config_items(r).items()]
        out.append(lines)
    return out


def frontier_figure(rows, frontier_idx=None, x="output_throughput_per_user", y="output_throughput_per_gpu", *,
                    chosen=None, details=None, title=None):
    """The Pareto frontier of ``rows`` as a figure ``(data, layout)``: every configuration with a
    finite ``x`` and ``y`` a point (grey crosses for those whose ``meets_slo`` is false), the
    frontier joined in the order of ``x``, the ``chosen`` one a star; hovering any point shows its
    configuration (``details``, default :func:`point_details`), GPUs, status and both values.

    Parameters
    ----------
    rows : numpy structured array or sequence of dict
        As :func:`simllm.report.plots.plot_frontier` takes them.
    frontier_idx : sequence of int, dict or None
        The frontier rows; a dict ``{name: indices}`` draws several; None computes it
        (:func:`simllm.search.pareto.frontier_rows`).
    x, y : str
        Columns on the axes.
    chosen : int, optional
        The configuration picked.
    details : list of list of str, optional
        Per row the hover lines that describe it.
    title : str, optional
    """
    xs, ys = fr.column(rows, x), fr.column(rows, y)
    if frontier_idx is None:
        frontier_idx = fr.frontier_rows(rows, x, y)
    lines = frontier_idx if isinstance(frontier_idx, dict) else {"Pareto frontier": frontier_idx}
    details = details if details is not None else point_details(rows)
    gpus = fr.column(rows, "gpus")
    has_slo = fr.has_column(rows, "meets_slo")
    meets = fr.column(rows, "meets_slo") if has_slo else np.ones(len(xs))

    def hover(i):
        extra = [_value_text(x, xs[i]), _value_text(y, ys[i])]
        if math.isfinite(gpus[i]):
            extra.append(f"GPUs: {gpus[i]:g}")
        status = fr.cell(rows[i], "status")
        if status not in (None, ""):
            extra.append(f"status: {status}")
        return _hover(list(details[i]) + extra)

    finite = np.isfinite(xs) & np.isfinite(ys)
    data = []
    for mask, name, marker in ((finite & (meets > 0), "meets the SLOs" if has_slo else "configuration",
                                {"color": COLOURS[0], "size": 8, "line": {"color": "black", "width": 0.5},
                                 "opacity": 0.8}),
                               (finite & ~(meets > 0), "fails the SLOs",
                                {"color": "#999", "size": 8, "symbol": "x"})):
        idx = np.nonzero(mask)[0]
        if idx.size:
            data.append({"type": "scatter", "mode": "markers", "name": name, "x": xs[idx].tolist(),
                         "y": ys[idx].tolist(), "marker": marker, "hovertext": [hover(i) for i in idx],
                         "hoverinfo": "text", "customdata": idx.tolist()})
    on_frontier = 0
    for k, (name, members) in enumerate(lines.items(), 1):
        m = np.asarray(members, dtype=np.int64).reshape(-1)
        m = m[finite[m]] if m.size else m
        if m.size:
            m = m[np.lexsort((m, xs[m]))]
            on_frontier += m.size
            data.append({"type": "scatter", "mode": "lines+markers", "name": f"{name} ({m.size})",
                         "x": xs[m].tolist(), "y": ys[m].tolist(),
                         "line": {"color": COLOURS[k % len(COLOURS)], "width": 2}, "marker": {"size": 9},
                         "hovertext": [hover(i) for i in m], "hoverinfo": "text", "customdata": m.tolist()})
    if chosen is not None and finite[chosen]:
        data.append({"type": "scatter", "mode": "markers", "name": "chosen", "x": [float(xs[chosen])],
                     "y": [float(ys[chosen])], "hovertext": ["chosen<br>" + hover(chosen)], "hoverinfo": "text",
                     "marker": {"symbol": "star", "size": 20, "color": COLOURS[3],
                                "line": {"color": "black", "width": 1}}, "customdata": [int(chosen)]})
    n = int(finite.sum())
    title = title or f"Pareto frontier: {on_frontier} of {n} configuration{'s' if n != 1 else ''}"
    return data, layout(title, fr.axis_label(x), fr.axis_label(y))


def _frontier_table(page, rows, idx, x, y):
    xs, ys, gs = fr.column(rows, x), fr.column(rows, y), fr.column(rows, "gpus")
    labels = fr.config_labels(rows)
    body = [[i + 1, int(j), labels[int(j)], format_number(gs[j], 0), format_number(xs[j]), format_number(ys[j])]
            for i, j in enumerate(idx)]
    page.table(["#", "row", "configuration", "GPUs", x, y], body, "rrlrrr", table_id="headline")


def frontier_report(rows, x="output_throughput_per_user", y="output_throughput_per_gpu", *, frontier_idx=None,
                    title="simllm frontier", subtitle=""):
    """The report of ``simllm frontier --report``: the frontier rows as a table and the figure
    of every configuration with the frontier (:func:`frontier_figure`; hover for each point's
    configuration).

    Returns
    -------
    str
        The HTML page.
    """
    idx = fr.frontier_rows(rows, x, y) if frontier_idx is None else frontier_idx
    page = Page(title, subtitle)
    page.heading(f"Pareto frontier: {fr.axis_label(y)} vs {fr.axis_label(x)}")
    _frontier_table(page, rows, idx, x, y)
    page.figure(*frontier_figure(rows, idx, x, y))
    return page.render()


# ----------------------------------------------------------------------------- simllm sweep

def sweep_report(result, title="simllm sweep", subtitle=""):
    """The report of a sweep (``simllm sweep --report``): per configuration (over seeds) the mean
    of the key metrics with the P5-P95 band, each metric against the first numeric grid path (one
    line per combination of the others, the P5-P95 band shaded; histograms without a numeric
    path), and the Pareto frontier of output tokens/s per GPU against per-user speed with each
    point's configuration on hover.

    Parameters
    ----------
    result : SweepResult

    Returns
    -------
    str
        The HTML page.
    """
    t = result.table
    agg = result.aggregate()
    seeds = len(t) // max(len(agg), 1)
    counts = f"{len(agg)} configurations x {seeds} seeds = {len(t)} simulations"
    page = Page(title, f"{subtitle}: {counts}" if subtitle else counts)
    page.heading("Configurations")
    header = ["config"] + list(result.paths) + ["n"] + [h for _, h in REPORT_METRICS]
    body = []
    for g in agg[:MAX_TABLE_ROWS]:
        row = [int(g["config_id"])] + [format_cell(g[p], 4) for p in result.paths] + [int(g["n"])]
        for m, _ in REPORT_METRICS:
            digits = 3 if m == "error_rate" else 1
            mean, lo, hi = g[f"{m}_mean"], g[f"{m}_p5"], g[f"{m}_p95"]
            cell = format_cell(mean, digits)
            if g["n"] - g["n_failed"] > 1 and not math.isnan(mean) and format_cell(lo, digits) != format_cell(hi, digits):
                cell += f" [{format_cell(lo, digits)}-{format_cell(hi, digits)}]"
            row.append(cell)
        body.append(row)
    page.table(header, body, "r" + "l" * len(result.paths) + "r" * (1 + len(REPORT_METRICS)), table_id="headline")
    if len(agg) > MAX_TABLE_ROWS:
        page.paragraph(f"... {len(agg) - MAX_TABLE_ROWS} more configurations (in the figures, and written by "
                       "--output FILE)")
    errors = sorted({e for e in t["error"].tolist() if e})
    for e in errors[:10]:
        page.paragraph(f"failed: {e}", "warn")
    page.heading("Metrics over the grid")
    numeric = [p for p in result.grid_paths if t[p].dtype.kind in "if"]
    grid = result.aggregate(by="grid") if result.grid_paths else None
    for m in ("output_throughput", "p99_ttft_ms", "p99_tpot_ms", "mean_e2el_ms"):
        if m not in result.metrics:
            continue
        if numeric and grid is not None and len(grid):
            xname = numeric[0]
            others = [p for p in result.grid_paths if p != xname]
            labels = [" ".join(f"{p}={format_cell(g[p], 4)}" for p in others) for g in grid]
            data = []
            log = False
            for k, label in enumerate(dict.fromkeys(labels)):
                g = grid[np.array([lab == label for lab in labels])]
                g = g[np.argsort(g[xname], kind="stable")]
                xs = g[xname].astype(float)
                colour = COLOURS[k % len(COLOURS)]
                name = esc(label or m)
                data.append({"type": "scatter", "mode": "lines", "x": xs.tolist(), "y": g[f"{m}_p95"].tolist(),
                             "line": {"width": 0}, "showlegend": False, "hoverinfo": "skip", "name": f"{name} P95"})
                data.append({"type": "scatter", "mode": "lines", "x": xs.tolist(), "y": g[f"{m}_p5"].tolist(),
                             "fill": "tonexty", "fillcolor": "rgba(120,120,120,0.18)", "line": {"width": 0},
                             "showlegend": False, "hoverinfo": "skip", "name": f"{name} P5"})
                hover = [_hover([label, f"{xname}={format_cell(v, 4)}", f"{m} mean {format_number(a)}",
                                 f"P5-P95 {format_number(lo)}-{format_number(hi)}"])
                         for v, a, lo, hi in zip(xs, g[f"{m}_mean"], g[f"{m}_p5"], g[f"{m}_p95"])]
                data.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": xs.tolist(),
                             "y": g[f"{m}_mean"].tolist(), "line": {"color": colour}, "hovertext": hover,
                             "hoverinfo": "text"})
                log = log or bool(xs.size and xs.min() > 0 and xs.max() / xs.min() >= 16)
            page.figure(data, layout(f"{m} (mean, P5-P95 shaded)", xname, m, xlog=log,
                                     showlegend=len(set(labels)) > 1))
        else:
            trace, log, _ = histogram_trace(t[m], m)
            if trace is not None:
                page.figure([trace], layout(f"{m} over all simulations", m, "share of simulations", xlog=log))
    page.heading("Pareto frontier")
    xs, ys = fr.column(t, "output_throughput_per_user"), fr.column(t, "output_throughput_per_gpu")
    if (np.isfinite(xs) & np.isfinite(ys)).any():
        page.paragraph("Output tokens/s per GPU against per-user speed, one point per simulation; hover a point "
                       "for its configuration.")
        page.figure(*frontier_figure(t))
    else:
        page.paragraph("No simulation has both metrics (every configuration failed).")
    return page.render()


# ----------------------------------------------------------------------------- simllm optimize

def optimize_report(result, bands=None, title="simllm optimize"):
    """The report of ``simllm optimize --report``: the answer and the command that reproduces it,
    the feasible configurations ranked (with their error bands), how many configurations met the
    SLOs or why not, and the Pareto frontiers of output tokens/s per GPU against per-user speed
    and against P99 TTFT, with every configuration's engine flags, status and metrics on hover and
    the answer a star.

    Parameters
    ----------
    result : OptimizeResult
    bands : list of (dict, tuple), optional
        Per shown ranked configuration ``({key: Band}, reasons)``.

    Returns
    -------
    str
        The HTML page.
    """
    slos = ", ".join(s.text for s in result.slos) or "(none)"
    page = Page(title, f"{result.model}: {result.workload}; SLOs {slos}; objective {result.objective}")
    page.heading("Answer")
    if result.answer is None:
        page.paragraph("No configuration meets the SLOs.", "warn")
    else:
        gpus = result.answer.gpus
        page.paragraph(f"{result.answer.label}: {gpus} GPU{'s' if gpus != 1 else ''}", "")
        page.code("simllm run " + result.answer.run_flags())
    shown = result.ranked[:result.top]
    body = [[i, c.label, c.hardware, c.gpus, format_number(c.goodput_per_gpu),
             format_number(c.output_throughput_per_gpu), format_number((c.summary or {}).get("p99_ttft_ms")),
             format_number((c.summary or {}).get("p99_tpot_ms"))] for i, c in enumerate(shown, 1)]
    page.table(["rank", "configuration", "hardware", "GPUs", "goodput/GPU (req/s)", "output tok/s/GPU",
                "TTFT P99 (ms)", "TPOT P99 (ms)"], body, "rllrrrrr", highlight={0} if shown else (),
               table_id="headline")
    if bands:
        band_table(page, [(f"{i} {c.label}", b, r) for i, (c, (b, r)) in enumerate(zip(shown, bands), 1)],
                   first="rank configuration")
    counts = {}
    for c in result.candidates:
        counts[c.status] = counts.get(c.status, 0) + 1
    page.paragraph("; ".join(f"{n} {STATUSES.get(s, s)}" for s, n in counts.items()), "")
    rows = result.rows()
    details = []
    for c in result.candidates:
        lines = [c.label, f"simllm run {c.run_flags()}"]
        if c.violations:
            lines.append("breaks " + ", ".join(str(v) for v in c.violations))
        if c.reason:
            lines.append(c.reason)
        details.append(lines)
    chosen = result.answer.index if result.answer else None
    page.heading("Pareto frontiers")
    page.paragraph("Hover a point for its configuration (the engine flags that reproduce it), status and metrics.")
    for kind, x in (("speed", "output_throughput_per_user"), ("ttft", "p99_ttft_ms")):
        idx = (result.frontier(kind) if len(result.modes) < 2 else
               {MODES[m]: result.frontier(kind, m) for m in result.modes})
        if np.isfinite(fr.column(rows, x)).any():
            page.figure(*frontier_figure(rows, idx, x, "output_throughput_per_gpu", chosen=chosen, details=details))
    return page.render()


# ----------------------------------------------------------------------------- simllm validate

def _validation_figure(page, points, metric):
    pairs = []
    for p in points:
        if p.predicted is None:
            continue
        measured = getattr(p.measurement, f"{metric}_ms")
        predicted = p.predicted.get(metric)
        if measured is None or predicted is None:
            continue
        if math.isfinite(measured) and math.isfinite(predicted) and measured > 0 and predicted > 0:
            pairs.append((float(measured), float(predicted), p))
    if not pairs:
        return
    name = LABELS.get(metric, metric.upper())
    measured = np.array([a for a, _, _ in pairs])
    predicted = np.array([b for _, b, _ in pairs])
    lo = float(min(measured.min(), predicted.min()) / 1.5)
    hi = float(max(measured.max(), predicted.max()) * 1.5)
    line = np.geomspace(lo, hi, 32)
    data = [{"type": "scatter", "mode": "lines", "x": line.tolist(), "y": (line * (1 + BAND)).tolist(),
             "line": {"width": 0}, "hoverinfo": "skip", "showlegend": False, "name": f"+{BAND:.0%}"},
            {"type": "scatter", "mode": "lines", "x": line.tolist(), "y": (line * (1 - BAND)).tolist(),
             "fill": "tonexty", "fillcolor": "rgba(120,120,120,0.2)", "line": {"width": 0}, "hoverinfo": "skip",
             "name": f"±{BAND:.0%}"},
            {"type": "scatter", "mode": "lines", "x": line.tolist(), "y": (line * (1 + LINES)).tolist(),
             "line": {"dash": "dash", "color": "#888", "width": 1}, "hoverinfo": "skip", "name": f"±{LINES:.0%}"},
            {"type": "scatter", "mode": "lines", "x": line.tolist(), "y": (line * (1 - LINES)).tolist(),
             "line": {"dash": "dash", "color": "#888", "width": 1}, "hoverinfo": "skip", "showlegend": False,
             "name": f"-{LINES:.0%}"},
            {"type": "scatter", "mode": "lines", "x": [lo, hi], "y": [lo, hi], "line": {"color": "#333", "width": 1},
             "hoverinfo": "skip", "name": "y = x"}]
    groups = {}
    for a, b, p in pairs:
        groups.setdefault(p.hardware or "(unknown)", []).append((a, b, p))
    for k, (hw, group) in enumerate(sorted(groups.items())):
        hover = [_hover([p.measurement.where, f"{p.model or p.measurement.model} on {hw}",
                         f"{p.measurement.backend} {p.measurement.mode}, TP={p.measurement.tp}, "
                         f"ISL {p.measurement.input_len} / OSL {p.measurement.output_len}, "
                         f"concurrency {p.measurement.concurrency}",
                         f"measured {format_number(a)} ms, predicted {format_number(b)} ms ({b / a - 1:+.1%})"])
                 for a, b, p in group]
        data.append({"type": "scatter", "mode": "markers", "name": esc(hw), "x": [a for a, _, _ in group],
                     "y": [b for _, b, _ in group], "hovertext": hover, "hoverinfo": "text",
                     "marker": {"size": 8, "color": COLOURS[k % len(COLOURS)], "line": {"color": "black", "width": 0.5}}})
    median = float(np.median(np.abs(predicted / measured - 1.0)) * 100)
    n = len(pairs)
    fig_layout = layout(f"{name}: {n} point{'s' if n != 1 else ''}, median |error| {median:.1f}%",
                        f"measured {name} (ms)", f"predicted {name} (ms)", xlog=True, ylog=True)
    for axis in ("xaxis", "yaxis"):
        fig_layout[axis]["range"] = [math.log10(lo), math.log10(hi)]
    page.figure(data, fig_layout)


def validate_report(points, summary, groups=None, title="simllm validate", subtitle=""):
    """The report of ``simllm validate --report``: the error of each metric (points, median and
    mean absolute error, share within 10% and 20%), per group (backend, mode) when given, the
    skipped points and why, and one predicted-vs-measured scatter per metric (log-log, y = x
    with a shaded +/-10% band and dashed +/-20% lines, coloured by hardware, each point's source
    and configuration on hover).

    Parameters
    ----------
    points : list of Point
    summary : dict
        :func:`simllm.calibration.validate.error_summary`.
    groups : dict, optional
        ``{"backend": {name: summary}, ...}`` (:func:`error_summary_by`).

    Returns
    -------
    str
        The HTML page.
    """
    points = list(points)
    ran = sum(1 for p in points if p.predicted is not None)
    page = Page(title, subtitle or f"{len(points)} measured points, {ran} simulated")
    page.heading("Prediction error")

    def error_rows(s):
        return [[k.upper(), v["points"], f"{v['median_abs_pct_error']:.1f}%", f"{v['mean_abs_pct_error']:.1f}%",
                 f"{v['within_10pct']:.0%}", f"{v['within_20pct']:.0%}"] for k, v in s.items()]

    header = ["metric", "points", "median |error|", "mean |error|", "within 10%", "within 20%"]
    page.table(header, error_rows(summary), table_id="headline")
    below = next((v.get("below_bound", 0) for v in summary.values()), 0)
    if below:
        page.paragraph(f"{below} point(s) measured faster than the hardware's datasheet peaks allow for their stated "
                       "configuration are left out of the statistics.", "warn")
    for kind, by in (groups or {}).items():
        body = [[name] + r for name, s in by.items() for r in error_rows(s)]
        if body:
            page.table([kind] + header, body, "ll" + "r" * (len(header) - 1))
    skipped = [p for p in points if p.predicted is None]
    if skipped:
        page.paragraph(f"{len(skipped)} point(s) skipped:", "")
        page.table(["source", "model", "why"], [[p.measurement.where, p.measurement.model, p.reason]
                                                 for p in skipped[:50]], "lll")
    page.heading("Predicted vs measured")
    for metric in VALIDATION_METRICS:
        _validation_figure(page, points, metric)
    return page.render()
