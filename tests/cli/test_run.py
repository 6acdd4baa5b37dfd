"""``simllm run``: the seed's form, ``vllm bench serve``-compatible JSON and flags, output files,
bad input (exit 2, one line on stderr, no traceback), and the Python API giving the same summary."""
import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest

import simllm
import simllm.cli
from helpers import ROOT, stderr_lines
from simllm.report import text as report
from simllm.sim.results import TIMING_KEYS

MODEL = str(ROOT / "configs" / "model.yaml")
HARDWARE = str(ROOT / "configs" / "hardware.yaml")
N = 50

BENCH_KEYS = [
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "output_throughput", "total_token_throughput",
] + [f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el")
     for stat in ("mean", "median", "std", "p99")]
SIMLLM_KEYS = ["compute_utilization", "bandwidth_utilization", "kv_cache_usage_mean", "memory"]
WALL_KEYS = set(TIMING_KEYS)


def run_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "simllm", "run", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def run_main(argv, capsys):
    """``simllm.cli.main(["run", ...])`` in-process: (status, stdout, stderr)."""
    try:
        rc = simllm.cli.main(["run", *map(str, argv)])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *extra):
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", N, "--format", "json", *extra], capsys)
    assert rc == 0, (rc, out[-2000:], err[-2000:])
    return json.loads(out)


#: What simllm run's JSON adds to the API's result: the error bands and the calibration warnings.
BAND_KEYS = ("error_band", "error_band_coverage", "calibration_warnings")


def strip_wall(summary):
    """``summary`` without wall-clock keys and without the bands run's JSON adds."""
    return {k: v for k, v in summary.items() if k not in WALL_KEYS and k not in BAND_KEYS}


def assert_one_line_error(rc, out, err, *needles):
    assert rc == 2, (rc, out[-2000:], err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out, err
    lines = stderr_lines(err)
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture(scope="module")
def seed_summary():
    """The JSON of ``simllm run MODEL HARDWARE --num-prompts 50 --format json`` (subprocess)."""
    proc = run_cli(MODEL, HARDWARE, "--num-prompts", N, "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


# ----------------------------------------------------------------------------- the seed's form


def test_seed_form_exits_zero():
    proc = run_cli(MODEL, HARDWARE, "--num-prompts", N)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "Serving Benchmark Result" in proc.stdout
    assert "Successful requests:" in proc.stdout and f"{N}" in proc.stdout


def test_seed_form_flags_equal_positional(capsys):
    rc, out, err = run_main(["--model", MODEL, "--hardware", HARDWARE, "--num-prompts", N, "--format", "json"],
                            capsys)
    assert rc == 0, err
    assert strip_wall(json.loads(out)) == strip_wall(run_json(capsys))


def test_table_output_lists_percentiles(capsys):
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", N, "--metric-percentiles", "50,90,99"], capsys)
    assert rc == 0, err
    for label in ("Mean TTFT (ms):", "Median TPOT (ms):", "P90 ITL (ms):", "P99 E2EL (ms):"):
        assert label in out


# ----------------------------------------------------------------------------- JSON


def test_json_is_one_object_with_bench_serve_keys(seed_summary):
    s = seed_summary
    missing = [k for k in BENCH_KEYS + SIMLLM_KEYS if k not in s]
    assert not missing, missing
    assert isinstance(s["memory"], dict) and s["memory"]


def test_json_stdout_is_only_json():
    proc = run_cli(MODEL, HARDWARE, "--num-prompts", N, "--format", "json")
    assert proc.returncode == 0
    assert isinstance(json.loads(proc.stdout), dict)  # warnings go to stderr, not stdout


def test_json_values_sane(seed_summary):
    s = seed_summary
    assert s["completed"] == N and s["failed"] == 0
    assert s["duration"] > 0
    assert s["total_input_tokens"] == N * 1024
    assert s["total_output_tokens"] == N * 128
    assert s["output_throughput"] == pytest.approx(s["total_output_tokens"] / s["duration"], rel=1e-12)
    assert s["request_throughput"] == pytest.approx(s["completed"] / s["duration"], rel=1e-12)
    assert s["total_token_throughput"] == pytest.approx(
        (s["total_input_tokens"] + s["total_output_tokens"]) / s["duration"], rel=1e-12)
    for metric in ("ttft", "tpot", "itl", "e2el"):
        mean, median, p99 = (s[f"{k}_{metric}_ms"] for k in ("mean", "median", "p99"))
        assert mean > 0 and median > 0 and p99 >= median and s[f"std_{metric}_ms"] >= 0
    assert s["mean_e2el_ms"] >= s["mean_ttft_ms"]
    assert s["p99_e2el_ms"] <= s["duration"] * 1e3 * (1 + 1e-9)
    for key in ("compute_utilization", "bandwidth_utilization", "kv_cache_usage_mean"):
        assert 0 < s[key] <= 1, (key, s[key])


def test_metric_percentiles(capsys):
    s = run_json(capsys, "--metric-percentiles", "50,99.9")
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert f"p50_{metric}_ms" in s and f"p99.9_{metric}_ms" in s
        assert f"p99_{metric}_ms" not in s and f"p90_{metric}_ms" not in s
        assert s[f"p50_{metric}_ms"] <= s[f"p99.9_{metric}_ms"]
    assert s["p50_ttft_ms"] == pytest.approx(s["median_ttft_ms"])


def test_goodput_loose_slos_equal_throughput(capsys):
    s = run_json(capsys, "--goodput", "ttft:100000", "tpot:100000")
    assert s["request_goodput"] == pytest.approx(s["request_throughput"], rel=1e-12)


def test_goodput_impossible_slo_is_zero(capsys):
    s = run_json(capsys, "--goodput", "ttft:0.000001")
    assert s["request_goodput"] == 0.0


def test_no_goodput_key_without_flag(seed_summary):
    assert "request_goodput" not in seed_summary


# ----------------------------------------------------------------------------- output files


def test_output_file_same_json(tmp_path, capsys):
    """--output holds vllm bench serve's --save-result keys on top of what --format json prints."""
    path = tmp_path / "result.json"
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", N, "--format", "json", "--output", path], capsys)
    assert rc == 0, err
    printed, written = json.loads(out), json.loads(path.read_text(encoding="utf-8"))
    printed = {k: v for k, v in printed.items() if k not in BAND_KEYS}  # the bands are the report's, not the result's
    assert {k: written[k] for k in printed} == printed
    for key in ("date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
                "max_concurrency", "duration", "completed", "request_throughput", "mean_ttft_ms", "p99_itl_ms"):
        assert key in written, key
    assert written["backend"] == "simllm"  # never mistaken for a measured result


def test_output_file_with_table_format(tmp_path, capsys):
    path = tmp_path / "result.json"
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", N, "-o", path], capsys)
    assert rc == 0, err
    assert "Serving Benchmark Result" in out
    assert json.loads(path.read_text(encoding="utf-8"))["completed"] == N


def test_save_detailed_csv(tmp_path, capsys):
    path = tmp_path / "x.csv"
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", N, "--save-detailed", path], capsys)
    assert rc == 0, err
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == N
    for col in ("ttft_s", "tpot_s", "status", "e2el_s", "arrival_s", "input_tokens", "output_tokens"):
        assert col in rows[0], col
    assert {r["status"] for r in rows} == {"done"}
    assert all(float(r["ttft_s"]) > 0 and float(r["tpot_s"]) > 0 for r in rows)
    assert sum(int(r["output_tokens"]) for r in rows) == N * 128


def test_save_detailed_bad_extension(tmp_path, capsys):
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", 5, "--save-detailed", tmp_path / "x.txt"], capsys)
    assert_one_line_error(rc, out, err, "--save-detailed", "x.txt", ".csv")


def test_quiet_prints_exactly_one_line(capsys):
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", N, "--quiet"], capsys)
    assert rc == 0, err
    assert len(out.splitlines()) == 1 and out.endswith("\n")
    assert f"{N}/{N} ok" in out


def test_quiet_subprocess_one_line():
    proc = run_cli(MODEL, HARDWARE, "--num-prompts", N, "-q")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1


# ----------------------------------------------------------------------------- vLLM flag names


def test_vllm_flag_names_accepted(capsys):
    s = run_json(
        capsys,
        "--request-rate", "50", "--burstiness", "0.5", "--max-concurrency", "8",
        "--input-len", "256", "--output-len", "32", "--random-range-ratio", "0.2",
        "--tensor-parallel-size", "2", "--data-parallel-size", "2", "--dtype", "fp16", "--kv-cache-dtype", "fp8",
        "--max-num-seqs", "64", "--max-num-batched-tokens", "4096", "--enable-chunked-prefill",
        "--enable-prefix-caching", "--block-size", "32", "--gpu-memory-utilization", "0.8", "--seed", "3",
    )
    assert s["completed"] + s["failed"] == N and s["completed"] == N
    assert s["tensor_parallel_size"] == 2 and s["data_parallel_size"] == 2
    assert s["dtype"] == "fp16" and s["kv_cache_dtype"] == "fp8"
    assert s["max_num_seqs"] == 64 and s["max_num_batched_tokens"] == 4096
    assert s["enable_chunked_prefill"] is True and s["enable_prefix_caching"] is True
    assert s["max_concurrency"] == 8 and s["burstiness"] == 0.5 and s["request_rate"] == 50.0
    # --random-range-ratio 0.2: prompts in [204, 307], outputs in [25, 38]
    assert 204 * N <= s["total_input_tokens"] <= 307 * N
    assert 25 * N <= s["total_output_tokens"] <= 38 * N


def test_short_tp_and_no_chunked_prefill(capsys):
    s = run_json(capsys, "-tp", "2", "--no-enable-chunked-prefill")
    assert s["tensor_parallel_size"] == 2
    assert s["enable_chunked_prefill"] is False
    assert s["max_num_batched_tokens"] == 2048  # vLLM v0: max(max_model_len 2048, 2048)


def test_seed_changes_sampled_workload(capsys):
    a = run_json(capsys, "--input-len", "500", "--random-range-ratio", "0.5", "--seed", "1")
    b = run_json(capsys, "--input-len", "500", "--random-range-ratio", "0.5", "--seed", "1")
    c = run_json(capsys, "--input-len", "500", "--random-range-ratio", "0.5", "--seed", "2")
    assert a["total_input_tokens"] == b["total_input_tokens"]
    assert strip_wall(a) == strip_wall(b)
    assert a["total_input_tokens"] != c["total_input_tokens"]


def test_workload_preset_with_overrides(capsys):
    s = run_json(capsys, "--workload", "bench-1m", "--request-rate", "inf")
    assert s["completed"] == N and s["request_rate"] == "inf"
    assert 100 * N <= s["total_input_tokens"] <= 999 * N


def test_trace_workload_positional(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,100,10\n0.5,200,20\n1.0,300,30\n", encoding="utf-8")
    rc, out, err = run_main([MODEL, HARDWARE, trace, "--format", "json"], capsys)
    assert rc == 0, err
    s = json.loads(out)
    assert s["completed"] == 3 and s["total_input_tokens"] == 600 and s["total_output_tokens"] == 60


# ----------------------------------------------------------------------------- bad input


def _syntax_error_yaml(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("workload:\n  num_prompts: 10\n   request_rate: 3\n", encoding="utf-8")
    return ["--workload", path], [f"{path}:3:", "YAML"]


def _missing_column_trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_len\n0,5\n", encoding="utf-8")
    return ["--workload", path], [f"{path}:1:", "output_len"]


def _bad_value_trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_len,output_len\n0,5,5\n1,abc,5\n", encoding="utf-8")
    return ["--workload", path], [f"{path}:3:", "input_len", "'abc'"]


def _negative_rate_yaml(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("workload:\n  request_rate: -1\n", encoding="utf-8")
    return ["--workload", path], [f"{path}:2:", "request_rate", "-1"]


def _missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    return ["--workload", path], ["--workload", "nope.yaml", "existing file"]


def _too_long_input(tmp_path):
    return ["--input-len", "5000"], ["input_len", "5000", "2048"]


BAD = {
    "negative-rate": lambda p: (["--request-rate", "-1"], ["--request-rate", "-1"]),
    "negative-rate-eq": lambda p: (["--request-rate=-1"], ["--request-rate", "-1"]),
    "zero-prompts": lambda p: (["--num-prompts", "0"], ["--num-prompts", "0"]),
    "bad-percentiles": lambda p: (["--metric-percentiles", "50,101"], ["--metric-percentiles", "101"]),
    "bad-goodput": lambda p: (["--goodput", "foo:1"], ["--goodput", "foo:1"]),
    "bad-ratio": lambda p: (["--random-range-ratio", "2"], ["--random-range-ratio", "2"]),
    "missing-file": _missing_file,
    "yaml-syntax": _syntax_error_yaml,
    "yaml-negative-rate": _negative_rate_yaml,
    "trace-missing-column": _missing_column_trace,
    "trace-bad-value": _bad_value_trace,
    "too-long-input": _too_long_input,
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_in_process(tmp_path, capsys, case):
    args, needles = BAD[case](tmp_path)
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", 5, *args], capsys)
    assert_one_line_error(rc, out, err, *needles)


@pytest.mark.parametrize("case", ["negative-rate", "zero-prompts", "missing-file", "yaml-syntax",
                                  "trace-missing-column"])
def test_bad_input_subprocess(tmp_path, case):
    args, needles = BAD[case](tmp_path)
    proc = run_cli(MODEL, HARDWARE, "--num-prompts", 5, *args)
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, *needles)


# ----------------------------------------------------------------------------- Python API


@pytest.fixture(scope="module")
def api_result():
    model, hardware = simllm.load_model(MODEL), simllm.load_hardware(HARDWARE)
    return simllm.simulate(model, hardware, workload=simllm.Workload(num_prompts=N))


def test_api_summary_equals_cli_json(api_result, seed_summary):
    assert isinstance(api_result, simllm.SimResult)
    from_api = json.loads(report.to_json(api_result.to_dict()))
    assert strip_wall(from_api) == strip_wall(seed_summary)
    full = api_result.to_dict()
    assert {k: full[k] for k in api_result.summary} == api_result.summary
    assert len(full["timeseries"]["t_s"]) == len(full["timeseries"]["output_throughput"]) > 0
    assert sum(full["batch_size_histogram"]) == api_result.summary["iterations"]


def test_api_summary_equals_cli_json_open_loop(tmp_path, capsys):
    model, hardware = simllm.load_model(MODEL), simllm.load_hardware(HARDWARE)
    wpath = tmp_path / "w.yaml"
    wpath.write_text("workload:\n  num_prompts: 40\n  request_rate: 3\n  burstiness: 0.5\n"
                     "  input_len: {distribution: uniform, low: 100, high: 900}\n  output_len: 64\n  seed: 5\n",
                     encoding="utf-8")
    res = simllm.simulate(model, hardware, workload=simllm.load_workload(wpath), percentiles=(50, 99.9),
                          goodput={"ttft": 500})
    rc, out, err = run_main([MODEL, HARDWARE, wpath, "--format", "json", "--metric-percentiles", "50,99.9",
                             "--goodput", "ttft:500"], capsys)
    assert rc == 0, err
    assert strip_wall(json.loads(report.to_json(res.to_dict()))) == strip_wall(json.loads(out))


def test_api_requests_arrays(api_result):
    req = api_result.requests
    for name in ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "input_tokens", "output_tokens",
                 "ttft_s", "tpot_s", "e2el_s", "queue_s", "preemptions", "status"):
        assert name in req, name
        assert len(req[name]) == N, name
    assert np.all(req["input_tokens"] == 1024) and np.all(req["output_tokens"] == 128)
    assert np.all(req["ttft_s"] > 0)
    assert np.all(req["finish_s"] >= req["first_token_s"])
    np.testing.assert_allclose(req["e2el_s"], req["finish_s"] - req["arrival_s"])
    np.testing.assert_allclose(np.mean(req["ttft_s"]) * 1e3, api_result.summary["mean_ttft_ms"])


def test_api_deterministic(api_result):
    model, hardware = simllm.load_model(MODEL), simllm.load_hardware(HARDWARE)
    again = simllm.simulate(model, hardware, workload=simllm.Workload(num_prompts=N))
    assert strip_wall(again.summary) == strip_wall(api_result.summary)
    for name, arr in api_result.requests.items():
        assert np.array_equal(arr, again.requests[name], equal_nan=arr.dtype.kind == "f"), name


def test_api_to_pandas(api_result):
    pytest.importorskip("pandas")
    df = api_result.to_pandas()
    assert len(df) == N
    assert {"ttft_s", "tpot_s", "status"} <= set(df.columns)
    assert set(df["status"].astype(str)) == {"done"}


def test_api_requests_given(api_result):
    """Pre-drawn requests give the same result as letting simulate draw them."""
    model, hardware = simllm.load_model(MODEL), simllm.load_hardware(HARDWARE)
    w = simllm.Workload(num_prompts=N)
    res = simllm.simulate(model, hardware, workload=w, requests=simllm.generate(w))
    assert strip_wall(res.summary) == strip_wall(api_result.summary)
    assert not math.isnan(res.summary["mean_tpot_ms"])


def test_summary_percentiles_equal_numpys():
    """The summary's percentile shortcut gives np.percentile's numbers to the last bit."""
    from simllm.sim.stats import percentiles_inplace as _percentiles_inplace

    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 10, 101, 4096):
        x = rng.lognormal(size=n)
        ps = (50.0, 0.0, 25.0, 90.0, 99.0, 99.9, 100.0)
        assert np.array_equal(_percentiles_inplace(x.copy(), ps), np.percentile(x, ps))


def test_closed_loop_flags(capsys, tmp_path):
    """--client-jitter-ms, --warmup-requests and the ramp-up flags reach the workload; their
    errors are one line naming the flag."""
    base = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--num-prompts", "40", "--max-concurrency", "4",
            "--input-len", "300", "--output-len", "20", "--format", "json"]
    rc, out, _ = run_main([*base, "--warmup-requests", "8", "--client-jitter-ms", "0",
                           "--save-detailed", tmp_path / "r.csv"], capsys)
    s = json.loads(out)
    assert rc == 0 and s["completed"] == 32 and s["warmup_requests"] == 8
    rows = list(csv.DictReader(open(tmp_path / "r.csv", encoding="utf-8")))
    assert [r["warmup"] for r in rows[7:9]] == ["True", "False"] and len(rows) == 40
    rc, out, _ = run_main([*base, "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "2", "--ramp-up-end-rps",
                           "50"], capsys)
    assert rc == 0 and json.loads(out)["completed"] == 40
    rc, _, err = run_main([*base, "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "2", "--ramp-up-end-rps",
                           "50", "--request-rate", "4"], capsys)
    assert rc == 2 and "--request-rate" in err and err.count("\n") == 1
    rc, _, err = run_main([*base, "--warmup-requests", "40"], capsys)
    assert rc == 2 and "--warmup-requests = 40" in err


@pytest.mark.heavy
def test_disaggregated_run_reports_both_pools_and_the_transfers(capsys):
    summary = run_json(capsys, "--prefill-instances", "2", "--decode-config", '{"max_num_seqs": 64}',
                       "--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_transfer_bandwidth_gbps": 40}')
    assert summary["num_gpus"] == 3
    assert summary["prefill_pool"]["instances"] == 2 and summary["decode_pool"]["max_num_seqs"] == 64
    kv = summary["kv_transfer"]
    assert kv["link"] == "stated" and kv["bandwidth_gbps"] == 40 and kv["kv_connector"] == "NixlConnector"
    assert kv["transfers"] == summary["completed"] and kv["mean_transfer_ms"] > 0
    rc, out, _ = run_main([MODEL, HARDWARE, "--num-prompts", N, "--prefill-instances", "1"], capsys)
    assert rc == 0 and "Disaggregated prefill / decode" in out and "KV transfer mean" in out


@pytest.mark.parametrize("flag, value, needle", [
    ("--prefill-config", '{"tensor_parallel_size": 0}', "--prefill-config tensor_parallel_size"),
    ("--decode-config", '{"no_such": 1}', "--decode-config no_such"),
    ("--decode-config", '{"gpu": "no-such-gpu"}', "--decode-config gpu"),
    ("--decode-config", "[1]", "--decode-config"),
    ("--kv-transfer-config", '{"kv_transfer_bandwidth_gbps": -1}', "kv_transfer_bandwidth_gbps"),
    ("--kv-transfer-config", '{"first_token": "both"}', "first_token"),
    ("--prefill-instances", "0", "--prefill-instances"),
])
def test_disaggregated_bad_flags_are_one_line_errors(capsys, flag, value, needle):
    rc, out, err = run_main([MODEL, HARDWARE, "--num-prompts", N, flag, value], capsys)
    assert_one_line_error(rc, out, err, needle)
