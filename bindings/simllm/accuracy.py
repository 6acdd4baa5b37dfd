"""``simllm validate``: simulate every measured point under its own conditions and report the
error of each metric (measured vs predicted), with the median and mean absolute percentage error
and the share of points within 10% and 20%."""
import math
import re
from dataclasses import dataclass, replace

import numpy as np

from simllm import presets
from simllm.errors import ConfigError
from simllm.hardware import load_hardware
from simllm.model import load_model
from simllm.serving import ServingConfig
from simllm.simulate import simulate
from simllm.workload import Workload, fixed

METRICS = ("ttft", "tpot", "itl", "e2el")
_SUFFIXES = ("-instruct", "-chat", "-hf", "-fp8", "-fp4", "-nvfp4", "-awq", "-gptq")
_PRECISION = {"": "auto", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "int4": "int4"}


@dataclass(frozen=True)
class Point:
    """One measurement and its prediction (``predicted`` None when skipped, with ``reason``)."""

    measurement: object
    model: str = ""
    hardware: str = ""
    predicted: dict = None
    reason: str = ""

    def error(self, metric):
        """Relative error (predicted / measured - 1) of ``metric``, nan if either is missing."""
        measured = getattr(self.measurement, f"{metric}_ms")
        if self.predicted is None or not measured or math.isnan(measured):
            return math.nan
        return self.predicted[metric] / measured - 1.0


def _key(name):
    name = name.strip().lower().split("/")[-1].replace("_", "-")
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                changed = True
    return re.sub(r"-v0\.\d+$", "", name)


def parse_map(items, flag):
    """``FROM=TO`` pairs of a ``--model-map``/``--hardware-map`` flag."""
    out = {}
    for item in items or ():
        src, sep, dst = item.partition("=")
        if not sep or not src or not dst:
            raise ConfigError("FROM=PRESET", source="command line", key=flag, value=item)
        out[src] = dst
    return out


def resolve_name(kind, name, mapping):
    """The preset a measurement's model or system name stands for, or "" when none matches."""
    if name in mapping:
        return mapping[name]
    wanted = _key(name)
    for preset in presets.preset_names(kind):
        if _key(preset) == wanted:
            return preset
    return ""


def predict(m, model_name, hardware_name, num_prompts=0):
    """Simulate measurement ``m`` on the given presets; returns the predicted metrics in ms."""
    model = load_model(model_name)
    hardware = load_hardware(hardware_name)
    if m.concurrency:
        n = m.num_prompts or max(8 * m.concurrency, 64)
        workload = Workload(num_prompts=n, max_concurrency=m.concurrency, input_len=fixed(m.input_len),
                            output_len=fixed(m.output_len))
    else:
        workload = Workload(num_prompts=m.num_prompts or 500, request_rate=m.request_rate,
                            input_len=fixed(m.input_len), output_len=fixed(m.output_len))
    if num_prompts:
        workload = replace(workload, num_prompts=num_prompts)
    serving = ServingConfig(
        tensor_parallel_size=m.tp,
        dtype=_PRECISION[m.precision],
        max_model_len=min(model.max_sequence_length, m.input_len + m.output_len),
        max_num_seqs=max(256, m.concurrency),
    )
    s = simulate(model, hardware, serving, workload, keep_requests=False, percentiles=(50,)).summary
    return {metric: s[f"mean_{metric}_ms"] for metric in METRICS}


def validate(measurements, model_map=None, hardware_map=None, num_prompts=0):
    """Predict every measurement that maps to presets; returns a list of :class:`Point`."""
    model_map = model_map or {}
    hardware_map = hardware_map or {}
    points = []
    for m in measurements:
        model = resolve_name("models", m.model, model_map)
        hardware = resolve_name("hardware", m.hardware, hardware_map) if m.hardware else ""
        reason = ""
        if not model:
            reason = f"no model preset for {m.model!r} (use --model-map)"
        elif not hardware:
            reason = f"no hardware preset for {m.hardware!r} (use --hardware-map or --hardware)"
        elif m.mode != "agg":
            reason = f"mode {m.mode} (disaggregated serving is not simulated)"
        elif m.pp != 1 or m.dp != 1:
            reason = "pipeline or attention data parallelism"
        elif m.precision not in _PRECISION:
            reason = f"precision {m.precision!r}"
        if reason:
            points.append(Point(m, model, hardware, None, reason))
            continue
        try:
            points.append(Point(m, model, hardware, predict(m, model, hardware, num_prompts)))
        except ConfigError as exc:  # e.g. a simulated OOM: the configuration cannot run
            points.append(Point(m, model, hardware, None, str(exc)))
    return points


def error_summary(points):
    """Per metric: points compared, median and mean absolute percentage error, and the share
    within 10% and 20%."""
    out = {}
    for metric in METRICS:
        errs = np.array([abs(p.error(metric)) for p in points])
        errs = errs[~np.isnan(errs)]
        if errs.size == 0:
            continue
        out[metric] = {
            "points": int(errs.size),
            "median_abs_pct_error": float(np.median(errs) * 100),
            "mean_abs_pct_error": float(np.mean(errs) * 100),
            "within_10pct": float(np.mean(errs <= 0.10)),
            "within_20pct": float(np.mean(errs <= 0.20)),
        }
    return out
