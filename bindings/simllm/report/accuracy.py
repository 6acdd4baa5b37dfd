"""Accuracy tables: ``simllm validate``'s errors per measured dataset, GPU family and framework,
in and out of sample, as Markdown (README's Accuracy section and docs/accuracy-tables.md are
written from them by ``docs/accuracy_tables.py``, so that no cell goes stale).

Imports the calibration layer (the points and their statistics) and :mod:`simllm.text`.
"""
import math

import numpy as np

from simllm.calibration import bands
from simllm.calibration import validate as accuracy
from simllm.calibration.record import load_record
from simllm.text import markdown_table

#: Each measured file's dataset, in the order the tables show them: file, mode, title, and what its
#: TTFT and TPOT columns measure.
DATASETS = (
    ("silicon_sample.csv", "agg", "silicon_sample.csv, aggregated (aiconfigurator; vLLM, SGLang, TensorRT-LLM)",
     ("TTFT", "TPOT")),
    ("silicon_sample.csv", "disagg", "silicon_sample.csv, disaggregated", ("TTFT", "TPOT")),
    ("trtllm_static_batch.csv", "static", "trtllm_static_batch.csv (TensorRT-LLM 0.9 static batches)",
     ("TTFT (batch prefill)", "TPOT (decode step)")),
    ("nim_genai_perf.csv", "agg", "nim_genai_perf.csv (NIM 2024, GenAI-Perf closed loops)", ("TTFT", "ITL")),
)

#: A hardware preset's GPU generation, by the start of its name.
GPU_FAMILIES = (("a100", "Ampere"), ("l40s", "Ada"), ("rtx-4090", "Ada"), ("h100", "Hopper"), ("h200", "Hopper"),
                ("gh200", "Hopper"), ("b200", "Blackwell"), ("b300", "Blackwell"), ("gb200", "Blackwell"),
                ("gb300", "Blackwell"), ("rtx-pro-6000", "Blackwell"), ("mi3", "AMD CDNA3/4"))


def gpu_family(preset):
    """The GPU generation of hardware preset ``preset`` (its name when not known)."""
    return next((family for start, family in GPU_FAMILIES if preset.startswith(start)), preset)


def dataset_of(point):
    """``(file name, mode)`` of a point: which of :data:`DATASETS` it belongs to."""
    return accuracy.source_name(point.measurement), point.measurement.mode


def _median_cell(errors):
    errors = np.array(errors, dtype=float)
    errors = errors[~np.isnan(errors)]
    return f"{np.median(np.abs(errors)) * 100:.1f}% ({np.median(errors) * 100:+.1f}%)" if errors.size else "-"


def _cells(points, memory=False):
    """``[rows, below bound, TTFT, TPOT]`` of simulated ``points``: each metric's median |error|
    (median signed error) over the rows within the peak bound (validate's statistics); with
    ``memory``, the peak memory per GPU's too (:func:`simllm.calibration.validate.memory_error`)."""
    kept = [p for p in points if not p.inconsistent]
    cells = [len(points), len(points) - len(kept)]
    cells += [_median_cell([p.error(metric) for p in kept]) for metric in ("ttft", "tpot")]
    if memory:
        cells.append(_median_cell([accuracy.memory_error(p) for p in points]))
    return cells


def _group_rows(points, key, memory=False):
    """Rows ``[*group, rows, below bound, TTFT, TPOT(, memory)]`` of the simulated points grouped by ``key``."""
    groups = {}
    for p in points:
        if p.predicted is not None:
            groups.setdefault(key(p), []).append(p)
    return [[*name, *_cells(groups[name], memory)] for name in sorted(groups)]


def dataset_tables(points):
    """Markdown: one table per dataset of :data:`DATASETS` that ``points`` hold (simulated points
    of ``simllm.calibration.validate``, bounded), a row per GPU family, framework and sample
    (``in`` = rows a shipped figure was fitted on, :func:`simllm.calibration.validate.in_sample`).
    Cells: median |error| (median signed error) of the rows within the peak bound; a dataset that
    measured each GPU's peak memory gets its column (over every simulated row)."""
    out = []
    for name, mode, title, (ttft, tpot) in DATASETS:
        rows = [p for p in points if dataset_of(p) == (name, mode)]
        if not any(p.predicted is not None for p in rows):
            continue
        memory = any(not math.isnan(p.measurement.peak_memory_gb) for p in rows)
        body = _group_rows(rows, lambda p: (gpu_family(p.hardware), p.measurement.backend or "unknown",
                                            "in" if accuracy.in_sample(p) else "out"), memory)
        headers = ["GPU", "framework", "sample", "rows", "below bound", ttft, tpot] + ["peak memory"] * memory
        out += [f"### {title}", "", markdown_table(headers, body), ""]
    return "\n".join(out).rstrip() + "\n"


def summary_table(points):
    """Markdown: one row per dataset and sample (in / out), the README's headline table."""
    rows = []
    for name, mode, title, _ in DATASETS:
        part = [p for p in points if dataset_of(p) == (name, mode) and p.predicted is not None]
        for sample in ("in", "out"):
            group = [p for p in part if accuracy.in_sample(p) == (sample == "in")]
            if group:
                rows.append([title.split(" (")[0], sample, *_cells(group)])
    return markdown_table(["dataset", "sample", "rows", "below bound", "TTFT", "TPOT / ITL"], rows)


def capacity_table(results):
    """Markdown: the capacity check, per dataset and GPU family: ``results`` are
    :func:`simllm.calibration.validate.capacity_points`' ``(point, predicted, error)``; cells the
    deployments, the median |error| (median signed error) of their capacity against the measured
    maximum output throughput, and how many lie within 8%."""
    groups = {}
    for p, _, err in results:
        name, mode = dataset_of(p)
        title = next((t for n, md, t, _ in DATASETS if (n, md) == (name, mode)), name)
        groups.setdefault((title.split(" (")[0], gpu_family(p.hardware), p.measurement.backend or "unknown"),
                          []).append(err)
    rows = [[*key, len(errs), _median_cell(errs), f"{np.mean(np.abs(errs) <= 0.08) * 100:.0f}%"]
            for key, errs in sorted(groups.items())]
    return markdown_table(["dataset", "GPU", "framework", "deployments", "capacity", "within 8%"], rows)


def _covered(point, metric, record, terms=None):
    """Whether ``point``'s measured ``metric`` lies in the 80% band the accuracy ``record`` gives
    its prediction (None where either is missing)."""
    m = point.measurement
    measured = getattr(m, f"{metric}_ms")
    predicted = point.predicted.get(metric)
    if predicted is None or math.isnan(measured) or not measured:
        return None
    features = bands.Features(point.model, point.hardware, m.backend or "vllm", m.tp, float(m.input_len),
                              float(m.output_len), float(max(m.concurrency, 1)), m.dp)
    band = bands.error_band(features, f"{metric}_ms", record, value=predicted, reasons=(), terms=terms)
    return None if band is None else band.lo <= measured <= band.hi


def band_table(points, record=None):
    """Markdown: how often the 80% error band (:mod:`simllm.calibration.bands`, from the accuracy
    ``record``; default the shipped one) holds the measured value, per dataset: the record's own
    rows left out one at a time (:func:`simllm.calibration.bands.leave_one_out_coverage`), every
    other dataset's rows within the peak bound as they are (the record holds none of them)."""
    record = load_record() if record is None else record
    own = {s["file"] for s in record.provenance.get("sources", [])}
    terms = bands.distance_terms(record)  # once: every band below reads the same record
    rows = []
    for name, mode, title, _ in DATASETS:
        part = [p for p in points if dataset_of(p) == (name, mode) and p.predicted is not None and not p.inconsistent]
        if not part:
            continue
        if name in own and mode == "agg":
            cells = [f"{bands.leave_one_out_coverage(record, f'{metric}_ms')[0] * 100:.0f}%" for metric in ("ttft", "tpot")]
            how = "each left out of the record"
        else:
            cells = []
            for metric in ("ttft", "tpot"):
                hits = [c for c in (_covered(p, metric, record, terms) for p in part) if c is not None]
                cells.append(f"{np.mean(hits) * 100:.0f}%" if hits else "-")
            how = "not in the record"
        rows.append([title.split(" (")[0], len(part), how, *cells])
    return markdown_table(["dataset", "rows", "rows are", "TTFT band holds", "TPOT band holds"], rows)
