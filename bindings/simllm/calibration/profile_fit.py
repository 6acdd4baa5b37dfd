"""``simllm profile``'s fit: from measured timings to the efficiency factors of a hardware YAML.

Pure arithmetic on measurement rows (no PyTorch): :func:`measurement_row` turns a timing into
achieved rates and fractions of the datasheet peaks, :func:`fit_profile` turns the rows into the
factors, and :class:`ProfileResult` holds the outcome with everything behind it.

The fit (:class:`ProfileResult` records how each figure was obtained):

- ``compute_utilization``: the median achieved / peak FLOP/s of the GEMMs with ``M >= 1024``
  tokens (of the largest M measured when no shape is that large). The median over many large,
  compute-bound shapes, not the best shape, because the simulator applies one factor to every
  GEMM and a single lucky tile shape would overstate the rest; large M because prefill time is
  spent there. Smaller M are memory-bound and the roofline's bandwidth term covers them; the
  achieved fraction per M (the GEMM efficiency curve, :attr:`ProfileResult.gemm_curve`) is in the
  raw output for a future per-operator efficiency curve.
- ``bandwidth_utilization``: copy bandwidth (bytes read + written per second) / datasheet
  bandwidth; decode attention (bandwidth-bound) is reported next to it as a cross-check.
- ``launch_overhead_us``: the median time per tiny kernel (CUDA-graph replay where it works, as
  the serving engines replay decode steps from CUDA graphs; eager launches otherwise).
- ``interconnect_utilization`` and ``interconnect_latency_us`` (only when an all-reduce ran):
  bus bandwidth ``2 (n - 1) / n * bytes / t`` of the largest message, net of the small-message
  time, / the datasheet link bandwidth; and the smallest message's time less the launch overhead.

Fractions are rounded to 4 significant digits and clamped to (0, 1] so that the written YAML
loads with :func:`simllm.config.hardware.load_hardware`; a clamp is recorded in the figure's comment. On
a CPU, fractions of a GPU's datasheet peaks are tiny (1e-4 and below): such a profile exercises
the tool, it is no calibration.
"""
import math
import statistics
from dataclasses import asdict, dataclass, field

import numpy as np

from simllm.calibration import kernels
from simllm.config.serving import FRAMEWORKS
from simllm.errors import ConfigError

#: The kinds of measurement (see :mod:`simllm.calibration.profile`).
KINDS = ("gemm", "attention_prefill", "attention_decode", "copy", "launch", "allreduce")
LARGE_M = 1024  # GEMMs with at least this many tokens set compute_utilization
FITTED_KEYS = ("compute_utilization", "bandwidth_utilization", "launch_overhead_us",
               "interconnect_utilization", "interconnect_latency_us")
MIB = 2**20


@dataclass(frozen=True)
class ProfileResult:
    """Measured efficiency factors of one device, against the datasheet peaks of a base profile.

    Attributes
    ----------
    gpu : str
        ``gpu`` of the base profile.
    base_source : str
        File of the base profile.
    device : str
        Torch device profiled (``"cuda:0"``, ``"cpu"``).
    device_name : str
        ``torch.cuda.get_device_name`` or the CPU's model name.
    torch_version : str
    date : str
        UTC date of the run, ``YYYY-MM-DD``.
    dtype : str
        dtype asked for (``bf16``, ``fp16``, ``fp8``).
    gemm_dtype : str
        dtype the GEMMs ran in (``bf16`` when FP8 was asked for but is unavailable; see ``notes``).
    attention_dtype : str
    size : str
        ``"tiny"`` or ``"full"``.
    peak_tflops : float
        Datasheet dense peak of the base in ``gemm_dtype``, TFLOP/s (fractions are against it).
    attention_peak_tflops : float
        Datasheet peak in ``attention_dtype``, TFLOP/s.
    memory_bandwidth_gbps : float
        Datasheet memory bandwidth of the base, GB/s (decimal).
    interconnect_bandwidth_gbps : float
        Datasheet link bandwidth of the base, GB/s per direction.
    compute_utilization : float
        Fitted, in (0, 1].
    bandwidth_utilization : float
        Fitted, in (0, 1].
    launch_overhead_us : float
        Fitted, microseconds per kernel.
    interconnect_utilization : float or None
        Fitted in (0, 1] when an all-reduce was measured, else None (the base value stays).
    interconnect_latency_us : float or None
        Fitted when an all-reduce was measured, else None.
    gemm_tflops : float
        Median achieved TFLOP/s of the GEMMs behind ``compute_utilization``.
    copy_gbps : float
        Achieved copy bandwidth, GB/s (read + written).
    decode_bandwidth_fraction : float
        Cross-check of ``bandwidth_utilization``: median achieved / datasheet bandwidth of the decode
        attention shapes with the largest KV caches.
    prefill_compute_fraction : float
        Median achieved / ``attention_peak_tflops`` of prefill attention at the longest context.
    gemm_curve : tuple of dict
        The GEMM efficiency curve: per tokens ``m``, the median over (N, K) of ``compute_fraction``
        (achieved / peak FLOP/s) and of ``achieved_fraction`` (roofline time at datasheet peaks /
        measured time), and ``shapes``.
    measurements : tuple of dict
        One dict per measurement: ``kind`` (one of :data:`KINDS`), shape fields, ``skipped``, and
        when run ``seconds``, ``flops``, ``bytes``, ``achieved_tflops``, ``achieved_gbps``,
        ``compute_fraction``, ``bandwidth_fraction``, ``achieved_fraction`` (their maximum: roofline
        time at datasheet peaks / measured time) and ``bound``; a skipped one has a ``reason``.
    methods : dict
        Fitted key -> how it was measured (the YAML comment), clamping included.
    raw_fits : dict
        Fitted key -> value before rounding and clamping.
    notes : tuple of str
        Fallbacks and cross-check warnings.
    table_measurements : tuple of dict
        The kernel-table shapes (rows as ``measurements``; empty when the profile ran without
        tables), fitted by :func:`kernel_tables`.
    """

    gpu: str
    base_source: str
    device: str
    device_name: str
    torch_version: str
    date: str
    dtype: str
    gemm_dtype: str
    attention_dtype: str
    size: str
    peak_tflops: float
    attention_peak_tflops: float
    memory_bandwidth_gbps: float
    interconnect_bandwidth_gbps: float
    compute_utilization: float
    bandwidth_utilization: float
    launch_overhead_us: float
    interconnect_utilization: float | None
    interconnect_latency_us: float | None
    gemm_tflops: float
    copy_gbps: float
    decode_bandwidth_fraction: float
    prefill_compute_fraction: float
    gemm_curve: tuple = ()
    measurements: tuple = ()
    methods: dict = field(default_factory=dict)
    raw_fits: dict = field(default_factory=dict)
    notes: tuple = ()
    table_measurements: tuple = ()

    @property
    def fitted(self):
        """The hardware YAML keys this profile sets, with their values (interconnect ones only when
        measured)."""
        return {k: getattr(self, k) for k in FITTED_KEYS if getattr(self, k) is not None}

    def to_dict(self):
        """Plain JSON-ready mapping of everything (the raw JSON output)."""
        out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        out["fitted"] = self.fitted
        out["gemm_curve"] = [dict(p) for p in self.gemm_curve]
        out["measurements"] = [dict(r) for r in self.measurements]
        out["table_measurements"] = [dict(r) for r in self.table_measurements]
        out["notes"] = list(self.notes)
        return out


# ----------------------------------------------------------------------------- measurement rows

def measurement_row(kind, shape, seconds, flops, nbytes, peak_flops, peak_bytes_per_s, bound=None):
    """One measurement: ``kind`` (one of :data:`KINDS`) of ``shape`` took ``seconds`` for ``flops``
    and ``nbytes``; its achieved rates and fractions of the peaks (``peak_flops`` FLOP/s,
    ``peak_bytes_per_s``), and what bound it (the larger fraction, unless ``bound`` says)."""
    compute = flops / seconds / peak_flops if flops else 0.0
    bandwidth = nbytes / seconds / peak_bytes_per_s if nbytes else 0.0
    return {
        "kind": kind,
        **shape,
        "skipped": False,
        "seconds": seconds,
        "flops": float(flops),
        "bytes": float(nbytes),
        "achieved_tflops": flops / seconds / 1e12,
        "achieved_gbps": nbytes / seconds / 1e9,
        "compute_fraction": compute,
        "bandwidth_fraction": bandwidth,
        "achieved_fraction": max(compute, bandwidth),
        "bound": bound or ("compute" if compute >= bandwidth else "memory"),
    }


def skipped_row(kind, reason, **shape):
    """A measurement of ``kind`` that did not run, and why."""
    return {"kind": kind, **shape, "skipped": True, "reason": reason}


# ----------------------------------------------------------------------------- fitting

def round_sig(x, digits=4):
    """``x`` rounded to ``digits`` significant digits."""
    return float(f"{x:.{digits}g}")


def _fraction(key, raw, method, methods, raw_fits):
    """Round to 4 significant digits and clamp to (0, 1]; record how in ``methods``."""
    raw_fits[key] = raw
    value = round_sig(raw)
    if value > 1.0:
        method += f"; measured {value:.4g} > 1, clamped to 1.0"
        value = 1.0
    methods[key] = method
    return value


def _median(values):
    values = list(values)
    return statistics.median(values) if values else math.nan


def gemm_curve(gemms):
    """Per tokens M, the median over (N, K) of the GEMMs' compute and achieved fractions."""
    curve = []
    for m in sorted({r["m"] for r in gemms}):
        at_m = [r for r in gemms if r["m"] == m]
        curve.append({
            "m": m,
            "compute_fraction": _median(r["compute_fraction"] for r in at_m),
            "achieved_fraction": _median(r["achieved_fraction"] for r in at_m),
            "shapes": len(at_m),
        })
    return tuple(curve)


def fit_profile(base, measurements, gemm_dtype, peak_flops, notes):
    """The efficiency factors the ``measurements`` (rows of :func:`measurement_row`) show, against
    the datasheet of ``base`` (memory and link bandwidth) and ``peak_flops`` (FLOP/s in
    ``gemm_dtype``). Fallbacks and cross-check warnings are appended to ``notes``.

    Returns
    -------
    (dict, dict, dict)
        The :class:`ProfileResult` fields fitted (the factors, ``gemm_tflops``, ``copy_gbps``,
        ``decode_bandwidth_fraction``, ``prefill_compute_fraction``, ``gemm_curve``); fitted key
        -> how it was measured; fitted key -> value before rounding and clamping.

    Raises
    ------
    ConfigError
        When no GEMM or no tiny kernel was measured.
    """
    done = [r for r in measurements if not r["skipped"]]
    skipped = [r for r in measurements if r["skipped"] and r["kind"] not in ("allreduce", "launch")]
    if skipped:
        notes.append(f"{len(skipped)} shape(s) skipped ({', '.join(sorted({r['kind'] for r in skipped}))}); "
                     f"first: {skipped[0]['reason']}")

    def kind(name):
        return [r for r in done if r["kind"] == name]
    methods, raw_fits, out = {}, {}, {}

    gemms = kind("gemm")
    if not gemms:
        raise ConfigError("no GEMM could be measured, so compute_utilization cannot be fitted")
    threshold = min(LARGE_M, max(r["m"] for r in gemms))
    large = [r for r in gemms if r["m"] >= threshold]
    out["gemm_tflops"] = _median(r["achieved_tflops"] for r in large)
    out["compute_utilization"] = _fraction(
        "compute_utilization", _median(r["compute_fraction"] for r in large),
        f"median achieved / peak {gemm_dtype} FLOP/s of {len(large)} GEMMs with M >= {threshold} tokens "
        f"({out['gemm_tflops']:.4g} of {peak_flops / 1e12:.6g} TFLOPS)", methods, raw_fits)
    out["gemm_curve"] = gemm_curve(gemms)

    copies = kind("copy")
    copy_fraction = _median(r["bandwidth_fraction"] for r in copies)
    out["copy_gbps"] = _median(r["achieved_gbps"] for r in copies)
    decode = kind("attention_decode")
    biggest = max((r["bytes"] for r in decode), default=0.0)
    out["decode_bandwidth_fraction"] = _median(r["bandwidth_fraction"] for r in decode if r["bytes"] >= biggest / 4)
    buffer_mib = copies[0]["buffer_bytes"] / MIB
    out["bandwidth_utilization"] = _fraction(
        "bandwidth_utilization", copy_fraction,
        f"{buffer_mib:g} MiB device copy, {out['copy_gbps']:.4g} GB/s read + written / "
        f"{base.memory_bandwidth_gbps:g} GB/s (decode attention reads its KV cache at "
        f"{out['decode_bandwidth_fraction']:.3g} of it)", methods, raw_fits)
    ratio = out["decode_bandwidth_fraction"] / copy_fraction
    if math.isfinite(ratio) and not 0.67 <= ratio <= 1.5:
        notes.append(f"decode attention reaches {ratio:.2f}x the copy bandwidth (a cross-check; expected near 1)")

    prefill = kind("attention_prefill")
    longest = max((r["context"] for r in prefill), default=0)
    out["prefill_compute_fraction"] = _median(r["compute_fraction"] for r in prefill if r["context"] == longest)

    launches = kind("launch")
    mode = "graph" if any(r["mode"] == "graph" for r in launches) else "eager"
    chosen = [r for r in launches if r["mode"] == mode]
    if not chosen:
        raise ConfigError("no tiny kernel could be timed, so launch_overhead_us cannot be fitted")
    launch_s = _median(r["seconds"] for r in chosen)
    raw_fits["launch_overhead_us"] = launch_s * 1e6
    out["launch_overhead_us"] = round_sig(launch_s * 1e6)
    how = "replayed from a CUDA graph" if mode == "graph" else "launched eagerly"
    methods["launch_overhead_us"] = (f"median time per tiny kernel (1-element add, 16x16 matmul), "
                                     f"{chosen[0]['kernels']} back to back, {how}")

    out["interconnect_utilization"] = out["interconnect_latency_us"] = None
    reduces = sorted(kind("allreduce"), key=lambda r: r["message_bytes"])
    if len(reduces) >= 2:
        small, big = reduces[0], reduces[-1]
        gpus = big["gpus"]
        latency_us = max(small["seconds"] * 1e6 - out["launch_overhead_us"], 0.0)
        raw_fits["interconnect_latency_us"] = latency_us
        out["interconnect_latency_us"] = round_sig(latency_us) if latency_us > 0 else 0.0
        methods["interconnect_latency_us"] = (f"NCCL all-reduce of {small['message_bytes']} B on {gpus} GPUs, "
                                              f"{small['seconds'] * 1e6:.4g} us less the launch overhead")
        net_s = big["seconds"] - small["seconds"]
        link = base.interconnect_bandwidth_gbps * 1e9
        if net_s > 0:
            busbw = big["bytes"] / net_s
            out["interconnect_utilization"] = _fraction(
                "interconnect_utilization", busbw / link,
                f"NCCL all-reduce of {big['message_bytes'] / MIB:g} MiB on {gpus} GPUs, bus bandwidth "
                f"{busbw / 1e9:.4g} GB/s (net of the small-message time) / {base.interconnect_bandwidth_gbps:g} GB/s",
                methods, raw_fits)
        else:
            notes.append("all-reduce: the largest message was not slower than the smallest; "
                         "interconnect_utilization not fitted")
    return out, methods, raw_fits


# ----------------------------------------------------------------------------- kernel tables

def kernel_tables(result, hardware, framework="vllm"):
    """The kernel-table mapping (``simllm-kernel-tables/1``) of a profile's table measurements,
    fitted against ``hardware``'s datasheet peaks by the importer's own code
    (:func:`simllm.calibration.kernels.tables_from_rows`: the same grids, clipping and held-out
    check as ``simllm kernels import``).

    Parameters
    ----------
    result : ProfileResult
        Profiled with tables (:attr:`ProfileResult.table_measurements` not empty).
    hardware : HardwareConfig
        The base profile the result was measured against.
    framework : str
        The file's name and label: which framework's tables these stand for (``vllm``, ``sglang``,
        ``trtllm``).

    Returns
    -------
    dict
        The mapping; its provenance says ``source: simllm profile``, the torch version, device,
        rows measured and skipped, and, with no collective measured, why (``omitted``).

    Raises
    ------
    ConfigError
        For an unknown framework, a result without table measurements, or a table without rows.
    """
    if framework not in FRAMEWORKS:
        raise ConfigError("one of " + ", ".join(FRAMEWORKS), key="framework", value=framework)
    if not result.table_measurements:
        raise ConfigError("a profile with kernel-table measurements (profile_hardware(tables=True); "
                          "simllm profile without --no-tables)")
    done = [r for r in result.table_measurements if not r["skipped"]]

    def rows(kind, *keys):
        got = [r for r in done if r["kind"] == kind]
        return tuple(np.array([r[k] for r in got]) for k in keys)
    gemm = {}
    for dtype in ("bf16", "fp8"):
        sel = [r for r in done if r["kind"] == "gemm" and ("fp8" if r["dtype"] == "fp8" else "bf16") == dtype]
        if sel:
            gemm[dtype] = tuple(np.array([r[k] for r in sel]) for k in ("m", "n", "k", "seconds"))
    prefill = rows("attention_prefill", "batch", "context", "heads", "seconds")
    decode = rows("attention_decode", "batch", "context", "heads", "kv_heads", "seconds")
    head_dims = {r["head_dim"] for r in done if r["kind"].startswith("attention")}
    if len(prefill[0]) == 0 or len(decode[0]) == 0 or len(head_dims) != 1:
        raise ConfigError("kernel tables need timed prefill and decode attention of one head_dim; "
                          f"got {len(prefill[0])} prefill, {len(decode[0])} decode rows, head_dim {sorted(head_dims)}")
    reduces = rows("allreduce", "gpus", "message_bytes", "seconds")
    allreduce, omitted = None, None
    if len(reduces[0]):
        allreduce = (reduces[0], reduces[1] // 2, reduces[2])  # BF16 elements, as the importer counts
    else:
        why = [r["reason"] for r in result.table_measurements if r["kind"] == "allreduce" and r["skipped"]]
        omitted = {"allreduce": (why[0] if why else "not measured")
                   + "; collectives use the hardware profile's scalar interconnect figures"}
    (head_dim,) = head_dims
    act = next((r["dtype"] for r in done if r["kind"] == "attention_prefill"), "bf16")
    provenance = {
        "source": "simllm profile",
        "torch_version": result.torch_version,
        "device": result.device,
        "device_name": result.device_name,
        "profile_size": result.size,
        "rows_measured": len(done),
        "rows_skipped": sum(r["skipped"] and r["kind"] != "allreduce" for r in result.table_measurements),
        "assumptions": [
            "GEMM: torch.mm of x (M, K) by W.T, W (N, K) as nn.Linear weights; fp16 timings stand for bf16; "
            "fp8 = torch._scaled_mm, per-tensor scaled",
            f"attention: torch scaled_dot_product_attention, causal MHA prefill, GQA decode (a group's query "
            f"heads as rows of one KV head), head_dim {head_dim}, {act} KV cache",
            "all-reduce: in-process NCCL (torch.cuda.nccl), message sizes in BF16 elements",
            "each timing the median after warm-up; CUDA events with the L2 cache flushed on a GPU",
        ],
    }
    return kernels.tables_from_rows(hardware, result.gpu, framework, f"torch {result.torch_version}", provenance,
                                    gemm=gemm, prefill=prefill, decode=decode, allreduce=allreduce,
                                    head_dim=head_dim, omitted=omitted)
