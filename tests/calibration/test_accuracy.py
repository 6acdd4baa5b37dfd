"""Accuracy of the calibrated h100-sxm and h200-sxm presets on the measured dense, aggregated
rows of ../shared/data/silicon_sample.csv (Llama-3.1-8B, Llama-3.1-70B, Qwen3-32B; vLLM,
TensorRT-LLM, SGLang): in sample, and across systems (each GPU predicted with the other GPU's
fitted factors on its own datasheet figures). The figures are printed at the end of the test
run and are those of the README's Accuracy section. Skipped when the shared data is absent."""
import dataclasses
import re

import pytest

import simllm
from helpers import REPORT, SHARED_DATA
from simllm.calibration import validate as accuracy
from simllm.config.hardware import FACTOR_KEYS
from simllm.formats.measurements import load_measurements

SHARED = SHARED_DATA / "silicon_sample.csv"
DENSE = re.compile(r"Llama-3\.1-(8|70)B|Qwen3-32B")
SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm"}
OTHER = {"h100-sxm": "h200-sxm", "h200-sxm": "h100-sxm"}

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SHARED.is_file(), reason=f"{SHARED} is absent")]


def _factors_of(source):
    """The calibrated GPU factors of preset ``source`` (framework costs are the frameworks' own)."""
    hw = simllm.load_hardware(source)
    return {k: getattr(hw, k) for k in FACTOR_KEYS}


@pytest.fixture(scope="module")
def results():
    rows = [m for m in load_measurements([SHARED]) if m.mode == "agg" and DENSE.search(m.model)
            and m.hardware in SYSTEMS]
    points = accuracy.with_bounds(accuracy.resolve(rows))
    own = accuracy.predict_points(points)
    cross_hw = {name: dataclasses.replace(simllm.load_hardware(name), **_factors_of(OTHER[name])) for name in OTHER}
    cross = accuracy.predict_points(points, cross_hw.get)
    return own, cross


def _table(title, points):
    summary = accuracy.error_summary(points)
    by = accuracy.error_summary_by(points, lambda p: p.measurement.backend)
    lines = [title, f"  all      TTFT {summary['ttft']['median_abs_pct_error']:5.1f}%  "
                    f"TPOT {summary['tpot']['median_abs_pct_error']:5.1f}%  ({summary['tpot']['points']} points, "
                    f"{summary['tpot']['below_bound']} faster than the peaks left out)"]
    for name, g in by.items():
        lines.append(f"  {name:<8} TTFT {g['ttft']['median_abs_pct_error']:5.1f}%  TPOT {g['tpot']['median_abs_pct_error']:5.1f}%"
                     f"  ({g['tpot']['points']} points)")
    print("\n".join(lines))
    REPORT.extend(lines)
    return summary, by


def test_calibrated_presets_in_sample_and_across_systems(results):
    own, cross = results
    assert len(own) == 778 and sum(p.predicted is not None for p in own) == 778
    s_own, by_own = _table("in sample (each GPU's own calibrated preset):", own)
    s_cross, by_cross = _table("across systems (H100 <-> H200, the other GPU's factors):", cross)
    # vLLM, the scheduler simllm simulates: the targets.
    assert by_own["vllm"]["tpot"]["median_abs_pct_error"] <= 7.0
    assert by_own["vllm"]["ttft"]["median_abs_pct_error"] <= 15.0
    assert by_cross["vllm"]["tpot"]["median_abs_pct_error"] <= 10.0
    assert by_cross["vllm"]["ttft"]["median_abs_pct_error"] <= 20.0
    # All frameworks together: the published figures must not get worse. Since the GPU presets
    # hold GPU physics only (no per-framework GPU factors, no fitted 45-120 ms "frontend" that
    # was the benchmark clients' time), SGLang and TensorRT-LLM rows are predicted with vLLM's
    # GPU factors and their framework profiles' few ms: TTFT 29% / TPOT 10% in sample (was 17.5 /
    # 7.5 with the absorbed factors). What their clients add belongs to the measurement
    # (Measurement.client_overhead_ms), which silicon_sample.csv does not document.
    assert s_own["tpot"]["median_abs_pct_error"] <= 11.0
    assert s_own["ttft"]["median_abs_pct_error"] <= 30.0
    assert s_cross["tpot"]["median_abs_pct_error"] <= 10.0  # the cross-system TPOT target
    assert s_cross["ttft"]["median_abs_pct_error"] <= 34.0


def test_same_model_across_systems(results):
    """Llama-3.1-70B on vLLM was measured on both GPUs: the cleanest cross-system test."""
    _, cross = results
    pts = [p for p in cross if p.model == "llama-3.1-70b" and p.measurement.backend == "vllm"]
    s = accuracy.error_summary(pts)
    line = (f"Llama-3.1-70B vLLM across systems: TTFT {s['ttft']['median_abs_pct_error']:.1f}%, "
            f"TPOT {s['tpot']['median_abs_pct_error']:.1f}% ({s['tpot']['points']} points)")
    print(line)
    REPORT.append(line)
    assert s["tpot"]["median_abs_pct_error"] <= 10.0 and s["ttft"]["median_abs_pct_error"] <= 20.0
