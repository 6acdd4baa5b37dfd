"""``simllm calibrate``: the fit recovers factors that generated the data, writes a profile that
keeps the datasheet figures, and changes efficiencies, never the physics."""
import dataclasses
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml

import simllm
import simllm.cli
from simllm.calibration import fit as calibrate
from simllm.calibration import validate as accuracy
from simllm.formats.measurements import Measurement

pytestmark = pytest.mark.slow  # dozens of simulation passes: not for the NUMBA_DISABLE_JIT run


def _scalar_preset(name):
    """A copy of preset ``name`` without its kernel tables: the scalar roofline, whose GPU factors
    (compute and bandwidth utilisation) shape every operator, so a fit can recover them."""
    source = simllm.load_hardware(name).source
    text = "".join(line for line in open(source, encoding="utf-8") if not line.strip().startswith("kernel_tables:"))
    path = Path(tempfile.mkdtemp(prefix="simllm-test-fit-")) / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


H100 = _scalar_preset("h100-sxm")
# Clients in step (no jitter): the synthetic world is deterministic and smooth in the factors, so
# the fit can recover them to a few per cent (random client delays make its objective ragged).
SHAPE = accuracy.BenchmarkShape(client_jitter_ms=0.0)

# GPU factors and framework quantities (the latter set on the truth as the hardware file's explicit
# overrides, which the fit starts from the vllm profile's values to recover).
TRUE = {"compute_utilization": 0.55, "bandwidth_utilization": 0.72, "launch_overhead_us": 3.5,
        "frontend_latency_ms": 6.0}
# (tp, input, output, concurrency): decode-bound, prefill-bound and in between, so every
# factor shows in some point.
CASES = [(1, 128, 64, 1), (1, 2048, 16, 1), (1, 4096, 8, 4), (1, 512, 64, 8), (2, 1024, 32, 4), (1, 256, 128, 16),
         (2, 3000, 16, 2), (1, 64, 64, 2), (1, 1500, 48, 12), (2, 200, 100, 8)]


def synthetic(hardware, model="llama-3.1-8b", cases=CASES):
    """Measurements that ``hardware`` produces exactly (as a JSON result would state them)."""
    out = []
    for i, (tp, isl, osl, c) in enumerate(cases):
        m = Measurement(source="synthetic.json", line=i + 1, model=model, hardware="h100_sxm", backend="vllm",
                        precision="", mode="agg", tp=tp, pp=1, dp=1, input_len=isl, output_len=osl, concurrency=c,
                        request_rate=math.inf, num_prompts=4 * c, ttft_ms=1.0, tpot_ms=1.0)
        pred = accuracy.predict(m, model, hardware, shape=SHAPE)
        out.append(dataclasses.replace(m, ttft_ms=pred["ttft"], tpot_ms=pred["tpot"]))
    return out


@pytest.fixture(scope="module")
def fit():
    truth = dataclasses.replace(simllm.load_hardware(H100), **TRUE)
    points = accuracy.resolve(synthetic(truth))
    return calibrate.calibrate(points, simllm.load_hardware(H100), tuple(TRUE), workers=1, shape=SHAPE)


def test_fit_recovers_the_factors_that_made_the_data(fit):
    for key, value in TRUE.items():
        assert fit.factors[key] == pytest.approx(value, rel=0.03), key
    assert fit.initial["compute_utilization"] == simllm.load_hardware(H100).compute_utilization  # the start
    for metric in ("ttft", "tpot"):
        assert fit.fit_error[metric]["points"] == len(CASES)
        assert fit.fit_error[metric]["median_abs_pct_error"] < 1.0
        assert fit.loo_error[metric]["median_abs_pct_error"] < 2.0


def test_write_calibration_keeps_the_datasheet_and_says_what_was_fitted(fit, tmp_path):
    """GPU factors go to the hardware profile, framework quantities to the framework profile,
    each with the provenance of the fit; everything else in both files is kept."""
    out, fw_out = calibrate.write_calibration(fit, tmp_path / "my-gpu.yaml", tmp_path / "my-vllm.yaml",
                                              date="2026-12-02")
    text = out.read_text(encoding="utf-8")
    base_text = open(simllm.load_hardware(H100).source, encoding="utf-8").read()
    for line in base_text.splitlines():  # every datasheet line and source comment kept
        if line.strip() and not any(line.strip().startswith(k) for k in TRUE):
            assert line in text
    what = "fitted by simllm calibrate on 10 measured points (llama-3.1-8b; vllm) from synthetic.json, 2026-12-02"
    assert what in text
    hw = simllm.load_hardware(str(out))
    base = simllm.load_hardware(H100)
    assert hw.launch_overhead_us is None and hw.frontend_latency_ms is None  # no framework figures in it
    for key in calibrate.GPU_FACTORS:
        if key in TRUE:
            assert getattr(hw, key) == pytest.approx(TRUE[key], rel=0.03)
    for key in ("bf16_tflops", "fp8_tflops", "memory_bandwidth_gbps", "memory_size_bytes", "interconnect_bandwidth_gbps"):
        assert getattr(hw, key) == getattr(base, key)
    fw_text = fw_out.read_text(encoding="utf-8")
    assert f"{what} on h100-sxm" in fw_text
    shipped = open(simllm.load_framework("vllm").source, encoding="utf-8").read()
    for line in shipped.splitlines():  # the sources and the unfitted figures kept
        if line.strip() and not any(line.strip().startswith(k) for k in TRUE):
            assert line in fw_text
    fw = simllm.load_framework(str(fw_out))
    for key in calibrate.FRAMEWORK_FACTORS:
        if key in TRUE:
            assert getattr(fw, key) == pytest.approx(TRUE[key], rel=0.03)
    assert fw.iteration_overhead_us == simllm.load_framework("vllm").iteration_overhead_us  # not fitted


def test_fit_stays_within_the_documented_bounds_and_says_when_it_hits_one(tmp_path):
    """Data made with a 40 ms frontend (what a benchmark client might add) cannot push the
    framework's frontend_latency_ms past its documented 10 ms: the fit ends at the bound and
    reports it; told what the client adds, the same data fit inside the bounds."""
    truth = dataclasses.replace(simllm.load_hardware(H100), frontend_latency_ms=40.0)
    cases = CASES[:6]
    ms = synthetic(truth, cases=cases)
    fit = calibrate.calibrate(accuracy.resolve(ms), simllm.load_hardware(H100),
                              ("compute_utilization", "frontend_latency_ms"), workers=1, max_iterations=8,
                              shape=SHAPE)
    low, high = simllm.config.framework.BOUNDS["frontend_latency_ms"]
    assert high == 10.0 and low <= fit.factors["frontend_latency_ms"] <= high
    assert fit.factors["frontend_latency_ms"] >= 0.99 * high
    assert fit.bound_hits == (("frontend_latency_ms", "upper", 10.0),)
    assert calibrate.describe_bound_hit(fit.bound_hits[0]) == "frontend_latency_ms hit its upper bound 10 ms"
    from simllm.report import text as report
    assert "frontend_latency_ms hit its upper bound 10 ms" in report.format_calibration(fit, "vllm", "x.yaml")
    # The client's 38 ms declared with the measurements: the fit lands inside the bounds.
    declared = [dataclasses.replace(m, client_overhead_ms=38.0) for m in ms]
    ok = calibrate.calibrate(accuracy.resolve(declared), simllm.load_hardware(H100),
                             ("frontend_latency_ms",), workers=1, max_iterations=8, shape=SHAPE)
    assert ok.factors["frontend_latency_ms"] == pytest.approx(2.0, abs=0.25) and not ok.bound_hits


@pytest.mark.heavy  # the disaggregated kernel: minutes of its own compile from an empty cache
def test_fit_on_disaggregated_measurements_recovers_the_factor():
    """Disaggregated rows calibrate as aggregated ones do: measurements a truth GPU produces as two
    pools (1-2 prefill workers, one decode worker, as silicon_sample.csv's prefill_* / decode_*
    columns state them) give back its bandwidth utilisation and the client overhead they carry."""
    from simllm.formats.common import WorkerPool

    truth = dataclasses.replace(simllm.load_hardware(H100), bandwidth_utilization=0.72)
    ms = []
    for i, (workers, isl, osl, c) in enumerate([(1, 1024, 64, 4), (2, 2048, 32, 8), (1, 512, 128, 2),
                                                (2, 4096, 16, 4), (1, 256, 64, 16)]):
        m = Measurement(source="synthetic.csv", line=i + 2, model="llama-3.1-8b", hardware="h100_sxm",
                        backend="vllm", precision="", mode="disagg", tp=0, pp=1, dp=1, input_len=isl,
                        output_len=osl, concurrency=c, request_rate=math.inf, num_prompts=4 * c, ttft_ms=1.0,
                        tpot_ms=1.0, prefill=WorkerPool(workers=workers, batch_size=1),
                        decode=WorkerPool(workers=1, batch_size=c))
        pred = accuracy.predict(m, "llama-3.1-8b", truth, shape=SHAPE)
        ms.append(dataclasses.replace(m, ttft_ms=pred["ttft"] + 25.0, tpot_ms=pred["tpot"]))
    points = accuracy.resolve(ms)
    assert all(not p.reason for p in points)
    fit = calibrate.calibrate(points, simllm.load_hardware(H100), ("bandwidth_utilization", "client_overhead_ms"),
                              workers=1, shape=SHAPE)
    assert fit.factors["bandwidth_utilization"] == pytest.approx(0.72, rel=0.03)
    assert fit.factors["client_overhead_ms"] == pytest.approx(25.0, abs=2.0)


def test_client_overhead_is_added_to_the_predicted_ttft_and_e2e():
    m = synthetic(simllm.load_hardware(H100), cases=CASES[:1])[0]
    plain = accuracy.predict(m, "llama-3.1-8b", H100)
    more = accuracy.predict(dataclasses.replace(m, client_overhead_ms=12.5), "llama-3.1-8b", H100)
    assert more["ttft"] == pytest.approx(plain["ttft"] + 12.5) and more["e2el"] == pytest.approx(plain["e2el"] + 12.5)
    assert more["tpot"] == plain["tpot"] and more["itl"] == plain["itl"]


def test_calibration_changes_efficiencies_never_the_physics(fit):
    """The foundation's closed forms (bytes streamed per token, KV bytes per token, the decode
    lower bound at peak bandwidth) are the same on the calibrated profile."""
    model = simllm.load_model("mistral-7b")
    base = simllm.load_hardware(H100)
    a = simllm.estimate(model, base, batch_size=1, input_len=512, output_len=64)
    b = simllm.estimate(model, fit.hardware, batch_size=1, input_len=512, output_len=64)
    assert b.streamed_weight_bytes == a.streamed_weight_bytes == pytest.approx(14.22e9, rel=2e-3)
    assert b.decode_lower_bound_s == a.decode_lower_bound_s
    assert b.memory.kv_bytes_per_token == a.memory.kv_bytes_per_token == 131072
    assert b.memory.weight_bytes == a.memory.weight_bytes
    assert b.ideal_tpot_s != a.ideal_tpot_s  # the efficiencies did change


def test_points_faster_than_the_peaks_are_left_out():
    truth = dataclasses.replace(simllm.load_hardware(H100), **TRUE)
    ms = synthetic(truth)
    impossible = dataclasses.replace(ms[0], tpot_ms=ms[0].tpot_ms / 10)  # 10x faster than the peaks allow
    points = accuracy.with_bounds(accuracy.resolve([impossible] + ms[1:]))
    assert points[0].below_bound("tpot") and not points[0].below_bound("ttft")
    assert points[0].inconsistent and not any(p.inconsistent for p in points[1:])
    f = calibrate.calibrate(points, simllm.load_hardware(H100), tuple(TRUE), workers=1, shape=SHAPE)
    assert f.fit_error["tpot"]["points"] == f.fit_error["ttft"]["points"] == len(CASES) - 1
    assert f.factors["bandwidth_utilization"] == pytest.approx(TRUE["bandwidth_utilization"], rel=0.05)


def test_calibrate_refuses_what_it_cannot_fit():
    points = accuracy.resolve(synthetic(simllm.load_hardware(H100), cases=CASES[:2]))
    with pytest.raises(simllm.ConfigError, match="at least 5 measured points"):
        calibrate.calibrate(points, simllm.load_hardware(H100), tuple(TRUE))
    with pytest.raises(simllm.ConfigError, match="--fit = 'speed'"):
        calibrate.calibrate(points, simllm.load_hardware(H100), ("speed",))


def _write_json_results(tmp_path, measurements):
    paths = []
    for i, m in enumerate(measurements):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps({
            "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": m.num_prompts,
            "request_rate": "inf", "max_concurrency": m.concurrency, "completed": m.num_prompts,
            "total_input_tokens": m.num_prompts * m.input_len, "total_output_tokens": m.num_prompts * m.output_len,
            "mean_ttft_ms": m.ttft_ms, "mean_tpot_ms": m.tpot_ms}), encoding="utf-8")
        paths.append(str(path))
    return paths


def test_calibrate_and_validate_cli_round_trip(tmp_path, capsys):
    """vllm bench serve results of one GPU -> simllm calibrate -> a profile on which simllm
    validate reproduces them; the same factors applied to another GPU with --factors-from."""
    truth = dataclasses.replace(simllm.load_hardware(H100), **TRUE)
    cases = [c for c in CASES if c[0] == 1]
    paths = _write_json_results(tmp_path, synthetic(truth, cases=cases))
    out, fw_out = tmp_path / "cal.yaml", tmp_path / "vllm-cal.yaml"
    args = ["calibrate", *paths, "--hardware", H100, "-o", str(out), "--framework-output", str(fw_out),
            "--fit", *TRUE, "--format", "json", "--client-jitter-ms", "0"]
    assert simllm.cli.main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fit_error"]["tpot"]["median_abs_pct_error"] < 1.0
    assert data["factors"]["compute_utilization"] == pytest.approx(0.55, rel=0.05)
    assert data["framework_output"] == str(fw_out) and data["bound_hits"] == []
    assert yaml.safe_load(fw_out.read_text())["framework"]["frontend_latency_ms"] == pytest.approx(6.0, rel=0.05)
    assert simllm.cli.main(["validate", *paths, "--hardware", str(out), "--framework-profile", str(fw_out),
                            "--format", "json", "--client-jitter-ms", "0"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["ttft"]["median_abs_pct_error"] < 1.0 and summary["tpot"]["median_abs_pct_error"] < 1.0
    # --factors-from: the measurements, relabelled as H200 runs, predicted with the H100's factors
    assert simllm.cli.main(["validate", *paths, "--hardware", "h200-sxm", "--factors-from", str(out),
                            "--format", "json", "--client-jitter-ms", "0"]) == 0
    rows = json.loads(capsys.readouterr().out)["points"]
    h200 = dataclasses.replace(simllm.load_hardware("h200-sxm"), **{k: getattr(simllm.load_hardware(str(out)), k)
                                                                     for k in TRUE if k in calibrate.GPU_FACTORS})
    m = synthetic(truth, cases=cases[:1])[0]
    assert rows[0]["predicted_tpot_ms"] == pytest.approx(accuracy.predict(m, "llama-3.1-8b", h200, shape=SHAPE)["tpot"],
                                                         rel=1e-9)


def test_calibrate_cli_errors_are_one_line(tmp_path, capsys):
    truth = dataclasses.replace(simllm.load_hardware(H100), **TRUE)
    paths = _write_json_results(tmp_path, synthetic(truth, cases=CASES[:1]))
    assert simllm.cli.main(["calibrate", *paths, "--hardware", H100, "-o", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "measured points" in err
    assert not (tmp_path / "x.yaml").exists()  # nothing half-written
    with pytest.raises(SystemExit) as exc:
        simllm.cli.main(["validate", *paths, "--filter", "(["])
    assert exc.value.code == 2
    assert "invalid regular expression" in capsys.readouterr().err


def test_validate_plot_writes_pngs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    truth = dataclasses.replace(simllm.load_hardware(H100), **TRUE)
    paths = _write_json_results(tmp_path, synthetic(truth, cases=CASES[:3]))
    assert simllm.cli.main(["validate", *paths, "--hardware", H100, "--plot", str(tmp_path / "plots")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == ["validation_tpot.png", "validation_ttft.png"]
    assert all((tmp_path / "plots" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in pngs)
    capsys.readouterr()


def test_profile_cli_tiny_on_cpu(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "prof.yaml"
    args = ["profile", "--hardware", "h100-sxm", "--device", "cpu", "--size", "tiny", "-o", str(out)]
    assert simllm.cli.main(args) == 0
    hw = simllm.load_hardware(str(out))
    assert 0 < hw.compute_utilization <= 1 and 0 < hw.bandwidth_utilization <= 1
    assert hw.bf16_tflops == simllm.load_hardware("h100-sxm").bf16_tflops
    assert "wrote" in capsys.readouterr().out
    assert np.isfinite(hw.launch_overhead_us)  # measured on this GPU: an explicit override of the framework's
