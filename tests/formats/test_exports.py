"""``simllm.formats.exports``: vLLM-compatible JSON (exact keys, the summary's values), GuideLLM
benchmarks.json (read back by ``load_measurements``), CSV and Parquet, and atomic writes."""
import csv
import json
import math
import re
import stat
import sys

import numpy as np
import pytest

import simllm
from simcore import codes
from simllm.errors import ConfigError
from simllm.formats import exports
from simllm.formats.measurements import load_measurements
from simllm.sim.results import SimResult

MODEL, HARDWARE = "llama-3.1-8b", "h100-sxm"
N = 300
OPEN_LOOP = simllm.Workload(num_prompts=N, request_rate=20.0, seed=3,
                            input_len=simllm.LengthDist("uniform", low=100, high=1000),
                            output_len=simllm.LengthDist("uniform", low=20, high=400))

# ``vllm bench serve --save-result --save-detailed``'s keys, in its order (vllm/benchmarks/serve.py).
VLLM_KEYS = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
             "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
             "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
             "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
             "max_output_tokens_per_s", "max_concurrent_requests"]
VLLM_STATS = [f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el")
              for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99")]
# GuideLLM's GenerativeMetrics, StatusBreakdown, DistributionSummary and Percentiles fields.
GUIDELLM_METRICS = ["requests_per_second", "request_concurrency", "request_latency", "prompt_token_count",
                    "output_token_count", "time_to_first_token_ms", "time_per_output_token_ms",
                    "inter_token_latency_ms", "output_tokens_per_second", "tokens_per_second"]
STATUSES = {"successful", "errored", "incomplete", "total"}
DISTRIBUTION = {"mean", "median", "mode", "variance", "std_dev", "min", "max", "count", "total_sum", "percentiles"}
PERCENTILES = ["p001", "p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p999"]


def run(workload=OPEN_LOOP, keep_requests=True, **serving):
    return simllm.simulate(simllm.load_model(MODEL), simllm.load_hardware(HARDWARE), simllm.ServingConfig(**serving),
                           workload, keep_requests=keep_requests)


@pytest.fixture(scope="module")
def result():
    return run()


@pytest.fixture(scope="module")
def failing():
    """Prompts up to 3000 tokens with max_model_len 2048 and a 0.5 s client timeout: some
    requests are rejected, some time out, some succeed."""
    w = simllm.Workload(num_prompts=120, request_rate=30.0, timeout_s=0.5,
                        input_len=simllm.LengthDist("uniform", low=100, high=3000),
                        output_len=simllm.LengthDist("fixed", value=40))
    return run(w, max_model_len=2048)


def same(a, b):
    if isinstance(a, float) and math.isnan(a):
        return b is None
    return a == b


# ----------------------------------------------------------------------------- vLLM JSON


def test_vllm_keys_in_order(result):
    doc = exports.vllm_result(result)
    keys = list(doc)
    assert keys[:len(VLLM_KEYS)] == VLLM_KEYS
    assert keys[len(VLLM_KEYS):len(VLLM_KEYS) + len(VLLM_STATS)] == VLLM_STATS
    assert re.fullmatch(r"\d{8}-\d{6}", doc["date"])
    assert doc["endpoint_type"] == doc["backend"] == doc["label"] == "simllm"
    assert doc["model_id"] == doc["tokenizer_id"] == result.summary["model"]
    assert doc["num_prompts"] == N and doc["request_rate"] == 20.0 and doc["burstiness"] == 1.0
    assert doc["max_concurrency"] is None and doc["request_goodput"] is None  # as vLLM without SLOs


def test_vllm_values_are_the_summary(result):
    doc = exports.vllm_result(result)
    for key, value in result.summary.items():
        assert same(value, doc[key]), key
    assert doc["timeseries"]["output_throughput"] == result.timeseries["output_throughput"].tolist()
    json.dumps(doc, allow_nan=False)


def test_vllm_per_request_lists(result):
    doc = exports.vllm_result(result)
    req = result.requests
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        assert len(doc[key]) == N, key
    assert doc["input_lens"] == req["input_tokens"].tolist()
    assert doc["output_lens"] == req["output_tokens"].tolist()
    assert doc["ttfts"] == req["ttft_s"].tolist()  # seconds, as vLLM
    assert doc["itls"] == [[]] * N and doc["errors"] == [""] * N
    assert sum(doc["output_lens"]) == doc["total_output_tokens"]
    assert 0 < doc["max_output_tokens_per_s"] and 0 < doc["max_concurrent_requests"] <= N
    assert not exports.vllm_result(result, detailed=False).keys() & set(exports.VLLM_DETAILED_KEYS)


def test_vllm_failed_requests(failing):
    s = failing.summary
    assert s["num_rejected"] > 0 and s["num_timed_out"] > 0 and s["completed"] > 0
    doc = exports.vllm_result(failing)
    ok = failing.requests["status"] == codes.STATUS_DONE
    assert doc["failed"] == s["failed"] == int((~ok).sum())
    assert [e == "" for e in doc["errors"]] == ok.tolist()
    assert {e for e in doc["errors"] if e} == {"timed out", "rejected: longer than max_model_len or the KV cache"}
    assert all(doc["output_lens"][i] == 0 and doc["ttfts"][i] == 0.0 for i in np.nonzero(~ok)[0])


def test_vllm_summary_only():
    res = run(keep_requests=False)
    doc = exports.vllm_result(res)
    assert not doc.keys() & set(exports.VLLM_DETAILED_KEYS)
    assert doc["max_output_tokens_per_s"] is None and doc["max_concurrent_requests"] is None
    with pytest.raises(ConfigError, match="keep_requests=True"):
        exports.vllm_result(res, detailed=True)


def test_vllm_file_is_read_back(result, tmp_path):
    path = exports.export(result, tmp_path / "r.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["mean_ttft_ms"] == result.summary["mean_ttft_ms"]
    (m,) = load_measurements([path])
    assert m.ttft_ms == result.summary["mean_ttft_ms"] and m.tpot_ms == result.summary["mean_tpot_ms"]
    assert m.num_prompts == N and m.request_rate == 20.0 and m.backend == "simllm"


# ----------------------------------------------------------------------------- GuideLLM


def test_guidellm_layout(result):
    doc = exports.guidellm_report(result)
    (bench,) = doc["benchmarks"]
    assert bench["type_"] == "generative_benchmark"
    assert bench["args"]["strategy"] == {"type_": "poisson", "rate": 20.0, "max_concurrency": None,
                                         "initial_burst": False}
    assert bench["request_totals"] == {"successful": N, "errored": 0, "incomplete": 0, "total": N}
    assert list(bench["metrics"]) == GUIDELLM_METRICS
    for name, metric in bench["metrics"].items():
        assert set(metric) == STATUSES, name
        for status, dist in metric.items():
            assert set(dist) == DISTRIBUTION, (name, status)
            assert list(dist["percentiles"]) == PERCENTILES
        assert metric["incomplete"]["count"] == 0 and metric["errored"]["count"] == 0
    json.dumps(doc, allow_nan=False)


def test_guidellm_round_trip(result, tmp_path):
    path = exports.export(result, tmp_path / "benchmarks.json", "guidellm")
    (m,) = load_measurements([path])
    s, req = result.summary, result.requests
    decode = req["finish_s"] - req["first_token_s"]
    assert m.ttft_ms == pytest.approx(s["mean_ttft_ms"], rel=1e-9)
    # GuideLLM's TPOT spreads the decode time over every output token, weighted by tokens.
    assert m.tpot_ms == pytest.approx(1e3 * decode.sum() / req["output_tokens"].sum(), rel=1e-9)
    # Its ITL per request is vLLM's TPOT; weighted by tokens - 1, its mean is vLLM's mean ITL.
    assert m.itl_ms == pytest.approx(s["mean_itl_ms"], rel=1e-9)
    assert m.e2el_ms == pytest.approx(s["mean_e2el_ms"], rel=1e-9)
    assert m.input_len == round(s["total_input_tokens"] / N) and m.output_len == round(s["total_output_tokens"] / N)
    assert m.num_prompts == N and m.concurrency == 0 and m.request_rate == 20.0
    assert m.model == s["model"] and m.backend == "simllm"
    metrics = json.loads(path.read_text(encoding="utf-8"))["benchmarks"][0]["metrics"]
    ttft = metrics["time_to_first_token_ms"]["successful"]
    assert ttft["count"] == N and ttft["min"] == pytest.approx(1e3 * np.min(req["ttft_s"]))
    assert metrics["output_tokens_per_second"]["successful"]["mean"] == pytest.approx(s["output_throughput"], rel=1e-6)


def test_guidellm_closed_loop(tmp_path):
    res = run(simllm.Workload(num_prompts=64, max_concurrency=8))
    path = exports.export(res, tmp_path / "b.json", "guidellm")
    assert json.loads(path.read_text())["benchmarks"][0]["args"]["strategy"] == {"type_": "concurrent", "streams": 8}
    (m,) = load_measurements([path])
    assert m.concurrency == 8 and math.isinf(m.request_rate)
    assert m.ttft_ms == pytest.approx(res.summary["mean_ttft_ms"], rel=1e-9)
    conc = json.loads(path.read_text())["benchmarks"][0]["metrics"]["request_concurrency"]["successful"]
    assert conc["max"] == 8 and 1 <= conc["mean"] <= 8


def test_guidellm_errors(failing):
    bench = exports.guidellm_report(failing)["benchmarks"][0]
    s = failing.summary
    assert bench["request_totals"] == {"successful": s["completed"], "errored": s["failed"], "incomplete": 0,
                                       "total": s["num_requests"]}
    latency = bench["metrics"]["request_latency"]
    assert latency["successful"]["count"] == s["completed"] and latency["errored"]["count"] == s["failed"]
    assert latency["total"]["count"] == s["num_requests"]
    assert bench["metrics"]["time_to_first_token_ms"]["successful"]["mean"] == pytest.approx(s["mean_ttft_ms"])


def test_guidellm_needs_requests():
    with pytest.raises(ConfigError, match="keep_requests=True") as info:
        exports.guidellm_report(run(keep_requests=False))
    assert "\n" not in str(info.value)


def test_distribution_as_guidellm():
    d = exports.distribution([4.0, 1.0, 3.0, 2.0])
    assert (d["mean"], d["median"], d["min"], d["max"], d["count"], d["total_sum"]) == (2.5, 2.0, 1.0, 4.0, 4, 10.0)
    assert d["variance"] == 1.25 and d["std_dev"] == math.sqrt(1.25)
    assert d["percentiles"]["p25"] == 1.0 and d["percentiles"]["p75"] == 3.0 and d["percentiles"]["p999"] == 4.0
    w = exports.distribution([1.0, 2.0], [3.0, 1.0])
    assert (w["mean"], w["median"], w["mode"], w["count"]) == (1.25, 1.0, 1.0, 2)
    empty = exports.distribution([])
    assert empty["count"] == 0 and empty["mean"] == 0.0 and set(empty["percentiles"]) == set(PERCENTILES)


# ----------------------------------------------------------------------------- CSV and Parquet


def test_summary_csv(result, tmp_path):
    path = exports.export(result, tmp_path / "summary.csv")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1
    row = rows[0]
    s = result.summary
    for key in ("mean_ttft_ms", "p99_tpot_ms", "output_throughput", "compute_utilization"):
        assert float(row[key]) == s[key], key
    assert int(row["completed"]) == N and row["model"] == s["model"]
    assert float(row["memory.weight_bytes"]) == s["memory"]["weight_bytes"]
    assert row["max_concurrency"] == ""


def test_requests_csv(result, tmp_path):
    path = exports.export(result, tmp_path / "requests.csv", "requests")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == N and {r["status"] for r in rows} == {"done"}
    assert [float(r["ttft_s"]) for r in rows] == result.requests["ttft_s"].tolist()


def test_parquet(result, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(exports.export(result, tmp_path / "s.parquet")).to_pylist()
    assert len(table) == 1 and table[0]["mean_ttft_ms"] == result.summary["mean_ttft_ms"]
    rows = pq.read_table(exports.export(result, tmp_path / "r.parquet", "requests")).to_pylist()
    assert len(rows) == N and rows[0]["status"] == "done" and rows[0]["ttft_s"] == result.requests["ttft_s"][0]


def test_missing_pyarrow_is_one_line(result, tmp_path, monkeypatch):
    for name in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, name, None)
    for fmt in ("summary", "requests"):
        with pytest.raises(ConfigError, match="pip install pyarrow") as info:
            exports.export(result, tmp_path / "x.parquet", fmt)
        assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- choosing and writing


def test_format_by_suffix(tmp_path):
    assert exports.resolve_format(tmp_path / "a.json") == (".json", "vllm")
    assert exports.resolve_format(tmp_path / "a.JSON", "guidellm") == (".json", "guidellm")
    assert exports.resolve_format(tmp_path / "a.csv") == (".csv", "summary")
    assert exports.resolve_format(tmp_path / "a.parquet", "requests") == (".parquet", "requests")
    assert exports.resolve_format(tmp_path / "result", "vllm") == (".json", "vllm")
    for path, fmt in (("a.txt", None), ("a.csv", "guidellm"), ("a.json", "requests"), ("a.json", "yaml")):
        with pytest.raises(ConfigError) as info:
            exports.resolve_format(tmp_path / path, fmt)
        assert "\n" not in str(info.value)


def test_failed_write_leaves_nothing(result, tmp_path, monkeypatch):
    target = tmp_path / "requests.csv"
    target.write_text("old\n", encoding="utf-8")

    def half_then_fail(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write("request,ttft_s\n0,")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(SimResult, "save_detailed", half_then_fail)
    with pytest.raises(RuntimeError, match="disk on fire"):
        exports.export(result, target, "requests")
    assert target.read_text(encoding="utf-8") == "old\n"  # untouched
    assert [p.name for p in tmp_path.iterdir()] == ["requests.csv"]  # no temporary file left


def test_failed_serialisation_leaves_nothing(result, tmp_path, monkeypatch):
    monkeypatch.setattr(exports, "to_json", lambda obj: (_ for _ in ()).throw(ValueError("bad")))
    with pytest.raises(ValueError):
        exports.export(result, tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


def test_folder_created_and_unwritable_path(result, tmp_path):
    path = exports.export(result, tmp_path / "new" / "r.json")
    assert json.loads(path.read_text(encoding="utf-8"))["completed"] == N
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's private mode
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot write") as info:
        exports.export(result, tmp_path / "file" / "r.json")  # a file where the folder should be
    assert "\n" not in str(info.value)
