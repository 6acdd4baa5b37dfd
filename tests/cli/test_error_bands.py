"""Error bands in run, compare and optimize: the JSON keys (strict JSON), the text beside the
headline figures, the out-of-domain line, --no-error-band and --accuracy-record."""
import json

from helpers import run_main

MODEL = ["--model", "llama-3.1-8b", "--hardware", "h200-sxm"]
SMALL = ["--num-prompts", "32", "--max-concurrency", "8"]
KEYS = ("error_band", "error_band_coverage", "calibration_warnings")


def strict(text):
    def refuse(name):
        raise AssertionError(f"non-strict JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def test_run_json_carries_bands(capsys):
    rc, out, err = run_main(["run", *MODEL, *SMALL, "--format", "json"], capsys)
    assert rc == 0, err
    d = strict(out)
    assert d["error_band_coverage"] == 0.8 and d["calibration_warnings"] == []  # 8B with vLLM on H200: calibrated
    for key in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "output_throughput"):
        lo, hi = d["error_band"][key]
        assert 0 < lo < hi, key
    assert d["error_band"]["mean_tpot_ms"][0] < 2 * d["mean_tpot_ms"] and d["error_band"]["mean_tpot_ms"][1] > 0.5 * d["mean_tpot_ms"]


def test_run_out_of_domain(capsys):
    argv = ["run", "--model", "qwen2.5-7b", "--hardware", "l40s", "--num-prompts", "16", "--max-concurrency", "4",
            "--input-len", "16384", "--max-model-len", "17000"]
    rc, out, err = run_main([*argv, "--format", "json"], capsys)
    assert rc == 0, err
    warnings = strict(out)["calibration_warnings"]
    gpu = next(w for w in warnings if w.startswith("GPU l40s was never calibrated (calibrated: "))
    assert "h100-sxm" in gpu and "h200-sxm" in gpu and "l40s" not in gpu.split("calibrated: ")[1]
    assert any(w.startswith("model family qwen2.5 was never calibrated") for w in warnings)
    assert any(w.startswith("input length 16k above the calibrated ") for w in warnings)
    rc, out, err = run_main(argv, capsys)
    lines = [line for line in out.splitlines() if line.startswith("outside the calibrated domain")]
    assert len(lines) == 1 and "GPU l40s was never calibrated" in lines[0]
    assert "80% band" in next(line for line in out.splitlines() if line.startswith("Mean TTFT"))


def test_run_text_and_no_error_band(capsys):
    rc, out, _ = run_main(["run", *MODEL, *SMALL], capsys)
    assert rc == 0
    banded = [line.split(":")[0] for line in out.splitlines() if "80% band " in line]
    assert banded == ["Request throughput (req/s)", "Output token throughput (tok/s)", "Total Token throughput (tok/s)",
                      "Mean TTFT (ms)", "P99 TTFT (ms)", "Mean TPOT (ms)", "P99 TPOT (ms)"]
    assert "outside the calibrated domain" not in out
    rc, out, _ = run_main(["run", *MODEL, *SMALL, "--no-error-band"], capsys)
    assert rc == 0 and "% band" not in out and "Error bands" not in out
    rc, out, _ = run_main(["run", *MODEL, *SMALL, "--no-error-band", "--format", "json"], capsys)
    assert not set(KEYS) & set(strict(out))


def test_open_loop_has_no_throughput_band(capsys):
    rc, out, _ = run_main(["run", *MODEL, "--num-prompts", "32", "--request-rate", "4", "--format", "json"], capsys)
    band = strict(out)["error_band"]
    assert "mean_ttft_ms" in band and "output_throughput" not in band


def test_bad_accuracy_record_is_one_line(tmp_path, capsys):
    rc, out, err = run_main(["run", *SMALL, "--accuracy-record", tmp_path / "absent.json"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "accuracy record" in err and "Traceback" not in err


def test_compare_json_and_text(capsys):
    argv = ["compare", "--model", "llama-3.1-8b", "--hardware", "h200-sxm", "l40s", *SMALL]
    rc, out, err = run_main([*argv, "--format", "json"], capsys)
    assert rc == 0, err
    columns = strict(out)["columns"]
    assert all(set(KEYS) <= set(c) for c in columns)
    assert columns[0]["calibration_warnings"] == [] and columns[1]["calibration_warnings"][0].startswith("GPU l40s")
    rc, out, _ = run_main(argv, capsys)
    assert "80% error bands" in out and "llama-3.1-8b @ l40s: outside the calibrated domain" in out
    rc, out, _ = run_main([*argv, "--no-error-band"], capsys)
    assert "error bands" not in out


def test_optimize_json_and_text(capsys):
    argv = ["optimize", *MODEL, "--slo", "ttft_p99<=5000", "--over", "tp=1,2", *SMALL]
    rc, out, err = run_main([*argv, "--format", "json"], capsys)
    assert rc == 0, err
    d = strict(out)
    assert set(KEYS) <= set(d["answer"]) and all(set(KEYS) <= set(t) for t in d["top"])
    assert d["answer"]["error_band"] == d["top"][0]["error_band"]
    rc, out, _ = run_main(argv, capsys)
    assert "80% error bands" in out and "rank configuration" in out
