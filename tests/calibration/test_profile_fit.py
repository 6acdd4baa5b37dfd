"""``simllm profile``'s fit on made-up timings at known efficiencies: the fit must return those
efficiencies. Needs no PyTorch (torch is made unimportable here), so it runs everywhere."""
import sys

import numpy as np
import pytest

from simllm.calibration.profile_fit import KINDS, ProfileResult, fit_profile, measurement_row, skipped_row
from simllm.config.hardware import load_hardware
from simllm.errors import ConfigError

BASE = load_hardware("h100-sxm")
PEAK = BASE.peak_flops("bf16")  # FLOP/s
BW = BASE.memory_bandwidth_bytes_per_s
LINK = BASE.interconnect_bandwidth_gbps * 1e9
MIB = 2**20


@pytest.fixture(autouse=True)
def no_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # any `import torch` now fails


def gemm(m, n, k, efficiency):
    """A GEMM of M x N x K that ran at ``efficiency`` of the bf16 peak."""
    flops = 2.0 * m * n * k
    return measurement_row("gemm", {"m": m, "n": n, "k": k, "dtype": "bf16"}, flops / (efficiency * PEAK), flops,
                           (m * k + k * n + m * n) * 2, PEAK, BW)


def copy(fraction, nbytes=256 * MIB):
    """A device copy of ``nbytes`` (read + written) at ``fraction`` of the datasheet bandwidth."""
    return measurement_row("copy", {"buffer_bytes": nbytes}, 2.0 * nbytes / (fraction * BW), 0.0, 2.0 * nbytes,
                           PEAK, BW)


def decode(fraction, batch=8, context=4096):
    nbytes = 2.0 * batch * 8 * context * 128 * 2
    shape = {"batch": batch, "context": context, "heads": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bf16"}
    return measurement_row("attention_decode", shape, nbytes / (fraction * BW), 4.0 * 128 * 32 * batch * context,
                           nbytes, PEAK, BW)


def prefill(fraction, context):
    flops = 4.0 * 128 * 32 * context * (context + 1) / 2.0
    shape = {"batch": 1, "context": context, "heads": 32, "kv_heads": 32, "head_dim": 128, "dtype": "bf16"}
    return measurement_row("attention_prefill", shape, flops / (fraction * PEAK), flops, 4.0 * 32 * context * 128 * 2,
                           PEAK, BW)


def launch(us, mode="eager"):
    return measurement_row("launch", {"op": "elementwise", "mode": mode, "kernels": 1000}, us * 1e-6, 1.0, 8.0, PEAK,
                           BW, bound="launch")


def allreduce(size, seconds, gpus=8):
    bus = 2.0 * (gpus - 1) / gpus * size
    return measurement_row("allreduce", {"message_bytes": size, "gpus": gpus}, seconds, 0.0, bus, 1.0, LINK,
                           bound="link")


def synthetic(compute=(0.60, 0.64), small_m=0.05, bandwidth=0.85, launch_us=4.0):
    """GEMMs at M = 1, 16 (``small_m`` of peak) and 1024, 4096 (the two ``compute`` efficiencies
    over two (N, K) shapes), a copy at ``bandwidth``, decode attention near it, prefill, launches."""
    rows = []
    for m in (1, 16, 1024, 4096):
        for (n, k), eff in zip(((4096, 4096), (8192, 8192)), compute):
            rows.append(gemm(m, n, k, small_m if m < 1024 else eff))
    rows += [copy(bandwidth), decode(0.80), decode(0.70, batch=1, context=1024)]
    rows += [prefill(0.30, 512), prefill(0.55, 8192)]
    rows += [launch(launch_us), launch(launch_us * 1.5)]  # median of the two
    return rows


def fit(rows, notes=None):
    notes = [] if notes is None else notes
    return fit_profile(BASE, rows, "bf16", PEAK, notes)


def test_the_fit_returns_the_efficiencies_the_timings_were_made_at():
    notes = []
    out, methods, raw = fit(synthetic(), notes)
    assert out["compute_utilization"] == 0.62  # median of 0.60, 0.64 over M >= 1024, the small M ignored
    assert raw["compute_utilization"] == pytest.approx(0.62, rel=1e-12)
    assert out["gemm_tflops"] == pytest.approx(0.62 * PEAK / 1e12, rel=1e-12)
    assert out["bandwidth_utilization"] == 0.85
    assert out["copy_gbps"] == pytest.approx(0.85 * BW / 1e9, rel=1e-12)
    assert out["decode_bandwidth_fraction"] == pytest.approx(0.80, rel=1e-12)  # the largest KV caches only
    assert out["prefill_compute_fraction"] == pytest.approx(0.55, rel=1e-12)  # the longest context only
    assert out["launch_overhead_us"] == 5.0  # median of 4 and 6 us
    assert out["interconnect_utilization"] is None and out["interconnect_latency_us"] is None
    assert [(p["m"], p["shapes"]) for p in out["gemm_curve"]] == [(1, 2), (16, 2), (1024, 2), (4096, 2)]
    assert [p["compute_fraction"] for p in out["gemm_curve"]] == pytest.approx([0.05, 0.05, 0.62, 0.62], rel=1e-12)
    assert "4 GEMMs with M >= 1024" in methods["compute_utilization"]
    assert "256 MiB device copy" in methods["bandwidth_utilization"]
    assert "launched eagerly" in methods["launch_overhead_us"]
    assert set(methods) == set(raw) == {"compute_utilization", "bandwidth_utilization", "launch_overhead_us"}
    assert notes == []  # decode attention within the cross-check's range of the copy


def test_cuda_graph_launches_are_preferred_to_eager_ones():
    out, methods, _ = fit(synthetic() + [launch(2.0, mode="graph")])
    assert out["launch_overhead_us"] == 2.0 and "CUDA graph" in methods["launch_overhead_us"]


def test_without_large_gemms_the_largest_m_sets_compute_utilization():
    rows = [r for r in synthetic() if not (r["kind"] == "gemm" and r["m"] >= 1024)]
    rows += [gemm(128, 4096, 4096, 0.3), gemm(128, 8192, 8192, 0.4)]
    out, methods, _ = fit(rows)
    assert out["compute_utilization"] == 0.35 and "M >= 128" in methods["compute_utilization"]


def test_fractions_above_one_are_clamped():
    out, methods, raw = fit(synthetic(compute=(1.3, 1.3)))
    assert out["compute_utilization"] == 1.0 and raw["compute_utilization"] == pytest.approx(1.3)
    assert "clamped to 1.0" in methods["compute_utilization"]


def test_allreduce_gives_link_utilization_and_latency():
    small, big, latency_s, util = 8 * 1024, 128 * MIB, 30e-6, 0.7
    bus_big = 2.0 * 7 / 8 * big
    rows = synthetic(launch_us=4.0) + [allreduce(small, latency_s), allreduce(big, latency_s + bus_big / (util * LINK))]
    out, methods, _ = fit(rows)
    assert out["interconnect_utilization"] == util
    assert out["interconnect_latency_us"] == 30.0 - 5.0  # less the launch overhead (median of 4 and 6 us)
    assert "on 8 GPUs" in methods["interconnect_utilization"]


def test_skipped_shapes_are_noted_and_missing_kinds_are_one_line_errors():
    notes = []
    fit(synthetic() + [skipped_row("gemm", "OutOfMemoryError: no room", m=8192, n=8192, k=8192)], notes)
    assert notes and "1 shape(s) skipped (gemm)" in notes[0]
    for kind in ("gemm", "launch"):
        with pytest.raises(ConfigError) as info:
            fit([r for r in synthetic() if r["kind"] != kind])
        assert "\n" not in str(info.value)


def test_measurement_rows_carry_their_fractions():
    row = gemm(4096, 8192, 8192, 0.5)
    assert row["kind"] in KINDS and not row["skipped"] and row["bound"] == "compute"
    assert row["compute_fraction"] == pytest.approx(0.5) and row["achieved_fraction"] == row["compute_fraction"]
    assert row["achieved_tflops"] == pytest.approx(0.5 * PEAK / 1e12)


# ----------------------------------------------------------------------------- kernel tables
# Timings made from closed forms (a fixed latency plus the roofline's time), fitted by the code
# `simllm kernels import` uses too: the tables must give those latencies back.

LATENCY = 20e-6  # s, the fixed part of every made-up kernel


def result_with(table_rows):
    """A ProfileResult of the synthetic scalar rows with ``table_rows`` as its table measurements."""
    out, methods, raw = fit(synthetic())
    return ProfileResult(gpu=BASE.gpu, base_source=BASE.source, device="cuda:0", device_name="Made-up GPU",
                         torch_version="0.0-test", date="2026-01-01", dtype="bf16", gemm_dtype="bf16",
                         attention_dtype="bf16", size="tiny", peak_tflops=PEAK / 1e12,
                         attention_peak_tflops=PEAK / 1e12,
                         memory_bandwidth_gbps=BASE.memory_bandwidth_gbps,
                         interconnect_bandwidth_gbps=BASE.interconnect_bandwidth_gbps, measurements=tuple(synthetic()),
                         methods=methods, raw_fits=raw, table_measurements=tuple(table_rows), **out)


def gemm_at(m, n, k):
    flops = 2.0 * m * n * k
    return measurement_row("gemm", {"m": m, "n": n, "k": k, "dtype": "bf16"}, LATENCY + flops / PEAK, flops,
                           (m * k + k * n + m * n) * 2, PEAK, BW)


def decode_at(batch, context, heads=32, kv_heads=8):
    nbytes = 2.0 * batch * kv_heads * context * 128 * 2 + 2.0 * batch * heads * 128 * 2
    shape = {"batch": batch, "context": context, "heads": heads, "kv_heads": kv_heads, "head_dim": 128, "dtype": "bf16"}
    return measurement_row("attention_decode", shape, LATENCY + nbytes / BW, 4.0 * 128 * heads * batch * context,
                           nbytes, PEAK, BW)


def prefill_at(batch, context, heads=32):
    flops = 4.0 * 128 * heads * batch * context * (context + 1) / 2.0
    shape = {"batch": batch, "context": context, "heads": heads, "kv_heads": heads, "head_dim": 128, "dtype": "bf16"}
    return measurement_row("attention_prefill", shape, LATENCY + flops / PEAK, flops, 0.0, PEAK, BW)


def allreduce_at(size, gpus=2):
    bus = 2.0 * (gpus - 1) / gpus * size
    return measurement_row("allreduce", {"message_bytes": size, "gpus": gpus}, LATENCY + bus / LINK, 0.0, bus, 1.0,
                           LINK, bound="link")


NK_FIT = [(n, k) for n in (1024, 2048, 4096) for k in (1024, 2048, 4096)]
NK_HELD = [(3072, 4096), (4096, 1536)]


def closed_form_rows(with_allreduce=True):
    rows = [gemm_at(2**i, n, k) for i in range(16) for n, k in NK_FIT]
    rows += [gemm_at(2**i, n, k) for i in range(0, 16, 3) for n, k in NK_HELD]
    rows += [prefill_at(b, s) for b in (1, 4) for s in (256, 1024, 4096)] + [prefill_at(1, 1024, heads=40)]
    rows += [decode_at(b, c) for b in (1, 8, 64) for c in (256, 1024, 4096, 16384)] + [decode_at(8, 4096, heads=40)]
    if with_allreduce:
        rows += [allreduce_at(2**p) for p in range(12, 28)]
    else:
        rows.append(skipped_row("allreduce", "1 CUDA GPU visible; all-reduce needs two or more"))
    return rows


def test_kernel_tables_give_the_closed_form_latencies_back():
    from simllm.calibration import kernels
    from simllm.calibration.profile_fit import kernel_tables
    from simllm.config import kernels as kt

    data = kernel_tables(result_with(closed_form_rows()), BASE, "sglang")
    tables = kt.tables_from_dict(data)  # what simllm run reads
    assert (tables.gpu, tables.framework, tables.framework_version) == ("h100-sxm", "sglang", "torch 0.0-test")
    prov = data["provenance"]
    assert prov["source"] == "simllm profile" and prov["torch_version"] == "0.0-test"
    assert prov["device_name"] == "Made-up GPU" and prov["rows_measured"] == len(closed_form_rows())
    assert "omitted" not in prov
    fit_report = prov["fit"]
    assert fit_report["gemm_bf16"]["rows"] == 16 * len(NK_FIT)
    assert fit_report["gemm_bf16"]["held_out_rows"] == 6 * len(NK_HELD)
    assert (fit_report["attention_prefill"]["held_out_rows"], fit_report["attention_decode"]["held_out_rows"]) == (1, 1)
    assert fit_report["allreduce"]["held_out_rows"] == 8  # the odd log2 message sizes

    # GEMMs: latency = a + flops / peak within 1% at every measured shape and, between the
    # measured M, as the cost kernel reads the table (seconds at M = 2**i, linear in M).
    table = tables.gemm_table("bf16")

    def seconds(m, n, k):
        return float(kernels.gemm_roofline_s(m, n, k, PEAK, BW, 2.0) / kt.gemm_efficiency(table, m, n, k))
    for n, k in NK_FIT:
        for m in [2**i for i in range(16)]:
            assert seconds(m, n, k) == pytest.approx(LATENCY + 2.0 * m * n * k / PEAK, rel=0.01), (m, n, k)
        for m in (3, 48, 700, 20000):
            lo = 2 ** int(np.log2(m))
            got = np.interp(m, [lo, 2 * lo], [seconds(lo, n, k), seconds(2 * lo, n, k)])
            assert got == pytest.approx(LATENCY + 2.0 * m * n * k / PEAK, rel=0.01), (m, n, k)
    # The held-out error is the importer's: median |predicted / measured - 1| of the held-out GEMMs.
    held = [r for r in closed_form_rows() if r["kind"] == "gemm" and (r["n"], r["k"]) in NK_HELD]
    m, n, k = (np.array([r[x] for r in held]) for x in ("m", "n", "k"))
    pred = kernels.gemm_roofline_s(m, n, k, PEAK, BW, 2.0) / kt.gemm_efficiency(table, m, n, k)
    err = float(np.median(np.abs(pred / np.array([r["seconds"] for r in held]) - 1.0)))
    # (the fit checks its unrounded table; the file holds 4 significant digits)
    assert fit_report["gemm_bf16"]["held_out_median_abs_error"] == pytest.approx(err, rel=1e-3)
    assert err < 0.05

    # Decode attention (rows x KV heads and contexts on the grid) and 2-GPU all-reduce likewise.
    for r in closed_form_rows():
        if r["kind"] == "attention_decode" and r["heads"] == 32:
            eff = kt.decode_efficiency(tables.attention_decode, r["batch"] * 8, r["context"])
            assert r["bytes"] / BW / float(eff) == pytest.approx(r["seconds"], rel=0.01)
        if r["kind"] == "allreduce":
            got = kt.link_seconds(tables.allreduce_curve(2), r["bytes"], LINK)
            assert float(got) == pytest.approx(r["seconds"], rel=0.01)


def test_kernel_tables_without_a_collective_omit_it_and_say_why():
    from types import SimpleNamespace

    from simllm.calibration.profile_fit import kernel_tables
    from simllm.config import kernels as kt
    from simcore.cost import link_seconds_nb
    from simllm.sim.efficiency import scalar_link_seconds

    data = kernel_tables(result_with(closed_form_rows(with_allreduce=False)), BASE)
    assert data["framework"] == "vllm" and data["allreduce"] == {}
    assert "1 CUDA GPU visible" in data["provenance"]["omitted"]["allreduce"]
    assert "allreduce" not in data["provenance"]["fit"]
    assert kt.tables_from_dict(data).allreduce_curve(8) is None
    # Collectives are then priced as without tables: latency + launch + bytes / (bandwidth x utilisation).
    p = SimpleNamespace(link_latency_s=8e-6, launch_s=4e-6, link_bw=LINK, eff_link=0.8)
    seconds = scalar_link_seconds(p)
    nbytes = kt.log2_grid(7, len(seconds))
    assert seconds == pytest.approx(12e-6 + nbytes / (LINK * 0.8), rel=1e-12)
    # ... and between the points, as the kernel reads the curve (linear in bytes).
    packed = np.zeros(kt.codes.EFF_SIZE)
    packed[kt.codes.EFF_LINK:kt.codes.EFF_LINK + len(seconds)] = seconds
    for x in (200.0, 3e4, 5e6, 7e8):
        assert link_seconds_nb(packed, x) == pytest.approx(12e-6 + x / (LINK * 0.8), rel=1e-12)


def test_kernel_tables_need_table_measurements_and_a_known_framework():
    from simllm.calibration.profile_fit import kernel_tables

    with pytest.raises(ConfigError, match="without --no-tables"):
        kernel_tables(result_with([]), BASE)
    with pytest.raises(ConfigError, match="vllm, sglang, trtllm"):
        kernel_tables(result_with(closed_form_rows()), BASE, "tgi")
