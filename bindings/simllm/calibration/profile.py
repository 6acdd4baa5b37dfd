"""``simllm profile``: measure a GPU with PyTorch and fit the efficiency factors of its hardware YAML.

A hardware profile holds datasheet peaks (TFLOPS, memory and link bandwidth) plus the achieved
fractions the roofline of :mod:`simcore.cost` applies to them. :func:`profile_hardware` keeps the
peaks of a base profile as they are and measures the fractions on the local device:

===========================  =====================================================================
measurement                  how
===========================  =====================================================================
``gemm``                     ``x @ W.T`` (``W`` laid out as ``nn.Linear`` weights) over tokens M
                             x widths (N, K), in the profile dtype (FP8 via ``torch._scaled_mm``)
``attention_prefill``        causal ``scaled_dot_product_attention``, batch x context, MHA shape
``attention_decode``         one query token per sequence against a KV cache of ``context``
                             tokens, GQA-shaped (the query heads of a group ride as rows of one
                             KV head, so K and V are read once per KV head)
``copy``                     large device-to-device copy; bytes = read + written
``launch``                   a tiny elementwise op and a 16x16 matmul, many back to back
                             (replayed from a CUDA graph on a GPU when capture works, and eagerly)
``allreduce``                NCCL all-reduce over all visible GPUs (``torch.cuda.nccl``, in
                             process) when two or more are visible; otherwise recorded as skipped
===========================  =====================================================================

Every timing is the median over ``repeats`` after warm-up: CUDA events around each call on a GPU
(with the L2 cache overwritten before each call, as weights and KV caches of a served model do not
stay in it), ``time.perf_counter`` on the CPU.

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

PyTorch is optional (``pip install "simllm[profile]"``) and imported only when a profile runs.
"""
import contextlib
import csv
import io
import json
import math
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml

from simllm.calibration.hwyaml import (
    base_path_of,
    edit_hardware_yaml,
    generate_hardware_yaml,
)
from simllm.config import dtypes
from simllm.config.hardware import HardwareConfig, hardware_from_dict, load_hardware
from simllm.errors import ConfigError
from simllm.fileio import write_text_atomic

DTYPES = ("bf16", "fp16", "fp8")
SIZES = ("tiny", "full")
KINDS = ("gemm", "attention_prefill", "attention_decode", "copy", "launch", "allreduce")
LARGE_M = 1024  # GEMMs with at least this many tokens set compute_utilization
FITTED_KEYS = ("compute_utilization", "bandwidth_utilization", "launch_overhead_us",
               "interconnect_utilization", "interconnect_latency_us")
INSTALL_HINT = 'simllm profile needs PyTorch, which is not installed: pip install "simllm[profile]"'
MIB = 2**20


@dataclass(frozen=True)
class _Grid:
    """The shapes and repetitions of one profile size."""

    gemm_m: tuple  # tokens in the batch
    gemm_nk: tuple  # (N, K) = (output width, input width) of the weight
    prefill: tuple  # (batch, context)
    decode: tuple  # (batch, context)
    heads: int
    kv_heads: int
    head_dim: int
    copy_bytes: int
    launch_kernels: int  # tiny kernels per timed loop
    allreduce_bytes: tuple
    repeats: int
    warmup: int
    flush_bytes: int  # L2 flush buffer on a GPU (0: no flush)


# Widths of Llama-3 8B (4096: o_proj; 6144: fused qkv; 28672: fused gate/up; 14336: down) and 70B
# (8192; 28672 = down's input); heads 32 / 8 KV heads x 128 as Llama-3 8B.
_GRIDS = {
    "full": _Grid(
        gemm_m=(1, 16, 64, 256, 1024, 2048, 4096, 8192),
        gemm_nk=((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (8192, 8192), (8192, 28672)),
        prefill=tuple((b, s) for b in (1, 4) for s in (512, 2048, 8192)),
        decode=tuple((b, c) for b in (1, 8, 32, 128) for c in (1024, 4096, 16384) if b * c <= 2**20),
        heads=32, kv_heads=8, head_dim=128,
        copy_bytes=2**30, launch_kernels=1000,
        allreduce_bytes=tuple(2**p for p in range(13, 29, 2)),  # 8 KiB .. 128 MiB
        repeats=20, warmup=3, flush_bytes=256 * MIB,
    ),
    # size="full" on a CPU: the GPU grid would take hours there.
    "full-cpu": _Grid(
        gemm_m=(1, 16, 128, 1024),
        gemm_nk=((4096, 4096), (4096, 14336)),
        prefill=((1, 512), (1, 2048)),
        decode=((1, 1024), (8, 4096)),
        heads=32, kv_heads=8, head_dim=128,
        copy_bytes=256 * MIB, launch_kernels=1000,
        allreduce_bytes=(),
        repeats=5, warmup=1, flush_bytes=0,
    ),
    "tiny": _Grid(
        gemm_m=(1, 16, 128),
        gemm_nk=((256, 256), (512, 256)),
        prefill=((1, 64), (2, 128)),
        decode=((1, 256), (4, 1024)),
        heads=4, kv_heads=2, head_dim=64,
        copy_bytes=4 * MIB, launch_kernels=200,
        allreduce_bytes=(2**12, 2**20),
        repeats=3, warmup=1, flush_bytes=0,
    ),
}


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
        out["notes"] = list(self.notes)
        return out


# ---------------------------------------------------------------------------------------------
# Running the measurements


def _import_torch():
    try:
        import torch  # optional dependency, only for profiling
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return torch


def _resolve_device(torch, device):
    text = str(device).strip().lower()
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise ConfigError("'cuda', 'cuda:N' or 'cpu'", key="device", value=device) from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ConfigError("'cuda', 'cuda:N' or 'cpu'", key="device", value=device)
    if not torch.cuda.is_available():
        raise ConfigError(f"a CUDA GPU, but torch {torch.__version__} sees none (torch.cuda.is_available() is "
                          "False); pass device='cpu' (--device cpu) to profile the CPU", key="device", value=device)
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < count:
        raise ConfigError(f"a visible GPU index (0..{count - 1})", key="device", value=device)
    return torch.device("cuda", index)


def _device_name(torch, dev):
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    name = platform.processor()
    if not name or name == platform.machine():
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    return f"CPU {name or platform.machine() or 'unknown'}"


class _Timer:
    """Median seconds of a callable: CUDA events on a GPU, ``time.perf_counter`` on the CPU."""

    def __init__(self, torch, dev, grid, repeats):
        self.torch = torch
        self.dev = dev
        self.cuda = dev.type == "cuda"
        self.repeats = repeats
        self.warmup = grid.warmup
        self.flush = None
        if self.cuda and grid.flush_bytes:
            self.flush = torch.empty(grid.flush_bytes, dtype=torch.int8, device=dev)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.dev)

    def seconds(self, fn, flush=True):
        """Median seconds of one call of ``fn`` (the L2 cache overwritten before each, on a GPU)."""
        for _ in range(self.warmup):
            fn()
        self.sync()
        times = []
        if self.cuda:
            event = self.torch.cuda.Event
            pairs = []
            for _ in range(self.repeats):
                if flush and self.flush is not None:
                    self.flush.zero_()
                start, end = event(enable_timing=True), event(enable_timing=True)
                start.record()
                fn()
                end.record()
                pairs.append((start, end))
            self.sync()
            times = [start.elapsed_time(end) * 1e-3 for start, end in pairs]
        else:
            for _ in range(self.repeats):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return max(statistics.median(times), 1e-9)

    def host_seconds(self, fn):
        """Median host wall seconds of ``fn`` including a synchronize (loops of launches)."""
        for _ in range(self.warmup):
            fn()
        self.sync()
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        return max(statistics.median(times), 1e-9)


def _torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}[name]


def _record(kind, shape, seconds, flops, nbytes, peak_flops, peak_bytes_per_s, bound=None):
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


def _skipped(kind, reason, **shape):
    return {"kind": kind, **shape, "skipped": True, "reason": reason}


def _scaled_mm(torch, a, b, scale):
    out = torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    return out[0] if isinstance(out, tuple) else out  # torch < 2.4 returned (out, amax)


def fp8_gemm_available(torch, dev):
    """Whether ``torch._scaled_mm`` runs an FP8 (e4m3) GEMM on ``dev``.

    Returns
    -------
    (bool, str)
        Availability and, when unavailable, why.
    """
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return False, f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
    try:
        a = torch.randn(16, 32, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(32, 32, device=dev).to(torch.float8_e4m3fn).t()
        _scaled_mm(torch, a, b, torch.ones((), device=dev, dtype=torch.float32))
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    except Exception as exc:  # noqa: BLE001 - any failure means "not on this device"
        return False, f"torch._scaled_mm fails on {dev}: {_first_line(exc)}"
    return True, ""


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _timed(torch, timer, kind, shape, build, peak_flops, bw, catch=()):
    """Build a shape (``build() -> (fn, flops, bytes)``), time ``fn`` and return its record; a shape
    that runs out of device memory (or raises one of ``catch``) is recorded as skipped."""
    errors = (torch.OutOfMemoryError if hasattr(torch, "OutOfMemoryError") else torch.cuda.OutOfMemoryError,
              *catch)
    fn = None
    try:
        fn, flops, nbytes = build()
        seconds = timer.seconds(fn)
    except errors as exc:
        reason = _first_line(exc)
    else:
        return _record(kind, shape, seconds, flops, nbytes, peak_flops, bw)
    fn = None  # drop the shape's tensors before handing the memory back
    if timer.cuda:
        torch.cuda.empty_cache()
    return _skipped(kind, reason, **shape)


def _measure_gemms(torch, dev, grid, timer, gemm_dtype, peak_flops, bw, say):
    rows = []
    for m in grid.gemm_m:
        for n, k in grid.gemm_nk:
            def build(m=m, n=n, k=k):
                # x (M, K) times W^T with W (N, K) row-major: nn.Linear's layout.
                if gemm_dtype == "fp8":
                    a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
                    w = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn)
                    scale = torch.ones((), device=dev, dtype=torch.float32)
                    nbytes = (m * k + k * n) * 1 + m * n * 2  # fp8 in, bf16 out
                    return (lambda: _scaled_mm(torch, a, w.t(), scale)), 2.0 * m * n * k, nbytes
                tdt = _torch_dtype(torch, gemm_dtype)
                a = torch.randn(m, k, device=dev, dtype=tdt)
                w = torch.randn(n, k, device=dev, dtype=tdt)
                out = torch.empty(m, n, device=dev, dtype=tdt)
                return (lambda: torch.mm(a, w.t(), out=out)), 2.0 * m * n * k, (m * k + k * n + m * n) * 2
            shape = {"m": m, "n": n, "k": k, "dtype": gemm_dtype}
            # An FP8 shape the kernels refuse (alignment) is skipped, not fatal.
            row = _timed(torch, timer, "gemm", shape, build, peak_flops, bw,
                         catch=(RuntimeError,) if gemm_dtype == "fp8" else ())
            rows.append(row)
            if row["skipped"]:
                say(f"gemm M={m} N={n} K={k}: skipped ({row['reason']})")
            else:
                say(f"gemm M={m} N={n} K={k}: {row['achieved_tflops']:.3g} TFLOP/s "
                    f"({row['compute_fraction']:.3g} of peak)")
    return rows


def _measure_attention(torch, dev, grid, timer, act_dtype, peak_flops, bw, say):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    tdt = _torch_dtype(torch, act_dtype)
    e = 2
    h, kvh, d = grid.heads, grid.kv_heads, grid.head_dim
    rows = []
    for b, s in grid.prefill:
        def build(b=b, s=s):
            q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=tdt) for _ in range(3))
            # Causal: s (s + 1) / 2 query-key pairs per sequence, 4 d FLOPs per pair and head (QK^T
            # and PV), as simcore.cost counts them; Q, K, V read and O written once.
            flops = 4.0 * d * h * b * s * (s + 1) / 2.0
            return (lambda: sdpa(q, k, v, is_causal=True)), flops, 4.0 * b * h * s * d * e
        shape = {"batch": b, "context": s, "heads": h, "kv_heads": h, "head_dim": d, "dtype": act_dtype}
        row = _timed(torch, timer, "attention_prefill", shape, build, peak_flops, bw)
        rows.append(row)
        say(f"attention prefill batch={b} context={s}: "
            + (f"skipped ({row['reason']})" if row["skipped"] else f"{row['achieved_tflops']:.3g} TFLOP/s"))
    group = h // kvh
    for b, c in grid.decode:
        def build(b=b, c=c):
            # GQA decode: the `group` query heads sharing a KV head are the rows of one query block,
            # so each KV head's cache is read once (as FlashDecoding-style kernels do).
            q = torch.randn(b, kvh, group, d, device=dev, dtype=tdt)
            k, v = (torch.randn(b, kvh, c, d, device=dev, dtype=tdt) for _ in range(2))
            nbytes = 2.0 * b * kvh * c * d * e + 2.0 * b * h * d * e
            return (lambda: sdpa(q, k, v)), 4.0 * d * h * b * c, nbytes
        shape = {"batch": b, "context": c, "heads": h, "kv_heads": kvh, "head_dim": d, "dtype": act_dtype}
        row = _timed(torch, timer, "attention_decode", shape, build, peak_flops, bw)
        rows.append(row)
        say(f"attention decode batch={b} context={c}: "
            + (f"skipped ({row['reason']})" if row["skipped"] else f"{row['achieved_gbps']:.4g} GB/s"))
    return rows


def _measure_copy(torch, dev, grid, timer, peak_flops, bw, say):
    src = torch.ones(grid.copy_bytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    seconds = timer.seconds(lambda: dst.copy_(src), flush=False)
    row = _record("copy", {"buffer_bytes": grid.copy_bytes}, seconds, 0.0, 2.0 * grid.copy_bytes, peak_flops, bw)
    say(f"copy {grid.copy_bytes / MIB:g} MiB: {row['achieved_gbps']:.4g} GB/s (read + written)")
    return [row]


def _measure_launch(torch, dev, grid, timer, act_dtype, peak_flops, bw, say, notes):
    n = grid.launch_kernels
    tdt = _torch_dtype(torch, act_dtype)
    x = torch.zeros(1, device=dev, dtype=torch.float32)
    a = torch.randn(16, 16, device=dev, dtype=tdt)
    b = torch.randn(16, 16, device=dev, dtype=tdt)
    o = torch.empty(16, 16, device=dev, dtype=tdt)
    ops = {
        "elementwise": (lambda: x.add_(1.0), 1.0, 8.0),
        "matmul": (lambda: torch.mm(a, b, out=o), 2.0 * 16**3, 3.0 * 16 * 16 * 2),
    }
    rows = []
    for name, (op, flops, nbytes) in ops.items():
        def loop(op=op):
            for _ in range(n):
                op()
        modes = {"eager": lambda loop=loop: timer.host_seconds(loop) / n}
        if dev.type == "cuda":
            modes = {"graph": lambda loop=loop: _graph_seconds(torch, timer, loop) / n, **modes}
        for mode, measure in modes.items():
            shape = {"op": name, "mode": mode, "kernels": n}
            try:
                seconds = measure()
            except Exception as exc:  # noqa: BLE001 - CUDA graph capture is best effort
                rows.append(_skipped("launch", f"{mode}: {_first_line(exc)}", **shape))
                notes.append(f"launch {name} {mode}: {_first_line(exc)}")
                continue
            rows.append(_record("launch", shape, seconds, flops, nbytes, peak_flops, bw, bound="launch"))
            say(f"launch {name} ({mode}): {seconds * 1e6:.3g} us per kernel")
    return rows


def _graph_seconds(torch, timer, body):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return timer.seconds(graph.replay, flush=False)


def _measure_allreduce(torch, dev, base, grid, timer, say):
    if dev.type != "cuda":
        return [_skipped("allreduce", "profiled on the CPU; all-reduce needs two or more CUDA GPUs")]
    visible = torch.cuda.device_count()
    if visible < 2:
        return [_skipped("allreduce", f"{visible} CUDA GPU visible; all-reduce needs two or more")]
    gpus = min(visible, base.gpus_per_node)
    try:
        from torch.cuda import nccl

        elems = max(grid.allreduce_bytes) // 2
        buffers = [torch.zeros(elems, dtype=torch.bfloat16, device=torch.device("cuda", i)) for i in range(gpus)]
        if not nccl.is_available(buffers):
            return [_skipped("allreduce", f"NCCL is not available to torch {torch.__version__}", gpus=gpus)]
        rows = []
        link = base.interconnect_bandwidth_gbps * 1e9
        for size in grid.allreduce_bytes:
            views = [t[: size // 2] for t in buffers]
            seconds = _allreduce_seconds(torch, nccl, views, timer)
            bus_bytes = 2.0 * (gpus - 1) / gpus * size
            shape = {"message_bytes": size, "gpus": gpus}
            row = _record("allreduce", shape, seconds, 0.0, bus_bytes, 1.0, link, bound="link")
            rows.append(row)
            say(f"all-reduce {size} B on {gpus} GPUs: {seconds * 1e6:.4g} us, bus {row['achieved_gbps']:.4g} GB/s")
        return rows
    except Exception as exc:  # noqa: BLE001 - record why and go on: the rest of the profile stands
        return [_skipped("allreduce", f"in-process NCCL all-reduce failed: {_first_line(exc)}", gpus=gpus)]


def _allreduce_seconds(torch, nccl, views, timer):
    devices = [v.device for v in views]

    def sync_all():
        for d in devices:
            torch.cuda.synchronize(d)
    for _ in range(max(timer.warmup, 2)):
        nccl.all_reduce(views)
    sync_all()
    stream = torch.cuda.current_stream(devices[0])
    times = []
    for _ in range(timer.repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        nccl.all_reduce(views)
        end.record(stream)
        sync_all()
        times.append(start.elapsed_time(end) * 1e-3)
    return max(statistics.median(times), 1e-9)


# ---------------------------------------------------------------------------------------------
# Fitting


def _round_sig(x, digits=4):
    return float(f"{x:.{digits}g}")


def _fraction(key, raw, method, methods, raw_fits):
    """Round to 4 significant digits and clamp to (0, 1]; record how in ``methods``."""
    raw_fits[key] = raw
    value = _round_sig(raw)
    if value > 1.0:
        method += f"; measured {value:.4g} > 1, clamped to 1.0"
        value = 1.0
    methods[key] = method
    return value


def _median(values):
    values = list(values)
    return statistics.median(values) if values else math.nan


def _gemm_curve(gemms):
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


def _fit(base, measurements, gemm_dtype, peak_flops, notes):
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
    out["gemm_curve"] = _gemm_curve(gemms)

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
    out["launch_overhead_us"] = _round_sig(launch_s * 1e6)
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
        out["interconnect_latency_us"] = _round_sig(latency_us) if latency_us > 0 else 0.0
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


def profile_hardware(base, device="cuda", dtype="bf16", size="full", repeats=None, progress=None):
    """Measure the local device with PyTorch and fit the efficiency factors of ``base``.

    Parameters
    ----------
    base : HardwareConfig
        The datasheet figures of the device (:func:`simllm.config.hardware.load_hardware`); its peaks
        are kept, the profile measures the achieved fractions of them.
    device : str
        ``"cuda"``, ``"cuda:N"`` or ``"cpu"``.
    dtype : str
        GEMM dtype: ``"bf16"``, ``"fp16"`` or ``"fp8"`` (``torch._scaled_mm`` e4m3 with bf16
        output; falls back to bf16, with a note, where unavailable or the base has no FP8 peak).
        Attention runs in fp16 for ``"fp16"``, else bf16.
    size : str
        ``"full"``: M = 1..8192 tokens, N, K = 4096..28672, contexts to 16k (a reduced grid on the
        CPU); ``"tiny"``: a few small shapes and 3 repeats, seconds on a CPU (for tests).
    repeats : int, optional
        Timed calls per measurement (median taken); default 20 (full), 5 (full on CPU), 3 (tiny).
    progress : callable, optional
        Called with one line of text per measurement.

    Returns
    -------
    ProfileResult

    Raises
    ------
    ConfigError
        One line: PyTorch missing (``pip install "simllm[profile]"``), no CUDA GPU for
        ``device="cuda"``, or a bad argument.
    """
    if not isinstance(base, HardwareConfig):
        raise ConfigError("a HardwareConfig (simllm.load_hardware)", key="base", value=type(base).__name__)
    dtype = dtypes.normalize(dtype, DTYPES, key="dtype")
    if size not in SIZES:
        raise ConfigError("one of " + ", ".join(SIZES), key="size", value=size)
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise ConfigError("a positive integer", key="repeats", value=repeats)
    torch = _import_torch()
    dev = _resolve_device(torch, device)
    notes = []
    grid_name = size
    if size == "full" and dev.type == "cpu":
        grid_name = "full-cpu"
        notes.append("size full on the CPU runs a reduced grid (M <= 1024, N, K <= 14336, contexts <= 4096)")
    grid = _GRIDS[grid_name]
    say = progress or (lambda _line: None)

    gemm_dtype = dtype
    if dtype == "fp8":
        if base.fp8_tflops <= 0:
            ok, why = False, f"{base.gpu} has no FP8 peak (fp8_tflops = 0)"
        else:
            ok, why = fp8_gemm_available(torch, dev)
        if not ok:
            gemm_dtype = "bf16"
            notes.append(f"fp8 GEMMs unavailable ({why}); measured bf16 GEMMs against the bf16 peak instead")
    act_dtype = "fp16" if dtype == "fp16" else "bf16"
    peak_flops = base.peak_flops(gemm_dtype)
    attn_peak = base.peak_flops(act_dtype)
    bw = base.memory_bandwidth_bytes_per_s

    context = torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
    with context, torch.no_grad():
        timer = _Timer(torch, dev, grid, repeats or grid.repeats)
        rows = _measure_gemms(torch, dev, grid, timer, gemm_dtype, peak_flops, bw, say)
        rows += _measure_attention(torch, dev, grid, timer, act_dtype, attn_peak, bw, say)
        rows += _measure_copy(torch, dev, grid, timer, attn_peak, bw, say)
        rows += _measure_launch(torch, dev, grid, timer, act_dtype, attn_peak, bw, say, notes)
        rows += _measure_allreduce(torch, dev, base, grid, timer, say)
        timer.flush = None
    for row in rows:
        if row["skipped"] and row["kind"] == "allreduce":
            notes.append(f"all-reduce skipped: {row['reason']}; interconnect figures keep the base's values")

    fit, methods, raw_fits = _fit(base, rows, gemm_dtype, peak_flops, notes)
    return ProfileResult(
        gpu=base.gpu,
        base_source=base.source,
        device=str(dev),
        device_name=_device_name(torch, dev),
        torch_version=str(torch.__version__),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        dtype=dtype,
        gemm_dtype=gemm_dtype,
        attention_dtype=act_dtype,
        size=size,
        peak_tflops=peak_flops / 1e12,
        attention_peak_tflops=attn_peak / 1e12,
        memory_bandwidth_gbps=base.memory_bandwidth_gbps,
        interconnect_bandwidth_gbps=base.interconnect_bandwidth_gbps,
        measurements=tuple(rows),
        methods=methods,
        raw_fits=raw_fits,
        notes=tuple(notes),
        **fit,
    )


# ---------------------------------------------------------------------------------------------
# Writing the profile


def _curve_comment(result):
    parts = [f"M={p['m']}: {p['compute_fraction']:.3g}" for p in result.gemm_curve]
    lines, line = [], "#   "
    for part in parts:
        if len(line) + len(part) > 98:
            lines.append(line.rstrip(", "))
            line = "#   "
        line += part + ", "
    lines.append(line.rstrip(", "))
    return lines


def _header(result, base_path, raw_name, kept_comments):
    lines = [
        (f"# Calibrated by `simllm profile` on {result.device_name} ({result.device}), {result.date}, "
         f"torch {result.torch_version}, {result.gemm_dtype} GEMMs, size {result.size}."),
        f"# Datasheet figures: those of {base_path.name}, kept as they are"
        + ("" if kept_comments else " (its comments are lost: not a block YAML mapping)") + ".",
        f"# Measured here (each comment says how): {', '.join(result.fitted)}.",
        f"# GEMM efficiency vs tokens M (median achieved / peak {result.gemm_dtype} FLOP/s over N, K):",
        *_curve_comment(result),
        f"# Raw measurements: {raw_name}",
    ]
    lines += [f"# Note: {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def _csv_text(result):
    rows = [dict(r) for r in result.measurements]
    rows += [{"kind": "gemm_curve", **p} for p in result.gemm_curve]
    columns = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})
    return buffer.getvalue()


def write_profile(result, base_path_or_name, output_yaml, raw_output=None):
    """Write the calibrated hardware YAML and the raw measurements.

    The YAML is the base profile's text with its datasheet keys and source comments as they are,
    the measured figures in place of (or after) the base's values, each with the comment
    ``measured by simllm profile on <device>, <date>, torch <version>: <what>``, and a header with
    the GEMM efficiency curve. Both files are written atomically (temporary file + ``os.replace``);
    the YAML is checked to load before anything is written.

    Parameters
    ----------
    result : ProfileResult
    base_path_or_name : str, Path or HardwareConfig
        The base profile the result was measured against: a preset name or a YAML file.
    output_yaml : str or Path
        The hardware YAML to write (loadable with :func:`simllm.config.hardware.load_hardware`).
    raw_output : str or Path, optional
        The raw measurements: JSON (everything: metadata, fit, GEMM curve, measurements) unless the
        name ends in ``.csv`` (one row per measurement plus ``gemm_curve`` rows). Default:
        ``<output stem>.profile.json`` next to ``output_yaml``.

    Returns
    -------
    (Path, Path)
        The YAML and raw files written.

    Raises
    ------
    ConfigError
        For an unknown base, or a base whose peaks differ from those the result was measured against.
    """
    base_path = base_path_of(base_path_or_name)
    base = load_hardware(base_path)
    used = (base.peak_flops(result.gemm_dtype) / 1e12, base.memory_bandwidth_gbps)
    if not all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(used, (result.peak_tflops,
                                                                       result.memory_bandwidth_gbps))):
        raise ConfigError(f"the base the profile was measured against ({result.peak_tflops:g} TFLOPS "
                          f"{result.gemm_dtype}, {result.memory_bandwidth_gbps:g} GB/s), got {used[0]:g} TFLOPS, "
                          f"{used[1]:g} GB/s", source=str(base_path))
    output_yaml = Path(output_yaml)
    raw_path = Path(raw_output) if raw_output is not None else output_yaml.with_name(
        output_yaml.stem + ".profile.json")

    stamp = f"measured by simllm profile on {result.device_name}, {result.date}, torch {result.torch_version}"
    updates = [(key, value, f"{stamp}: {result.methods[key]}") for key, value in result.fitted.items()]
    base_text = base_path.read_text(encoding="utf-8")
    base_data = yaml.safe_load(base_text) if base_path.suffix.lower() != ".json" else json.loads(base_text)
    expected = dict(base_data.get("hardware", base_data))
    expected.update(result.fitted)

    body = edit_hardware_yaml(base_text, updates) if base_path.suffix.lower() != ".json" else None
    if body is not None:
        with contextlib.suppress(yaml.YAMLError, AttributeError):
            parsed = yaml.safe_load(body)
            if dict(parsed.get("hardware", parsed)) != expected:
                body = None
    kept = body is not None
    if body is None:
        body = generate_hardware_yaml(base_data, updates)
    text = _header(result, base_path, raw_path.name, kept) + body
    data = yaml.safe_load(text)
    check = hardware_from_dict(data, str(output_yaml))  # raises ConfigError before anything is written
    for key, value in result.fitted.items():
        if getattr(check, key) != value:
            raise ConfigError(f"{key} = {value!r} after writing, read back as {getattr(check, key)!r}",
                              source=str(output_yaml))

    if raw_path.suffix.lower() == ".csv":
        raw_text = _csv_text(result)
    else:
        raw_text = json.dumps({"format": "simllm-profile", "version": 1, "base": str(base_path),
                               "hardware_yaml": str(output_yaml), **result.to_dict()},
                              indent=1, allow_nan=False) + "\n"
    write_text_atomic(raw_path, raw_text)
    write_text_atomic(output_yaml, text)
    return output_yaml, raw_path


def format_profile(result):
    """A short human-readable summary of a :class:`ProfileResult` (for the CLI)."""
    lines = [
        (f"simllm profile: {result.device_name} ({result.device}), torch {result.torch_version}, "
         f"{result.gemm_dtype} GEMMs, size {result.size}, against {result.gpu} datasheet peaks"),
        (f"  compute_utilization    {result.compute_utilization:<10.4g} GEMMs {result.gemm_tflops:.4g} of "
         f"{result.peak_tflops:.6g} TFLOPS"),
        (f"  bandwidth_utilization  {result.bandwidth_utilization:<10.4g} copy {result.copy_gbps:.4g} of "
         f"{result.memory_bandwidth_gbps:g} GB/s; decode attention {result.decode_bandwidth_fraction:.3g} of it"),
        f"  launch_overhead_us     {result.launch_overhead_us:<10.4g}",
    ]
    if result.interconnect_utilization is not None:
        lines.append(f"  interconnect_utilization {result.interconnect_utilization:.4g}")
    if result.interconnect_latency_us is not None:
        lines.append(f"  interconnect_latency_us  {result.interconnect_latency_us:.4g}")
    lines.append("  GEMM efficiency vs tokens M: "
                 + ", ".join(f"{p['m']}: {p['compute_fraction']:.3g}" for p in result.gemm_curve))
    lines += [f"  note: {note}" for note in result.notes]
    return "\n".join(lines)
