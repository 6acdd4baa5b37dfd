"""Error bands (simllm.calibration.bands): the band from a record equals quantiles computed by
hand, the nearest cases are chosen as documented, out-of-domain cases say why, and the shipped
record's bands hold about their nominal share of held-out measurements."""
import math

import numpy as np
import pytest

from simllm.calibration import bands as B
from simllm.calibration.record import load_record, model_family, record_from_dict


def point(ratio=1.0, *, model="llama-3.1-8b", gpu="h100-sxm", framework="vllm", tp=1, isl=1024, osl=128,
          concurrency=16, below_bound=False, measured=100.0, dp=1):
    """A record point whose predicted / measured TTFT, TPOT and throughput are ``ratio``."""
    return {"model": model, "family": model_family(model), "gpu": gpu, "framework": framework,
            "precision": "native", "tp": tp, "dp": dp, "isl": isl, "osl": osl, "concurrency": concurrency,
            "closed_loop": True, "below_bound": below_bound,
            "measured_ttft_ms": measured, "predicted_ttft_ms": measured * ratio,
            "measured_tpot_ms": measured / 10, "predicted_tpot_ms": measured / 10 * ratio,
            "measured_output_throughput": measured * 5, "predicted_output_throughput": measured * 5 * ratio}


def record(points):
    return record_from_dict({"provenance": {"date": "2025-01-01"}, "points": points}, "test record")


def features(**kw):
    base = {"model": "Llama-3.1-8B", "gpu": "h100-sxm", "framework": "vllm", "tp": 1, "isl": 1024.0, "osl": 128.0,
            "concurrency": 16.0}
    base.update(kw)
    return B.Features(**base)


def hand_quantile(values, q):
    """numpy's default ('linear') quantile, written out: position q x (n - 1) in the sorted values."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def test_band_equals_hand_computed_quantiles():
    ratios = [0.8, 0.9, 1.0, 1.1, 1.25, 1.4]
    rec = record([point(r) for r in ratios])
    logs = [math.log(r) for r in ratios]
    for coverage in (0.5, 0.8):
        band = B.error_band(features(), "ttft_ms", rec, coverage, value=200.0)
        q_lo, q_hi = hand_quantile(logs, (1 - coverage) / 2), hand_quantile(logs, (1 + coverage) / 2)
        # measured = predicted / ratio: a prediction that ran high means the truth is lower
        assert band.lo == pytest.approx(200.0 * math.exp(-q_hi), rel=1e-12)
        assert band.hi == pytest.approx(200.0 * math.exp(-q_lo), rel=1e-12)
        assert band.points == len(ratios) and band.coverage == coverage and band.in_domain
    # coverage 0.5 over six sorted points: the upper quantile falls at position 3.75, between 1.1 and 1.25
    band = B.error_band(features(), "mean_tpot_ms", rec, 0.5)
    assert band.lo == pytest.approx(math.exp(-(math.log(1.1) + 0.75 * (math.log(1.25) - math.log(1.1)))), rel=1e-12)


def test_summary_keys_map_to_record_metrics():
    rec = record([point(r) for r in (0.5, 1.0, 2.0)])
    for key, metric in B.METRIC_OF.items():
        a = B.error_band(features(), key, rec, value=10.0)
        b = B.error_band(features(), metric, rec, value=10.0)
        assert (a.lo, a.hi) == (b.lo, b.hi)


def test_nearest_prefers_the_same_gpu_family_and_framework():
    rec = record([
        point(1.0, gpu="h200-sxm"),                      # 0: other GPU, same workload: 3
        point(1.0, isl=4096),                            # 1: two doublings of input: 2
        point(1.0, model="qwen3-32b"),                   # 2: other family: 3
        point(1.0, framework="trtllm"),                  # 3: other framework: 2 (ties with 1, later)
        point(1.0, isl=1024, osl=256, concurrency=32),   # 4: sqrt(2) doublings
        point(1.0, tp=8),                                # 5: three doublings of TP: 3
        point(1.0),                                      # 6: the same case: 0
    ])
    d = B.distances(features(), rec)
    np.testing.assert_allclose(d, [3.0, 2.0, 3.0, 2.0, math.sqrt(2), 3.0, 0.0])
    assert list(B.nearest(features(), rec, "ttft_ms", k=4)) == [6, 4, 1, 3]
    assert len(B.nearest(features(), rec, "ttft_ms", k=100)) == 7


def test_below_bound_and_missing_points_are_left_out():
    pts = [point(1.0), point(3.0, below_bound=True), point(2.0)]
    pts[2]["measured_tpot_ms"] = None
    rec = record(pts)
    assert list(B.nearest(features(), rec, "ttft_ms")) == [0, 2]
    assert list(B.nearest(features(), rec, "tpot_ms")) == [0]
    assert B.error_band(features(), "tpot_ms", rec).points == 1
    empty = record([point(1.0, below_bound=True)])
    assert B.error_band(features(), "ttft_ms", empty) is None


def test_in_domain_case_has_no_reasons():
    rec = record([point(1.0, isl=512, tp=1, concurrency=4), point(1.0, isl=8192, tp=8, concurrency=256)])
    assert B.domain_reasons(features(isl=2048, tp=2, concurrency=64), rec) == ()
    assert B.error_band(features(), "ttft_ms", rec).in_domain


def test_out_of_domain_reasons():
    rec = record([point(1.0, isl=1024, osl=128, concurrency=4, tp=1),
                  point(1.0, isl=8192, osl=1024, concurrency=256, tp=8, gpu="h200-sxm", framework="sglang"),
                  point(1.0, model="llama-3.1-70b", framework="trtllm")])
    reasons = B.domain_reasons(features(gpu="l40s", model="Qwen2.5-7B", isl=65536, framework="tgi"), rec)
    assert "GPU l40s was never calibrated (calibrated: h100-sxm, h200-sxm)" in reasons
    assert "framework tgi was never calibrated" in reasons
    assert "model family qwen2.5 was never calibrated (calibrated: llama-3.1)" in reasons
    assert "input length 64k above the calibrated 8k" in reasons
    reasons = B.domain_reasons(features(gpu="h200-sxm", framework="vllm"), rec)
    assert reasons[0] == "framework vllm was never calibrated on h200-sxm (calibrated there: sglang)"
    reasons = B.domain_reasons(features(model="Llama-3.1-405B", osl=2048, concurrency=2, tp=16, dp=2), rec)
    assert reasons == ("model Llama-3.1-405B was never calibrated itself (its family's llama-3.1-70b, llama-3.1-8b were)",
                       "output length 2k above the calibrated 1k", "concurrency 2 below the calibrated 4",
                       "TP 16 above the calibrated 8",
                       "data parallelism (DP=2) was never calibrated: every calibrated point is one engine")
    reasons = B.domain_reasons(features(framework="trtllm"), rec)  # 8B never with trtllm on h100
    assert reasons == ("Llama-3.1-8B was never calibrated with trtllm on h100-sxm (its band borrows from other "
                       "models, frameworks or GPUs)",)
    band = B.error_band(features(gpu="l40s"), "ttft_ms", rec)
    assert not band.in_domain and band.reasons[0].startswith("GPU l40s")


def test_model_family():
    assert model_family("llama-3.1-70b") == model_family("Llama-3.1-8B") == "llama-3.1"
    assert model_family("qwen3-32b") == model_family("Qwen/Qwen3-235B-A22B") == "qwen3"
    assert model_family("Mixtral-8x7B-v0.1") == "mixtral"
    assert model_family("qwen2.5-0.5b") == "qwen2.5"
    assert model_family("gpt-j-6b") == "gpt-j"


def _summary(**kw):
    s = {"completed": 10, "total_input_tokens": 10240, "total_output_tokens": 1280, "model": "Llama-3.1-8B",
         "hardware": "h100-sxm", "tensor_parallel_size": 2, "data_parallel_size": 1, "max_concurrency": 8,
         "request_rate": "inf", "request_throughput": 4.0, "mean_e2el_ms": 500.0, "mean_ttft_ms": 50.0,
         "p99_ttft_ms": 80.0, "mean_tpot_ms": 5.0, "p99_tpot_ms": 6.0, "output_throughput": 512.0,
         "total_token_throughput": 4608.0}
    s.update(kw)
    return s


def test_features_of_a_summary():
    f = B.features_of(_summary(), "sglang")
    assert f == B.Features("Llama-3.1-8B", "h100-sxm", "sglang", 2, 1024.0, 128.0, 8.0, 1)
    f = B.features_of(_summary(max_concurrency=None, request_rate=4.0))
    assert f.concurrency == pytest.approx(2.0)  # Little's law: 4 req/s x 0.5 s in flight
    assert B.features_of(_summary(completed=0)) is None


def test_summary_bands_and_open_loops():
    rec = record([point(r) for r in (0.9, 1.0, 1.1)])
    bands, reasons = B.summary_bands(_summary(tensor_parallel_size=1, max_concurrency=16), "vllm", rec)
    assert set(bands) == {"mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "output_throughput",
                          "total_token_throughput", "request_throughput"}
    assert reasons == () and bands["p99_ttft_ms"].value == 80.0
    assert bands["mean_ttft_ms"].lo < 50.0 < bands["mean_ttft_ms"].hi
    bands, _ = B.summary_bands(_summary(max_concurrency=None, request_rate=4.0, p99_ttft_ms=math.nan), "vllm", rec)
    assert set(bands) == {"mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms"}  # paced by arrivals; NaN skipped
    assert B.band_dict(bands)["mean_tpot_ms"] == [bands["mean_tpot_ms"].lo, bands["mean_tpot_ms"].hi]


@pytest.mark.heavy  # leave-one-out over the record's thousands of points: a few seconds (40 before the record's terms were computed once)
def test_shipped_record_loads_and_its_bands_hold_their_coverage():
    rec = load_record()
    assert len(rec) > 100 and rec.provenance["points"] == len(rec)
    assert {"h100-sxm", "h200-sxm"} <= set(rec["gpu"])
    for metric in ("ttft_ms", "tpot_ms", "output_throughput"):
        covered, width = B.leave_one_out_coverage(rec, metric)
        assert 0.75 <= covered <= 0.95, (metric, covered)  # nominal 0.8
        assert 1.0 < width < 3.0
