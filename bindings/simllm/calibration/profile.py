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

With ``tables=True`` (the default) it also times the shapes shape-aware kernel tables are fitted
from (:class:`_TableGrid`, kept apart in :attr:`ProfileResult.table_measurements`): GEMMs over the
tables' log2 M grid at power-of-two N and K (and a few model widths that are not, held out),
prefill attention by batch and sequence length, decode attention by batch and context (at a
power-of-two head count, and one that is not, held out), and all-reduce by message size on each
power of two GPUs when two or more are visible. :func:`kernel_tables` fits them with the importer's
code (:func:`simllm.calibration.kernels.tables_from_rows`) into the same ``simllm-kernel-tables/1``
mapping ``simllm kernels import`` writes.

The work is split three ways, so that the fit runs (and is tested) without PyTorch:
:mod:`.profile_timing` runs the measurements (PyTorch, imported only when a profile runs),
:mod:`.profile_fit` turns them into the factors (pure arithmetic; :class:`ProfileResult`), and
:mod:`.profile_write` writes the hardware YAML and the raw data. This module decides what is
measured at each size (the grids) and holds the entry points: :func:`profile_hardware`,
:func:`write_profile` and :func:`format_profile`.

Every timing is the median over ``repeats`` after warm-up (see :mod:`.profile_timing`).

How the measurements become the factors (the median of the large GEMMs, the copy's bandwidth,
the time per tiny kernel, the all-reduce's bus bandwidth), rounded to 4 significant digits and
clamped to (0, 1]: :mod:`.profile_fit`. On a CPU, fractions of a GPU's datasheet peaks are tiny
(1e-4 and below): such a profile exercises the tool, it is no calibration.

PyTorch is optional (``pip install "simllm[profile]"``) and imported only when a profile runs.
"""
from dataclasses import dataclass
from datetime import datetime, timezone

from simllm.calibration.profile_fit import KINDS, MIB, ProfileResult, fit_profile, kernel_tables
from simllm.calibration.profile_timing import (
    device_name,
    fp8_gemm_available,
    import_torch,
    measure_all,
    measure_table_rows,
    resolve_device,
)
from simllm.calibration.profile_write import format_profile, format_tables, write_profile
from simllm.config import dtypes
from simllm.config.hardware import HardwareConfig
from simllm.errors import ConfigError

__all__ = ["DTYPES", "KINDS", "SIZES", "ProfileResult", "format_profile", "format_tables", "fp8_gemm_available",
           "kernel_tables", "profile_hardware", "write_profile"]

DTYPES = ("bf16", "fp16", "fp8")
SIZES = ("tiny", "full")


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
class _TableGrid:
    """The shapes kernel tables are fitted from at one profile size (see
    :func:`simllm.calibration.profile_timing.measure_table_rows`)."""

    gemms: tuple  # (M, N, K), N and K powers of two: fitted
    gemms_held: tuple  # (M, N, K), N or K not a power of two: held out
    prefill: tuple  # (batch, sequence length) at `heads`
    prefill_held: tuple  # ... at `held_heads` (not a power of two: held out)
    decode: tuple  # (batch, context) at `heads` / `kv_heads`
    decode_held: tuple  # ... at `held_heads` / `held_kv_heads`
    heads: int
    kv_heads: int
    held_heads: int
    held_kv_heads: int
    head_dim: int
    allreduce_bytes: tuple  # even and odd log2 (the odd ones are the held-out check)
    repeats: int
    warmup: int
    flush_bytes: int


def _pow2(lo, hi):
    return tuple(2**i for i in range(lo, hi + 1))


def _table_grid(m, nk, nk_held, m_held, prefill, prefill_held, decode, decode_held, **rest):
    return _TableGrid(gemms=tuple((a, n, k) for a in m for n, k in nk),
                      gemms_held=tuple((a, n, k) for a in m_held for n, k in nk_held),
                      prefill=prefill, prefill_held=prefill_held, decode=decode, decode_held=decode_held, **rest)


# full (a GPU): every M of the tables' grid (1 .. 32768); N, K = 128 .. 65536 where the weight has
# at most 2**28 elements (Llama-3.1-405B's widest shard has 2**27.8), 90 pairs, the rest filled
# from the nearest; held out: Llama-3 / Qwen2.5 widths at every other M. Prefill: sequences of
# 128 .. 32768 tokens, batches up to 65536 tokens; decode: batch 1 .. 256, context 128 .. 131072,
# KV caches to 8 GiB. 1,660 shapes (4.4e14 GEMM FLOPs per pass); a minute or two on an H100 (an estimate).
_TABLE_GRIDS = {
    "full": _table_grid(
        m=_pow2(0, 15), nk=tuple((n, k) for n in _pow2(7, 16) for k in _pow2(7, 16) if n * k <= 2**28),
        m_held=_pow2(0, 15)[::2],
        nk_held=((6144, 4096), (28672, 4096), (4096, 14336), (8192, 28672), (5120, 13824), (1536, 1536)),
        prefill=tuple((b, s) for s in _pow2(7, 15) for b in _pow2(0, 5) if b == 1 or b * s <= 2**16),
        prefill_held=tuple((b, s) for s in _pow2(7, 15) for b in (1, 4) if b == 1 or b * s <= 2**16),
        decode=tuple((b, c) for b in _pow2(0, 8) for c in _pow2(7, 17) if b * c <= 2**21),
        decode_held=tuple((b, c) for b in (1, 16) for c in _pow2(7, 17) if b * c <= 2**21),
        heads=32, kv_heads=8, held_heads=40, held_kv_heads=8, head_dim=128,
        allreduce_bytes=_pow2(10, 29), repeats=10, warmup=2, flush_bytes=256 * MIB,
    ),
    # size="full" on a CPU: a few shapes per table, about a minute.
    "full-cpu": _table_grid(
        m=_pow2(0, 10)[::2], nk=tuple((n, k) for n in (256, 1024, 4096) for k in (256, 1024, 4096)),
        m_held=(1, 64, 1024), nk_held=((1536, 1024),),
        prefill=((1, 128), (1, 512), (1, 2048), (4, 512)), prefill_held=((1, 512),),
        decode=((1, 256), (1, 1024), (1, 4096), (8, 1024)), decode_held=((1, 1024),),
        heads=32, kv_heads=8, held_heads=40, held_kv_heads=8, head_dim=128,
        allreduce_bytes=(), repeats=3, warmup=1, flush_bytes=0,
    ),
    "tiny": _table_grid(
        m=(1, 8, 64), nk=((128, 128), (128, 256), (256, 128), (256, 256)),
        m_held=(1, 64), nk_held=((384, 256), (128, 384)),
        prefill=((1, 64), (1, 128), (2, 128)), prefill_held=((1, 128),),
        decode=((1, 256), (4, 256), (1, 1024)), decode_held=((1, 512),),
        heads=4, kv_heads=2, held_heads=6, held_kv_heads=2, head_dim=64,
        allreduce_bytes=(2**12, 2**13, 2**20, 2**21), repeats=3, warmup=1, flush_bytes=0,
    ),
}


def profile_hardware(base, device="cuda", dtype="bf16", size="full", repeats=None, progress=None, tables=True):
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
    tables : bool
        Also time the shapes of the kernel tables (:attr:`ProfileResult.table_measurements`,
        fitted by :func:`kernel_tables`); False: the scalar factors only.

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
    torch = import_torch()
    dev = resolve_device(torch, device)
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

    rows = measure_all(torch, dev, base, grid, gemm_dtype, act_dtype, repeats, say, notes)
    for row in rows:
        if row["skipped"] and row["kind"] == "allreduce":
            notes.append(f"all-reduce skipped: {row['reason']}; interconnect figures keep the base's values")
    table_rows = ()
    if tables:
        tgrid = _TABLE_GRIDS[grid_name]
        table_rows = tuple(measure_table_rows(torch, dev, base, tgrid, gemm_dtype, act_dtype, repeats, say))
        skipped = [r for r in table_rows if r["skipped"] and r["kind"] != "allreduce"]
        if skipped:
            notes.append(f"kernel tables: {len(skipped)} shape(s) skipped; first: {skipped[0]['reason']}")

    fit, methods, raw_fits = fit_profile(base, rows, gemm_dtype, peak_flops, notes)
    return ProfileResult(
        gpu=base.gpu,
        base_source=base.source,
        device=str(dev),
        device_name=device_name(torch, dev),
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
        table_measurements=table_rows,
        **fit,
    )
