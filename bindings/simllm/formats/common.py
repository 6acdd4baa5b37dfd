"""What more than one tool's module shares, so that none imports another's.

Reading: the :class:`Measurement` row every reader returns, reading a result JSON, and the checks
that turn a value found in a file into a number or a one-line :class:`ConfigError` naming the
file and key. Writing: the marker a simulated result carries, the per-request data a writer
needs, and the token timeline of a request (its output tokens spread evenly between its first
token and its end, as simllm keeps no per-token times).
"""
import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simllm.config.serving import MAX_GPUS
from simllm.config.workload import MAX_COUNT, MAX_LENGTH, MAX_RATE, MIN_RATE
from simllm.errors import ConfigError

NAN = float("nan")

#: The marker written as endpoint type, backend and label of a simulated result.
SIMULATED = "simllm"


# ----------------------------------------------------------------------------- the measured row

@dataclass(frozen=True)
class WorkerPool:
    """One pool of a disaggregated measurement: ``workers`` engine instances (0 = not recorded),
    each ``tp`` x ``dp`` x ``pp`` GPUs (attention tensor x attention data x pipeline parallel)
    with the MoE layers' experts over ``ep`` of them and each expert over ``moe_tp``;
    ``batch_size`` its largest batch per attention-DP rank (0 = not recorded)."""

    workers: int
    tp: int = 1
    dp: int = 1
    ep: int = 1
    moe_tp: int = 1
    pp: int = 1
    batch_size: int = 0


#: The ranges a measured point's counts and figures must lie in: lengths within a model's longest
#: context, GPUs per dimension, request counts within int32; rates in req/s; times in ms and
#: throughputs in tokens/s.
_COUNT_RANGES = {"input_len": (1, MAX_LENGTH), "output_len": (1, MAX_LENGTH), "tp": (1, MAX_GPUS),
                 "pp": (1, MAX_GPUS), "dp": (1, MAX_GPUS), "ep": (1, MAX_GPUS), "moe_tp": (1, MAX_GPUS),
                 "concurrency": (0, MAX_COUNT), "num_prompts": (0, MAX_COUNT), "warmup_requests": (0, MAX_COUNT)}
_ENGINE_GPUS = ("tp", "pp", "dp", "ep", "moe_tp")
MAX_MEASURED = 1e12


@dataclass(frozen=True)
class Measurement:
    """One measured serving point. Times in ms (``nan`` when not measured); ``concurrency`` is a
    closed loop's clients (0 for an open loop at ``request_rate``).

    ``client_overhead_ms`` is what the benchmark client itself added to each request's TTFT and
    end-to-end latency (its own HTTP stack, request building, stream parsing), beyond what the
    server did: ``simllm validate`` and ``simllm calibrate`` add it to the prediction's TTFT and
    E2E before comparing, so that it is not fitted into the GPU or framework profiles. 0 (the
    default) when unknown; no importer sets it today, for want of a published figure for any
    tool's client.
    """

    source: str
    line: int
    model: str  # as the measurement names it (a HuggingFace id)
    hardware: str  # as the measurement names it ("h100_sxm"), or "" when it does not say
    backend: str
    precision: str  # "" = the model's native dtype
    mode: str  # "agg" (one engine) or "disagg" (separate prefill/decode workers)
    tp: int
    pp: int
    dp: int
    input_len: int
    output_len: int
    concurrency: int
    request_rate: float
    num_prompts: int
    ttft_ms: float
    tpot_ms: float
    itl_ms: float = NAN
    e2el_ms: float = NAN
    output_throughput: float = NAN
    client_overhead_ms: float = 0.0
    ep: int = 1  # expert-parallel degree of the MoE layers (1 = experts sharded by TP only)
    moe_tp: int = 1  # each expert's tensor-parallel split (tp x dp: the MoE layers over every rank)
    # A disaggregated measurement's pools (mode "disagg"; None for one engine): its ``tp``, ``dp``
    # and ``ep`` above do not apply.
    prefill: WorkerPool = None
    decode: WorkerPool = None
    # Every request exactly its stated lengths (the client drew none: a static batch, a synthetic
    # load with standard deviation 0); False leaves it to simllm.calibration.validate.BenchmarkShape.
    fixed_lengths: bool = False
    # Requests the client sent first and left out of its figures (a steady-state measurement).
    warmup_requests: int = 0
    # The client's mean delay before each send of its closed loop, where the format says what client
    # ran (GenAI-Perf's perf_analyzer sends the next request as its last one ends: 0); NaN when
    # unknown (simllm.calibration.validate.BenchmarkShape decides).
    client_jitter_ms: float = NAN
    # The shipped framework profile that describes the server measured, where the format names
    # one other than its backend's current release ("" = the backend's: simllm.calibration.validate.framework_of).
    framework_profile: str = ""
    # Whether the server chunked long prompts (mixed prefill/decode steps), where the format's
    # server is known to (None: the backend's as simllm.calibration.validate.predict poses it).
    chunked_prefill: object = None
    # Each GPU's peak memory during the run, GB (10**9 bytes), where the format measured it
    # (TensorRT-LLM's static-batch table); NaN: not measured.
    peak_memory_gb: float = NAN

    def __post_init__(self):
        for name, (lo, hi) in _COUNT_RANGES.items():
            v = getattr(self, name)
            if self.mode == "disagg" and name in _ENGINE_GPUS:
                lo = 0  # a disaggregated point's own engine figures do not apply (its pools say)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                raise ConfigError(f"an integer in [{lo}, {hi}]", source=self.source, line=self.line or None,
                                  key=name, value=v)
        rate = self.request_rate
        if not (isinstance(rate, (int, float)) and (MIN_RATE <= rate <= MAX_RATE or rate == math.inf)):
            raise ConfigError(f"requests per second in [{MIN_RATE:g}, {MAX_RATE:g}], or inf", source=self.source,
                              line=self.line or None, key="request_rate", value=rate)
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_throughput", "client_overhead_ms",
                     "client_jitter_ms", "peak_memory_gb"):
            v = getattr(self, name)  # NaN: not measured
            if not isinstance(v, (int, float)) or not (math.isnan(v) or 0.0 <= v <= MAX_MEASURED):
                raise ConfigError(f"a number in [0, {MAX_MEASURED:.0e}] (or none)", source=self.source,
                                  line=self.line or None, key=name, value=v)

    @property
    def where(self):
        return f"{self.source}:{self.line}" if self.line else self.source


def agg_measurement(source, model, backend, hardware, tp, precision, **kw):
    """A measurement of one aggregated engine; the JSON formats name no line, PP or DP."""
    return Measurement(source=source, line=0, model=model, hardware=hardware, backend=backend, precision=precision,
                       mode="agg", tp=tp, pp=1, dp=1, **kw)


# ----------------------------------------------------------------------------- reading values

def csv_rows(path, columns, what):
    """``(line, row)`` for each data row of the CSV table ``path`` (``row`` a dict keyed by its
    header), once the header holds every one of ``columns``; else a one-line ConfigError naming the
    file and what is missing (``what``: the table's kind, as "the silicon_sample.csv"). A file that
    is not UTF-8 is a ConfigError too."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise ConfigError(f"expected {what} columns; missing {', '.join(missing)}", source=str(path), line=1)
            for row in reader:
                yield reader.line_num, row
    except UnicodeDecodeError as exc:
        raise ConfigError(f"a UTF-8 CSV file ({exc.reason} at byte {exc.start})", source=str(path)) from None


def load_json(path):
    """The parsed content of the JSON file ``path``, or a one-line ConfigError naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"a UTF-8 JSON file ({exc.reason} at byte {exc.start})", source=str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON: {exc.msg}", source=str(path), line=exc.lineno) from None


def field_number(row, key, source, line, integer=False, default=None):
    """``row[key]`` (a CSV row or a flat JSON object) as a number; ``default`` when missing."""
    value = row.get(key)
    if value in (None, ""):
        if default is not None:
            return default
        raise ConfigError("a value", source=source, line=line, key=key, value=value)
    try:
        f = float(value)
        if integer:
            if f != int(f):
                raise ValueError
            return int(f)
        return f
    except (TypeError, ValueError):
        raise ConfigError("an integer" if integer else "a number", source=source, line=line, key=key,
                          value=value) from None


def value_at(data, path):
    """The value at the dotted ``path`` in nested dicts, or None where any step is missing."""
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def first_found(data, *paths):
    """``(path, value)`` of the first of ``paths`` holding a value (not None), else (paths[0], None)."""
    for path in paths:
        value = value_at(data, path)
        if value is not None:
            return path, value
    return paths[0], None


def checked_number(value, source, key, *, integer=False, minimum=None, positive=False, default=None):
    """``value`` as a finite number, or a ConfigError naming ``source``, ``key`` and the value.

    With a ``default``, a missing value (None, "") or NaN gives the default instead."""
    if value is None or value == "":
        if default is not None:
            return default
        raise ConfigError("a value", source=source, key=key, value=value)
    what = "an integer" if integer else "a number"
    if isinstance(value, bool):  # JSON true/false is not a count or a time
        raise ConfigError(what, source=source, key=key, value=value)
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ConfigError(what, source=source, key=key, value=value) from None
    if math.isnan(f) and default is not None:
        return default
    if not math.isfinite(f):
        raise ConfigError(f"a finite {what[3:] if integer else 'number'}", source=source, key=key, value=value)
    if integer:
        if f != int(f):
            raise ConfigError(what, source=source, key=key, value=value)
        f = int(f)
    if positive and f <= 0:
        raise ConfigError(f"{what} > 0", source=source, key=key, value=value)
    if minimum is not None and f < minimum:
        raise ConfigError(f"{what} >= {minimum}", source=source, key=key, value=value)
    return f


def token_count(mean, source, key):
    """Mean tokens per request, rounded to the fixed length the simulation replays."""
    n = round(checked_number(mean, source, key, minimum=0))
    if n < 1:
        raise ConfigError("at least one token per request on average", source=source, key=key, value=mean)
    return n


def recorded_name(value):
    """A recorded name as a string ("" when absent; GuideLLM writes "None" for no model)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return "" if value in (None, "", "None") else str(value)


# ----------------------------------------------------------------------------- writing

def require_requests(result, what):
    """A ConfigError unless ``result`` kept per-request data (``what`` needs it)."""
    if result.requests is None:
        raise ConfigError(f"{what} needs per-request data: simulate with keep_requests=True")


def ramp_cumulative(grid, firsts, ends, ramp_counts, step_counts, side="right"):
    """Events up to each time of ``grid`` when each request emits ``step_counts`` events at its
    ``firsts`` time and ``ramp_counts`` more spread evenly until its ``ends`` time (a linear
    ramp, the continuous form of GuideLLM's evenly spaced token events). ``side="left"`` counts
    the step events strictly before each time."""
    grid = np.asarray(grid, dtype=float)
    out = np.zeros(grid.shape)
    if firsts.size == 0:
        return out
    span = ends - firsts
    flat = span <= 0
    step = step_counts + np.where(flat, ramp_counts, 0)  # a request without a span emits all at once
    order = np.argsort(firsts, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(step[order])])
    out += cum[np.searchsorted(firsts[order], grid, side=side)]
    slope = np.where(flat, 0.0, ramp_counts / np.where(flat, 1.0, span))
    for x, sign in ((firsts, 1.0), (ends, -1.0)):  # sum of slope * max(t - x, 0)
        o = np.argsort(x, kind="stable")
        cs = np.concatenate([[0.0], np.cumsum(slope[o])])
        cx = np.concatenate([[0.0], np.cumsum(slope[o] * x[o])])
        k = np.searchsorted(x[o], grid, side="right")
        out += sign * (grid * cs[k] - cx[k])
    return out
