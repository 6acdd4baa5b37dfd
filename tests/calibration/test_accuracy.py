"""Accuracy on the measured dense, aggregated rows of ../shared/data/silicon_sample.csv
(Llama-3.1-8B, Llama-3.1-70B, Qwen3-32B on H100 and H200; vLLM, TensorRT-LLM, SGLang), with the
shipped kernel tables (the GPU's shape-aware efficiency, measured kernels) and framework profiles
(sourced priors, not fitted), and each backend's benchmark-client overhead the only quantity
fitted to these rows (what the rows' harness adds to TTFT; ``formats.aiconfigurator``):

- in sample: the client overhead fitted on all rows of the backend;
- leave one system out: fitted on the H100 rows, H200 predicted, and the other way round;
- leave one model out: fitted on the backend's other models, the third predicted.

The GPU side has nothing fitted to these rows at all, so every TPOT figure is out of sample.
The figures are printed at the end of the run and are the tables of docs/accuracy.md. Skipped
when the shared data is absent."""
import dataclasses
import re

import pytest

from helpers import REPORT, SHARED_DATA, silicon_points
from simllm.calibration import validate as accuracy
from simllm.calibration.fit import fit_client_overhead
from simllm.formats.aiconfigurator import SILICON_CLIENT_OVERHEAD_MS
from simllm.formats.measurements import load_measurements

SHARED = SHARED_DATA / "silicon_sample.csv"
DENSE = re.compile(r"Llama-3\.1-(8|70)B|Qwen3-32B")
SYSTEMS = ("h100_sxm", "h200_sxm")
FRAMEWORKS = ("vllm", "sglang", "trtllm")

# heavy: every row of the silicon CSV (CI's second step), simulated once a run (helpers.silicon_points,
# shared with the accuracy record's test)
pytestmark = [pytest.mark.heavy, pytest.mark.slow, pytest.mark.skipif(not SHARED.is_file(), reason=f"{SHARED} is absent")]


def predicted(tmp_path_factory, keep):
    """The predicted points of the measurements ``keep`` selects, in the file's order: those
    ``simllm validate`` predicts for the whole file (what predicting them alone gives: each point
    is simulated on its own)."""
    return [p for p in silicon_points(tmp_path_factory)[1] if keep(p.measurement) and p.predicted]


def with_client(points, client_ms):
    """``points`` as if their measurements declared ``client_ms`` (it only adds to TTFT and E2E)."""
    out = []
    for p in points:
        m = p.measurement
        d = dict(p.predicted)
        d["ttft"] += client_ms - m.client_overhead_ms
        d["e2el"] += client_ms - m.client_overhead_ms
        out.append(dataclasses.replace(p, predicted=d, measurement=dataclasses.replace(m, client_overhead_ms=client_ms)))
    return out


def held_out(points, key):
    """Each group of ``key`` predicted with the client overhead fitted on the others."""
    out = []
    for value in sorted({key(p) for p in points}):
        train = [p for p in points if key(p) != value]
        if train:
            out += with_client([p for p in points if key(p) == value], fit_client_overhead(train)[0])
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    points = predicted(tmp_path_factory, lambda m: m.mode == "agg" and DENSE.search(m.model) and m.hardware in SYSTEMS)
    by_fw = {fw: [p for p in points if accuracy.framework_of(p.measurement) == fw] for fw in FRAMEWORKS}
    return {
        "shipped": points,
        "in sample": sum((with_client(ps, fit_client_overhead(ps)[0]) for ps in by_fw.values()), []),
        "leave one system out": sum((held_out(ps, lambda p: p.hardware) for ps in by_fw.values()), []),
        "leave one model out": sum((held_out(ps, lambda p: p.model) for ps in by_fw.values()), []),
    }


def _table(results):
    lines = ["accuracy on silicon_sample.csv dense aggregated H100/H200 rows, median |error| TTFT / TPOT:"]
    out = {}
    for name in ("in sample", "leave one system out", "leave one model out"):
        pts = results[name]
        s = accuracy.error_summary(pts)
        by = accuracy.error_summary_by(pts, lambda p: p.measurement.backend)
        out[name] = (s, by)
        cells = "  ".join(f"{fw} {by[fw]['ttft']['median_abs_pct_error']:4.1f}/{by[fw]['tpot']['median_abs_pct_error']:4.1f}"
                          for fw in FRAMEWORKS)
        lines.append(f"  {name:<21} all {s['ttft']['median_abs_pct_error']:4.1f}/{s['tpot']['median_abs_pct_error']:4.1f}"
                     f" ({s['tpot']['points']} points, {s['tpot']['below_bound']} faster than the peaks left out)  {cells}")
    print("\n".join(lines))
    REPORT.extend(lines)
    return out


def test_accuracy_in_sample_and_held_out(results):
    assert len(results["shipped"]) == 778
    t = _table(results)
    # The shipped client overheads are the in-sample fit (to the 0.1 ms they are declared with).
    for fw in FRAMEWORKS:
        ps = [p for p in results["shipped"] if accuracy.framework_of(p.measurement) == fw]
        assert fit_client_overhead(ps)[0] == pytest.approx(SILICON_CLIENT_OVERHEAD_MS[fw], abs=0.1)
    s, by = t["in sample"]
    assert s["tpot"]["median_abs_pct_error"] <= 8.5 and s["ttft"]["median_abs_pct_error"] <= 21.5
    assert by["vllm"]["tpot"]["median_abs_pct_error"] <= 8.5 and by["vllm"]["ttft"]["median_abs_pct_error"] <= 16.5
    # The targets are TPOT <= 7% / TTFT <= 15% across systems and <= 10% / <= 20% across
    # models: TPOT across models and all four for SGLang are met; the rest are missed (docs/accuracy.md says by how much
    # and why). These bounds hold today's figures so that a change that makes them worse fails.
    s, by = t["leave one system out"]
    assert s["tpot"]["median_abs_pct_error"] <= 8.5 and s["ttft"]["median_abs_pct_error"] <= 27.5
    # SGLang meets the targets across systems and across models
    assert by["sglang"]["tpot"]["median_abs_pct_error"] <= 7.0 and by["sglang"]["ttft"]["median_abs_pct_error"] <= 15.0
    assert by["vllm"]["ttft"]["median_abs_pct_error"] <= 19.5
    s, by = t["leave one model out"]
    assert s["tpot"]["median_abs_pct_error"] <= 10.0 and s["ttft"]["median_abs_pct_error"] <= 25.0
    assert by["sglang"]["tpot"]["median_abs_pct_error"] <= 10.0 and by["sglang"]["ttft"]["median_abs_pct_error"] <= 20.0


def test_same_model_across_systems(results):
    """Llama-3.1-70B on vLLM was measured on both GPUs: the cleanest cross-system test."""
    pts = [p for p in results["leave one system out"] if p.model == "llama-3.1-70b" and p.measurement.backend == "vllm"]
    s = accuracy.error_summary(pts)
    line = (f"Llama-3.1-70B vLLM across systems: TTFT {s['ttft']['median_abs_pct_error']:.1f}%, "
            f"TPOT {s['tpot']['median_abs_pct_error']:.1f}% ({s['tpot']['points']} points)")
    print(line)
    REPORT.append(line)
    assert s["tpot"]["median_abs_pct_error"] <= 10.0 and s["ttft"]["median_abs_pct_error"] <= 20.0


def gpu_family(p):
    return "Hopper" if p.hardware.startswith("h") else "Blackwell"


def family_summary(label, group):
    """Median errors of ``group`` overall and per (GPU family, framework), printed and added to the
    report; returns ``(summary, by (family, backend))``."""
    s = accuracy.error_summary(group)
    by = accuracy.error_summary_by(group, lambda p: (gpu_family(p), p.measurement.backend))
    lines = [f"{label}, out of sample, median |error| TTFT / TPOT: all "
             f"{s['ttft']['median_abs_pct_error']:.1f}/{s['tpot']['median_abs_pct_error']:.1f} "
             f"({s['tpot']['points']} points)"]
    lines += [f"  {fam:<9} {fw:<6} {g['ttft']['median_abs_pct_error']:5.1f}/{g['tpot']['median_abs_pct_error']:5.1f}"
              f" ({g['tpot']['points']})" for (fam, fw), g in by.items()]
    print("\n".join(lines))
    REPORT.extend(lines)
    return s, by


def test_moe_rows_out_of_sample(tmp_path_factory):
    """The MoE rows simllm can express (up to eight nodes since links between nodes are modelled): DeepSeek-V3/R1,
    MiniMax-M2.5, Qwen3-235B-A22B, Kimi-K2.5 on Hopper and Blackwell, without and with expert parallelism /
    attention data parallelism. Nothing is fitted to them (the client overheads are the dense
    rows'). The MoE issue's targets (TPOT <= 10%, TTFT <= 20% per GPU family and framework) are
    missed except Blackwell vLLM's TPOT without EP (docs/accuracy.md says why); these bounds hold
    today's figures so that a change that makes them worse fails."""
    import simllm
    points = predicted(tmp_path_factory, lambda m: m.mode == "agg"
                       and re.search(r"DeepSeek-(V3|R1)$|MiniMax-M2\.5|Qwen3-235B|Kimi-K2", m.model))
    assert all(simllm.load_model(p.model).is_moe for p in points)

    def parallel(p):
        return "EP/DP" if p.measurement.ep > 1 or p.measurement.dp > 1 else "TP"

    out = {kind: family_summary(f"MoE rows ({kind})", [p for p in points if parallel(p) == kind])
           for kind in ("TP", "EP/DP")}
    s, by = out["TP"]
    assert s["tpot"]["points"] >= 800
    assert s["ttft"]["median_abs_pct_error"] <= 26.5 and s["tpot"]["median_abs_pct_error"] <= 20.0
    assert by[("Blackwell", "vllm")]["tpot"]["median_abs_pct_error"] <= 10.1  # 9.9% before the FP8 GEMM share
    assert by[("Hopper", "vllm")]["tpot"]["median_abs_pct_error"] <= 14.5
    s, by = out["EP/DP"]
    assert s["tpot"]["points"] >= 250
    assert s["ttft"]["median_abs_pct_error"] <= 32.0 and s["tpot"]["median_abs_pct_error"] <= 35.0


def test_windowed_and_linear_attention_rows_out_of_sample(tmp_path_factory):
    """gpt-oss-120b (sliding-window layers, MXFP4 experts, BF16 attention) and Qwen3.5-397B-A17B
    (Gated DeltaNet layers) on one node, nothing fitted to them. The bounds hold today's figures
    so that a change that makes them worse fails (docs/accuracy.md)."""
    points = predicted(tmp_path_factory, lambda m: m.mode == "agg" and re.search(r"gpt-oss-120b|Qwen3\.5-397B", m.model))
    out = {name: family_summary(f"{name} rows", [p for p in points if p.model == name])
           for name in ("gpt-oss-120b", "qwen3.5-397b-a17b")}
    s, by = out["gpt-oss-120b"]
    assert s["tpot"]["points"] >= 350 and s["tpot"]["median_abs_pct_error"] <= 25.0
    assert by[("Hopper", "vllm")]["tpot"]["median_abs_pct_error"] <= 20.0
    s, by = out["qwen3.5-397b-a17b"]
    assert s["tpot"]["points"] >= 250 and s["tpot"]["median_abs_pct_error"] <= 25.0


def test_disaggregated_rows_out_of_sample(tmp_path_factory):
    """The disaggregated rows that record their pools (prefill and decode worker counts, each
    worker's TP / attention DP / EP, the prefill batch): DeepSeek-V3/R1, Kimi-K2.5, Qwen3-32B,
    Qwen3-235B-A22B over TensorRT-LLM, SGLang and vLLM (Dynamo), simulated as two pools in one
    event loop with the KV caches moving between them. Nothing is fitted to them. TPOT is the
    decode pool's and comes within a median ~15%; TTFT is under-predicted (median ~-43%): many
    rows' measured TTFTs are several times what their prefill and transfer take even at a few
    clients (docs/accuracy.md says so). The bounds hold today's figures so that a change that
    makes them worse fails."""
    rows = [m for m in load_measurements([SHARED]) if m.mode == "disagg"]
    resolved = accuracy.resolve(rows)  # no simulation: which rows can be simulated, and why not
    usable = {p.measurement.where for p in resolved if not p.reason}
    assert len(usable) >= 270  # the rows with worker counts; the other 1,328 do not record their pools
    assert all("worker counts" in p.reason for p in resolved if p.reason)
    points = predicted(tmp_path_factory, lambda m: m.mode == "disagg" and m.where in usable)
    s, by = family_summary("disaggregated rows", points)
    assert s["tpot"]["points"] >= 240
    assert s["tpot"]["median_abs_pct_error"] <= 17.0 and s["ttft"]["median_abs_pct_error"] <= 47.0
