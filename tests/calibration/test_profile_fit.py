"""``simllm profile``'s fit on made-up timings at known efficiencies: the fit must return those
efficiencies. Needs no PyTorch (torch is made unimportable here), so it runs everywhere."""
import sys

import pytest

from simllm.calibration.profile_fit import KINDS, fit_profile, measurement_row, skipped_row
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
