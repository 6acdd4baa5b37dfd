"""``simllm compare``: one workload on several hardware presets and/or models, side by side, each
metric also as a ratio to the first column (how GPUs are ranked).

::

    cmp = compare(["llama-3.1-8b"], ["h100-sxm", "a100-sxm-80gb"], ServingConfig(), workload)
    print(format_comparison(cmp))
    cmp.rows[0].ratios          # (1.0, 1.9...) mean TTFT relative to the first column

The columns are the cartesian product of the models and the hardware, hardware-major (every model
on the first hardware, then every model on the next). A column whose configuration cannot run
(:class:`~simllm.errors.SimulatedOOM` or another :class:`~simllm.errors.ConfigError` from
:func:`simllm.simulate`) keeps its error instead of a summary; its cells show ``OOM`` or
``error`` and the message is printed under the table. Ratios are relative to the first column
that ran (the first column, unless it failed).
"""
import json
import math
from dataclasses import dataclass
from pathlib import Path

from simllm.config.hardware import HardwareConfig, load_hardware
from simllm.config.model import ModelConfig, load_model
from simllm.config.serving import ServingConfig
from simllm.config.workload import Workload
from simllm.errors import ConfigError
from simllm.fileio import csv_text, write_output
from simllm.sim.results import output_throughput_per_gpu
from simllm.sim.runner import OOM, Base, Task, run_simulations
from simllm.text import jsonable, table


@dataclass(frozen=True)
class Metric:
    """A row of a comparison.

    Attributes
    ----------
    key : str
        The summary key (or ``output_throughput_per_gpu``, derived).
    label : str
        The row's name in the table.
    unit : str
        ``ms``, ``req/s``, ``tok/s`` or ``%`` (a fraction 0..1 shown as a percentage); ``""`` for
        a plain number.
    higher_is_better : bool
    """

    key: str
    label: str
    unit: str
    higher_is_better: bool


#: The metrics a comparison knows by name.
METRICS = {m.key: m for m in (
    Metric("mean_ttft_ms", "TTFT mean", "ms", False),
    Metric("median_ttft_ms", "TTFT median", "ms", False),
    Metric("p90_ttft_ms", "TTFT P90", "ms", False),
    Metric("p99_ttft_ms", "TTFT P99", "ms", False),
    Metric("mean_tpot_ms", "TPOT mean", "ms", False),
    Metric("median_tpot_ms", "TPOT median", "ms", False),
    Metric("p90_tpot_ms", "TPOT P90", "ms", False),
    Metric("p99_tpot_ms", "TPOT P99", "ms", False),
    Metric("mean_itl_ms", "ITL mean", "ms", False),
    Metric("p99_itl_ms", "ITL P99", "ms", False),
    Metric("mean_e2el_ms", "E2E latency mean", "ms", False),
    Metric("median_e2el_ms", "E2E latency median", "ms", False),
    Metric("p90_e2el_ms", "E2E latency P90", "ms", False),
    Metric("p99_e2el_ms", "E2E latency P99", "ms", False),
    Metric("mean_queue_ms", "queueing mean", "ms", False),
    Metric("request_throughput", "requests", "req/s", True),
    Metric("request_goodput", "goodput", "req/s", True),
    Metric("output_throughput", "output", "tok/s", True),
    Metric("total_token_throughput", "total tokens", "tok/s", True),
    Metric("output_throughput_per_gpu", "output per GPU", "tok/s", True),
    Metric("compute_utilization", "MFU", "%", True),
    Metric("bandwidth_utilization", "MBU", "%", True),
    Metric("gpu_busy_fraction", "GPU busy", "%", True),
    Metric("kv_cache_usage_mean", "KV cache usage mean", "%", False),
    Metric("kv_cache_usage_peak", "KV cache usage peak", "%", False),
    Metric("mean_batch_size", "batch size mean", "", True),
    Metric("error_rate", "error rate", "%", False),
    Metric("duration", "duration", "s", False),
)}
#: The rows of a comparison unless told otherwise.
DEFAULT_METRICS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "p99_e2el_ms",
                   "request_throughput", "output_throughput", "output_throughput_per_gpu", "compute_utilization",
                   "bandwidth_utilization", "kv_cache_usage_mean", "error_rate")


@dataclass(frozen=True)
class Column:
    """One configuration of a comparison: its summary, or the error that stopped it."""

    label: str
    model: str
    hardware: str
    summary: dict = None
    error: str = None
    oom: bool = False
    disaggregated: bool = False  # a prefill/decode deployment (compare's disagg=)

    @property
    def ok(self):
        return self.error is None


@dataclass(frozen=True)
class Row:
    """One metric across the columns: values (None where a column failed or lacks it) and
    ratios to the baseline column (None where either value is missing or the baseline's is 0)."""

    metric: Metric
    values: tuple
    ratios: tuple


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` returns.

    Attributes
    ----------
    columns : tuple of Column
        Hardware-major.
    rows : tuple of Row
        One per metric, in the order asked.
    baseline : int or None
        Index of the column the ratios are relative to (the first that ran); None when none ran.
    """

    columns: tuple
    rows: tuple
    baseline: object

    @property
    def labels(self):
        return tuple(c.label for c in self.columns)

    @property
    def summaries(self):
        return tuple(c.summary for c in self.columns)

    def row(self, key):
        """The row of metric ``key``."""
        for r in self.rows:
            if r.metric.key == key:
                return r
        raise KeyError(key)


def metric_value(summary, key):
    """The value of metric ``key`` in ``summary``, as a float (None when absent or not a finite
    number). ``output_throughput_per_gpu`` is ``output_throughput`` / (TP x DP)."""
    if summary is None:
        return None
    if key == "output_throughput_per_gpu":
        value = output_throughput_per_gpu(summary)
    else:
        value = summary.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _metric(key, summaries):
    if key in METRICS:
        return METRICS[key]
    if any(metric_value(s, key) is not None for s in summaries):
        return Metric(key, key, "", True)
    raise ConfigError(f"a metric name: {', '.join(METRICS)} or a numeric summary key", key="metric", value=key)


def build_comparison(columns, metrics=DEFAULT_METRICS):
    """The rows of ``metrics`` over ``columns`` (a sequence of :class:`Column`)."""
    columns = tuple(columns)
    baseline = next((i for i, c in enumerate(columns) if c.ok), None)
    summaries = [c.summary for c in columns if c.ok]
    rows = []
    for key in metrics:
        metric = _metric(key, summaries)
        values = tuple(metric_value(c.summary, key) if c.ok else None for c in columns)
        base = values[baseline] if baseline is not None else None
        ratios = tuple(None if v is None or not base else v / base for v in values)
        rows.append(Row(metric, values, ratios))
    return Comparison(columns, tuple(rows), baseline)


def _as_list(x):
    return [x] if isinstance(x, (str, Path, ModelConfig, HardwareConfig)) else list(x)


def _load(item, loader, cls):
    """(label, config) of a preset name, a path or a loaded config."""
    if isinstance(item, cls):
        return item.name, item
    return str(item), loader(str(item))


def compare(models, hardwares, serving=None, workload=None, metrics=DEFAULT_METRICS, *,
            percentiles=(50, 90, 95, 99), goodput=None, progress=None, executor=None, workers=None, scheduler=None,
            disagg=None):
    """Simulate ``workload`` on every model x hardware pair and tabulate ``metrics``.

    Parameters
    ----------
    models : str, ModelConfig or a sequence of them
        Preset names, files or loaded models.
    hardwares : str, HardwareConfig or a sequence of them
    serving : ServingConfig, optional
        The same engine settings for every column (default vLLM's).
    workload : Workload, optional
        The same requests for every column (default :class:`Workload`'s).
    metrics : sequence of str
        Rows: keys of :data:`METRICS`, or any numeric summary key.
    percentiles : sequence of float
        Passed to :func:`simllm.simulate` (P99 rows need 99).
    goodput : dict, optional
        SLOs for ``request_goodput`` (see :func:`simllm.simulate`).
    progress : callable, optional
        ``progress(done, total)`` as columns finish.
    executor, workers, scheduler
        Where the columns run (:func:`simllm.sim.runner.run_many`; default threads on all cores).
    disagg : DisaggConfig, optional
        Every model x hardware pair also as this disaggregated prefill/decode deployment (its
        pools on that hardware unless it names their GPUs): a column labelled ``... P/D``
        right after the aggregated one; per-GPU rows count both pools' GPUs.

    Returns
    -------
    Comparison

    Raises
    ------
    ConfigError
        An unknown preset or unreadable file, no model or no hardware, or an unknown metric.
        A configuration that cannot run is not an error: its column records it.
    """
    models = [_load(m, load_model, ModelConfig) for m in _as_list(models)]
    hardwares = [_load(h, load_hardware, HardwareConfig) for h in _as_list(hardwares)]
    if not models or not hardwares:
        raise ConfigError("at least one model and one hardware to compare")
    serving = serving or ServingConfig()
    workload = workload or Workload()
    modes = (None,) if disagg is None else (None, disagg)
    pairs = [(hw_label, hw, model_label, model, d) for hw_label, hw in hardwares for model_label, model in models
             for d in modes]
    base = Base(serving=serving, workload=workload, percentiles=tuple(percentiles), goodput=goodput)
    outcomes = run_simulations(base, [Task(model=m, hardware=h, disagg=d) for _, h, _, m, d in pairs], executor,
                               workers=workers, scheduler=scheduler, progress=progress)

    def label(ml, hl, d):
        return f"{ml} @ {hl}" + ("" if d is None else f" P/D {d.prefill_instances}P{d.decode_instances}D")

    columns = [Column(label(ml, hl, d), ml, hl, o.value, disaggregated=d is not None) if o.ok else
               Column(label(ml, hl, d), ml, hl, None, o.error, o.status == OOM, d is not None)
               for (hl, _, ml, _, d), o in zip(pairs, outcomes)]
    return build_comparison(columns, metrics)


# ----------------------------------------------------------------------------- rendering

def format_value(metric, value):
    """A value as the table shows it: ms with 2 decimals, rates with thousands separators,
    fractions as percentages."""
    if value is None:
        return "-"
    if metric.unit == "%":
        return f"{value * 100:.1f}%"
    if metric.unit in ("tok/s", "req/s") and abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def format_ratio(ratio):
    return "" if ratio is None else f"(x{ratio:.2f})"


def _cell(comparison, row, i):
    column = comparison.columns[i]
    if not column.ok:
        return "OOM" if column.oom else "error"
    text = format_value(row.metric, row.values[i])
    if i == comparison.baseline or row.ratios[i] is None:
        return text
    return f"{text} {format_ratio(row.ratios[i])}"


def format_comparison(comparison, title=None):
    """The comparison as a text table: one row per metric, one column per configuration, each
    cell ``value (xRATIO)`` relative to the baseline column (which shows values only); failed
    columns' errors below."""
    headers = ["metric"] + [c.label for c in comparison.columns]
    rows = []
    for row in comparison.rows:
        unit = f" ({row.metric.unit})" if row.metric.unit and row.metric.unit != "%" else ""
        rows.append([row.metric.label + unit] + [_cell(comparison, row, i) for i in range(len(comparison.columns))])
    out = []
    if title:
        out.append(title)
    out.append(table(headers, rows))
    if comparison.baseline is not None and len(comparison.columns) > 1:
        out.append(f"ratios (xN) relative to {comparison.columns[comparison.baseline].label}")
    failed = [c for c in comparison.columns if not c.ok]
    if failed:
        out.append("")
        out += [f"{c.label}: {'OOM: ' if c.oom and 'OOM' not in c.error else ''}{c.error}" for c in failed]
    return "\n".join(out)


def comparison_to_dict(comparison):
    """JSON-ready: ``baseline`` (the label), ``columns`` (label, model, hardware, error, oom,
    summary; ``disaggregated`` true for a P/D column) and ``metrics`` (key, label, unit,
    higher_is_better, values, ratios)."""
    base = comparison.columns[comparison.baseline].label if comparison.baseline is not None else None
    return jsonable({
        "baseline": base,
        "columns": [{"label": c.label, "model": c.model, "hardware": c.hardware, "error": c.error, "oom": c.oom,
                     **({"disaggregated": True} if c.disaggregated else {}), "summary": c.summary}
                    for c in comparison.columns],
        "metrics": [{"key": r.metric.key, "label": r.metric.label, "unit": r.metric.unit,
                     "higher_is_better": r.metric.higher_is_better, "values": list(r.values),
                     "ratios": list(r.ratios)} for r in comparison.rows],
    })


def comparison_from_dict(data):
    """Inverse of :func:`comparison_to_dict`."""
    columns = tuple(Column(c["label"], c["model"], c["hardware"], c.get("summary"), c.get("error"),
                           bool(c.get("oom")), bool(c.get("disaggregated"))) for c in data["columns"])
    rows = tuple(Row(Metric(m["key"], m["label"], m["unit"], bool(m["higher_is_better"])), tuple(m["values"]),
                     tuple(m["ratios"])) for m in data["metrics"])
    labels = [c.label for c in columns]
    baseline = labels.index(data["baseline"]) if data.get("baseline") in labels else None
    return Comparison(columns, rows, baseline)


#: Columns of :func:`comparison_to_csv`: one line per configuration and metric.
CSV_COLUMNS = ("column", "model", "hardware", "metric", "unit", "value", "ratio", "error")


def comparison_to_csv(comparison):
    """CSV text, one line per configuration and metric (``CSV_COLUMNS``); empty cells for missing
    values; a failed column has its error on each of its lines."""
    lines = []
    for i, c in enumerate(comparison.columns):
        for row in comparison.rows:
            v, r = row.values[i], row.ratios[i]
            lines.append([c.label, c.model, c.hardware, row.metric.key, row.metric.unit,
                          "" if v is None else repr(v), "" if r is None else repr(r), c.error or ""])
    return csv_text(CSV_COLUMNS, lines)


#: The file suffixes :func:`save_comparison` writes.
SAVE_SUFFIXES = (".json", ".csv", ".txt")


def check_save_path(path):
    """Raise a ConfigError unless ``path`` ends with one of :data:`SAVE_SUFFIXES` (check before
    simulating)."""
    if Path(path).suffix.lower() not in SAVE_SUFFIXES:
        raise ConfigError("a .json, .csv or .txt file name", key="comparison file", value=str(path))


def save_comparison(comparison, path):
    """Write the comparison to ``path`` by its suffix: ``.json`` (:func:`comparison_to_dict`),
    ``.csv`` (:func:`comparison_to_csv`) or ``.txt`` (the table); atomically."""
    check_save_path(path)
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        text = json.dumps(comparison_to_dict(comparison), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    elif suffix == ".csv":
        text = comparison_to_csv(comparison)
    else:
        text = format_comparison(comparison) + "\n"
    return write_output(path, text)
