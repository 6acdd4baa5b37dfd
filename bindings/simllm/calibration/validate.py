"""``simllm validate``: simulate every measured point under its own conditions and report the
error of each metric (measured vs predicted), with the median and mean absolute percentage error
and the share of points within 10% and 20%."""
import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from simllm.config import hub, presets
from simllm.config.disagg import DisaggConfig
from simllm.config.framework import FrameworkProfile, load_framework
from simllm.config.hardware import load_hardware
from simllm.config.model import load_model
from simllm.config.serving import FRAMEWORKS, ServingConfig
from simllm.config.workload import LengthDist, Workload, fixed
from simllm.errors import ConfigError
from simllm.sim.capacity import capacity
from simllm.sim.disagg import simulate_disagg
from simllm.sim.runner import run_many
from simllm.sim.simulate import simulate
from simllm.sim.stats import abs_error_stats

METRICS = ("ttft", "tpot", "itl", "e2el")
_SUFFIXES = ("-instruct", "-chat", "-hf", "-fp8", "-fp4", "-nvfp4", "-awq", "-gptq")
_PRECISION = {"": "auto", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "int4": "int4", "fp4": "fp4"}


@dataclass(frozen=True)
class Point:
    """One measurement and its prediction (``predicted`` None when skipped, with ``reason``)."""

    measurement: object
    model: str = ""
    hardware: str = ""
    predicted: dict = None
    reason: str = ""
    bound: dict = None  # metric -> ms at 100% of the datasheet peaks with no overheads

    def below_bound(self, metric):
        """True when the measured ``metric`` is faster than the hardware's datasheet peaks allow
        for the point's stated configuration (the measurement then ran something else)."""
        measured = getattr(self.measurement, f"{metric}_ms")
        return bool(self.bound) and not math.isnan(measured) and bool(measured < self.bound[metric])

    @property
    def inconsistent(self):
        """Some metric was measured faster than simllm predicts at 100% of the datasheet peaks:
        no efficiency factor reaches it, because the run differed from its stated configuration
        or from simllm's schedule for it; none of its metrics is a fair test of the factors."""
        return any(self.below_bound(metric) for metric in METRICS)

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


# Checkpoints that share a preset's architecture (their config.json dimensions are the preset's,
# compared in aiconfigurator-core 0.12.0's model_configs: DeepSeek-R1 and V3.1 are DeepSeek-V3
# retrained; Kimi-K2.5's language model is Kimi-K2's, its text_config differing only in
# max_position_embeddings 262144 and a vision tower the rows' text prompts do not use).
# Llama 3's 8B and 70B are Llama 3.1's with an 8,192-token context (meta-llama's config.json files:
# the same hidden, intermediate and vocabulary sizes, layers and heads; 3.1 adds rope scaling to 131,072).
SAME_ARCHITECTURE = {"deepseek-r1": "deepseek-v3", "deepseek-v3.1": "deepseek-v3", "kimi-k2.5": "kimi-k2",
                     "meta-llama-3-8b": "llama-3.1-8b", "meta-llama-3-70b": "llama-3.1-70b"}


def resolve_name(kind, name, mapping):
    """The preset a measurement's model or system name stands for, or "" when none matches."""
    if name in mapping:
        return mapping[name]
    if kind == "hardware" and name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return name  # the caller's own profile
    if kind == "models" and name.lower() in hub.preset_hf_ids():  # a HuggingFace id a preset stands for
        return hub.preset_hf_ids()[name.lower()]
    wanted = _key(name)
    if kind == "models":
        wanted = SAME_ARCHITECTURE.get(wanted, wanted)
    names = presets.preset_names(kind)
    for preset in names:
        if _key(preset) == wanted:
            return preset
    if kind == "hardware":  # "b200_sxm" is the b200 preset: the form factor only when it tells GPUs apart
        for preset in names:
            if _key(preset).replace("-sxm", "") == wanted.replace("-sxm", ""):
                return preset
    return ""


# InferenceMAX's published client settings: lengths uniform in [0.8 x, 1 x] of the stated ones
# (benchmark_serving.py --random-range-ratio 0.8), 10 x concurrency prompts
# (https://github.com/InferenceMAX/InferenceMAX README, "Benchmark Client Configuration").
INFERENCEMAX_RATIO = 0.8
#: TensorRT-LLM's tokens per step when an engine does not say (trtllm-build's and the LLM API's
#: ``max_num_tokens`` default, 8,192): without chunked context a step holds a whole prompt and the
#: decodes beside it, up to this many tokens.
TRTLLM_MAX_NUM_TOKENS = 8192


@dataclass(frozen=True)
class BenchmarkShape:
    """How the benchmark client drew the requests of a measured point, where the measurement
    does not record it: lengths uniform in [``min_length_ratio`` x length, length]
    (``benchmark_serving.py --random-range-ratio``; 1.0 = every request exactly the stated
    length), ``prompts_per_client`` requests per client of a closed loop (InferenceMAX's
    and SGLang's scripts send 10 x concurrency) and the closed loop's ``client_jitter_ms``.

    ``min_length_ratio`` None picks per point. silicon_sample.csv does not record its clients'
    length distribution: its rows get InferenceMAX's 0.8 except SGLang's, which
    ``sglang.bench_serving`` runs with fixed lengths (``--random-range-ratio 1``); a JSON result
    states its mean lengths, simulated as fixed. Whether lengths vary matters: with fixed lengths
    a closed loop's clients stay in step, every prefill of a wave queues behind the others and
    TTFT is several times that of clients out of step.
    """

    min_length_ratio: float = None
    prompts_per_client: int = 10
    seed: int = 0
    client_jitter_ms: float = None  # closed loops' client jitter; None = the workload default

    def ratio(self, m):
        if self.min_length_ratio is not None:
            return self.min_length_ratio
        if not m.source.lower().endswith(".csv") or m.backend == "sglang" or m.fixed_lengths:
            return 1.0
        return INFERENCEMAX_RATIO

    def lengths(self, value, m):
        ratio = self.ratio(m)
        if ratio >= 1.0:
            return fixed(value)
        return LengthDist("uniform", low=max(1, int(value * ratio)), high=int(value) + 1)


def _dtype(m, model):
    """The ``--dtype`` of measurement ``m``: its precision, except that a row marked FP4 of a model
    whose checkpoint is already 4-bit MXFP4 (gpt-oss: aiconfigurator labels its runs nvfp4) serves
    that checkpoint as it is, experts in MXFP4 and attention in BF16."""
    if m.precision == "fp4" and model.dtype == "mxfp4":
        return "auto"
    return _PRECISION[m.precision]


def _kv_cache_dtype(m):
    """TensorRT-LLM serves FP8 checkpoints with an FP8 KV cache (the checkpoints' quantization
    config asks for it: ``kv_cache_quant_algo: FP8``); vLLM and SGLang keep the model's dtype
    unless told otherwise."""
    return "fp8" if m.backend == "trtllm" and m.precision == "fp8" else "auto"


@lru_cache(maxsize=None)
def _preset(kind, name):
    return load_model(name) if kind == "models" else load_hardware(name)


def preset_hardware(name):
    """The hardware preset ``name`` (loaded once per process)."""
    return _preset("hardware", name)


def framework_of(m):
    """The framework of measurement ``m`` (``--framework``): its backend where simllm ships a
    profile for it, else vllm."""
    return m.backend if m.backend in FRAMEWORKS else "vllm"


def profile_of(m):
    """The shipped framework profile that describes the server of measurement ``m``: the one its
    format names (``Measurement.framework_profile``: an older release of the backend), else
    :func:`framework_of`'s."""
    return m.framework_profile or framework_of(m)


#: The rows a shipped figure was fitted on, per measured file: what a table of errors calls in
#: sample (:func:`in_sample`). silicon_sample.csv: its dense aggregated H100 and H200 rows, on which
#: each backend's client overhead was fitted (simllm.formats.aiconfigurator.SILICON_CLIENT_OVERHEAD_MS);
#: nim_genai_perf.csv: its Llama-3-8B rows, on which configs/frameworks/nim-trtllm.yaml's per-step,
#: per-sequence and decode-attention figures were fitted.
FITTED_ON = {
    "silicon_sample.csv": lambda p: (p.measurement.mode == "agg" and p.hardware in ("h100-sxm", "h200-sxm")
                                     and p.model in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-32b")),
    "nim_genai_perf.csv": lambda p: p.model == "llama-3.1-8b",
}


def source_name(measurement):
    """The file name a measurement was read from (without its folder or a ``#`` part)."""
    return Path(measurement.source.split("#")[0]).name


def in_sample(point):
    """Whether a shipped figure was fitted on ``point``'s row (:data:`FITTED_ON`)."""
    fitted = FITTED_ON.get(source_name(point.measurement))
    return bool(fitted and fitted(point))


#: A framework that adds nothing: what the peak bounds are simulated with.
NO_OVERHEAD = FrameworkProfile(name="none", frontend_latency_ms=0.0, iteration_overhead_us=0.0, launch_overhead_us=0.0)


class Posed(NamedTuple):
    """What :func:`pose` makes of a measurement: the simulation that reproduces it."""

    model: object
    hardware: object
    serving: ServingConfig
    workload: Workload
    framework: FrameworkProfile
    disagg: DisaggConfig  # None for an aggregated row


def pose(m, model, hardware, num_prompts=0, shape=BenchmarkShape(), framework=None):
    """The simulation of measurement ``m`` under its own conditions (:class:`Posed`): its model
    and GPU, engine settings, client and framework profile. ``model`` and ``hardware`` are preset
    names or loaded configs (calibration passes modified hardware), ``framework`` a framework
    profile (default: the one of ``m``'s backend, see :func:`profile_of`); ``num_prompts``
    overrides the requests simulated."""
    model = _preset("models", model) if isinstance(model, str) else model
    hardware = _preset("hardware", hardware) if isinstance(hardware, str) else hardware
    lengths = {"input_len": shape.lengths(m.input_len, m), "output_len": shape.lengths(m.output_len, m),
               "seed": shape.seed}
    static = m.mode == "static"
    if static and m.input_len + m.output_len > model.max_sequence_length:
        # The benchmark built its engine for these lengths and ran them past the checkpoint's
        # trained context (Llama 2's 4,096 with 128 + 4,096 tokens): the cost of a position does
        # not depend on it, so the row is simulated as it ran.
        model = replace(model, max_sequence_length=m.input_len + m.output_len)
    if static:  # one batch, every request sent at once: no client in between
        workload = Workload(num_prompts=m.concurrency, max_concurrency=m.concurrency, client_jitter_ms=0.0,
                            **lengths)
    elif m.concurrency:
        n = m.num_prompts or shape.prompts_per_client * m.concurrency
        jitter_ms = shape.client_jitter_ms
        if jitter_ms is None and not math.isnan(m.client_jitter_ms):
            jitter_ms = m.client_jitter_ms  # what the format says its client did
        jitter = {} if jitter_ms is None else {"client_jitter_ms": jitter_ms}
        workload = Workload(num_prompts=n + m.warmup_requests, max_concurrency=m.concurrency,
                            warmup_requests=m.warmup_requests, **lengths, **jitter)
    else:
        workload = Workload(num_prompts=m.num_prompts or 500, request_rate=m.request_rate, **lengths)
    if num_prompts:
        workload = replace(workload, num_prompts=num_prompts)
    disagg = m.mode == "disagg"
    chunked = m.backend != "sglang" if m.chunked_prefill is None else bool(m.chunked_prefill)
    max_len = min(model.max_sequence_length, m.input_len + m.output_len)
    tokens = {}
    if static:  # the benchmark's context phase runs the whole batch's prompts in one step
        chunked = False
        tokens = {"max_num_batched_tokens": max(TRTLLM_MAX_NUM_TOKENS, m.concurrency * m.input_len, max_len)}
    elif m.backend == "trtllm" and not chunked:  # a whole prompt and the decodes beside it in one step
        tokens = {"max_num_batched_tokens": max(TRTLLM_MAX_NUM_TOKENS, max_len)}
    serving = ServingConfig(
        tensor_parallel_size=1 if disagg else m.tp,
        dtype=_dtype(m, model),
        max_model_len=max_len,
        max_num_seqs=m.concurrency if static else max(256, m.concurrency),  # a static batch: all of it
        framework=framework_of(m),
        kv_cache_dtype=_kv_cache_dtype(m),
        # attention data parallelism: replicas; with expert parallelism (a MoE model's rows only: a
        # dense model's may fill the column in) their tokens meet in every MoE layer
        data_parallel_size=1 if disagg else m.dp,
        pipeline_parallel_size=1 if disagg else m.pp,
        expert_parallel_size=m.ep if model.is_moe and not disagg else 1,
        moe_tensor_parallel_size=0 if disagg else moe_tensor_parallel(m, model),
        # SGLang runs prefill batches apart from decode batches (its default: no mixed chunks),
        # which is vLLM's v0 schedule, not v1's chunked prefill.
        enable_chunked_prefill=chunked,
        **tokens,
        batching="static" if static else "continuous",
    )
    framework = framework or load_framework(profile_of(m))
    if static:  # the benchmark drives the engine itself: no HTTP frontend before it
        framework = replace(framework, frontend_latency_ms=0.0)
    return Posed(model, hardware, serving, workload, framework, disagg_config(m, model) if disagg else None)


def predict(m, model, hardware, num_prompts=0, shape=BenchmarkShape(), framework=None):
    """Simulate measurement ``m`` as :func:`pose` poses it; returns the predicted metrics in ms,
    with the measurement's ``client_overhead_ms`` (what its benchmark client adds) added to TTFT
    and E2E latency, as the client measured them. The parameters are :func:`pose`'s."""
    p = pose(m, model, hardware, num_prompts, shape, framework)
    if p.disagg is not None:
        s = simulate_disagg(p.model, p.hardware, p.serving, p.workload, p.disagg, keep_requests=False,
                            percentiles=(50,), framework=p.framework).summary
    else:
        s = simulate(p.model, p.hardware, p.serving, p.workload, keep_requests=False, percentiles=(50,),
                     framework=p.framework).summary
    out = {metric: s[f"mean_{metric}_ms"] for metric in METRICS}
    if p.disagg is None:
        out["peak_memory_gb"] = peak_memory_gb(s)
    client = getattr(m, "client_overhead_ms", 0.0)
    if client:
        out["ttft"] += client
        out["e2el"] += client
    return out


def predict_capacity(m, model, hardware, framework=None):
    """The output throughput (tokens/s) of the deployment of aggregated measurement ``m`` saturated
    (:func:`simllm.sim.capacity.capacity` of what :func:`pose` makes of it: its engine, lengths and
    client), to set against a measured maximum."""
    p = pose(m, model, hardware, framework=framework)
    if p.disagg is not None:
        raise ConfigError("an aggregated row", source=source_name(m), key="mode", value=m.mode)
    return capacity(p.model, p.hardware, p.serving, p.workload, framework=p.framework).output_throughput_tok_s


#: The largest load of a closed-loop or static-batch sweep is a measured maximum throughput (the
#: capacity check of :func:`capacity_points`) when it is at least this: NIM's sweeps end at 250 clients,
#: the static-batch sweeps at their largest batch.
MAXIMUM_MIN_LOAD = 64


def measured_maxima(points):
    """The points whose measured output throughput is their deployment's maximum: per model, GPU,
    parallelism, precision, framework and lengths, the row of the largest concurrency (a closed
    loop) or batch (a static batch), when that is at least :data:`MAXIMUM_MIN_LOAD` and the row
    measured its throughput and lies within the peak bound (simulated points of :func:`validate`).
    Open loops and disaggregated rows are left out."""
    best = {}
    for p in points:
        m = p.measurement
        if (p.predicted is None or p.inconsistent or m.mode == "disagg" or not m.concurrency
                or math.isnan(m.output_throughput) or m.output_throughput <= 0):
            continue
        key = (source_name(m), m.mode, p.model, p.hardware, m.tp, m.pp, m.dp, m.ep, m.precision, m.backend,
               m.input_len, m.output_len)
        if key not in best or m.concurrency > best[key].measurement.concurrency:
            best[key] = p
    return [p for p in best.values() if p.measurement.concurrency >= MAXIMUM_MIN_LOAD]


def capacity_point(context, item):
    """The runner's ``evaluate`` of :func:`capacity_points`: ``item`` a point; tokens/s."""
    return predict_capacity(item.measurement, item.model, item.hardware)


def capacity_points(points, workers=0):
    """``[(point, predicted tokens/s, signed error)]`` of :func:`measured_maxima`: each deployment's
    capacity (:func:`predict_capacity`) against the measured maximum output throughput, the error
    ``predicted / measured - 1`` (points that fail to simulate left out)."""
    maxima = measured_maxima(points)
    outcomes = run_many(capacity_point, None, maxima, workers=workers or None)
    return [(p, o.value, o.value / p.measurement.output_throughput - 1.0) for p, o in zip(maxima, outcomes) if o.ok]


def peak_memory_gb(summary):
    """Each GPU's peak memory in a run, GB (10**9 bytes), from its summary: weights, activations
    and the runtime's own, and the KV cache's blocks at their peak use."""
    mem = summary["memory"]
    used = mem["weight_bytes"] + mem["activation_bytes"] + mem["runtime_overhead_bytes"]
    return (used + (summary["kv_cache_usage_peak"] or 0.0) * mem["kv_pool_bytes"]) / 1e9


def memory_error(point):
    """Relative error of a point's predicted peak memory per GPU (nan where either is missing)."""
    measured = point.measurement.peak_memory_gb
    predicted = (point.predicted or {}).get("peak_memory_gb", math.nan)
    if math.isnan(measured) or not measured or math.isnan(predicted):
        return math.nan
    return predicted / measured - 1.0


def moe_tensor_parallel(m, model):
    """The ``moe_tensor_parallel_size`` of measurement (or pool) ``m``: its ``moe_tp`` where its
    experts are tensor-parallel over all its attention data-parallel ranks' GPUs without expert
    parallelism (``moe_tp`` = tp x dp, dp > 1), else 0 (the usual split; a ``moe_tp`` that
    matches no layout of the row's GPUs is left to it)."""
    coupled = model.is_moe and m.ep == 1 and m.dp > 1 and m.moe_tp == m.tp * m.dp
    return m.moe_tp if coupled else 0


def disagg_config(m, model):
    """The :class:`~simllm.config.disagg.DisaggConfig` of disaggregated measurement ``m``: its
    pools' instances and parallelism (each worker ``tp`` x ``dp`` GPUs, experts over ``ep``), each
    pool's batch (its ``batch_size`` requests per attention-DP rank at once, as aiconfigurator's
    ``prefill_batch_size`` and ``decode_batch_size`` configure the workers: a request whose cache
    has arrived waits for a decode slot), requests routed to the instance or rank with the fewest
    in flight (the load-aware routers of Dynamo and TensorRT-LLM's disaggregated server), the link
    between the pools the default (NVLink within one NVLink domain, else the GPUs' NICs), and the
    first token where the backend samples it (vLLM's proxy: on decode; SGLang, TensorRT-LLM: on
    prefill, streamed when the decode worker admits the request)."""
    def overrides(pool, batch):
        out = {"tensor_parallel_size": pool.tp, "data_parallel_size": pool.dp,
               "expert_parallel_size": pool.ep if model.is_moe else 1,
               "moe_tensor_parallel_size": moe_tensor_parallel(pool, model), "router": "least_outstanding"}
        if batch:
            out["max_num_seqs"] = batch
        return tuple(sorted(out.items()))

    return DisaggConfig(prefill_instances=m.prefill.workers, decode_instances=m.decode.workers,
                        prefill=overrides(m.prefill, m.prefill.batch_size), decode=overrides(m.decode, m.decode.batch_size),
                        first_token="decode" if framework_of(m) == "vllm" else "prefill")


def skip_reason(m, model, hardware):
    """Why measurement ``m`` cannot be simulated ("" when it can)."""
    if not model:
        return f"no model preset for {m.model!r} (use --model-map)"
    if not hardware:
        return f"no hardware preset for {m.hardware!r} (use --hardware-map or --hardware)"
    if m.mode == "disagg":
        if not (m.prefill and m.decode and m.prefill.workers and m.decode.workers):
            return "disaggregated row without its worker counts (prefill_num_workers, decode_num_workers)"
        if not m.concurrency:
            return "disaggregated row without its concurrency"
        if m.prefill.pp != 1 or m.decode.pp != 1:
            return "pipeline parallelism in a disaggregated pool"
    elif m.mode not in ("agg", "static"):
        return f"mode {m.mode!r} (agg, disagg or static)"
    if m.precision not in _PRECISION:
        return f"precision {m.precision!r}"
    return ""


def resolve(measurements, model_map=None, hardware_map=None):
    """Each measurement with its model and hardware presets and, when it cannot be simulated,
    the reason: a list of :class:`Point` without predictions."""
    model_map = model_map or {}
    hardware_map = hardware_map or {}
    out = []
    for m in measurements:
        model = resolve_name("models", m.model, model_map)
        hardware = resolve_name("hardware", m.hardware, hardware_map) if m.hardware else ""
        out.append(Point(m, model, hardware, None, skip_reason(m, model, hardware)))
    return out


def predict_point(context, item):
    """The runner's ``evaluate`` of one measured point: ``context`` is ``(num_prompts, shape)``,
    ``item`` ``(measurement, model, hardware, framework)``; the predicted metrics in ms."""
    num_prompts, shape = context
    m, model, hardware, framework = item
    return predict(m, model, hardware, num_prompts, shape, framework)


def predict_points(points, hardware_for=None, num_prompts=0, shape=BenchmarkShape(), workers=0, *, executor=None,
                   scheduler=None, framework_for=None):
    """Predict every point that has no skip reason on the runner (:func:`simllm.sim.runner.run_many`:
    ``workers`` threads by default, 0 = all cores; the kernels release the GIL).
    ``hardware_for(name)`` maps a point's hardware preset name to the config to simulate
    (calibration's trial factors); default: the preset itself. ``framework_for(name)`` likewise maps
    a point's framework profile name (:func:`profile_of`) to the profile to simulate; default: the shipped one."""
    hardware_for = hardware_for or (lambda name: name)
    framework_for = framework_for or load_framework
    todo = [i for i, p in enumerate(points) if not p.reason]
    items = [(points[i].measurement, points[i].model, hardware_for(points[i].hardware),
              framework_for(profile_of(points[i].measurement))) for i in todo]
    outcomes = run_many(predict_point, (num_prompts, shape), items, executor, workers=workers or None,
                        scheduler=scheduler)
    out = list(points)
    for i, o in zip(todo, outcomes):  # a ConfigError (e.g. a simulated OOM): the configuration cannot run
        out[i] = replace(points[i], predicted=o.value) if o.ok else replace(points[i], predicted=None, reason=o.error)
    return out


def peak_hardware(hardware):
    """``hardware`` at 100% of its datasheet peaks with no latencies and no kernel tables (whose
    efficiencies are at most 1): the fastest it can be (the framework's launch gap and frontend
    time overridden to 0; :data:`NO_OVERHEAD` has no per-iteration overhead either)."""
    return replace(hardware, compute_utilization=1.0, bandwidth_utilization=1.0, interconnect_utilization=1.0,
                   launch_overhead_us=0.0, interconnect_latency_us=0.0, frontend_latency_ms=0.0, kernel_tables=())


def with_bounds(points, num_prompts=0, shape=BenchmarkShape(), workers=0, *, executor=None, scheduler=None):
    """``points`` with ``bound`` set: each metric simulated at the hardware's peaks, with no
    framework overhead and no client overhead (a declared client overhead is an estimate, not a
    floor)."""
    peak = {name: peak_hardware(_preset("hardware", name)) for name in {p.hardware for p in points if not p.reason}}
    bare = [replace(p, measurement=replace(p.measurement, client_overhead_ms=0.0)) for p in points]
    done = predict_points(bare, peak.get, num_prompts, shape, workers, executor=executor, scheduler=scheduler,
                          framework_for=lambda _name: NO_OVERHEAD)
    return [replace(p, bound=d.predicted) for p, d in zip(points, done)]


def validate(measurements, model_map=None, hardware_map=None, num_prompts=0, shape=BenchmarkShape(),
             hardware_for=None, workers=0):
    """Predict every measurement that maps to presets, and the bound its hardware's peaks set;
    returns a list of :class:`Point`."""
    points = with_bounds(resolve(measurements, model_map, hardware_map), num_prompts, shape, workers)
    return predict_points(points, hardware_for, num_prompts, shape, workers)


def error_summary(points):
    """Per metric: points compared, median and mean absolute percentage error, the share within
    10% and 20%; and ``below_bound``, the points with a metric measured faster than the
    hardware's datasheet peaks allow for their stated configuration, which the statistics leave
    out (no efficiency factor can reach them)."""
    out = {}
    below = sum(1 for p in points if p.predicted is not None and p.inconsistent)
    for metric in METRICS:
        errs = np.array([abs(p.error(metric)) for p in points if not p.inconsistent])
        errs = errs[~np.isnan(errs)]
        if errs.size == 0:
            if below and any(not math.isnan(getattr(p.measurement, f"{metric}_ms")) for p in points):
                out[metric] = {"points": 0, "median_abs_pct_error": math.nan, "mean_abs_pct_error": math.nan,
                               "within_10pct": math.nan, "within_20pct": math.nan, "below_bound": below}
            continue
        out[metric] = {**abs_error_stats(errs), "below_bound": below}
    return out


def error_summary_by(points, key):
    """:func:`error_summary` per group: ``key(point)`` names a point's group (its backend, say)."""
    groups = {}
    for p in points:
        if p.predicted is not None:
            groups.setdefault(key(p), []).append(p)
    return {name: error_summary(group) for name, group in sorted(groups.items())}
