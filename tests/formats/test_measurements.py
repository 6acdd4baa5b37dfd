"""Importers of measured results beyond the silicon CSV and vLLM JSON: GuideLLM benchmarks.json
(0.2/0.3 and 0.4+ layouts), EvalScope perf benchmark_summary.json (both key generations),
genai-perf and AIPerf profile exports. The fixtures are written here by hand in each tool's
documented layout (only the keys the tools write; values chosen so every field is checkable)."""
import json
import math

import pytest

import simllm.cli
from simllm.errors import ConfigError
from simllm.formats.common import Measurement
from simllm.formats.evalscope import read_evalscope_result
from simllm.formats.genai_perf import read_profile_export
from simllm.formats.guidellm import read_guidellm_result
from simllm.formats.measurements import JSON_FORMATS, detect_json_format, load_measurements

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def fields(m):
    """Every field of a measurement, for whole-row comparisons."""
    return {k: getattr(m, k) for k in Measurement.__dataclass_fields__}


def same(row, expected):
    """Field-by-field equality, NaN equal to NaN and floats to 1e-9 relative."""
    got = fields(row)
    # no importer knows what its client adds; these formats measure one engine, no MoE layout
    expected = {"client_overhead_ms": 0.0, "ep": 1, "moe_tp": 1, "prefill": None, "decode": None,
                "fixed_lengths": False, "warmup_requests": 0, "client_jitter_ms": math.nan, "framework_profile": "",
                "chunked_prefill": None, "peak_memory_gb": math.nan,
                **expected}
    assert set(got) == set(expected)
    for k, v in expected.items():
        if isinstance(v, float) and math.isnan(v):
            assert isinstance(got[k], float) and math.isnan(got[k]), k
        elif isinstance(v, float):
            assert got[k] == pytest.approx(v, rel=1e-9), k
        else:
            assert got[k] == v, k


# --- GuideLLM ------------------------------------------------------------------------------------

def dist(mean, count=50):
    """A GuideLLM StatusDistributionSummary whose successful requests average ``mean``."""
    summary = {"mean": mean, "median": mean, "mode": mean, "variance": 0.0, "std_dev": 0.0, "min": mean,
               "max": mean, "count": count, "total_sum": mean * count,
               "percentiles": {"p001": mean, "p01": mean, "p05": mean, "p10": mean, "p25": mean, "p50": mean,
                               "p75": mean, "p90": mean, "p95": mean, "p99": mean, "p999": mean},
               "cumulative_distribution_function": None}
    empty = {**summary, "mean": 0.0, "count": 0, "total_sum": 0.0}
    return {"successful": summary, "incomplete": empty, "errored": empty, "total": summary}


def guidellm_metrics(ttft, tpot, itl, latency_s, prompt, output, out_tps):
    return {
        "requests_per_second": dist(3.2), "request_concurrency": dist(7.9),
        "request_latency": dist(latency_s), "prompt_token_count": dist(prompt),
        "output_token_count": dist(output), "time_to_first_token_ms": dist(ttft),
        "time_per_output_token_ms": dist(tpot), "inter_token_latency_ms": dist(itl),
        "output_tokens_per_second": dist(out_tps), "tokens_per_second": dist(out_tps * 5),
    }


def guidellm_v03_benchmark(strategy, successful, **metrics):
    """One benchmark as GuideLLM 0.2/0.3 writes it (args, run_stats, worker, request_totals)."""
    return {
        "type_": "generative_benchmark", "id_": "7c1d", "run_id": "a2f0",
        "args": {"profile": {"type_": "sweep", "sweep_size": 3, "rate_type": "constant"}, "strategy_index": 0,
                 "strategy": strategy, "max_number": None, "max_duration": 30.0, "warmup_number": None,
                 "warmup_duration": None, "cooldown_number": None, "cooldown_duration": None},
        "run_stats": {"start_time": 1717000000.0, "end_time": 1717000030.0,
                      "requests_made": {"successful": successful + 2, "incomplete": 0, "errored": 1,
                                        "total": successful + 3},
                      "queued_time_avg": 0.01, "scheduled_time_delay_avg": 0.0, "scheduled_time_sleep_avg": 0.0,
                      "worker_start_delay_avg": 0.0, "worker_time_avg": 1.2, "worker_start_time_targeted_delay_avg": 0.0,
                      "request_start_time_delay_avg": 0.0, "request_start_time_targeted_delay_avg": 0.0,
                      "request_time_delay_avg": 0.0, "request_time_avg": 1.2},
        "worker": {"type_": "generative_requests_worker", "backend_type": "openai_http",
                   "backend_target": "http://localhost:8000", "backend_model": LLAMA, "backend_info": {}},
        "request_loader": {"type_": "generative_request_loader", "data": "prompt_tokens=512,output_tokens=128"},
        "extras": {}, "start_time": 1717000000.5, "end_time": 1717000029.5,
        "metrics": guidellm_metrics(**metrics),
        "request_totals": {"successful": successful, "incomplete": 0, "errored": 1, "total": successful + 1},
        "request_samples": None,
        "requests": {"successful": [], "incomplete": [], "errored": []},
    }


@pytest.fixture
def guidellm_v03(tmp_path):
    return write(tmp_path, "benchmarks.json", {"benchmarks": [
        guidellm_v03_benchmark({"type_": "synchronous", "start_time": 1717000000.0}, 40, ttft=21.5, tpot=7.25,
                               itl=7.3, latency_s=0.95, prompt=511.6, output=128.0, out_tps=134.7),
        guidellm_v03_benchmark({"type_": "concurrent", "streams": 8, "start_time": 1717000031.0}, 200, ttft=48.0,
                               tpot=9.5, itl=9.55, latency_s=1.27, prompt=512.4, output=127.6, out_tps=802.0),
        guidellm_v03_benchmark({"type_": "constant", "rate": 4.5, "initial_burst": True}, 135, ttft=30.0,
                               tpot=8.0, itl=8.1, latency_s=1.05, prompt=512.0, output=128.0, out_tps=575.0),
        guidellm_v03_benchmark({"type_": "poisson", "rate": 2.0, "initial_burst": True, "random_seed": 42}, 60,
                               ttft=25.0, tpot=7.5, itl=7.6, latency_s=0.99, prompt=512.0, output=128.0,
                               out_tps=256.0),
        guidellm_v03_benchmark({"type_": "throughput", "max_concurrency": 512}, 500, ttft=900.0, tpot=20.0,
                               itl=20.2, latency_s=3.5, prompt=512.0, output=128.0, out_tps=4096.0),
    ]})


def test_guidellm_v03_file_gives_one_row_per_benchmark(guidellm_v03):
    rows = load_measurements([guidellm_v03], hardware="h100_sxm", tp=2, precision="bf16")
    assert len(rows) == 5
    base = {"line": 0, "model": LLAMA, "hardware": "h100_sxm", "backend": "openai_http", "precision": "bf16",
            "mode": "agg", "tp": 2, "pp": 1, "dp": 1}
    same(rows[0], {**base, "source": f"{guidellm_v03}#benchmarks[0]", "input_len": 512, "output_len": 128,
                   "concurrency": 1, "request_rate": math.inf, "num_prompts": 40, "ttft_ms": 21.5, "tpot_ms": 7.25,
                   "itl_ms": 7.3, "e2el_ms": 950.0, "output_throughput": 134.7})
    same(rows[1], {**base, "source": f"{guidellm_v03}#benchmarks[1]", "input_len": 512, "output_len": 128,
                   "concurrency": 8, "request_rate": math.inf, "num_prompts": 200, "ttft_ms": 48.0, "tpot_ms": 9.5,
                   "itl_ms": 9.55, "e2el_ms": 1270.0, "output_throughput": 802.0})
    same(rows[2], {**base, "source": f"{guidellm_v03}#benchmarks[2]", "input_len": 512, "output_len": 128,
                   "concurrency": 0, "request_rate": 4.5, "num_prompts": 135, "ttft_ms": 30.0, "tpot_ms": 8.0,
                   "itl_ms": 8.1, "e2el_ms": 1050.0, "output_throughput": 575.0})
    assert (rows[3].concurrency, rows[3].request_rate) == (0, 2.0)
    # throughput: everything at t=0, capped at max_concurrency in flight = a closed loop of the cap
    assert (rows[4].concurrency, rows[4].request_rate, rows[4].ttft_ms) == (512, math.inf, 900.0)
    # the sweep's points are told apart where validate lists them
    assert len({m.where for m in rows}) == 5
    assert read_guidellm_result(guidellm_v03, hardware="h100_sxm", tp=2, precision="bf16") == rows


def test_guidellm_v04_layout(tmp_path):
    """0.4+: the strategy and backend under ``config``, the request counts in ``metrics``, the run's
    arguments (backend type, model) in the report's ``args``."""
    metrics = guidellm_metrics(ttft=55.0, tpot=11.0, itl=11.1, latency_s=1.5, prompt=1024.0, output=256.0,
                               out_tps=1400.0)
    metrics["request_totals"] = {"successful": 300, "incomplete": 2, "errored": 0, "total": 302}
    path = write(tmp_path, "benchmarks.json", {
        "metadata": {"version": 1, "guidellm_version": "0.4.0", "python_version": "3.12.3", "platform": "Linux"},
        "args": {"target": "http://localhost:8000", "data": ["prompt_tokens=1024,output_tokens=256"],
                 "profile": "concurrent", "rate": [16.0], "backend": "openai_http", "model": LLAMA},
        "benchmarks": [{
            "type_": "generative_benchmark",
            "config": {"id_": "b1", "run_id": "r1", "run_index": 0,
                       "strategy": {"type_": "concurrent", "streams": 16, "worker_count": 16, "max_concurrency": 16,
                                    "rampup_duration": 0.0},
                       "constraints": {"max_seconds": {"max_duration": 60}}, "sample_requests": 20,
                       "warmup": {"percent": None, "value": None, "mode": "prefer_duration"},
                       "cooldown": {"percent": None, "value": None, "mode": "prefer_duration"},
                       "prefer_response_metrics": True, "profile": {"type_": "concurrent", "streams": [16]},
                       "requests": {}, "backend": {"target": "http://localhost:8000", "model": LLAMA, "timeout": 60.0},
                       "environment": {}},
            "scheduler_state": {}, "scheduler_metrics": {"requests_made": {"successful": 300, "incomplete": 2,
                                                                            "errored": 0, "total": 302}},
            "metrics": metrics,
            "requests": {"successful": [], "incomplete": [], "errored": [], "total": None},
        }],
    })
    (m,) = load_measurements([path], hardware="h100_sxm")
    same(m, {"source": str(path), "line": 0, "model": LLAMA, "hardware": "h100_sxm", "backend": "openai_http",
             "precision": "", "mode": "agg", "tp": 1, "pp": 1, "dp": 1, "input_len": 1024, "output_len": 256,
             "concurrency": 16, "request_rate": math.inf, "num_prompts": 300, "ttft_ms": 55.0, "tpot_ms": 11.0,
             "itl_ms": 11.1, "e2el_ms": 1500.0, "output_throughput": 1400.0})


def test_guidellm_optional_metrics_missing_are_nan(tmp_path):
    bench = guidellm_v03_benchmark({"type_": "synchronous"}, 10, ttft=20.0, tpot=7.0, itl=7.0, latency_s=1.0,
                                   prompt=100.0, output=10.0, out_tps=10.0)
    for name in ("time_per_output_token_ms", "inter_token_latency_ms", "request_latency", "output_tokens_per_second"):
        del bench["metrics"][name]
    del bench["worker"]
    (m,) = load_measurements([write(tmp_path, "b.json", {"benchmarks": [bench]})])
    assert all(math.isnan(v) for v in (m.tpot_ms, m.itl_ms, m.e2el_ms, m.output_throughput))
    assert (m.model, m.backend, m.ttft_ms) == ("", "", 20.0)


# --- EvalScope -----------------------------------------------------------------------------------

EVALSCOPE_OLD = {  # evalscope perf up to the perf_constants rename: sentences, times in seconds
    "Time taken for tests (s)": 61.2, "Number of concurrency": 8, "Request rate (req/s)": -1,
    "Total requests": 100, "Succeed requests": 98, "Failed requests": 2,
    "Output token throughput (tok/s)": 1502.5, "Total token throughput (tok/s)": 7514.0,
    "Request throughput (req/s)": 1.6013, "Average latency (s)": 4.8125,
    "Average time to first token (s)": 0.1234, "Average time per output token (s)": 0.0185,
    "Average inter-token latency (s)": 0.0184, "Average input tokens per request": 1024.4,
    "Average output tokens per request": 256.0,
}
EVALSCOPE_NEW = {  # the short names: TTFT/TPOT/ITL in ms, latency still in seconds
    "Test Duration (s)": 25.0, "Concurrency": 4, "Request Rate (req/s)": 2.0, "Total Requests": 50,
    "Success Requests": 48, "Failed Requests": 2, "Req Throughput (req/s)": 1.92, "Avg Latency (s)": 2.5,
    "Avg Input Tokens": 511.6, "Output Throughput (tok/s)": 240.0, "Total Throughput (tok/s)": 1222.0,
    "TTFT (ms)": 35.5, "TPOT (ms)": 9.25, "ITL (ms)": 9.1, "Avg Output Tokens": 127.5,
}


def test_evalscope_older_keys_in_seconds(tmp_path):
    path = write(tmp_path, "benchmark_summary.json", EVALSCOPE_OLD)
    (m,) = load_measurements([path], hardware="h200_sxm", tp=4, precision="fp8")
    same(m, {"source": str(path), "line": 0, "model": "", "hardware": "h200_sxm", "backend": "",
             "precision": "fp8", "mode": "agg", "tp": 4, "pp": 1, "dp": 1, "input_len": 1024, "output_len": 256,
             "concurrency": 8, "request_rate": math.inf, "num_prompts": 98, "ttft_ms": 123.4, "tpot_ms": 18.5,
             "itl_ms": 18.4, "e2el_ms": 4812.5, "output_throughput": 1502.5})


def test_evalscope_newer_keys_and_request_rate(tmp_path):
    path = write(tmp_path, "benchmark_summary.json", EVALSCOPE_NEW)
    (m,) = read_evalscope_result(path, hardware="h100_sxm")
    # --rate 2: an open loop at 2 req/s (--parallel 4 only caps what is in flight)
    same(m, {"source": str(path), "line": 0, "model": "", "hardware": "h100_sxm", "backend": "",
             "precision": "", "mode": "agg", "tp": 1, "pp": 1, "dp": 1, "input_len": 512, "output_len": 128,
             "concurrency": 0, "request_rate": 2.0, "num_prompts": 48, "ttft_ms": 35.5, "tpot_ms": 9.25,
             "itl_ms": 9.1, "e2el_ms": 2500.0, "output_throughput": 240.0})


def test_evalscope_unmeasured_metrics_are_nan(tmp_path):
    """EvalScope writes -1 (and 0 ITL without streaming) for what it could not measure."""
    data = {**EVALSCOPE_OLD, "Average time per output token (s)": -1, "Average inter-token latency (s)": 0.0}
    del data["Output token throughput (tok/s)"]
    (m,) = load_measurements([write(tmp_path, "s.json", data)])
    assert math.isnan(m.tpot_ms) and math.isnan(m.itl_ms) and math.isnan(m.output_throughput)


# --- genai-perf / AIPerf -------------------------------------------------------------------------

def stat(unit, avg, **more):
    return {"unit": unit, "avg": avg, "p99": avg * 1.5, "p95": avg * 1.4, "p90": avg * 1.3, "p75": avg * 1.1,
            "p50": avg, "p25": avg * 0.9, "min": avg * 0.5, "max": avg * 2, "std": avg * 0.1, **more}


GENAI_PERF_STATS = {
    "request_throughput": {"unit": "requests/sec", "avg": 3.1},
    "request_latency": stat("ms", 1290.0),
    "time_to_first_token": stat("ms", 42.0),
    "time_to_second_token": stat("ms", 9.0),
    "inter_token_latency": stat("ms", 9.8),
    "output_token_throughput": {"unit": "tokens/sec", "avg": 396.8},
    "output_token_throughput_per_request": stat("tokens/sec", 99.0),
    "output_sequence_length": stat("tokens", 127.8),
    "input_sequence_length": stat("tokens", 550.2),
}


def test_genai_perf_flat_input_config(tmp_path):
    """genai-perf up to its config rework: the command-line arguments flat in input_config; the
    Triton backend is the server's backend."""
    path = write(tmp_path, "profile_export_genai_perf.json", {**GENAI_PERF_STATS, "input_config": {
        "model": [LLAMA], "formatted_model_name": LLAMA, "model_selection_strategy": "round_robin",
        "backend": "vllm", "endpoint": None, "endpoint_type": "kserve", "service_kind": "triton",
        "streaming": True, "u": None, "num_prompts": 100, "output_tokens_mean": 128, "random_seed": 0,
        "synthetic_input_tokens_mean": 550, "synthetic_input_tokens_stddev": 0, "concurrency": 4,
        "measurement_interval": 10000, "request_rate": None, "stability_percentage": 999,
        "profile_export_file": "artifacts/x/profile_export.json", "artifact_dir": "artifacts/x",
        "tokenizer": "hf-internal-testing/llama-tokenizer", "subcommand": "profile", "extra_inputs": {},
    }})
    assert detect_json_format(path) == "genai-perf"
    (m,) = load_measurements([path], hardware="a100_sxm_80gb")
    # genai-perf's inter_token_latency is (latency - TTFT) / (output tokens - 1): TPOT and ITL both
    same(m, {"source": str(path), "line": 0, "model": LLAMA, "hardware": "a100_sxm_80gb", "backend": "vllm",
             "precision": "", "mode": "agg", "tp": 1, "pp": 1, "dp": 1, "input_len": 550, "output_len": 128,
             "concurrency": 4, "request_rate": math.inf, "num_prompts": 0, "ttft_ms": 42.0, "tpot_ms": 9.8,
             "itl_ms": 9.8, "e2el_ms": 1290.0, "output_throughput": 396.8})


def test_genai_perf_config_sections_and_request_rate(tmp_path):
    path = write(tmp_path, "profile_export_genai_perf.json", {
        **GENAI_PERF_STATS, "request_count": {"unit": "count", "avg": 120},
        "input_config": {"model_names": ["Qwen/Qwen3-8B"],
                         "endpoint": {"backend": "tensorrtllm", "service_kind": "openai", "type": "chat",
                                      "streaming": True, "url": "localhost:8000"},
                         "perf_analyzer": {"path": "perf_analyzer", "stimulus": {"request_rate": 8.0}},
                         "input": {"num_dataset_entries": 100, "synthetic_tokens": {"mean": 550, "stddev": 0}}}})
    assert detect_json_format(path) == "genai-perf"
    (m,) = load_measurements([path])
    assert (m.model, m.backend, m.concurrency, m.request_rate, m.num_prompts) == ("Qwen/Qwen3-8B", "chat", 0, 8.0,
                                                                                    120)


@pytest.fixture
def aiperf(tmp_path):
    """An AIPerf profile_export_aiperf.json (flat metric blocks, UserConfig as input_config)."""
    return write(tmp_path, "profile_export_aiperf.json", {
        "schema_version": "1.3", "aiperf_version": "0.3.0", "benchmark_id": "0b5e",
        "request_throughput": {"unit": "requests/sec", "avg": 7.2},
        "request_latency": stat("ms", 560.0, count=64, sum=35840.0),
        "request_count": {"unit": "requests", "avg": 64.0},
        "time_to_first_token": stat("ms", 28.5, count=64, sum=1824.0),
        "inter_token_latency": stat("ms", 8.4, count=64, sum=537.6),
        "output_token_throughput": {"unit": "tokens/sec", "avg": 460.8},
        "output_token_throughput_per_user": stat("tokens/sec", 119.0),
        "output_sequence_length": stat("tokens", 64.0, count=64, sum=4096.0),
        "input_sequence_length": stat("tokens", 512.0, count=64, sum=32768.0),
        "input_config": {"endpoint": {"model_names": [LLAMA], "type": "chat", "streaming": True,
                                      "url": "localhost:8000"},
                         "loadgen": {"concurrency": 4, "request_count": 64},
                         "cli_command": f"aiperf profile --model {LLAMA} --streaming --concurrency 4"},
        "was_cancelled": False, "error_summary": [],
        "start_time": "2025-10-01T12:00:00", "end_time": "2025-10-01T12:00:09",
    })


def test_aiperf_export(aiperf):
    assert detect_json_format(aiperf) == "aiperf"
    (m,) = load_measurements([aiperf], hardware="h100_sxm", tp=1)
    same(m, {"source": str(aiperf), "line": 0, "model": LLAMA, "hardware": "h100_sxm", "backend": "chat",
             "precision": "", "mode": "agg", "tp": 1, "pp": 1, "dp": 1, "input_len": 512, "output_len": 64,
             "concurrency": 4, "request_rate": math.inf, "num_prompts": 64, "ttft_ms": 28.5, "tpot_ms": 8.4,
             "itl_ms": 8.4, "e2el_ms": 560.0, "output_throughput": 460.8})
    assert read_profile_export(aiperf, hardware="h100_sxm") == [m]


def test_profile_export_units_are_converted(tmp_path):
    """The unit field decides: seconds and nanoseconds come out in ms."""
    data = {"records": {  # early AIPerf: the metric blocks under "records", tagged
        "time_to_first_token": {"tag": "time_to_first_token", "header": "Time to First Token", "unit": "s",
                                "avg": 0.0425},
        "inter_token_latency": {"tag": "inter_token_latency", "header": "Inter Token Latency", "unit": "ns",
                                "avg": 9_750_000.0},
        "request_latency": {"tag": "request_latency", "header": "Request Latency", "unit": "sec", "avg": 1.25},
        "input_sequence_length": {"tag": "input_sequence_length", "unit": "tokens", "avg": 200.0},
        "output_sequence_length": {"tag": "output_sequence_length", "unit": "tokens", "avg": 100.0},
        "request_count": {"tag": "request_count", "unit": "requests", "avg": 30},
    }, "input_config": {"model_names": [LLAMA], "endpoint": {"type": "completions"}}}
    path = write(tmp_path, "profile_export_aiperf.json", data)
    assert detect_json_format(path) == "aiperf"
    (m,) = load_measurements([path])
    assert m.ttft_ms == pytest.approx(42.5)
    assert m.tpot_ms == pytest.approx(9.75) and m.itl_ms == pytest.approx(9.75)
    assert m.e2el_ms == pytest.approx(1250.0)
    assert math.isnan(m.output_throughput)
    assert (m.model, m.backend, m.num_prompts, m.input_len, m.output_len) == (LLAMA, "completions", 30, 200, 100)


# --- detection, the CLI, bad input ---------------------------------------------------------------

def test_format_is_told_from_the_content_not_the_name(tmp_path, guidellm_v03, aiperf):
    named_wrong = write(tmp_path, "profile_export_genai_perf.json", EVALSCOPE_NEW)
    vllm = write(tmp_path, "benchmark_summary.json", {
        "backend": "vllm", "model_id": LLAMA, "completed": 10, "total_input_tokens": 1000,
        "total_output_tokens": 500, "mean_ttft_ms": 20.0})
    assert [detect_json_format(p) for p in (guidellm_v03, aiperf, named_wrong, vllm)] == [
        "guidellm", "aiperf", "evalscope", "vllm"]
    assert set(JSON_FORMATS) == {"vllm", "guidellm", "evalscope", "genai-perf", "aiperf"}
    rows = load_measurements([guidellm_v03, aiperf, named_wrong, vllm], hardware="h100_sxm")
    assert len(rows) == 5 + 1 + 1 + 1
    assert rows[-1].backend == "vllm" and rows[-1].input_len == 100
    with pytest.raises(ConfigError, match="GuideLLM"):
        read_guidellm_result(named_wrong)


def test_validate_cli_runs_on_an_aiperf_export(aiperf, capsys):
    assert simllm.cli.main(["validate", str(aiperf), "--hardware", "h100-sxm", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (point,) = data["points"]
    assert (point["model"], point["hardware"], point["skipped"]) == ("llama-3.1-8b", "h100-sxm", None)
    assert point["measured_ttft_ms"] == 28.5 and point["predicted_ttft_ms"] > 0
    ttft = data["summary"]["ttft"]
    assert ttft["points"] + ttft["below_bound"] == 1  # compared, or faster than the H100's peaks allow


def expect_error(path, *needles):
    with pytest.raises(ConfigError) as info:
        load_measurements([path])
    text = str(info.value)
    assert "\n" not in text and str(path) in text, text
    for needle in needles:
        assert needle in text, text
    return info.value


def test_unknown_json_shape(tmp_path):
    for name, data in (("other.json", {"results": {"accuracy": 0.5}}), ("list.json", [1, 2, 3])):
        err = expect_error(write(tmp_path, name, data), "GuideLLM", "EvalScope", "genai-perf", "AIPerf", "vllm")
        assert err.source == str(tmp_path / name)


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "benchmarks": [\n    {"metrics": }\n  ]\n}\n', encoding="utf-8")
    err = expect_error(path, "invalid JSON", f"{path}:3:")
    assert err.line == 3


def test_zero_successful_requests(tmp_path):
    bench = guidellm_v03_benchmark({"type_": "synchronous"}, 0, ttft=20.0, tpot=7.0, itl=7.0, latency_s=1.0,
                                   prompt=100.0, output=10.0, out_tps=10.0)
    err = expect_error(write(tmp_path, "g.json", {"benchmarks": [bench]}), "benchmarks[0].request_totals.successful",
                       "at least one successful request")
    assert (err.key, err.value) == ("benchmarks[0].request_totals.successful", 0)
    expect_error(write(tmp_path, "e.json", {**EVALSCOPE_OLD, "Succeed requests": 0}), "Succeed requests = 0")
    expect_error(write(tmp_path, "a.json", {**GENAI_PERF_STATS, "request_count": {"unit": "count", "avg": 0}}),
                 "request_count.avg = 0")


def test_non_numeric_metrics_name_the_key(tmp_path, guidellm_v03):
    data = json.loads(guidellm_v03.read_text())
    data["benchmarks"][1]["metrics"]["time_to_first_token_ms"]["successful"]["mean"] = "fast"
    err = expect_error(write(tmp_path, "g.json", data),
                       "benchmarks[1].metrics.time_to_first_token_ms.successful.mean = 'fast'", "a number")
    assert err.value == "fast"
    expect_error(write(tmp_path, "e.json", {**EVALSCOPE_NEW, "TTFT (ms)": "n/a"}), "TTFT (ms) = 'n/a'")
    expect_error(write(tmp_path, "p.json", {**GENAI_PERF_STATS, "time_to_first_token": {"unit": "ms", "avg": None}}),
                 "time_to_first_token.avg = None")
    expect_error(write(tmp_path, "u.json", {**GENAI_PERF_STATS,
                                            "time_to_first_token": {"unit": "fortnights", "avg": 1.0}}),
                 "time_to_first_token.unit = 'fortnights'", "time unit")


def test_bad_strategy_and_missing_tokens(tmp_path):
    bench = guidellm_v03_benchmark({"type_": "replay"}, 5, ttft=20.0, tpot=7.0, itl=7.0, latency_s=1.0,
                                   prompt=100.0, output=10.0, out_tps=10.0)
    expect_error(write(tmp_path, "g.json", {"benchmarks": [bench]}), "benchmarks[0].args.strategy.type_ = 'replay'")
    data = dict(EVALSCOPE_NEW)
    del data["Avg Input Tokens"]
    expect_error(write(tmp_path, "e.json", data), "Avg Input Tokens = None")


def test_bad_files_through_the_cli_are_one_line(tmp_path, capsys):
    path = write(tmp_path, "profile_export_aiperf.json", {**GENAI_PERF_STATS, "input_sequence_length": "long"})
    assert simllm.cli.main(["validate", str(path), "--hardware", "h100-sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err and "input_sequence_length = 'long'" in err
