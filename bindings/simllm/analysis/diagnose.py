"""``simllm diagnose``: what limits a simulated run, with the numbers, and what one change would do.

:func:`diagnose` classifies a :class:`~simllm.sim.results.SimResult` as one of :data:`KINDS`:

- ``memory-bound (KV cache)``: the paged KV pool is what stops the engine from running more;
- ``concurrency-bound``: too little load reaches the engine to fill it;
- ``prefill-bound``: prompt processing takes most of the GPU time;
- ``decode-bound (bandwidth)``: decode steps, which stream the weights and the KV cache every
  iteration, take most of the GPU time.

The rules, checked in this order (the first that holds wins; thresholds are module constants):

1. memory-bound if ``num_preemptions > 0``, or the KV pool's peak use is at least
   :data:`KV_PEAK_FULL` (95%), or requests were rejected for want of KV blocks (rejections
   beyond the workload's requests longer than ``max_model_len``; known when the workload is
   given);
2. concurrency-bound if the mean batch is below :data:`BATCH_FILL_LOW` (25%) of
   ``max_num_seqs`` and either the GPU is idle a good share of the run (``gpu_busy_fraction``
   below :data:`GPU_BUSY_LOW`, 75%) or both MFU and MBU are below :data:`UTILIZATION_LOW` (50%)
   of what the hardware profile can attain (its ``compute_utilization`` and
   ``bandwidth_utilization`` factors);
3. prefill-bound if prefill's share of the GPU time is above :data:`PREFILL_SHARE_HIGH` (50%);
4. otherwise decode-bound (bandwidth).

A small batch alone is not concurrency-bound: a closed loop of one or two clients keeps the GPU
busy streaming weights at a high MBU, which rule 4 calls decode-bound (bandwidth), with a note
that more concurrent requests would raise throughput.

Prefill and decode time shares are not counted by the engine; they are re-costed with the cost
model (``simcore.iteration_costs_nb``, the same roofline the engine times iterations with):

- prefill: the run's computed prompt tokens (``prefill_tokens_computed``, recomputation after
  preemption included) as prompts of their mean computed length, each split into chunks of
  ``max_num_batched_tokens`` (whole prompts without chunked prefill), as many prompts per
  iteration as that token budget and the run's mean batch allow, each iteration holding prefill
  alone;
- decode: the run's decode tokens (``decode_tokens_computed``) in decode-only iterations of the
  run's mean batch size, every sequence at the mean mid-generation context (mean prompt + half
  the mean output).

Each share is that phase's re-costed time over the sum of both; ``recosted_over_busy_pct`` in
the evidence compares the sum with the GPU time the simulation spent (near 100% when the
representative iterations describe the run well; above it when chunked prefill let prompt
chunks ride in decode iterations, sharing their weight reads). The per-operator shares of the
run come from the same re-costing.

:func:`what_if` re-simulates the configuration with exactly one change at a time (FP8 / INT8 /
INT4 weights, FP8 KV cache, GQA, twice the tensor parallelism, chunked prefill toggled, twice
``max_num_seqs`` or ``max_num_batched_tokens``, ``gpu_memory_utilization`` 0.95, prefix
caching, with expert parallelism balanced expert routing, and disaggregated prefill/decode: the
run's data-parallel replicas split into a prefill pool and a decode pool, the larger half
decoding, or with one replica one prefill and one decode instance of its size; speculative
decoding toggled: off when the run has it, else EAGLE-3 with 3 drafts at vLLM's pinned acceptance)
and reports TTFT,
TPOT and output throughput against the base; a change that does not apply, or whose
configuration is invalid or does not fit (:class:`~simllm.errors.SimulatedOOM`), is reported as
skipped with the reason.
"""
import json
import math
import textwrap
from dataclasses import dataclass, field, replace

import numpy as np

from simcore import codes, iteration_costs_nb, new_cost_arrays, op_count_nb, step_overhead_nb
from simllm.config import serving as serving_mod
from simllm.config.disagg import DisaggConfig
from simllm.config.hardware import load_hardware
from simllm.config.model import load_model
from simllm.config.serving import ServingConfig
from simllm.config.speculative import SpeculativeConfig
from simllm.config.workload import Workload, generate
from simllm.errors import ConfigError
from simllm.sim.pack import pack_cost_params
from simllm.sim.runner import Base, Task, run_simulations
from simllm.sim.simulate import simulate
from simllm.text import table

# The kernels' per-step CPU time rule as plain Python (a compiled call from here would compile it
# for CostParams alone); under NUMBA_DISABLE_JIT the kernel is plain Python already.
_STEP_OVERHEAD = getattr(step_overhead_nb, "py_func", step_overhead_nb)

MEMORY_BOUND = "memory-bound (KV cache)"
CONCURRENCY_BOUND = "concurrency-bound"
PREFILL_BOUND = "prefill-bound"
DECODE_BOUND = "decode-bound (bandwidth)"
KINDS = (MEMORY_BOUND, CONCURRENCY_BOUND, PREFILL_BOUND, DECODE_BOUND)  # in rule priority order

# Thresholds of the rules (fractions).
KV_PEAK_FULL = 0.95  # KV pool peak use at or above this: memory-bound
BATCH_FILL_LOW = 0.25  # mean batch below this fraction of max_num_seqs: the engine could batch more
GPU_BUSY_LOW = 0.75  # GPU busy below this share of the run: idle a good share (concurrency-bound)
UTILIZATION_LOW = 0.5  # MFU and MBU both below this fraction of the attainable ones (concurrency-bound)
PREFILL_SHARE_HIGH = 0.5  # prefill's share of the re-costed GPU time above this: prefill-bound

TOP_OPERATORS = 6  # operators listed in the text report
MAX_CHUNKS = 512  # prefill chunks re-costed per prompt at most


@dataclass(frozen=True)
class OperatorShare:
    """One operator's share of the run's re-costed GPU time. ``bound`` is what limits it in the
    phase where it spends most of its time."""

    name: str
    time_pct: float
    bound: str


@dataclass(frozen=True)
class Diagnosis:
    """What limits a simulated run.

    Attributes
    ----------
    kind : str
        One of :data:`KINDS`.
    reason : str
        One sentence with the numbers behind ``kind``.
    rule : str
        The rule that fired, with its threshold.
    evidence : dict
        Named numbers, units in the names (``_pct`` percent, ``_ms``, ``_count``, ...).
    operators : tuple of OperatorShare
        Every operator that runs, by share of the run's re-costed GPU time, largest first.
    notes : tuple of str
        Secondary observations (other rules close to firing, batch headroom).
    """

    kind: str
    reason: str
    rule: str
    evidence: dict = field(default_factory=dict)
    operators: tuple = ()
    notes: tuple = ()


@dataclass(frozen=True)
class WhatIf:
    """The base configuration with one change, re-simulated. ``*_change`` are relative to the
    base (``-0.25`` = 25% lower); all numbers are None when ``skipped`` gives the reason the
    change was not simulated."""

    name: str
    change: str  # flag-style text: "--dtype fp8"
    ttft_ms: float = None
    tpot_ms: float = None
    output_throughput: float = None  # tokens/s
    ttft_change: float = None
    tpot_change: float = None
    throughput_change: float = None
    failed: int = None
    num_preemptions: int = None
    note: str = ""
    skipped: str = None


@dataclass(frozen=True)
class Change:
    """A what-if change. ``apply(model, hardware, serving, workload)`` returns ``(model, serving,
    change_text)`` for the changed configuration (or ``(model, serving, change_text, disagg)``, a
    :class:`~simllm.config.disagg.DisaggConfig` making it a disaggregated run), or a string: why it
    does not apply. ``key`` is its short name (``simllm diagnose --what-if KEY``), ``name`` the
    label in reports."""

    key: str
    name: str
    apply: object
    note: str = ""


# ----------------------------------------------------------------------------- re-costing

def _configs(result, model, hardware, serving):
    """The configs behind ``result``: as given, else rebuilt from its summary (presets only)."""
    s = result.summary
    mem = s.get("memory", {})
    if model is None:
        try:
            model = load_model(s["model"])
        except ConfigError:
            raise ConfigError(f"diagnose() needs model=: the result's model {s['model']!r} is not a preset name") from None
    if hardware is None:
        try:
            hardware = load_hardware(s["hardware"])
        except ConfigError:
            raise ConfigError(
                f"diagnose() needs hardware=: the result's hardware {s['hardware']!r} is not a preset name") from None
    if serving is None:
        util = mem.get("usable_bytes", 0.9) / mem["total_bytes"] if mem.get("total_bytes") else 0.9
        serving = ServingConfig(
            tensor_parallel_size=s["tensor_parallel_size"], data_parallel_size=s["data_parallel_size"],
            pipeline_parallel_size=s.get("pipeline_parallel_size", 1),
            pp_max_micro_batch_size=s.get("pp_max_micro_batch_size", 0),
            dtype=s["dtype"], kv_cache_dtype=s["kv_cache_dtype"], max_num_seqs=s["max_num_seqs"],
            max_num_batched_tokens=s["max_num_batched_tokens"], enable_chunked_prefill=s["enable_chunked_prefill"],
            enable_prefix_caching=s["enable_prefix_caching"], batching=s["batching"],
            block_size=mem.get("block_size", 16), max_model_len=mem.get("max_model_len", 0),
            gpu_memory_utilization=min(max(util, 1e-6), 1.0),
        )
    return model, hardware, serving


class _Recost:
    """Accumulates re-costed iterations: per-operator seconds, launch overhead and the
    framework's per-iteration CPU overhead (not an operator)."""

    def __init__(self, params):
        self.p = params
        self.arrays = new_cost_arrays()
        self.op_s = np.zeros(codes.N_OPS)
        self.op_bound_s = np.zeros((codes.N_OPS, len(codes.BOUND_NAMES)))
        self.total_s = 0.0
        self.launch_s = 0.0
        self.iteration_overhead_s = 0.0
        self.memory_bound_s = 0.0

    def add(self, times, n_tokens, pairs, kv_read, n_emit):
        """Add ``times`` iterations of the given batch aggregates; returns the seconds added."""
        if times <= 0.0 or n_tokens <= 0.0:
            return 0.0
        flops, nbytes, seconds, bound = self.arrays
        t = iteration_costs_nb(self.p, n_tokens, pairs, kv_read, n_emit, flops, nbytes, seconds, bound)
        self.op_s += times * seconds
        self.op_bound_s[np.arange(codes.N_OPS), bound] += times * seconds
        launches = sum(op_count_nb(self.p, i) for i in range(codes.N_OPS) if bound[i] != codes.BOUND_NONE)
        self.launch_s += times * launches * self.p.launch_s
        self.iteration_overhead_s += times * _STEP_OVERHEAD(self.p, n_emit)
        self.memory_bound_s += times * float(seconds[bound == codes.BOUND_MEMORY].sum())
        self.total_s += times * t
        return times * t


def _recost(params, model, serving, resolved, s):
    """Re-cost the run's prefill and decode work (see the module docstring).

    Returns (prefill _Recost, decode _Recost)."""
    prefill, decode = _Recost(params), _Recost(params)
    completed = s["completed"]
    p_tokens = float(s["prefill_tokens_computed"])
    d_tokens = float(s["decode_tokens_computed"])
    batch = max(float(s["mean_batch_size"]), 1.0)
    n_prefills = completed + s["num_preemptions"] + s.get("num_timed_out", 0)
    if p_tokens > 0:
        length = max(p_tokens / max(n_prefills, 1), 1.0)
        n_prompts = p_tokens / length
        continuous = serving.batching == "continuous"
        budget = float(resolved.max_num_batched_tokens)
        chunk = min(length, budget) if (continuous and serving.enable_chunked_prefill) else length
        chunk = max(chunk, length / MAX_CHUNKS)  # a tiny budget: cost fewer, larger chunks
        per_iter = 1.0
        if chunk >= length:  # whole prompts: as many per iteration as the budget and the batch allow
            per_iter = max(1.0, min(math.floor(budget / length) if continuous else batch, batch,
                                    float(serving.max_num_seqs)))
        done = 0.0
        while done < length:
            q = min(chunk, length - done)
            last = done + q >= length
            k = per_iter
            prefill.add(n_prompts / k, k * q, k * (q * done + q * (q + 1.0) / 2.0), k * (done + q), k if last else 0.0)
            done += q
    if d_tokens > 0:
        mean_in = s["total_input_tokens"] / completed if completed else p_tokens / max(n_prefills, 1)
        mean_out = s["total_output_tokens"] / completed if completed else 1.0
        ctx = mean_in + mean_out / 2.0
        steps = d_tokens / batch
        if model.kv_cache_enabled:
            decode.add(steps, batch, batch * (ctx + 1.0), batch * (ctx + 1.0), batch)
        else:  # no KV cache: each step recomputes the whole context
            n = ctx + 1.0
            decode.add(steps, batch * n, batch * n * (n + 1.0) / 2.0, batch * n, batch)
    return prefill, decode


def _rejected_for_kv(summary, workload, max_model_len):
    """Rejected requests that were not longer than ``max_model_len``, so rejected for want of KV
    blocks: ``num_rejected`` less the workload's requests over ``max_model_len`` (every one of
    which is rejected). None without the workload."""
    if not summary["num_rejected"]:
        return 0
    if workload is None:
        return None
    req = generate(workload)
    too_long = int(((req.input_len + req.output_len) > max_model_len).sum())
    return max(0, int(summary["num_rejected"]) - too_long)


# ----------------------------------------------------------------------------- diagnosis

def _pct(x):
    """A fraction in percent; a figure that does not apply (None: no KV cache) counts as 0%."""
    return float(x) * 100.0 if x is not None else 0.0


def classify(ev):
    """Apply the rules (module docstring) to an evidence dict; returns ``(kind, rule)``."""
    if ev["preemptions_count"] > 0:
        return MEMORY_BOUND, "num_preemptions > 0"
    if ev["kv_cache_usage_peak_pct"] >= KV_PEAK_FULL * 100:
        return MEMORY_BOUND, f"KV cache peak >= {KV_PEAK_FULL:.0%}"
    if ev.get("rejected_for_kv_count", 0) > 0:
        return MEMORY_BOUND, "requests rejected for want of KV blocks"
    if ev["batch_fill_pct"] < BATCH_FILL_LOW * 100:
        if ev["gpu_busy_pct"] < GPU_BUSY_LOW * 100:
            return CONCURRENCY_BOUND, (f"mean batch < {BATCH_FILL_LOW:.0%} of max_num_seqs and GPU busy "
                                       f"< {GPU_BUSY_LOW:.0%}")
        if ev["mfu_of_attainable_pct"] < UTILIZATION_LOW * 100 and ev["mbu_of_attainable_pct"] < UTILIZATION_LOW * 100:
            return CONCURRENCY_BOUND, (f"mean batch < {BATCH_FILL_LOW:.0%} of max_num_seqs and MFU, MBU both "
                                       f"< {UTILIZATION_LOW:.0%} of attainable")
    if ev["prefill_time_share_pct"] > PREFILL_SHARE_HIGH * 100:
        return PREFILL_BOUND, f"prefill share of GPU time > {PREFILL_SHARE_HIGH:.0%}"
    return DECODE_BOUND, f"none of the above (prefill share of GPU time <= {PREFILL_SHARE_HIGH:.0%})"


def diagnose(result, model=None, hardware=None, serving=None, workload=None):
    """Classify what limits a simulated run (rules and method in the module docstring).

    Parameters
    ----------
    result : SimResult
    model, hardware, serving : optional
        The configs ``result`` was simulated with. Without them they are rebuilt from the
        summary, which works for preset models and hardware only and assumes the ``vllm``
        framework profile; pass them when you have them.
    workload : Workload, optional
        The workload simulated; only needed to tell requests rejected for KV blocks from those
        longer than ``max_model_len`` (``rejected_for_kv_count`` is left out without it).

    Returns
    -------
    Diagnosis
    """
    s = result.summary
    model, hardware, serving = _configs(result, model, hardware, serving)
    resolved = serving_mod.resolve(model, hardware, serving)
    params = pack_cost_params(model, hardware, serving, resolved)
    prefill, decode = _recost(params, model, serving, resolved, s)
    recosted = prefill.total_s + decode.total_s
    busy_s = s["gpu_busy_fraction"] * s["duration"] * s["data_parallel_size"]
    ttft = s["mean_ttft_ms"]
    mfu, mbu = float(s["compute_utilization"]), float(s["bandwidth_utilization"])
    ev = {
        "prefill_time_share_pct": _pct(prefill.total_s / recosted) if recosted else 0.0,
        "decode_time_share_pct": _pct(decode.total_s / recosted) if recosted else 0.0,
        "recosted_over_busy_pct": _pct(recosted / busy_s) if busy_s else 0.0,
        "launch_overhead_time_pct": _pct((prefill.launch_s + decode.launch_s) / recosted) if recosted else 0.0,
        "iteration_overhead_time_pct": (_pct((prefill.iteration_overhead_s + decode.iteration_overhead_s) / recosted)
                                        if recosted else 0.0),
        "decode_memory_bound_time_pct": _pct(decode.memory_bound_s / decode.total_s) if decode.total_s else 0.0,
        "mfu_pct": _pct(mfu),
        "mbu_pct": _pct(mbu),
        "mfu_of_attainable_pct": _pct(mfu / hardware.compute_utilization) if hardware.compute_utilization else 0.0,
        "mbu_of_attainable_pct": _pct(mbu / hardware.bandwidth_utilization) if hardware.bandwidth_utilization else 0.0,
        "gpu_busy_pct": _pct(s["gpu_busy_fraction"]),
        "kv_cache_usage_mean_pct": _pct(s["kv_cache_usage_mean"]),
        "kv_cache_usage_peak_pct": _pct(s["kv_cache_usage_peak"]),
        "kv_cache_capacity_tokens": int(s["kv_cache_capacity_tokens"]),
        "preemptions_count": int(s["num_preemptions"]),
        "rejected_count": int(s["num_rejected"]),
        "timed_out_count": int(s["num_timed_out"]),
        "failed_count": int(s["failed"]),
        "mean_queue_ms": float(s["mean_queue_ms"]),
        "mean_ttft_ms": float(ttft),
        "queue_share_of_ttft_pct": _pct(s["mean_queue_ms"] / ttft) if ttft else 0.0,
        "mean_tpot_ms": float(s["mean_tpot_ms"]),
        "mean_batch_seqs": float(s["mean_batch_size"]),
        "max_num_seqs": int(s["max_num_seqs"]),
        "batch_fill_pct": _pct(s["mean_batch_size"] / s["max_num_seqs"]),
        "prefill_tokens_computed": int(s["prefill_tokens_computed"]),
        "decode_tokens_computed": int(s["decode_tokens_computed"]),
        "output_throughput_tok_s": float(s["output_throughput"]),
    }
    kv_rejected = _rejected_for_kv(s, workload, resolved.max_model_len)
    if kv_rejected is not None:  # listed after rejected_count
        items = list(ev.items())
        at = [k for k, _ in items].index("rejected_count") + 1
        ev = dict(items[:at] + [("rejected_for_kv_count", kv_rejected)] + items[at:])
    kind, rule = classify(ev)

    op_s = prefill.op_s + decode.op_s
    by_bound = prefill.op_bound_s + decode.op_bound_s
    operators = tuple(
        OperatorShare(codes.OP_NAMES[i], _pct(op_s[i] / recosted), codes.BOUND_NAMES[int(np.argmax(by_bound[i]))])
        for i in np.argsort(-op_s, kind="stable") if op_s[i] > 0.0
    )
    reason = _reason(kind, ev, operators)
    return Diagnosis(kind, reason, rule, ev, operators, _notes(kind, ev))


def _top(operators, n=3):
    return ", ".join(f"{o.name} {o.time_pct:.0f}%" for o in operators[:n])


def _queueing(ev):
    if not ev["mean_ttft_ms"]:
        return ""  # no request completed
    return f"; queueing is {ev['queue_share_of_ttft_pct']:.0f}% of the {ev['mean_ttft_ms']:.0f} ms mean TTFT"


def _reason(kind, ev, operators):
    if kind == MEMORY_BOUND:
        rej = f", {ev['rejected_for_kv_count']} requests rejected for KV" if ev.get("rejected_for_kv_count") else ""
        return (f"The KV cache is the limit: {ev['preemptions_count']} preemptions, KV use peaks at "
                f"{ev['kv_cache_usage_peak_pct']:.0f}% (mean {ev['kv_cache_usage_mean_pct']:.0f}%) of "
                f"{ev['kv_cache_capacity_tokens']:,} tokens{rej}{_queueing(ev)}.")
    if kind == CONCURRENCY_BOUND:
        return (f"Too little load reaches the engine: mean batch {ev['mean_batch_seqs']:.1f} of max_num_seqs "
                f"{ev['max_num_seqs']} ({ev['batch_fill_pct']:.1f}%), GPU busy {ev['gpu_busy_pct']:.0f}% of the run "
                f"at MFU {ev['mfu_pct']:.1f}% / MBU {ev['mbu_pct']:.1f}%; more concurrent requests would raise "
                f"throughput at little cost in latency.")
    if kind == PREFILL_BOUND:
        return (f"Prefill takes {ev['prefill_time_share_pct']:.0f}% of the GPU time "
                f"({ev['prefill_tokens_computed']:,} prompt tokens computed vs {ev['decode_tokens_computed']:,} "
                f"decode tokens) at MFU {ev['mfu_pct']:.1f}%{_queueing(ev)}; top operators {_top(operators)}.")
    return (f"Decode takes {ev['decode_time_share_pct']:.0f}% of the GPU time, "
            f"{ev['decode_memory_bound_time_pct']:.0f}% of it in memory-bound operators streaming weights and KV "
            f"at MBU {ev['mbu_pct']:.1f}% (TPOT {ev['mean_tpot_ms']:.2f} ms, mean batch {ev['mean_batch_seqs']:.1f}); "
            f"top operators {_top(operators)}.")


def _notes(kind, ev):
    notes = []
    if kind == DECODE_BOUND and ev["batch_fill_pct"] < BATCH_FILL_LOW * 100:
        notes.append(f"mean batch {ev['mean_batch_seqs']:.1f} is {ev['batch_fill_pct']:.1f}% of max_num_seqs "
                     f"{ev['max_num_seqs']}: more concurrent requests would raise throughput (the GPU is busy "
                     f"{ev['gpu_busy_pct']:.0f}%, so not concurrency-bound by the rules)")
    if ev["launch_overhead_time_pct"] >= 10:
        notes.append(f"kernel launch overhead is {ev['launch_overhead_time_pct']:.0f}% of the re-costed GPU time")
    if kind != MEMORY_BOUND and ev["kv_cache_usage_peak_pct"] >= 80:
        notes.append(f"KV cache peaks at {ev['kv_cache_usage_peak_pct']:.0f}%: close to memory-bound")
    if ev["timed_out_count"]:
        notes.append(f"{ev['timed_out_count']} requests timed out")
    if ev["rejected_count"] and not ev.get("rejected_for_kv_count"):
        notes.append(f"{ev['rejected_count']} requests rejected (longer than max_model_len"
                     + ("" if "rejected_for_kv_count" in ev else " or the KV pool: pass workload= to tell which")
                     + ")")
    if not 50 <= ev["recosted_over_busy_pct"] <= 200:
        notes.append(f"the re-costed prefill + decode time is {ev['recosted_over_busy_pct']:.0f}% of the simulated "
                     "busy time: the time shares are rough for this run")
    return tuple(notes)


# ----------------------------------------------------------------------------- what-if

def _dtype_change(dtype, note=""):
    """Weights in ``dtype``."""

    def apply(model, hardware, serving, workload):
        current = serving_mod.resolve(model, hardware, serving).weight_dtype
        if current == dtype:
            return f"weights are already {dtype}"
        return model, replace(serving, dtype=dtype), f"--dtype {dtype}"
    return Change(dtype, f"{dtype.upper()} weights", apply, note)


def _kv_fp8(model, hardware, serving, workload):
    if not model.kv_cache_enabled:
        return "the model runs without a KV cache"
    current = serving_mod.resolve(model, hardware, serving).kv_dtype
    if current in ("fp8", "int8", "int4"):
        return f"the KV cache is already {current}"
    return model, replace(serving, kv_cache_dtype="fp8"), "--kv-cache-dtype fp8"


GQA_KV_HEADS = 8


def _gqa(model, hardware, serving, workload):
    heads, kv = model.num_attention_heads, model.num_key_value_heads
    if model.is_mla:
        return "multi-head latent attention already caches one latent per token, whatever the heads"
    if kv != heads:
        return f"already {'MQA' if kv == 1 else 'GQA'} ({kv} KV heads for {heads} query heads)"
    if heads <= GQA_KV_HEADS or heads % GQA_KV_HEADS:
        return f"{heads} attention heads do not group into {GQA_KV_HEADS} KV heads"
    return (replace(model, num_key_value_heads=GQA_KV_HEADS), serving,
            f"model num_key_value_heads {kv} -> {GQA_KV_HEADS}")


def _tp_x2(model, hardware, serving, workload):
    tp = serving.tensor_parallel_size * 2
    return model, replace(serving, tensor_parallel_size=tp), f"--tensor-parallel-size {tp}"


def _chunked_toggle(model, hardware, serving, workload):
    if serving.batching != "continuous":
        return f"chunked prefill applies to continuous batching, not {serving.batching}"
    on = not serving.enable_chunked_prefill
    flag = "--enable-chunked-prefill" if on else "--no-enable-chunked-prefill"
    return model, replace(serving, enable_chunked_prefill=on), flag


def _seqs_x2(model, hardware, serving, workload):
    n = serving.max_num_seqs * 2
    return model, replace(serving, max_num_seqs=n), f"--max-num-seqs {n}"


def _tokens_x2(model, hardware, serving, workload):
    n = serving_mod.resolve(model, hardware, serving).max_num_batched_tokens * 2
    return model, replace(serving, max_num_batched_tokens=n), f"--max-num-batched-tokens {n}"


HIGH_MEMORY_UTILIZATION = 0.95


def _memory_up(model, hardware, serving, workload):
    if serving.gpu_memory_utilization >= HIGH_MEMORY_UTILIZATION:
        return f"gpu_memory_utilization is already {serving.gpu_memory_utilization:g}"
    return (model, replace(serving, gpu_memory_utilization=HIGH_MEMORY_UTILIZATION),
            f"--gpu-memory-utilization {HIGH_MEMORY_UTILIZATION:g}")


def _prefix_on(model, hardware, serving, workload):
    if serving.enable_prefix_caching:
        return "prefix caching is already on"
    if not workload.prefix_len or not workload.prefix_hit_ratio:
        return ("the workload declares no shared prefix (prefix_len / prefix_hit_ratio 0): the prefix cache "
                "would have nothing to hit")
    return model, replace(serving, enable_prefix_caching=True), "--enable-prefix-caching"


def _balanced_experts(model, hardware, serving, workload):
    ep = serving_mod.expert_parallel(model, serving)[0] if model.is_moe else 1
    if ep == 1:
        return "no expert parallelism: every GPU holds a slice of every expert"
    if serving.expert_routing == "balanced":
        return "expert routing is already balanced"
    return model, replace(serving, expert_routing="balanced"), "--expert-routing balanced"


def _disaggregate(model, hardware, serving, workload):
    if serving.batching != "continuous":
        return f"disaggregated pools batch continuously, not {serving.batching}"
    if serving_mod.moe_spans_ranks(serving, serving_mod.resolve(model, hardware, serving)):
        return ("the data-parallel ranks form one MoE engine (their tokens meet in every MoE layer): split it by "
                "hand with --prefill-config / --decode-config")
    dp = serving.data_parallel_size
    if dp == 1:
        disagg = DisaggConfig()
        return model, serving, "--prefill-instances 1 --decode-instances 1", disagg
    p = dp // 2
    one = (("data_parallel_size", 1),)
    disagg = DisaggConfig(prefill_instances=p, decode_instances=dp - p, prefill=one, decode=one)
    return (model, serving, f"--prefill-instances {p} --decode-instances {dp - p} --prefill-config "
            f"'{{\"data_parallel_size\": 1}}' --decode-config '{{\"data_parallel_size\": 1}}'", disagg)


# The speculative what-if's drafter when the run has none: an EAGLE-3 head with k = 3 at the
# per-position acceptance vLLM's EAGLE-3 test pins for Llama-3.1-8B (0.730, 0.521, 0.355: 2.61
# tokens a step). Acceptance belongs to the model pair and the traffic: give the run a
# --speculative-config with measured rates and the what-if turns it off instead.
WHAT_IF_SPECULATIVE = SpeculativeConfig("eagle3", 3, (0.73, 0.521, 0.355))


def _speculative_toggle(model, hardware, serving, workload):
    if serving.speculative_config is not None:
        return model, replace(serving, speculative_config=None), "without --speculative-config"
    if serving.batching != "continuous":
        return f"speculative decoding verifies drafts in continuous batching, not {serving.batching}"
    if not model.kv_cache_enabled:
        return "the model runs without a KV cache to verify drafts against"
    spec = WHAT_IF_SPECULATIVE
    return (model, replace(serving, speculative_config=spec),
            f"--speculative-config '{json.dumps(spec.vllm_dict(), separators=(',', ':'))}'")


CHANGES = {c.key: c for c in (
    _dtype_change("fp8"),
    _dtype_change("int8"),
    _dtype_change("int4", "weight-only: activations stay 16-bit"),
    Change("kv-fp8", "FP8 KV cache", _kv_fp8),
    Change("gqa", "GQA", _gqa, "a different model: needs a GQA checkpoint"),
    Change("tp2", "TP x2", _tp_x2, "twice the GPUs per replica"),
    Change("chunked-prefill", "chunked prefill toggled", _chunked_toggle),
    Change("max-num-seqs", "max_num_seqs x2", _seqs_x2),
    Change("max-num-batched-tokens", "max_num_batched_tokens x2", _tokens_x2),
    Change("gpu-memory-utilization", "gpu_memory_utilization 0.95", _memory_up),
    Change("prefix-caching", "prefix caching", _prefix_on),
    Change("balanced-experts", "balanced expert routing", _balanced_experts,
           "every EP GPU its mean share: the most any expert balancer could gain"),
    Change("disaggregate", "prefill/decode disaggregated", _disaggregate,
           "the replicas as prefill and decode pools (one replica: twice the GPUs)"),
    Change("speculative", "speculative decoding toggled", _speculative_toggle,
           "EAGLE-3 at vLLM's pinned acceptance (state yours: the what-if is then 'off')"),
)}
DEFAULT_CHANGES = tuple(CHANGES)


def _rel(new, base):
    return (new - base) / base if base else None


def what_if(model, hardware, serving=None, workload=None, changes=DEFAULT_CHANGES, *, base=None, fast_forward=True,
            executor=None, workers=None, scheduler=None):
    """Re-simulate with exactly one change at a time.

    Parameters
    ----------
    model, hardware, serving, workload
        The base configuration, as for :func:`simllm.simulate`.
    changes : sequence of str or Change
        Keys of :data:`CHANGES` (default all of them, :data:`DEFAULT_CHANGES`) or
        :class:`Change` objects.
    base : SimResult, optional
        The base run's result, when already simulated (else simulated here).
    executor, workers, scheduler
        Where the variants run (:func:`simllm.sim.runner.run_many`; default threads on all cores).

    Returns
    -------
    list of WhatIf
        In the order of ``changes``. A change that does not apply or whose configuration is
        invalid or does not fit is returned with ``skipped`` set, not raised.
    """
    serving = serving or ServingConfig()
    if workload is None:
        workload = Workload()
    requests = generate(workload)  # drawn once: every variant serves the same requests
    if base is None:
        base = simulate(model, hardware, serving, workload, requests=requests, fast_forward=fast_forward,
                        keep_requests=False)
    b = base.summary
    out = []
    variants = []  # (position in out, name, text, note, model, serving)
    for ch in changes:
        if isinstance(ch, str):
            if ch not in CHANGES:
                raise ConfigError(f"one of {', '.join(CHANGES)}", source=serving_mod.CLI, key="--what-if", value=ch)
            ch = CHANGES[ch]
        try:
            applied = ch.apply(model, hardware, serving, workload)
        except ConfigError as exc:
            out.append(WhatIf(ch.name, "", note=ch.note, skipped=str(exc)))
            continue
        if isinstance(applied, str):
            out.append(WhatIf(ch.name, "", note=ch.note, skipped=applied))
            continue
        m2, s2, text, *disagg = applied
        variants.append((len(out), ch, text, Task(model=m2, serving=s2, disagg=disagg[0] if disagg else None)))
        out.append(None)
    shared = Base(model=model, hardware=hardware, serving=serving, workload=workload, requests=requests,
                  fast_forward=fast_forward)
    outcomes = run_simulations(shared, [task for *_, task in variants], executor, workers=workers,
                               scheduler=scheduler)
    for (i, ch, text, _), o in zip(variants, outcomes):
        if not o.ok:  # SimulatedOOM included
            out[i] = WhatIf(ch.name, text, note=ch.note, skipped=o.error)
            continue
        r = o.value
        out[i] = WhatIf(
            ch.name, text, ttft_ms=r["mean_ttft_ms"], tpot_ms=r["mean_tpot_ms"],
            output_throughput=r["output_throughput"], ttft_change=_rel(r["mean_ttft_ms"], b["mean_ttft_ms"]),
            tpot_change=_rel(r["mean_tpot_ms"], b["mean_tpot_ms"]),
            throughput_change=_rel(r["output_throughput"], b["output_throughput"]),
            failed=int(r["failed"]), num_preemptions=int(r["num_preemptions"]), note=ch.note,
        )
    return out


# ----------------------------------------------------------------------------- output

def _signed(x):
    return "" if x is None else f"{round(x * 100, 1) + 0.0:+.1f}%"  # + 0.0: no "-0.0%"


def _evidence_value(key, value):
    if isinstance(value, int):
        return f"{value:,}"
    if key.endswith("_pct"):
        return f"{value:.1f}%"
    return f"{value:,.2f}"


def format_diagnosis(diag, what_ifs=None):
    """Human-readable report of a :class:`Diagnosis` and, if given, the what-if table."""
    ev = diag.evidence
    out = [f"Diagnosis: {diag.kind}", f"  {diag.reason}", f"  rule: {diag.rule}"]
    out += [f"  note: {n}" for n in diag.notes]
    out += ["", "Evidence", table(["", "value"], [[k, _evidence_value(k, v)] for k, v in ev.items()], "lr")]
    ops = diag.operators[:TOP_OPERATORS]
    if ops:
        rest = sum(o.time_pct for o in diag.operators[TOP_OPERATORS:])
        rows = [[o.name, f"{o.time_pct:.1f}%", o.bound] for o in ops]
        if rest:
            rows.append(["(others)", f"{rest:.1f}%", ""])
        out += ["", "GPU time by operator (re-costed from the run's prefill and decode work, per GPU)",
                table(["operator", "share", "bound"], rows, "lrl")]
    if what_ifs:
        rows = [["(as run)", "", f"{ev['mean_ttft_ms']:,.2f}", "", f"{ev['mean_tpot_ms']:,.2f}", "",
                 f"{ev['output_throughput_tok_s']:,.1f}", "", ""]]
        skipped = []
        for w in what_ifs:
            if w.skipped:
                skipped.append(f"  {w.name}: {w.skipped}")
                continue
            rows.append([w.name, w.change, f"{w.ttft_ms:,.2f}", _signed(w.ttft_change), f"{w.tpot_ms:,.2f}",
                         _signed(w.tpot_change), f"{w.output_throughput:,.1f}", _signed(w.throughput_change),
                         "; ".join(x for x in (w.note, f"{w.failed} failed" if w.failed else "",
                                               f"{w.num_preemptions} preemptions" if w.num_preemptions else "") if x)])
        out += ["", "What if (each row re-simulates the run with that one change)",
                table(["change", "flags", "TTFT ms", "", "TPOT ms", "", "output tok/s", "", "note"], rows,
                      "llrrrrrrl")]
        if skipped:
            out += ["Skipped:"] + skipped
    return "\n".join(out)


def format_run_section(diag):
    """A few lines for ``simllm run``'s table, in its layout (``simllm diagnose`` gives the rest)."""
    ev = diag.evidence
    return "\n".join([
        f"{'Bottleneck':-^50}",
        f"{'Diagnosis:':<40} {diag.kind}",
        f"{'Prefill / decode share of GPU time:':<40} {ev['prefill_time_share_pct']:.0f}% / "
        f"{ev['decode_time_share_pct']:.0f}%",
        textwrap.fill(diag.reason, width=100, initial_indent="  ", subsequent_indent="  "),
    ])


def diagnosis_to_dict(diag, what_ifs=None):
    """JSON-ready form of a :class:`Diagnosis` and, if given, its what-ifs."""
    out = {
        "kind": diag.kind,
        "reason": diag.reason,
        "rule": diag.rule,
        "evidence": dict(diag.evidence),
        "operators": [{"name": o.name, "time_pct": o.time_pct, "bound": o.bound} for o in diag.operators],
        "notes": list(diag.notes),
        "thresholds": {"kv_peak_full": KV_PEAK_FULL, "batch_fill_low": BATCH_FILL_LOW, "gpu_busy_low": GPU_BUSY_LOW,
                       "utilization_low": UTILIZATION_LOW, "prefill_share_high": PREFILL_SHARE_HIGH},
    }
    if what_ifs is not None:
        out["what_if"] = [
            {"name": w.name, "change": w.change, "ttft_ms": w.ttft_ms, "tpot_ms": w.tpot_ms,
             "output_throughput": w.output_throughput, "ttft_change": w.ttft_change, "tpot_change": w.tpot_change,
             "throughput_change": w.throughput_change, "failed": w.failed, "num_preemptions": w.num_preemptions,
             "note": w.note or None, "skipped": w.skipped}
            for w in what_ifs
        ]
    return out
