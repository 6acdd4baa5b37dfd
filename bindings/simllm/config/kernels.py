"""Shape-aware kernel efficiency tables: what fraction of the datasheet roofline each operator
shape achieves on one GPU with one serving framework's kernels.

A table set is one JSON file (``configs/kernels/<gpu>/<framework>.json``, written by
``simllm kernels import`` from aiconfigurator-core's measured latencies or by ``simllm profile``
from torch timings) that a hardware preset names with ``kernel_tables: <folder>``. It holds:

- ``gemm``: per dtype (``bf16``, ``fp8``, ``fp4`` = NVFP4), efficiency over log2 M x log2 N x log2 K
  (:data:`GEMM_LOG2_M` x :data:`GEMM_LOG2_NK` x :data:`GEMM_LOG2_NK`), relative to
  ``max(2 M N K / peak(dtype), bytes / bandwidth)``;
- ``attention_prefill``: over log2 FLOPs of one layer x log2 mean keys per query, relative to
  ``flops / peak(bf16)`` (the grids of ``simcore.codes.EFF_PF_*`` and ``EFF_CTX_POINTS``);
- ``attention_decode``: over log2 (rows x KV heads) x log2 context, relative to
  ``bytes / bandwidth`` (``EFF_DEC_POINTS`` x ``EFF_CTX_POINTS``);
- ``moe`` (optional): per dtype (also ``int4``, weight-only kernels relative to the BF16 peak, and
  ``mxfp4``, relative to ``HardwareConfig.peak_flops("mxfp4")``: W4A8 at the FP8 rate where the GPU
  has FP4 tensor cores, weight-only elsewhere), the grouped MoE kernel (one layer's routed experts: gate/up,
  activation and down of every hit expert in one launch, as vLLM's ``fused_moe``, SGLang's and
  TensorRT-LLM's MoE ops run them) over log2 tokens per hit expert x log2 bytes of the hit
  experts' weights on the GPU (:data:`MOE_LOG2_M` x :data:`MOE_LOG2_BYTES`), relative to the
  up and down projections' rooflines summed (each ``max(flops / peak(dtype), bytes /
  bandwidth)`` as the cost kernel counts them, experts hit ``E (1 - (1 - k/E)**T)``); without
  it routed experts are priced as one GEMM of the hit experts' widths side by side;
- ``moe_shapes`` (optional): per dtype, the measured expert shapes themselves (``hidden``, per-GPU
  ``inter``, ``experts``, ``topk``) each with its efficiency over log2 tokens (:data:`MOE_LOG2_T`,
  same roofline): a model whose routed experts are one of them is priced off its own curve, which
  the shape-blind ``moe`` grid cannot match for every model (DeepSeek-V3 at TP 8 on H200 runs at
  the bandwidth roofline where other shapes of the same cell reach half of it);
- ``mla`` (optional): multi-head latent attention's own kernels (FlashMLA, FlashInfer/TensorRT-LLM
  MLA), per KV-cache dtype (``bf16``, ``fp8``) and per query heads on the GPU (1 .. 128), a
  ``prefill`` and a ``decode`` table on the attention grids above, with the FLOPs and bytes the
  cost kernel counts for an MLA layer of DeepSeek-V3's geometry (:data:`MLA_QK_DIM`,
  :data:`MLA_V_DIM`, :data:`MLA_LATENT`): an MLA model reads the table of its heads per GPU in place
  of ``attention_prefill`` / ``attention_decode``, whose head_dim-128 GQA kernels are not the ones
  an MLA model runs (absorbed decode does 3.4x the FLOPs per key of the MHA form and is
  compute-bound at 128 heads per GPU);
- ``alltoall`` (optional): one MoE layer's expert all-to-all (a dispatch and a combine, DeepEP's
  low-latency or normal kernels, the faster at each size) within one node, over log2 of the bytes
  each GPU moves as the cost kernel counts them (``2 T k hidden x 2 (EP - 1) / EP``), relative to
  ``bytes / link bandwidth`` (:data:`LINK_SHAPE`, the ``allreduce`` grid); without it the
  all-to-all is priced off the all-reduce curve;
- ``allreduce``: per GPU count, over log2 bus bytes (``EFF_LINK_*``), relative to
  ``bus_bytes / link bandwidth``, bus bytes being ``2 (n - 1) / n`` x the message (packing turns
  it into seconds at those points, interpolated linearly in bytes: :func:`link_seconds`); empty
  (``{}``) when no collective was measured (a single-GPU ``simllm profile``): collectives are then
  priced with the hardware profile's scalar interconnect figures.

Every efficiency lies in ``[simcore.codes.EFF_FLOOR, 1]``: a measured kernel faster than the
datasheet roofline is clipped to 1 by the importer, which reports how many were. The numpy
interpolators here are the ones the importer's held-out check and the packing use; they match the
kernel's (:func:`simcore.cost.interp2_nb`, :func:`simcore.cost.link_seconds_nb`) point for point.
"""
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simcore import codes
from simllm.errors import ConfigError

FORMAT = "simllm-kernel-tables/1"
GEMM_DTYPES = ("bf16", "fp8", "fp4")
MOE_DTYPES = ("bf16", "fp8", "fp4", "int4", "mxfp4")  # int4 weight-only (W4A16); mxfp4 W4A8 on Blackwell, else W4A16
MLA_KV_DTYPES = ("bf16", "fp8")
# The MLA geometry aiconfigurator-core measured (DeepSeek-V3's, also Kimi-K2's): q/k width per head
# (qk_nope 128 + rope 64), value width per head, and the cached latent per token (kv_lora 512 + rope 64).
MLA_QK_DIM, MLA_V_DIM, MLA_LATENT = 192, 128, 576
GEMM_LOG2_M = tuple(range(0, 16))  # M = 1 .. 32768
GEMM_LOG2_NK = tuple(range(7, 17))  # N, K = 128 .. 65536
GEMM_SHAPE = (len(GEMM_LOG2_M), len(GEMM_LOG2_NK), len(GEMM_LOG2_NK))
PREFILL_SHAPE = (codes.EFF_PF_POINTS, codes.EFF_CTX_POINTS)
DECODE_SHAPE = (codes.EFF_DEC_POINTS, codes.EFF_CTX_POINTS)
LINK_SHAPE = (codes.EFF_LINK_POINTS,)
MOE_LOG2_M = tuple(range(0, 16))  # tokens per hit expert 1 .. 32768
MOE_LOG2_BYTES = tuple(range(20, 36))  # hit experts' weights on one GPU, 1 MiB .. 32 GiB per layer
MOE_SHAPE = (len(MOE_LOG2_M), len(MOE_LOG2_BYTES))
MOE_LOG2_T = tuple(range(0, 15))  # a measured expert shape's curve: tokens 1 .. 16384
MOE_CURVE_SHAPE = (len(MOE_LOG2_T),)


@dataclass(frozen=True, eq=False)
class KernelTables:
    """One GPU's efficiency tables for one serving framework (see the module docstring).

    Arrays are read-only float64. ``provenance`` is the file's free-form record (source package
    and version, rows used, held-out fit errors) as a JSON string.
    """

    gpu: str
    framework: str
    framework_version: str
    gemm: tuple  # ((dtype, ndarray GEMM_SHAPE), ...)
    attention_prefill: np.ndarray
    attention_decode: np.ndarray
    allreduce: tuple  # ((n_gpus, ndarray LINK_SHAPE), ...) in increasing n_gpus; () when none was measured
    provenance: str = "{}"
    source: str = "<dict>"
    moe: tuple = ()  # ((dtype, ndarray MOE_SHAPE), ...); () when no MoE kernel was measured
    moe_shapes: tuple = ()  # ((dtype, hidden, inter, experts, topk, ndarray MOE_CURVE_SHAPE), ...)
    mla: tuple = ()  # ((kv_dtype, heads per GPU, ndarray PREFILL_SHAPE, ndarray DECODE_SHAPE), ...)
    alltoall: np.ndarray = None  # LINK_SHAPE efficiencies of the measured expert all-to-all; None: not measured

    def mla_tables(self, kv_dtype, heads):
        """``(prefill, decode)`` MLA tables for a KV cache of ``kv_dtype`` (its own where measured,
        else ``bf16``) at the measured head count nearest ``heads`` per GPU (in log2), or None."""
        key = kv_dtype if any(d == kv_dtype for d, *_ in self.mla) else "bf16"
        best = None
        for d, n, pre, dec in self.mla:
            if d == key and (best is None or abs(np.log2(n / heads)) < abs(np.log2(best[0] / heads))):
                best = (n, pre, dec)
        return None if best is None else best[1:]

    def moe_shape_curve(self, dtype, hidden, inter, experts, topk):
        """The measured efficiency curve of exactly this expert shape (``inter`` per GPU) for
        weights of ``dtype`` (its own curves where the set has any, else ``bf16``), or None."""
        key = dtype if any(d == dtype for d, *_ in self.moe_shapes) else "bf16"
        for d, h, i, e, k, curve in self.moe_shapes:
            if d == key and h == hidden and abs(i - inter) < 1e-6 and e == experts and k == topk:
                return curve
        return None

    def moe_table(self, dtype):
        """The grouped-MoE table for expert weights of ``dtype`` (its own where measured, int8 →
        fp8's as :meth:`gemm_table`, else ``bf16``), or None when the set has none."""
        tables = dict(self.moe)
        return tables.get(measured_stand_in(dtype, tables))

    def gemm_table(self, dtype):
        """The GEMM table for weights of ``dtype`` (fp8 / fp4 → its own where measured, int8 →
        fp8's where measured, anything else → ``bf16``)."""
        tables = dict(self.gemm)
        return tables[measured_stand_in(dtype, tables) if dtype in ("fp8", "fp4", "int8") else "bf16"]

    def allreduce_curve(self, n_gpus):
        """The all-reduce curve measured on the nearest GPU count at or below ``n_gpus`` (the
        smallest one measured when ``n_gpus`` is below all); None when no collective was measured."""
        if not self.allreduce:
            return None
        best = self.allreduce[0][1]
        for n, curve in self.allreduce:
            if n <= n_gpus:
                best = curve
        return best


def measured_stand_in(dtype, tables):
    """The measured table whose fraction of peak prices GEMMs of ``dtype``: its own where measured;
    int8 without one takes fp8's (both are 8-bit tensor-core GEMMs on operands of the same byte;
    the fraction applies to int8's own peak, ``int8_tops``); else ``bf16``. Pricing int8 at bf16's
    fraction made int8 weights ten points of TTFT faster than fp8 on an H100, where both peaks are
    1,979 T/s: bf16 GEMMs reach a higher fraction of their peak than the measured 8-bit ones."""
    if dtype in tables:
        return dtype
    if dtype == "int8" and "fp8" in tables:
        return "fp8"
    return "bf16"


def _by_dtype(data, key, dtypes, what, source):
    """The optional mapping ``data[key]`` of some of ``dtypes`` to ``what`` ({} when absent)."""
    value = data.get(key, {})
    if not isinstance(value, dict) or set(value) - set(dtypes):
        raise ConfigError(f"{key}: a mapping of {', '.join(dtypes)} to {what}, got {str(value)[:100]}", source=source)
    return value


def _array(value, shape, where, source):
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: a numeric table of shape {shape}, got {str(value)[:100]}", source=source)
    if arr.shape != shape:
        raise ConfigError(f"{where}: a table of shape {shape}, got shape {arr.shape}", source=source)
    bad = ~np.isfinite(arr) | (arr < codes.EFF_FLOOR) | (arr > 1.0)
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        raise ConfigError(f"{where}{list(i)}: an efficiency in [{codes.EFF_FLOOR:g}, 1], got {arr[i]!r}", source=source)
    arr.flags.writeable = False
    return arr


def tables_from_dict(data, source="<dict>"):
    """Validate a kernel-table mapping (the JSON form) into :class:`KernelTables`.

    Raises
    ------
    ConfigError
        Naming the file, the key and the allowed values for a wrong format, shape or efficiency.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"format: {FORMAT!r}, got {str(got)[:100]!r}", source=source)
    for key in ("gpu", "framework", "framework_version", "gemm", "attention_prefill", "attention_decode", "allreduce"):
        if key not in data:
            raise ConfigError(f"missing key {key!r} (a kernel-table file needs it)", source=source)
    gemm = data["gemm"]
    if not isinstance(gemm, dict) or "bf16" not in gemm or set(gemm) - set(GEMM_DTYPES):
        raise ConfigError(f"gemm: a mapping of {', '.join(GEMM_DTYPES)} (bf16 required), got {str(gemm)[:100]}",
                          source=source)
    link = data["allreduce"]
    if not isinstance(link, dict):
        raise ConfigError(f"allreduce: a mapping of GPU count to a curve ({{}} for none), got {str(link)[:100]}",
                          source=source)
    moe = _by_dtype(data, "moe", MOE_DTYPES, "a table", source)
    shapes = _by_dtype(data, "moe_shapes", MOE_DTYPES, "shape lists", source)
    moe_shapes = []
    for d, items in shapes.items():
        for j, item in enumerate(items if isinstance(items, list) else [None]):
            where = f"moe_shapes.{d}[{j}]"
            if not isinstance(item, dict) or set(item) != {"hidden", "inter", "experts", "topk", "eff"}:
                raise ConfigError(f"{where}: a mapping of hidden, inter, experts, topk and eff, got {str(item)[:100]}",
                                  source=source)
            dims = []
            for key in ("hidden", "inter", "experts", "topk"):
                v = item[key]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 2**31:
                    raise ConfigError(f"{where}.{key}: a positive number below 2**31, got {str(v)[:100]!r}", source=source)
                dims.append(float(v))
            moe_shapes.append((d, *dims, _array(item["eff"], MOE_CURVE_SHAPE, f"{where}.eff", source)))
    mla = _by_dtype(data, "mla", MLA_KV_DTYPES, "tables by heads", source)
    mla_tables = []
    for d, by_heads in mla.items():
        for n, pair in (by_heads.items() if isinstance(by_heads, dict) else [(None, None)]):
            where = f"mla.{d}.{str(n)[:20]}"
            if not str(n).isdigit() or not 1 <= int(n) <= 1024:
                raise ConfigError(f"mla.{d}: head counts 1 .. 1024, got {str(n)[:100]!r}", source=source)
            if not isinstance(pair, dict) or set(pair) != {"prefill", "decode"}:
                raise ConfigError(f"{where}: a mapping of prefill and decode, got {str(pair)[:100]}", source=source)
            mla_tables.append((d, int(n), _array(pair["prefill"], PREFILL_SHAPE, f"{where}.prefill", source),
                               _array(pair["decode"], DECODE_SHAPE, f"{where}.decode", source)))
    alltoall = data.get("alltoall")
    if alltoall is not None:
        alltoall = _array(alltoall, LINK_SHAPE, "alltoall", source)
    curves = []
    for n, curve in link.items():
        if not str(n).isdigit() or not 2 <= int(n) <= 1024:
            raise ConfigError(f"allreduce: GPU counts 2 .. 1024, got {str(n)[:100]!r}", source=source)
        curves.append((int(n), _array(curve, LINK_SHAPE, f"allreduce.{n}", source)))
    return KernelTables(
        gpu=str(data["gpu"]),
        framework=str(data["framework"]),
        framework_version=str(data["framework_version"]),
        gemm=tuple((d, _array(gemm[d], GEMM_SHAPE, f"gemm.{d}", source)) for d in GEMM_DTYPES if d in gemm),
        attention_prefill=_array(data["attention_prefill"], PREFILL_SHAPE, "attention_prefill", source),
        attention_decode=_array(data["attention_decode"], DECODE_SHAPE, "attention_decode", source),
        allreduce=tuple(sorted(curves)),
        provenance=json.dumps(data.get("provenance", {}), sort_keys=True),
        source=source,
        moe=tuple((d, _array(moe[d], MOE_SHAPE, f"moe.{d}", source)) for d in MOE_DTYPES if d in moe),
        moe_shapes=tuple(moe_shapes),
        mla=tuple(mla_tables),
        alltoall=alltoall,
    )


def load_tables(path):
    """Read and validate one kernel-table JSON file.

    Raises
    ------
    ConfigError
        For a missing or unreadable file, invalid JSON (with its line) or an invalid table.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"a readable kernel-table JSON file ({exc.__class__.__name__})", source=str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"line {exc.lineno}: valid JSON ({exc.msg})", source=str(path))
    return tables_from_dict(data, str(path))


def load_table_folder(folder, frameworks):
    """The table sets of ``frameworks`` found in ``folder`` (``<framework>.json``), as
    ``((framework, KernelTables), ...)``; frameworks without a file are left out."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError("kernel_tables: an existing folder of <framework>.json tables", source=str(folder))
    return tuple((fw, load_tables(folder / f"{fw}.json")) for fw in frameworks if (folder / f"{fw}.json").is_file())


# --- interpolation (numpy mirrors of simcore.cost.interp1_nb / interp2_nb) ---------------------

def grid_coordinate(values, log2_min):
    """Grid coordinate of ``values`` on a grid starting at ``2**log2_min`` with one point per
    octave (``log2`` clamped below at 0 as the kernel's ``log2_nb`` does)."""
    v = np.asarray(values, dtype=np.float64)
    return np.log2(np.maximum(v, 1.0)) - log2_min


def interp2(table, x1, x2):
    """Bilinear interpolation of a 2-D table at grid coordinates ``(x1, x2)``, clamped."""
    return _interp2_rows(table[np.newaxis], 0, x1, x2)


def _interp2_rows(tables, rows, x1, x2):
    """:func:`interp2` of ``tables[rows]`` (a stack of 2-D tables, ``rows`` an index per point
    or one for all) at ``(x1, x2)``: the same arithmetic, every point at once."""
    _, n1, n2 = tables.shape
    x1 = np.clip(np.asarray(x1, dtype=np.float64), 0.0, n1 - 1.0)
    x2 = np.clip(np.asarray(x2, dtype=np.float64), 0.0, n2 - 1.0)
    i1 = np.minimum(x1.astype(np.int64), n1 - 2)
    i2 = np.minimum(x2.astype(np.int64), n2 - 2)
    f1 = x1 - i1
    f2 = x2 - i2
    a = tables[rows, i1, i2] + f2 * (tables[rows, i1, i2 + 1] - tables[rows, i1, i2])
    b = tables[rows, i1 + 1, i2] + f2 * (tables[rows, i1 + 1, i2 + 1] - tables[rows, i1 + 1, i2])
    return a + f1 * (b - a)


def gemm_efficiency(table, m, n, k):
    """Efficiency of GEMMs ``(m, n, k)`` from a :data:`GEMM_SHAPE` table (arrays broadcast)."""
    m, n, k = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (m, n, k)))
    x1 = grid_coordinate(m, GEMM_LOG2_M[0])
    x2 = grid_coordinate(n, GEMM_LOG2_NK[0])
    x3 = grid_coordinate(k, GEMM_LOG2_NK[0])
    out = np.empty(m.shape)
    flat = out.reshape(-1)
    n1 = table.shape[0]
    c1 = np.clip(x1.reshape(-1), 0.0, n1 - 1.0)
    i1 = np.minimum(c1.astype(np.int64), n1 - 2)
    f1 = c1 - i1
    a = _interp2_rows(table, i1, x2.reshape(-1), x3.reshape(-1))
    b = _interp2_rows(table, i1 + 1, x2.reshape(-1), x3.reshape(-1))
    flat[:] = a + f1 * (b - a)
    return out


def prefill_efficiency(table, flops, ctx):
    """Compute-side efficiency of prefill attention of ``flops`` per layer, ``ctx`` mean keys
    per query."""
    return interp2(table, grid_coordinate(flops, codes.EFF_PF_LOG2_MIN), grid_coordinate(ctx, 0))


def moe_efficiency(table, tokens_per_expert, weight_bytes):
    """Efficiency of the grouped MoE kernel at ``tokens_per_expert`` rows per hit expert and
    ``weight_bytes`` of hit experts' weights (one layer, one GPU)."""
    return interp2(table, grid_coordinate(tokens_per_expert, MOE_LOG2_M[0]),
                   grid_coordinate(weight_bytes, MOE_LOG2_BYTES[0]))


def moe_curve_efficiency(curve, tokens):
    """Efficiency of a measured expert shape's curve at ``tokens`` (linear in log2, clamped)."""
    x = np.clip(grid_coordinate(tokens, MOE_LOG2_T[0]), 0.0, len(curve) - 1.0)
    return np.interp(x, np.arange(len(curve), dtype=np.float64), curve)


def decode_efficiency(table, rows_kv_heads, ctx):
    """Memory-side efficiency of decode attention over ``rows x kv_heads`` and ``ctx`` tokens."""
    return interp2(table, grid_coordinate(rows_kv_heads, 0), grid_coordinate(ctx, 0))


def link_seconds_curve(curve, link_bw):
    """Seconds of a collective at the efficiency curve's bus-byte points ``2**(EFF_LINK_LOG2_MIN +
    i)`` over a link of ``link_bw`` bytes/s, made non-decreasing (a larger message never takes
    less time): what the cost kernel interpolates."""
    points = 2.0 ** (codes.EFF_LINK_LOG2_MIN + np.arange(codes.EFF_LINK_POINTS, dtype=np.float64))
    return np.maximum.accumulate(points / (link_bw * np.asarray(curve, dtype=np.float64)))


def link_seconds(curve, bus_bytes, link_bw):
    """Seconds of a collective moving ``bus_bytes`` per GPU, as the cost kernel prices it: the
    :func:`link_seconds_curve` interpolated linearly in bytes, its first point's time below it and
    proportional to the bytes beyond the last."""
    seconds = link_seconds_curve(curve, link_bw)
    x = np.asarray(bus_bytes, dtype=np.float64)
    points = 2.0 ** (codes.EFF_LINK_LOG2_MIN + np.arange(codes.EFF_LINK_POINTS, dtype=np.float64))
    inside = np.interp(x, points, seconds)
    return np.where(x > points[-1], seconds[-1] * x / points[-1], inside)


def bus_bytes(message_bytes, n_gpus):
    """Bytes each GPU sends in a ring all-reduce of ``message_bytes``: ``2 (n - 1) / n`` x."""
    return 2.0 * (n_gpus - 1.0) / n_gpus * np.asarray(message_bytes, dtype=np.float64)


def log2_grid(log2_min, points):
    """The grid's values: ``2**log2_min``, ``2**(log2_min + 1)``, ..."""
    return np.exp2(np.arange(log2_min, log2_min + points, dtype=np.float64))

