"""``simllm kernels import``: shape-aware efficiency tables fitted from measured kernel latencies.

Source: NVIDIA's aiconfigurator-core package (Apache-2.0; ``pip install "simllm[kernels]"``), which
ships per-GPU, per-framework kernel latencies as Parquet under
``aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/``. For one system and
framework (the newest version of each table unless one is asked for) this module reads

- ``gemm_perf`` (m, n, k, gemm_dtype, latency ms): BF16, per-tensor FP8 and NVFP4 (Blackwell),
  the fastest kernel source of each shape (what the framework's dispatch would pick);
- ``context_attention_perf`` and ``generation_attention_perf`` (batch_size, isl, step, num_heads,
  num_key_value_heads, head_dim, kv_cache_dtype, window_size, latency): full attention
  (window 0), head_dim 128, BF16 KV cache;
- ``custom_allreduce_perf`` (num_gpus, message_size in BF16 elements, latency), CUDA-graph
  variants where the table has them,
- ``moe_perf`` where the system and framework have it (moe_dtype, num_tokens, hidden_size,
  inter_size, topk, num_experts, moe_tp_size, moe_ep_size, distribution, kernel_source, latency):
  balanced routing without expert parallelism, gated kernels only, BF16, FP8 (per-tensor or
  block-scaled, the fastest), NVFP4, weight-only INT4 (relative to the BF16 peak) and MXFP4
  (W4A8 where measured, else W4A16; against :meth:`HardwareConfig.peak_flops`), each dtype from
  the newest version that measured it (see :func:`_moe_rows`),

turns every row into an efficiency, the datasheet roofline of our hardware preset divided by the
measured latency (:mod:`simllm.config.kernels` says against which roofline for each table), and
resamples them onto the tables' log2 grids:

- GEMM: at the power-of-two N and K of the grid, the efficiency over log2 M is interpolated
  linearly between the measured M (clamped at the ends); a grid (N, K) pair without rows takes
  its nearest measured pair's curve;
- attention, MoE and collectives: each grid cell takes the median (in log space) of the rows
  that round to it; empty cells take the nearest filled cell.

Efficiencies above 1 (a kernel faster than the roofline of our datasheet figures) are clipped to
1 and counted in the provenance: physics is not bent to fit.

Held-out check (what ``--report`` prints and the provenance records): GEMM rows whose N or K is
not a power of two, attention rows whose head count is not a power of two, MoE rows whose token
count is not a power of two, and all-reduce
message sizes of odd log2 (those refitted from the even ones alone) are never used to build the
tables; the median |predicted / measured - 1| of their latencies is the fit error.
"""
import importlib.metadata
import importlib.util
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from simcore import codes
from simllm.config import dtypes
from simllm.config import kernels as kt
from simllm.errors import ConfigError, optional_import
from simllm.fileio import write_text_atomic

PACKAGE = "aiconfigurator-core"
# aiconfigurator-core system name -> simllm hardware preset.
SYSTEMS = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200-sxm",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
    "a100_sxm": "a100-sxm-80gb",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
}
FRAMEWORKS = ("vllm", "sglang", "trtllm")
_GEMM_DTYPES = {"bfloat16": "bf16", "float16": "bf16", "fp8": "fp8"}
_BF16 = 2.0


def package_root():
    """The installed aiconfigurator_core folder and its version.

    Raises
    ------
    ConfigError
        When the package is not installed (with the pip command).
    """
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"importing kernel tables needs {PACKAGE}, which is not installed: "
                          'pip install "simllm[kernels]"')
    return Path(list(spec.submodule_search_locations)[0]), importlib.metadata.version(PACKAGE)


def _version_key(name):
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.\-_a-z]+", name) if x)


def table_files(data_dir, op, framework, filename, version=None):
    """Paths of ``<data_dir>/<op>/<framework>/<version>/<filename>``, newest version first (only
    ``version`` when given); empty when no version holds the file."""
    folder = data_dir / op / framework
    if not folder.is_dir():
        return []
    versions = [version] if version else sorted((p.name for p in folder.iterdir() if p.is_dir()), key=_version_key)
    return [folder / v / filename for v in reversed(versions) if (folder / v / filename).is_file()]


def table_file(data_dir, op, framework, filename, version=None):
    """The newest of :func:`table_files` (None when there is none)."""
    paths = table_files(data_dir, op, framework, filename, version)
    return paths[0] if paths else None


_OPTIONAL_COLUMNS = {"window_size": 0}  # older tables have no sliding-window rows


def read_columns(path, columns):
    """Columns of a Parquet file as numpy arrays (strings as object arrays); a column of
    ``_OPTIONAL_COLUMNS`` the file lacks takes its default."""
    pq = optional_import("pyarrow.parquet", "reading kernel tables", install='"simllm[kernels]"')
    names = set(pq.read_schema(path).names)
    missing = [c for c in columns if c not in names]
    for c in missing:
        if c not in _OPTIONAL_COLUMNS:
            raise ConfigError(f"{path}: a column {c!r} (found {', '.join(sorted(names))[:100]})")
    table = pq.read_table(path, columns=[c for c in columns if c in names])
    out = {c: np.asarray(table.column(c).to_pylist()) for c in columns if c in names}
    for c in missing:
        out[c] = np.full(table.num_rows, _OPTIONAL_COLUMNS[c])
    return out


def _fastest(keys, latency):
    """Per distinct key row (a 2-D array of shape keys), the smallest latency."""
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    best = np.full(len(uniq), np.inf)
    np.minimum.at(best, inverse.reshape(-1), latency)
    return uniq, best


def check_latencies(latency_s, what):
    """Raise a one-line ConfigError naming the first latency of ``what`` that is not a positive
    finite number of seconds (a measured kernel takes some time)."""
    lat = np.asarray(latency_s, dtype=np.float64)
    bad = ~np.isfinite(lat) | (lat <= 0.0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(f"{what} row {i}: latency must be a positive finite time (> 0 s), got {lat[i]!r}")


def _clip(eff):
    above = int(np.sum(eff > 1.0))
    return np.clip(eff, codes.EFF_FLOOR, 1.0), above


def _median_abs_error(pred_s, meas_s):
    if len(meas_s) == 0:
        return None
    return float(np.median(np.abs(pred_s / meas_s - 1.0)))


def _is_pow2(x):
    x = np.asarray(x, dtype=np.int64)
    return (x > 0) & ((x & (x - 1)) == 0)


def _fill_nearest(table, filled):
    """Fill the cells of ``table`` where ``filled`` is False with the nearest filled cell's value
    (Euclidean distance in grid steps; ties go to the first in row-major order)."""
    idx = np.argwhere(filled)
    if len(idx) == 0:
        raise ConfigError("the measured table has no usable rows")
    for cell in np.argwhere(~filled):
        d = np.sum((idx - cell) ** 2, axis=1)
        table[tuple(cell)] = table[tuple(idx[int(np.argmin(d))])]
    return table


def _binned(x1, x2, eff, shape):
    """Median-in-log efficiency of the rows rounding to each cell of a ``shape`` grid (coordinates
    already relative to the grid's start); empty cells from their nearest filled cell."""
    c1 = np.clip(np.rint(x1), 0, shape[0] - 1).astype(np.int64)
    c2 = np.clip(np.rint(x2), 0, shape[1] - 1).astype(np.int64)
    table = np.zeros(shape)
    filled = np.zeros(shape, dtype=bool)
    flat = c1 * shape[1] + c2
    order = np.argsort(flat, kind="stable")
    cells, starts = np.unique(flat[order], return_index=True)
    logs = np.log(eff[order])
    for cell, lo, hi in zip(cells, starts, list(starts[1:]) + [len(order)]):
        table.flat[cell] = np.exp(np.median(logs[lo:hi]))
        filled.flat[cell] = True
    return _fill_nearest(table, filled)


# --- GEMM ---------------------------------------------------------------------------------------

def gemm_roofline_s(m, n, k, peak_flops, mem_bw, w_bytes):
    """Datasheet roofline of a weight GEMM, as the cost kernel prices it: ``2 m n k`` FLOPs at
    ``peak_flops``; the weights (``n k`` at ``w_bytes``) and the BF16 input and output rows moved
    at ``mem_bw``."""
    m, n, k = (np.asarray(a, dtype=np.float64) for a in (m, n, k))
    return np.maximum(2.0 * m * n * k / peak_flops, (n * k * w_bytes + m * (n + k) * _BF16) / mem_bw)


def fit_gemm(m, n, k, latency_s, peak_flops, mem_bw, w_bytes):
    """A :data:`simllm.config.kernels.GEMM_SHAPE` table from measured GEMMs of one dtype.

    Returns
    -------
    table : ndarray
    report : dict
        ``rows`` used, ``held_out_rows``, ``held_out_median_abs_error``, ``clipped_above_roofline``.
    """
    check_latencies(latency_s, "gemm_perf")
    eff, above = _clip(gemm_roofline_s(m, n, k, peak_flops, mem_bw, w_bytes) / latency_s)
    lo, hi = 2 ** kt.GEMM_LOG2_NK[0], 2 ** kt.GEMM_LOG2_NK[-1]
    in_range = (n >= lo) & (n <= hi) & (k >= lo) & (k <= hi)
    fit = in_range & _is_pow2(n) & _is_pow2(k)
    held = in_range & ~fit
    shape = kt.GEMM_SHAPE
    table = np.zeros(shape)
    filled = np.zeros(shape[1:], dtype=bool)
    grid_m = np.asarray(kt.GEMM_LOG2_M, dtype=np.float64)
    for j, ln in enumerate(kt.GEMM_LOG2_NK):
        for l, lk in enumerate(kt.GEMM_LOG2_NK):
            sel = fit & (n == 2**ln) & (k == 2**lk)
            if not sel.any():
                continue
            ms, inv = np.unique(np.log2(m[sel]), return_inverse=True)
            e = np.zeros(len(ms))
            np.maximum.at(e, inv, eff[sel])  # the best kernel at each m
            table[:, j, l] = np.exp(np.interp(grid_m, ms, np.log(e)))
            filled[j, l] = True
    idx = np.argwhere(filled)
    if len(idx) == 0:
        raise ConfigError("gemm_perf has no rows at power-of-two N and K in the grid")
    for cell in np.argwhere(~filled):
        near = idx[int(np.argmin(np.sum((idx - cell) ** 2, axis=1)))]
        table[:, cell[0], cell[1]] = table[:, near[0], near[1]]
    table = np.clip(table, codes.EFF_FLOOR, 1.0)
    pred = gemm_roofline_s(m[held], n[held], k[held], peak_flops, mem_bw, w_bytes) / kt.gemm_efficiency(
        table, m[held], n[held], k[held])
    return table, {"rows": int(fit.sum()), "held_out_rows": int(held.sum()),
                   "held_out_median_abs_error": _median_abs_error(pred, latency_s[held]),
                   "clipped_above_roofline": above}


# --- attention ------------------------------------------------------------------------------------

def prefill_flops(batch, isl, heads, head_dim):
    """FLOPs of one layer's causal prefill attention: ``4 d heads x pairs``, ``pairs = b s (s+1)/2``."""
    b, s = np.asarray(batch, dtype=np.float64), np.asarray(isl, dtype=np.float64)
    return 4.0 * head_dim * np.asarray(heads, dtype=np.float64) * b * s * (s + 1.0) / 2.0


def decode_bytes(batch, ctx, heads, kv_heads, head_dim, kv_bytes):
    """Bytes of one layer's decode attention as the cost kernel counts them: every cached K and V
    once per KV head, plus the query and output rows in BF16."""
    b = np.asarray(batch, dtype=np.float64)
    return (b * np.asarray(ctx, dtype=np.float64) * 2.0 * np.asarray(kv_heads) * head_dim * kv_bytes
            + 2.0 * b * np.asarray(heads) * head_dim * _BF16)


def fit_prefill(batch, isl, heads, latency_s, peak_flops, head_dim=128):
    """The prefill-attention table (compute side) and its report."""
    check_latencies(latency_s, "context_attention_perf")
    flops = prefill_flops(batch, isl, heads, head_dim)
    eff, above = _clip(flops / peak_flops / latency_s)
    ctx = (np.asarray(isl, dtype=np.float64) + 1.0) / 2.0
    fit = _is_pow2(heads)
    x1 = kt.grid_coordinate(flops, codes.EFF_PF_LOG2_MIN)
    x2 = kt.grid_coordinate(ctx, 0)
    table = np.clip(_binned(x1[fit], x2[fit], eff[fit], kt.PREFILL_SHAPE), codes.EFF_FLOOR, 1.0)
    pred = flops[~fit] / peak_flops / kt.prefill_efficiency(table, flops[~fit], ctx[~fit])
    return table, {"rows": int(fit.sum()), "held_out_rows": int((~fit).sum()),
                   "held_out_median_abs_error": _median_abs_error(pred, latency_s[~fit]),
                   "clipped_above_roofline": above}


def fit_decode(batch, ctx, heads, kv_heads, latency_s, mem_bw, head_dim=128, kv_bytes=_BF16):
    """The decode-attention table (memory side) and its report."""
    check_latencies(latency_s, "generation_attention_perf")
    nbytes = decode_bytes(batch, ctx, heads, kv_heads, head_dim, kv_bytes)
    eff, above = _clip(nbytes / mem_bw / latency_s)
    fit = _is_pow2(heads)
    rows = np.asarray(batch, dtype=np.float64) * kv_heads
    table = np.clip(_binned(kt.grid_coordinate(rows[fit], 0), kt.grid_coordinate(ctx[fit], 0), eff[fit],
                            kt.DECODE_SHAPE), codes.EFF_FLOOR, 1.0)
    pred = nbytes[~fit] / mem_bw / kt.decode_efficiency(table, rows[~fit], ctx[~fit])
    return table, {"rows": int(fit.sum()), "held_out_rows": int((~fit).sum()),
                   "held_out_median_abs_error": _median_abs_error(pred, latency_s[~fit]),
                   "clipped_above_roofline": above}


# --- MLA ------------------------------------------------------------------------------------------

_MLA_KV = {"bfloat16": "bf16", "fp8": "fp8"}


def mla_prefill_flops(batch, isl, heads):
    """FLOPs of one MLA layer's causal prefill as the cost kernel counts them (the MHA form: q.k over
    ``MLA_QK_DIM`` and p.v over ``MLA_V_DIM`` per head and query-key pair)."""
    return prefill_flops(batch, isl, heads, (kt.MLA_QK_DIM + kt.MLA_V_DIM) / 2.0)


def mla_decode_bytes(batch, ctx, heads, kv_bytes):
    """Bytes of one MLA layer's decode as the cost kernel counts them: every cached token's latent
    once whatever the heads, plus each row's query and output (BF16, the MHA form's widths)."""
    b, c, n = (np.asarray(a, dtype=np.float64) for a in (batch, ctx, heads))
    return b * c * kt.MLA_LATENT * kv_bytes + b * n * (kt.MLA_QK_DIM + kt.MLA_V_DIM) * _BF16


def _mla_time_s(prefill, decode, batch, ctx, heads, kv_bytes, peak_flops, mem_bw):
    """Seconds of decode rows ``batch x ctx`` as the cost kernel prices an MLA layer with these
    tables: the larger of the compute side (prefill table at the FLOPs and keys per query) and the
    memory side (decode table at rows and keys per row)."""
    flops = mla_prefill_flops(batch, 1.0, heads) * ctx  # one query per row over ctx keys
    t_c = flops / peak_flops / kt.prefill_efficiency(prefill, flops, ctx)
    t_m = mla_decode_bytes(batch, ctx, heads, kv_bytes) / mem_bw / kt.decode_efficiency(decode, batch, ctx)
    return np.maximum(t_c, t_m)


def fit_mla(context, generation, peak_flops, mem_bw):
    """MLA tables per KV dtype and query heads per GPU (the JSON form's ``mla`` mapping) from
    ``context`` ``(kv, heads, batch, isl, latency_s)`` and ``generation`` ``(kv, heads, batch, ctx,
    latency_s)`` rows: the prefill table from the context rows (compute side, as
    :func:`fit_prefill`), the decode table from the generation rows (memory side, as
    :func:`fit_decode`). Held out: context rows whose prompt is not a power of two, generation
    rows at odd log2 context (priced as the cost kernel does, the larger of both sides). The
    generation rows' contexts are powers of two, so their held-out points lie two octaves from the
    nearest fitted ones, where the engine interpolates across one: where the kernel is
    launch-bound its efficiency doubles per octave and the linear interpolation over two octaves
    misses by up to 25%, over one by up to 6%.
    Returns ``(mapping, {name: report})``."""
    out, reports = {}, {}
    ckv, cheads, cb, cs, clat = context
    gkv, gheads, gb, gc, glat = generation
    for kv in sorted(set(ckv) & set(gkv)):
        kv_bytes = dtypes.BYTES[kv]
        pred_c, meas_c, pred_g, meas_g = [], [], [], []
        rows = {"prefill": 0, "decode": 0}
        above = {"prefill": 0, "decode": 0}
        for n in sorted(set(cheads[ckv == kv]) & set(gheads[gkv == kv])):
            sc = (ckv == kv) & (cheads == n)
            flops = mla_prefill_flops(cb[sc], cs[sc], n)
            eff, a1 = _clip(flops / peak_flops / clat[sc])
            fit = _is_pow2(cs[sc])
            x1 = kt.grid_coordinate(flops, codes.EFF_PF_LOG2_MIN)
            x2 = kt.grid_coordinate((cs[sc] + 1.0) / 2.0, 0)
            prefill = np.clip(_binned(x1[fit], x2[fit], eff[fit], kt.PREFILL_SHAPE), codes.EFF_FLOOR, 1.0)
            pred_c.append(flops[~fit] / peak_flops / kt.prefill_efficiency(prefill, flops[~fit], (cs[sc][~fit] + 1.0) / 2.0))
            meas_c.append(clat[sc][~fit])
            sg = (gkv == kv) & (gheads == n)
            nbytes = mla_decode_bytes(gb[sg], gc[sg], n, kv_bytes)
            eff, a2 = _clip(nbytes / mem_bw / glat[sg])
            fit = np.round(np.log2(gc[sg])).astype(np.int64) % 2 == 0
            decode = np.clip(_binned(kt.grid_coordinate(gb[sg][fit], 0), kt.grid_coordinate(gc[sg][fit], 0), eff[fit],
                                     kt.DECODE_SHAPE), codes.EFF_FLOOR, 1.0)
            prefill, decode = np.array(_rounded(prefill)), np.array(_rounded(decode))  # what the JSON file holds
            pred_g.append(_mla_time_s(prefill, decode, gb[sg][~fit], gc[sg][~fit], n, kv_bytes, peak_flops, mem_bw))
            meas_g.append(glat[sg][~fit])
            out.setdefault(kv, {})[str(int(n))] = {"prefill": prefill.tolist(), "decode": decode.tolist()}
            rows["prefill"] += int(_is_pow2(cs[sc]).sum())
            rows["decode"] += int(fit.sum())
            above["prefill"] += a1
            above["decode"] += a2
        for name, pred, meas in (("prefill", pred_c, meas_c), ("decode", pred_g, meas_g)):
            pred, meas = np.concatenate(pred), np.concatenate(meas)
            reports[f"mla_{name}_{kv}"] = {"rows": rows[name], "held_out_rows": int(len(meas)),
                                           "held_out_median_abs_error": _median_abs_error(pred, meas),
                                           "clipped_above_roofline": above[name]}
    return out, reports


def _mla_rows(path, ctx_column):
    """``(kv dtype, heads per GPU, batch, isl or context, latency_s)`` of an aiconfigurator-core MLA
    table's BF16 rows (the fastest of each shape), context ``isl + step`` for generation rows."""
    r = read_columns(path, ("mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step", "latency"))
    kv = np.array([_MLA_KV.get(str(v), "") for v in r["kv_cache_dtype"]])
    sel = (r["mla_dtype"].astype(str) == "bfloat16") & (kv != "")
    x = r["isl"].astype(np.float64) + (r["step"].astype(np.float64) if ctx_column else 0.0)
    codes_ = np.searchsorted(np.array(sorted(_MLA_KV.values())), kv[sel]).astype(np.float64)
    keys, lat = _fastest(np.stack([codes_, r["num_heads"][sel].astype(np.float64), r["batch_size"][sel].astype(np.float64),
                                   x[sel]], axis=1), r["latency"][sel].astype(np.float64) * 1e-3)
    names = np.array(sorted(_MLA_KV.values()))[keys[:, 0].astype(np.int64)]
    return names, keys[:, 1], keys[:, 2], keys[:, 3], lat


# --- MoE ------------------------------------------------------------------------------------------

def experts_hit(n_experts, topk, tokens):
    """Expected distinct experts ``T`` tokens hit, each routed to ``k`` of ``E`` uniformly (the cost
    kernel's ``experts_hit_nb``): ``E (1 - (1 - k/E)**T)``."""
    e, k, t = (np.asarray(a, dtype=np.float64) for a in (n_experts, topk, tokens))
    return e * (1.0 - (1.0 - k / e) ** t)


def moe_shape(tokens, hidden, inter, topk, n_experts, w_bytes):
    """``(tokens per hit expert, hit experts' weight bytes)`` of one layer's routed experts on one
    GPU (``inter`` the per-GPU expert width, gated: gate/up ``2 inter``, down ``inter``): the MoE
    table's coordinates."""
    hit = experts_hit(n_experts, topk, tokens)
    t = np.asarray(tokens, dtype=np.float64)
    m = np.maximum(t * topk / np.maximum(hit, 1.0), 1.0)
    return m, hit * 3.0 * np.asarray(hidden, dtype=np.float64) * inter * w_bytes


def moe_roofline_s(tokens, hidden, inter, topk, n_experts, peak_flops, mem_bw, w_bytes):
    """Datasheet roofline of one layer's routed experts as the cost kernel prices them: the
    gate/up and the down projection each ``max(flops / peak, bytes / bandwidth)``, FLOPs
    ``2 T k`` x the expert's matrix, bytes the hit experts' weights plus every routed row's BF16
    input and output."""
    t, h, i = (np.asarray(a, dtype=np.float64) for a in (tokens, hidden, inter))
    hit = experts_hit(n_experts, topk, t)
    routed = t * topk
    up = np.maximum(2.0 * routed * 2.0 * h * i / peak_flops,
                    (hit * 2.0 * h * i * w_bytes + routed * (h + 2.0 * i) * _BF16) / mem_bw)
    down = np.maximum(2.0 * routed * i * h / peak_flops, (hit * i * h * w_bytes + routed * (i + h) * _BF16) / mem_bw)
    return up + down


def fit_moe(tokens, hidden, inter, topk, n_experts, latency_s, peak_flops, mem_bw, w_bytes):
    """A :data:`simllm.config.kernels.MOE_SHAPE` table from measured grouped-MoE layers of one
    dtype (each cell the median in log of the rows rounding to it, empty cells from the nearest);
    held out: token counts that are not powers of two."""
    check_latencies(latency_s, "moe_perf")
    roof = moe_roofline_s(tokens, hidden, inter, topk, n_experts, peak_flops, mem_bw, w_bytes)
    eff, above = _clip(roof / latency_s)
    m, nbytes = moe_shape(tokens, hidden, inter, topk, n_experts, w_bytes)
    fit = _is_pow2(tokens)
    x1 = kt.grid_coordinate(m, kt.MOE_LOG2_M[0])
    x2 = kt.grid_coordinate(nbytes, kt.MOE_LOG2_BYTES[0])
    table = np.clip(_binned(x1[fit], x2[fit], eff[fit], kt.MOE_SHAPE), codes.EFF_FLOOR, 1.0)
    pred = roof[~fit] / kt.moe_efficiency(table, m[~fit], nbytes[~fit])
    return table, {"rows": int(fit.sum()), "held_out_rows": int((~fit).sum()),
                   "held_out_median_abs_error": _median_abs_error(pred, latency_s[~fit]),
                   "clipped_above_roofline": above}


def fit_moe_shapes(tokens, hidden, inter, topk, n_experts, latency_s, peak_flops, mem_bw, w_bytes):
    """Per measured expert shape (hidden, inter per GPU, experts, topk) with at least four
    power-of-two token counts, its efficiency curve over log2 tokens (:data:`kt.MOE_LOG2_T`, linear
    in log between the measured points, clamped at the ends); held out: the shape's other token
    counts. Returns ``(shapes, report)``, ``shapes`` a list of the JSON form's mappings."""
    check_latencies(latency_s, "moe_perf")
    t = np.asarray(tokens, dtype=np.float64)
    roof = moe_roofline_s(t, hidden, inter, topk, n_experts, peak_flops, mem_bw, w_bytes)
    eff, above = _clip(roof / latency_s)
    keys = np.stack([hidden, inter, n_experts, topk], axis=1).astype(np.float64)
    grid = np.asarray(kt.MOE_LOG2_T, dtype=np.float64)
    shapes, pred, meas, used = [], [], [], 0
    for key in np.unique(keys, axis=0):
        sel = np.all(keys == key, axis=1)
        fit = sel & _is_pow2(t)
        if fit.sum() < 4:
            continue
        order = np.argsort(t[fit])
        curve = np.clip(np.exp(np.interp(grid, np.log2(t[fit][order]), np.log(eff[fit][order]))), codes.EFF_FLOOR, 1.0)
        curve = np.array(_rounded(curve))  # what the JSON file holds
        shapes.append({"hidden": float(key[0]), "inter": float(key[1]), "experts": float(key[2]), "topk": float(key[3]),
                       "eff": curve.tolist()})
        used += int(fit.sum())
        held = sel & ~_is_pow2(t)
        pred.append(roof[held] / kt.moe_curve_efficiency(curve, t[held]))
        meas.append(latency_s[held])
    if not shapes:
        raise ConfigError("moe_perf has no expert shape with four power-of-two token counts")
    pred, meas = np.concatenate(pred), np.concatenate(meas)
    return shapes, {"rows": used, "held_out_rows": int(len(meas)),
                    "held_out_median_abs_error": _median_abs_error(pred, meas), "clipped_above_roofline": above}


#: moe_perf dtype names read as each simllm dtype, in order of preference: per-tensor and
#: block-scaled FP8 together (the faster of a shape is taken later, as a framework's dispatch
#: would); MXFP4 weights with BF16 activations, else (a version without them) with MXFP8 ones.
_MOE_DTYPES = {"bf16": (("bfloat16",),), "fp8": (("fp8", "fp8_block"),), "fp4": (("nvfp4",),),
               "int4": (("int4_wo",),), "mxfp4": (("w4a8_mxfp4_mxfp8",), ("w4a16_mxfp4",))}


def _moe_rows(paths):
    """``({dtype: (tokens, hidden, inter per GPU, topk, experts, latency_s)}, used paths)`` of the
    ``moe_perf`` files ``paths`` (newest version first): the balanced-routing rows without expert
    parallelism (each GPU holds every expert, sharded by ``moe_tp_size``) of gated (SwiGLU) kernels
    (:data:`_MOE_DTYPES` says which source dtypes). Each dtype comes from the newest version that
    has such rows of it: a version that re-collects a few shapes or kernels only (TensorRT-LLM
    1.3.0rc23's MoE tables, whose ``reuse.yaml`` declares the rest reused from 1.3.0rc20) leaves the
    other dtypes to its predecessor, and kernels of different versions are never mixed in one table."""
    out, used = {}, []
    for path in paths:
        r = read_columns(path, ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                                "moe_tp_size", "moe_ep_size", "distribution", "kernel_source", "latency"))
        base = ((r["distribution"].astype(str) == "balanced") & (r["moe_ep_size"].astype(np.int64) == 1)
                & ~np.char.endswith(r["kernel_source"].astype(str), "_nongated"))
        names = r["moe_dtype"].astype(str)
        took = False
        for dtype, choices in _MOE_DTYPES.items():
            if dtype in out:
                continue
            for sources in choices:
                sel = base & np.isin(names, sources)
                if sel.any():
                    out[dtype] = (r["num_tokens"][sel].astype(np.float64), r["hidden_size"][sel].astype(np.float64),
                                  r["inter_size"][sel].astype(np.float64) / r["moe_tp_size"][sel].astype(np.float64),
                                  r["topk"][sel].astype(np.float64), r["num_experts"][sel].astype(np.float64),
                                  r["latency"][sel].astype(np.float64) * 1e-3)
                    took = True
                    break
        if took:
            used.append(path)
    return out, used


# --- collectives ---------------------------------------------------------------------------------

def _link_curve(bus, eff):
    x = kt.grid_coordinate(bus, codes.EFF_LINK_LOG2_MIN)
    grid = np.arange(codes.EFF_LINK_POINTS, dtype=np.float64)
    order = np.argsort(x)
    return np.clip(np.exp(np.interp(grid, x[order], np.log(eff[order]))), codes.EFF_FLOOR, 1.0)


def fit_allreduce(n_gpus, message_elems, latency_s, link_bw):
    """All-reduce curves per GPU count over log2 bus bytes, and the report (held out: odd log2
    message sizes, predicted from curves fitted on the even ones)."""
    check_latencies(latency_s, "custom_allreduce_perf")
    msg = np.asarray(message_elems, dtype=np.float64) * _BF16
    bus = kt.bus_bytes(msg, np.asarray(n_gpus, dtype=np.float64))
    eff, above = _clip(bus / link_bw / latency_s)
    odd = (np.rint(np.log2(msg)).astype(np.int64) % 2) == 1
    curves, pred, meas = {}, [], []
    for n in np.unique(n_gpus):
        sel = n_gpus == n
        curves[int(n)] = _link_curve(bus[sel], eff[sel])
        train = sel & ~odd
        test = sel & odd
        if train.sum() >= 2 and test.any():
            curve = _link_curve(bus[train], eff[train])
            pred.append(kt.link_seconds(curve, bus[test], link_bw))
            meas.append(latency_s[test])
    pred = np.concatenate(pred) if pred else np.zeros(0)
    meas = np.concatenate(meas) if meas else np.zeros(0)
    return curves, {"rows": int(len(msg)), "held_out_rows": int(len(meas)),
                    "held_out_median_abs_error": _median_abs_error(pred, meas), "clipped_above_roofline": above}


# GPUs in one node of the systems aiconfigurator-core measured the all-to-all on (a GB200 or GB300
# compute tray holds 4); its rows' EP is the node's GPUs times node_num where they do not say.
_A2A_NODE_GPUS = {"gb200": 4, "gb300": 4}


def alltoall_bytes(tokens, hidden, topk, ep):
    """Bytes one GPU moves in one MoE layer's dispatch and combine as the cost kernel counts them:
    each of its ``tokens`` x ``topk`` assignments' hidden state (BF16) out and back, ``(EP - 1) / EP``
    of them to another GPU."""
    t, h, k, e = (np.asarray(a, dtype=np.float64) for a in (tokens, hidden, topk, ep))
    return 2.0 * t * k * h * _BF16 * (e - 1.0) / e


def fit_alltoall(mode, tokens, hidden, topk, ep, latency_s, link_bw):
    """The all-to-all curve (efficiency at the ``EFF_LINK`` byte points against ``bytes / link_bw``)
    from one node's measured dispatch + combine latencies, and its report.

    Each kernel family (``mode``, the table's backend: DeepEP's low-latency and normal or
    high-throughput kernels, and their variants) gets the affine model ``latency + bytes / bandwidth``, fitted by least squares on the relative error of
    its rows whose token count is a power of two; the curve is the faster of the families at each
    size (a deployment runs the low-latency kernels for decode batches and the normal ones for
    prefills). The rows' shapes (hidden size, top-k) scatter around one line per family by
    10-20%, which a finer curve would only chase. Held out: the other token counts, each against its
    own family's line. Returns ``(curve, report, {mode: (latency_s, bandwidth_bytes_per_s)})``."""
    check_latencies(latency_s, "moe_a2a_perf")
    nbytes = alltoall_bytes(tokens, hidden, topk, ep)
    _, above = _clip(nbytes / link_bw / latency_s)
    fit = _is_pow2(tokens)
    lines = {}
    for m in sorted(set(mode)):
        sel = fit & (mode == m)
        if sel.sum() < 2:
            continue
        a = np.stack([1.0 / latency_s[sel], nbytes[sel] / latency_s[sel]], axis=1)
        (lat0, per_byte), *_ = np.linalg.lstsq(a, np.ones(int(sel.sum())), rcond=None)
        lines[str(m)] = (max(float(lat0), 0.0), 1.0 / max(float(per_byte), 1e-15))
    if not lines:
        raise ConfigError("moe_a2a_perf has no kernel family with two power-of-two token counts")
    points = 2.0 ** (codes.EFF_LINK_LOG2_MIN + np.arange(codes.EFF_LINK_POINTS, dtype=np.float64))
    seconds = np.min([lat0 + points / bw for lat0, bw in lines.values()], axis=0)
    curve = np.array(_rounded(np.clip(points / link_bw / seconds, codes.EFF_FLOOR, 1.0)))
    held = ~fit & np.isin(mode, list(lines))
    own = np.array([lines[m][0] + b / lines[m][1] for m, b in zip(mode[held], nbytes[held])])
    return curve, {"rows": int(fit.sum()), "held_out_rows": int(held.sum()),
                   "held_out_median_abs_error": _median_abs_error(own, latency_s[held]),
                   "clipped_above_roofline": above}, lines


def _alltoall_rows(data_dir, framework, version, node_gpus):
    """``((mode, tokens, hidden, topk, ep, latency_s), [paths])`` of one node's measured expert
    all-to-alls, dispatch + combine per shape and kernel: vLLM's and TensorRT-LLM's ``moe_a2a_perf``
    (BF16 or the backend's default payload), SGLang's DeepEP low-latency and normal tables. None
    when the framework has none."""
    path = table_file(data_dir, "comm", framework, "moe_a2a_perf.parquet", version)
    rows = []
    if path is not None:
        r = read_columns(path, ("comm_backend", "phase", "comm_dtype", "ep_size", "node_num", "hidden_size", "topk",
                                "num_experts", "num_tokens", "sms", "latency"))
        sel = np.isin(r["comm_dtype"].astype(str), ("default", "bfloat16")) & (r["node_num"].astype(np.int64) == 1)
        total = {}
        for i in np.flatnonzero(sel):
            key = (str(r["comm_backend"][i]), int(r["sms"][i]), float(r["hidden_size"][i]), float(r["topk"][i]),
                   float(r["num_experts"][i]), float(r["num_tokens"][i]), float(r["ep_size"][i]))
            total.setdefault(key, {})[str(r["phase"][i])] = float(r["latency"][i]) * 1e-6
        rows = [(k[0], k[5], k[2], k[3], k[6], v["dispatch"] + v["combine"]) for k, v in total.items()
                if set(v) == {"dispatch", "combine"}]
        used = [path]
    else:
        ll = table_file(data_dir, "comm", framework, "wideep_deepep_ll_perf.parquet", version)
        normal = table_file(data_dir, "comm", framework, "wideep_deepep_normal_perf.parquet", version)
        used = [p for p in (ll, normal) if p is not None]
        if ll is not None:
            r = read_columns(ll, ("node_num", "hidden_size", "num_token", "num_topk", "dispatch_avg_t_us", "combine_avg_t_us"))
            for i in range(len(r["num_token"])):
                if int(r["node_num"][i]) == 1:
                    rows.append(("deepep_ll", float(r["num_token"][i]), float(r["hidden_size"][i]), float(r["num_topk"][i]),
                                 node_gpus, (float(r["dispatch_avg_t_us"][i]) + float(r["combine_avg_t_us"][i])) * 1e-6))
        if normal is not None:
            r = read_columns(normal, ("node_num", "hidden_size", "num_token", "num_topk", "dispatch_transmit_us",
                                      "dispatch_notify_us", "combine_transmit_us", "combine_notify_us"))
            for i in range(len(r["num_token"])):
                if int(r["node_num"][i]) == 1:
                    us = sum(float(r[c][i]) for c in ("dispatch_transmit_us", "dispatch_notify_us",
                                                      "combine_transmit_us", "combine_notify_us"))
                    rows.append(("deepep_normal", float(r["num_token"][i]), float(r["hidden_size"][i]), float(r["num_topk"][i]),
                                 node_gpus, us * 1e-6))
    rows = [x for x in rows if x[5] > 0 and x[4] > 1]
    if not rows:
        return None, []
    cols = list(zip(*rows))
    return (np.array(cols[0]), *(np.array(c, dtype=np.float64) for c in cols[1:])), used


# --- one system and framework ----------------------------------------------------------------------

def import_tables(system, framework, hardware, *, root=None, package_version=None, version=None):
    """Fit the efficiency tables of ``framework`` on ``system`` against ``hardware``'s peaks.

    Parameters
    ----------
    system : str
        An aiconfigurator-core system (``h100_sxm``, ...).
    framework : str
        ``vllm``, ``sglang`` or ``trtllm``.
    hardware : HardwareConfig
        Whose datasheet peaks define the roofline (the preset the tables will belong to).
    root, package_version : optional
        The aiconfigurator_core folder and version (found with :func:`package_root` if omitted).
    version : str, optional
        The framework version's folder; the newest one holding each table by default.

    Returns
    -------
    dict
        The kernel-table JSON mapping (:func:`simllm.config.kernels.tables_from_dict` reads it).
    """
    if root is None:
        root, package_version = package_root()
    data_dir = Path(root) / "systems" / "data" / system
    if not data_dir.is_dir():
        known = sorted(p.name for p in (Path(root) / "systems" / "data").iterdir() if p.is_dir())
        raise ConfigError(f"--system: one of {', '.join(known)}, got {system[:100]!r}")
    files = {}

    def need(op, filename):
        path = table_file(data_dir, op, framework, filename, version)
        if path is None:
            raise ConfigError(f"{PACKAGE} {package_version} has no {filename} for {system}/{framework}"
                              + (f" {version}" if version else ""))
        files[filename] = str(path.relative_to(root))
        return path

    # GEMM
    g = read_columns(need("gemm", "gemm_perf.parquet"), ("gemm_dtype", "m", "n", "k", "latency"))
    fw_version = Path(files["gemm_perf.parquet"]).parent.name
    gemm = {}
    for src, dtype in (("bfloat16", "bf16"), ("fp8", "fp8"), ("nvfp4", "fp4")):
        sel = g["gemm_dtype"] == src
        if sel.any():
            gemm[dtype] = (g["m"][sel], g["n"][sel], g["k"][sel], g["latency"][sel].astype(np.float64) * 1e-3)
    if "bf16" not in gemm:
        raise ConfigError(f"{files['gemm_perf.parquet']}: no bfloat16 GEMM rows")

    # attention
    cols = ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype", "window_size",
            "latency")
    ctx_rows = read_columns(need("attention", "context_attention_perf.parquet"), cols)
    sel = _attention_rows(ctx_rows)
    prefill = (ctx_rows["batch_size"][sel], ctx_rows["isl"][sel], ctx_rows["num_heads"][sel],
               ctx_rows["latency"][sel].astype(np.float64) * 1e-3)
    gen = read_columns(need("attention", "generation_attention_perf.parquet"), cols + ("step",))
    sel = _attention_rows(gen)
    decode = (gen["batch_size"][sel], gen["isl"][sel].astype(np.int64) + gen["step"][sel].astype(np.int64),
              gen["num_heads"][sel], gen["num_key_value_heads"][sel], gen["latency"][sel].astype(np.float64) * 1e-3)

    # all-reduce
    path = need("comm", "custom_allreduce_perf.parquet")
    pq = optional_import("pyarrow.parquet", "reading kernel tables", install='"simllm[kernels]"')
    names = set(pq.read_schema(path).names)
    ar = read_columns(path, ("num_gpus", "message_size", "latency") + (("backend",) if "backend" in names else ()))
    sel = np.ones(len(ar["latency"]), dtype=bool)
    if "backend" in ar and any("graph" in str(b) for b in ar["backend"]):
        sel = np.array(["graph" in str(b) for b in ar["backend"]])
    allreduce = (ar["num_gpus"][sel], ar["message_size"][sel], ar["latency"][sel].astype(np.float64) * 1e-3)

    # MLA's own kernels (the attention alone: SGLang's and TensorRT-LLM's sets)
    omitted = {}
    mla = None
    paths = [table_file(data_dir, "mla", framework, f"{k}_mla_perf.parquet", version) for k in ("context", "generation")]
    if all(paths):
        for p in paths:
            files[p.name] = str(p.relative_to(root))
        mla = (_mla_rows(paths[0], False), _mla_rows(paths[1], True))
    else:
        omitted["mla"] = f"{PACKAGE} {package_version} has no attention-only MLA tables for {system}/{framework}"

    # the experts' all-to-all (measured within one node)
    alltoall, a2a_used = _alltoall_rows(data_dir, framework, version, _A2A_NODE_GPUS.get(system, 8.0))
    for p in a2a_used:
        files[p.name] = str(p.relative_to(root))
    if alltoall is None:
        omitted["alltoall"] = f"{PACKAGE} {package_version} has no expert all-to-all table for {system}/{framework}"

    # grouped MoE (not every system and framework has it)
    moe, used = _moe_rows(table_files(data_dir, "moe", framework, "moe_perf.parquet", version))
    if used:
        files["moe_perf.parquet"] = [str(p.relative_to(root)) for p in used]
    moe = moe or None
    if moe is None:
        omitted["moe"] = (f"{PACKAGE} {package_version} has no balanced moe_perf rows without expert "
                          f"parallelism for {system}/{framework}")

    provenance = {
        "source": f"{PACKAGE} {package_version} (Apache-2.0), system {system}",
        "files": files,
        "assumptions": ["custom_allreduce message_size counts BF16 elements",
                        "attention tables: window_size 0, head_dim 128, BF16 KV cache",
                        "GEMM: the fastest kernel source per shape; fp8 = per-tensor scaled",
                        "MoE: balanced routing, no expert parallelism (moe_ep_size 1), gated experts, BF16 "
                        "activations; fp8 = the fastest of per-tensor and 128x128 block-scaled; int4 "
                        "(int4_wo) weight-only against the BF16 peak; mxfp4 = w4a8_mxfp4_mxfp8 where "
                        "measured, else w4a16_mxfp4, against the hardware's mxfp4 peak",
                        "MLA: DeepSeek-V3's geometry (q/k 192, v 128, latent 576), BF16 compute, "
                        "num_heads per GPU",
                        "GEMM fp4 = NVFP4 (E2M1, an FP8 scale per 16: 0.5625 bytes per weight)"],
    }
    return tables_from_rows(hardware, SYSTEMS.get(system, hardware.gpu), framework, fw_version, provenance,
                            gemm=gemm, prefill=prefill, decode=decode, allreduce=allreduce, moe=moe,
                            mla=mla, alltoall=alltoall, omitted=omitted or None)


def tables_from_rows(hardware, gpu, framework, framework_version, provenance, *, gemm, prefill, decode,
                     allreduce=None, head_dim=128, omitted=None, moe=None, mla=None, alltoall=None):
    """The kernel-table mapping fitted from measured latencies: what ``simllm kernels import``
    (aiconfigurator-core's rows) and ``simllm profile`` (torch timings) both write.

    Several rows of one shape keep the fastest (the kernel a framework's dispatch would pick).
    Each table is fitted by :func:`fit_gemm`, :func:`fit_prefill`, :func:`fit_decode` and
    :func:`fit_allreduce`, held-out check included (see the module docstring).

    Parameters
    ----------
    hardware : HardwareConfig
        Whose datasheet peaks define the roofline.
    gpu, framework, framework_version : str
        The mapping's labels (``gpu`` names the folder the file belongs in).
    provenance : dict
        The source's own record (``source`` first; ``assumptions`` a list of strings); the date,
        the roofline and the fit report are added here.
    gemm : dict
        ``{dtype: (m, n, k, latency_s)}``, dtype ``bf16`` (required) or ``fp8``; a dtype the
        hardware has no peak for is left out.
    prefill : tuple
        ``(batch, isl, heads, latency_s)`` of causal prefill attention, ``head_dim`` wide.
    decode : tuple
        ``(batch, context, heads, kv_heads, latency_s)`` of one-token decode attention, BF16 KV cache.
    allreduce : tuple or None
        ``(n_gpus, message_elems, latency_s)``, messages counted in BF16 elements; None: no
        collective was measured and the mapping's ``allreduce`` is empty (the cost model then
        prices collectives with the hardware's scalar interconnect figures).
    head_dim : int
    moe : dict or None
        ``{dtype: (tokens, hidden, inter, topk, experts, latency_s)}`` of grouped MoE layers
        (``inter`` per GPU); None: no MoE kernel was measured (routed experts are then priced
        from the GEMM table).
    mla : tuple or None
        ``(context, generation)`` rows of MLA attention for :func:`fit_mla`; None: none measured.
    alltoall : tuple or None
        ``(mode, tokens, hidden, topk, ep, latency_s)`` of one node's expert all-to-all (dispatch +
        combine) for :func:`fit_alltoall`; None: none measured.
    omitted : dict, optional
        Table -> why it was not measured, recorded as the provenance's ``omitted``.

    Returns
    -------
    dict
        The kernel-table JSON mapping (:func:`simllm.config.kernels.tables_from_dict` reads it).

    Raises
    ------
    ConfigError
        For no bf16 GEMM rows, or a table without a usable row.
    """
    report, tables = {}, {}
    for dtype, (m, n, k, latency) in gemm.items():
        peak = hardware.peak_flops(dtype)
        if peak <= 0 or len(latency) == 0:
            continue
        keys, lat = _fastest(np.stack([m, n, k], axis=1).astype(np.int64), np.asarray(latency, dtype=np.float64))
        tables[dtype], report[f"gemm_{dtype}"] = fit_gemm(keys[:, 0], keys[:, 1], keys[:, 2], lat, peak,
                                                          hardware.memory_bandwidth_bytes_per_s, dtypes.BYTES[dtype])
    if "bf16" not in tables:
        raise ConfigError("kernel tables need bf16 GEMM rows, got none")

    batch, isl, heads, latency = prefill
    keys, lat = _fastest(np.stack([batch, isl, heads], axis=1).astype(np.int64), np.asarray(latency, dtype=np.float64))
    attn_prefill, report["attention_prefill"] = fit_prefill(keys[:, 0], keys[:, 1], keys[:, 2], lat,
                                                            hardware.peak_flops("bf16"), head_dim)
    batch, ctx, heads, kv_heads, latency = decode
    keys, lat = _fastest(np.stack([batch, ctx, heads, kv_heads], axis=1).astype(np.int64),
                         np.asarray(latency, dtype=np.float64))
    attn_decode, report["attention_decode"] = fit_decode(keys[:, 0], keys[:, 1].astype(np.float64), keys[:, 2],
                                                         keys[:, 3], lat, hardware.memory_bandwidth_bytes_per_s,
                                                         head_dim)
    moe_tables, moe_shapes = {}, {}
    for dtype, (tokens, hidden, inter, topk, experts, latency) in (moe or {}).items():
        # weight-only kernels compute in BF16 (MXFP4 on Blackwell: W4A8 at the FP8 rate, see peak_flops)
        peak = hardware.peak_flops(dtype) or (hardware.peak_flops("bf16") if dtype in dtypes.WEIGHT_ONLY_DTYPES else 0.0)
        if peak <= 0 or len(latency) == 0:
            continue
        keys, lat = _fastest(np.stack([tokens, hidden, inter, topk, experts], axis=1),
                             np.asarray(latency, dtype=np.float64))
        args = (*keys.T, lat, peak, hardware.memory_bandwidth_bytes_per_s, dtypes.BYTES[dtype])
        moe_tables[dtype], report[f"moe_{dtype}"] = fit_moe(*args)
        moe_shapes[dtype], report[f"moe_shapes_{dtype}"] = fit_moe_shapes(*args)
    mla_tables = {}
    if mla is not None:
        mla_tables, mla_report = fit_mla(*mla, hardware.peak_flops("bf16"), hardware.memory_bandwidth_bytes_per_s)
        report.update(mla_report)
    a2a_curve = None
    if alltoall is not None:
        a2a_curve, report["alltoall"], lines = fit_alltoall(*alltoall, hardware.interconnect_bandwidth_gbps * 1e9)
        provenance = {**provenance, "alltoall_lines": {m: {"latency_us": round(lat0 * 1e6, 2),
                                                           "bandwidth_gbps": round(bw / 1e9, 1)}
                                                       for m, (lat0, bw) in lines.items()}}
    curves = {}
    if allreduce is not None:
        n_gpus, elems, latency = allreduce
        keys, lat = _fastest(np.stack([n_gpus, elems], axis=1).astype(np.int64), np.asarray(latency, dtype=np.float64))
        curves, report["allreduce"] = fit_allreduce(keys[:, 0], keys[:, 1], lat,
                                                    hardware.interconnect_bandwidth_gbps * 1e9)

    record = {k: v for k, v in provenance.items() if k != "assumptions"}
    record["created"] = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    record["roofline"] = {"hardware": hardware.gpu, "bf16_tflops": hardware.bf16_tflops,
                          "fp8_tflops": hardware.fp8_tflops, "memory_bandwidth_gbps": hardware.memory_bandwidth_gbps,
                          "interconnect_bandwidth_gbps": hardware.interconnect_bandwidth_gbps}
    if "assumptions" in provenance:
        record["assumptions"] = list(provenance["assumptions"])
    if omitted:
        record["omitted"] = dict(omitted)
    record["fit"] = report
    return {
        "format": kt.FORMAT,
        "gpu": gpu,
        "framework": framework,
        "framework_version": framework_version,
        "provenance": record,
        "gemm": {d: _rounded(t) for d, t in tables.items()},
        "attention_prefill": _rounded(attn_prefill),
        "attention_decode": _rounded(attn_decode),
        "allreduce": {str(n): _rounded(c) for n, c in sorted(curves.items())},
        **({"moe": {d: _rounded(t) for d, t in moe_tables.items()}} if moe_tables else {}),
        **({"moe_shapes": moe_shapes} if moe_shapes else {}),
        **({"mla": mla_tables} if mla_tables else {}),
        **({"alltoall": a2a_curve.tolist()} if a2a_curve is not None else {}),
    }


def _attention_rows(rows):
    kv = rows["kv_cache_dtype"].astype(str)
    full = rows["window_size"].astype(np.int64) == 0
    return full & (rows["head_dim"].astype(np.int64) == 128) & np.isin(kv, ("bfloat16", "float16", "bf16", "fp16"))


def _rounded(arr):
    """Nested lists with 4 significant digits (the tables' precision is far coarser)."""
    return json.loads(json.dumps(np.vectorize(lambda v: float(f"{v:.4g}"))(arr).tolist()))


def write_tables(data, folder):
    """Write the table mapping to ``<folder>/<framework>.json`` (atomically) and return the path."""
    kt.tables_from_dict(data, "<import>")  # what is written must load
    path = Path(folder) / f"{data['framework']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    return path


def fit_rows(data):
    """``(table, rows, held_out_rows, median_abs_error, clipped)`` rows of a table mapping's fit."""
    out = []
    for name, rep in data["provenance"]["fit"].items():
        out.append((name, rep["rows"], rep["held_out_rows"], rep["held_out_median_abs_error"],
                    rep["clipped_above_roofline"]))
    return out
