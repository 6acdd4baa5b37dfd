"""simllm.loadtest: planning load points (EvalScope's --parallel/--number pairing, concurrency
ranges, rate lists), running them, the knee recommendation and the table/JSON/CSV outputs."""
import csv
import io
import json
import math
from dataclasses import replace
from itertools import pairwise

import pytest

import simllm
from simllm.analysis.loadtest import (
    LoadPoint,
    LoadTestRow,
    format_loadtest,
    loadtest_to_csv,
    loadtest_to_json,
    parse_concurrency_range,
    plan_points,
    point_workload,
    recommend,
    run_loadtest,
)
from simllm.errors import ConfigError

# EvalScope's example sweep, one doubling further: with measured kernel tables an 8B model on an
# H100 saturates between 200 and 400 clients (max_num_seqs 256 caps the batch).
PARALLEL = [1, 10, 50, 100, 200, 400]
NUMBER = [10, 20, 100, 200, 400, 800]
TOL = 0.97  # "non-decreasing" up to 3% simulation noise


@pytest.fixture(scope="module")
def target():
    return simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"), simllm.ServingConfig()


@pytest.fixture(scope="module")
def sweep(target):
    model, hardware, serving = target
    points = plan_points(parallel=PARALLEL, number=NUMBER)
    return run_loadtest(model, hardware, serving, simllm.Workload(), points)


# ----------------------------------------------------------------------------- the issue's check


def test_evalscope_sweep_saturates_and_recommends_one_of_the_points(sweep):
    rows = sweep.rows
    assert [r.concurrency for r in rows] == PARALLEL
    assert [r.num_prompts for r in rows] == NUMBER
    for prev, cur in pairwise(rows):
        assert cur.output_throughput_tok_s >= TOL * prev.output_throughput_tok_s
        assert cur.p99_latency_ms >= TOL * prev.p99_latency_ms
        assert cur.avg_latency_ms >= TOL * prev.avg_latency_ms
    # It saturates: the last doubling buys far less than the first steps.
    assert rows[-1].output_throughput_tok_s / rows[-2].output_throughput_tok_s < 1.10
    assert rows[1].output_throughput_tok_s / rows[0].output_throughput_tok_s > 2
    assert sweep.recommended is not None
    assert rows[sweep.recommended].concurrency in PARALLEL
    assert sweep.reason.startswith(f"concurrency {rows[sweep.recommended].concurrency}:")
    for r in rows:
        assert r.error_rate == 0.0
        assert 0 < r.compute_utilization <= 1 and 0 < r.bandwidth_utilization <= 1
        assert 0 < r.kv_cache_usage_mean <= r.kv_cache_usage_peak <= 1
        assert r.p90_latency_ms <= r.p99_latency_ms and r.mean_ttft_ms <= r.p99_ttft_ms


def test_json_round_trip(sweep):
    data = loadtest_to_json(sweep)
    again = json.loads(json.dumps(data, allow_nan=False))
    assert again == data
    assert [LoadTestRow.from_dict(r) for r in again["rows"]] == list(sweep.rows)
    rec = again["recommendation"]
    assert rec["index"] == sweep.recommended
    assert rec["concurrency"] == sweep.rows[sweep.recommended].concurrency
    assert rec["reason"] == sweep.reason and rec["min_gain"] == 0.10 and rec["slo_p99_latency_ms"] is None
    assert again["rows"][0]["request_rate_rps"] == "inf"


def test_csv_has_header_and_one_line_per_point(sweep):
    text = loadtest_to_csv(sweep)
    lines = list(csv.reader(io.StringIO(text)))
    assert lines[0][:3] == ["concurrency", "request_rate_rps", "num_prompts"]
    assert "output_throughput_tok_s" in lines[0] and "p99_latency_ms" in lines[0]
    assert len(lines) == len(PARALLEL) + 1
    col = lines[0].index("output_throughput_tok_s")
    assert [float(line[col]) for line in lines[1:]] == [r.output_throughput_tok_s for r in sweep.rows]


def test_table_marks_the_recommendation(sweep):
    text = format_loadtest(sweep)
    assert "Llama-3.1-8B" in text and "P99 lat (ms)" in text and "Gen (tok/s)" in text
    marked = [line for line in text.splitlines() if line.startswith("* ")]
    assert len(marked) == 1 and marked[0].split()[1] == str(sweep.rows[sweep.recommended].concurrency)
    assert f"  {sweep.reason}\n" in text
    assert text.rstrip().endswith(sweep.capacity.describe())


def test_capacity_is_what_the_saturated_points_approach(target, sweep):
    """No closed loop of the sweep completes more than the capacity; the saturated one (400
    clients on 256 slots, ramp-up and drain included) comes within 15% of it."""
    cap = sweep.capacity
    assert cap == simllm.capacity(*target, simllm.Workload())
    assert all(r.output_throughput_tok_s <= cap.output_throughput_tok_s / TOL for r in sweep.rows)
    assert sweep.rows[-1].output_throughput_tok_s >= 0.85 * cap.output_throughput_tok_s
    assert loadtest_to_json(sweep)["capacity"] == cap.to_dict()


def test_row_equals_a_direct_simulation(target, sweep):
    model, hardware, serving = target
    i = 2
    direct = simllm.simulate(model, hardware, serving, simllm.Workload(num_prompts=NUMBER[i], max_concurrency=PARALLEL[i]),
                             keep_requests=False).summary
    row = sweep.rows[i]
    assert row.request_throughput_rps == direct["request_throughput"]
    assert row.output_throughput_tok_s == direct["output_throughput"]
    assert row.avg_latency_ms == direct["mean_e2el_ms"]
    assert row.p90_latency_ms == direct["p90_e2el_ms"]
    assert row.p99_latency_ms == direct["p99_e2el_ms"]
    assert row.mean_ttft_ms == direct["mean_ttft_ms"] and row.p99_ttft_ms == direct["p99_ttft_ms"]
    assert row.mean_tpot_ms == direct["mean_tpot_ms"] and row.p99_tpot_ms == direct["p99_tpot_ms"]
    assert row.compute_utilization == direct["compute_utilization"]
    assert row.bandwidth_utilization == direct["bandwidth_utilization"]
    assert row.kv_cache_usage_mean == direct["kv_cache_usage_mean"]
    assert row.kv_cache_usage_peak == direct["kv_cache_usage_peak"]
    assert row.error_rate == direct["error_rate"]


def test_open_loop_points_and_progress(target):
    model, hardware, serving = target

    class Counter:
        n = 0

        def advance(self, n=1):
            self.n += n

    base = simllm.Workload(input_len=simllm.LengthDist("fixed", value=256), output_len=simllm.LengthDist("fixed", value=32))
    points = plan_points(request_rates=[2, 8], number=[50])
    bar = Counter()
    res = run_loadtest(model, hardware, serving, base, points, progress=bar, keep_requests=True)
    assert bar.n == 2
    assert [(p.concurrency, p.request_rate, p.num_prompts) for p in points] == [(0, 2.0, 50), (0, 8.0, 50)]
    assert all(r.requests is not None for r in res.results)
    direct = simllm.simulate(model, hardware, serving, replace(base, num_prompts=50, request_rate=8.0)).summary
    assert res.rows[1].p99_latency_ms == direct["p99_e2el_ms"]
    assert res.rows[1].request_rate_rps == 8.0 and res.rows[1].concurrency == 0
    assert "rate 8 req/s" in format_loadtest(res) or "8 req/s" in format_loadtest(res)


def test_point_workload_keeps_the_request_shape():
    base = simllm.Workload(num_prompts=5, request_rate=3.0, max_concurrency=7, seed=4, output_len=simllm.LengthDist("fixed", value=9))
    w = point_workload(base, LoadPoint(concurrency=16, num_prompts=160))
    assert (w.num_prompts, w.max_concurrency, w.request_rate, w.seed, w.output_len.value) == (160, 16, math.inf, 4, 9)
    w = point_workload(base, LoadPoint(request_rate=2.5, num_prompts=30))
    assert (w.num_prompts, w.max_concurrency, w.request_rate) == (30, 0, 2.5)


def test_run_without_points_is_an_error(target):
    with pytest.raises(ConfigError):
        run_loadtest(*target, simllm.Workload(), [])


# ----------------------------------------------------------------------------- planning


def test_plan_pairs_parallel_and_number():
    points = plan_points(parallel=PARALLEL, number=NUMBER)
    assert [(p.concurrency, p.num_prompts) for p in points] == list(zip(PARALLEL, NUMBER))
    assert all(p.request_rate == math.inf and p.closed_loop for p in points)
    assert [p.num_prompts for p in plan_points(parallel=[1, 4])] == [10, 40]  # 10 per client by default
    assert [p.num_prompts for p in plan_points(parallel=[2], default_number_per_client=3)] == [6]


@pytest.mark.parametrize("spec, expected", [
    ("1:256:x2", [1, 2, 4, 8, 16, 32, 64, 128, 256]),
    ("1:200:x2", [1, 2, 4, 8, 16, 32, 64, 128]),
    ("16:64:+16", [16, 32, 48, 64]),
    ("4:10:3", [4, 7, 10]),
    ("1:10:x1.5", [1, 2, 3, 4, 6, 9]),
    ("5:5:x2", [5]),
    ((1, 8, "x2"), [1, 2, 4, 8]),
    ((10, 30, 10), [10, 20, 30]),
])
def test_concurrency_range(spec, expected):
    assert parse_concurrency_range(spec) == expected
    assert [p.concurrency for p in plan_points(concurrency_range=spec)] == expected


def test_plan_rates_and_broadcast_number():
    points = plan_points(request_rates=[1, 2.5, math.inf])
    assert [(p.concurrency, p.request_rate, p.num_prompts) for p in points] == [(0, 1.0, 1000), (0, 2.5, 1000),
                                                                                 (0, math.inf, 1000)]
    assert [p.num_prompts for p in plan_points(request_rates=[1, 2], number=[30])] == [30, 30]
    assert [p.num_prompts for p in plan_points(request_rates=[1, 2], number=[30, 40])] == [30, 40]
    assert [p.num_prompts for p in plan_points(concurrency_range="1:4:x2", number=[8])] == [8, 8, 8]


def _error(**kwargs):
    with pytest.raises(ConfigError) as exc:
        plan_points(**kwargs)
    return exc.value


def test_paired_length_mismatch_names_number_and_both_lengths():
    err = _error(parallel=PARALLEL, number=NUMBER[:5])
    assert err.key == "--number"
    assert "--parallel (6)" in str(err) and "got 5" in str(err)
    assert _error(parallel=[1, 2], number=[10]).key == "--number"  # --parallel pairs strictly, as evalscope
    assert _error(request_rates=[1, 2, 3], number=[10, 20]).key == "--number"


@pytest.mark.parametrize("kwargs, flag", [
    ({"parallel": []}, "--parallel"),
    ({"parallel": [1, 2], "number": []}, "--number"),
    ({"request_rates": []}, "--request-rate"),
    ({"parallel": [0, 10]}, "--parallel"),
    ({"parallel": [-5]}, "--parallel"),
    ({"parallel": [2.5]}, "--parallel"),
    ({"parallel": [1, 2], "number": [10, 0]}, "--number"),
    ({"request_rates": [0]}, "--request-rate"),
    ({"request_rates": [-1.0]}, "--request-rate"),
    ({"request_rates": [math.nan]}, "--request-rate"),
    ({"concurrency_range": "1:256"}, "--concurrency-range"),
    ({"concurrency_range": "0:8:x2"}, "--concurrency-range"),
    ({"concurrency_range": "8:4:x2"}, "--concurrency-range"),
    ({"concurrency_range": "1:8:x1"}, "--concurrency-range"),
    ({"concurrency_range": "1:8:+0"}, "--concurrency-range"),
    ({"concurrency_range": "a:b:c"}, "--concurrency-range"),
    ({"concurrency_range": (1, 8)}, "--concurrency-range"),
    ({"concurrency_range": "1:100000:+1"}, "--concurrency-range"),
])
def test_bad_values_name_the_flag(kwargs, flag):
    err = _error(**kwargs)
    assert err.key == flag
    assert str(err).startswith("command line: " + flag)


def test_exactly_one_mode():
    err = _error(parallel=[1], request_rates=[1.0])
    assert "exactly one of" in str(err) and "--parallel and --request-rate" in str(err)
    err = _error(concurrency_range="1:4:x2", parallel=[1])
    assert "--parallel and --concurrency-range" in str(err)
    assert "exactly one of" in str(_error())


# ----------------------------------------------------------------------------- recommend


def _rows(concurrency, throughput, p99):
    return [LoadTestRow(concurrency=c, num_prompts=10 * c, output_throughput_tok_s=t, p99_latency_ms=p)
            for c, t, p in zip(concurrency, throughput, p99)]


def test_recommend_finds_the_knee():
    rows = _rows([1, 10, 50, 100], [100, 500, 740, 785], [800, 1000, 2000, 4200])
    i, reason = recommend(rows)
    assert i == 2
    assert reason == ("concurrency 50: output throughput rises 48% from 10 to 50 but only 6% from 50 to 100 "
                      "while P99 latency grows 2.1x")
    assert recommend(rows, min_gain=0.5)[0] == 1  # 48% is not enough then
    assert recommend(rows, min_gain=0.05)[0] == 3  # ... and 6% is here, the last point: not saturated


def test_recommend_sorts_by_load_and_takes_mappings():
    rows = _rows([1, 10, 50, 100], [100, 500, 740, 785], [800, 1000, 2000, 4200])
    shuffled = [rows[2], rows[0], rows[3], rows[1]]
    assert recommend(shuffled)[0] == 0
    assert recommend([r.to_dict() for r in shuffled]) == recommend(shuffled)


def test_recommend_slo_excludes_later_points():
    rows = _rows([1, 10, 50, 100], [100, 500, 740, 1000], [800, 1000, 2000, 4200])
    i, reason = recommend(rows, slo_p99_latency_ms=1500)
    assert i == 1
    assert reason == ("concurrency 10: the highest load within the P99 latency SLO of 1500 ms: output throughput "
                      "rises 400% from 1 to 10, but at 50 P99 latency is 2,000 ms")
    i, reason = recommend(rows, slo_p99_latency_ms=500)
    assert i is None
    assert reason.startswith("no point meets the P99 latency SLO of 500 ms: the lowest P99 latency is 800 ms at "
                             "concurrency 1")
    # A saturated step beyond the SLO is described as saturation.
    rows = _rows([1, 10, 50], [100, 500, 510], [800, 1000, 5000])
    assert recommend(rows, slo_p99_latency_ms=1500) == (1, (
        "concurrency 10: output throughput rises 400% from 1 to 10 but only 2% from 10 to 50 while P99 latency "
        "grows 5.0x"))


def test_recommend_never_saturating_says_so():
    rows = _rows([1, 2, 4, 8], [100, 190, 370, 700], [800, 820, 850, 900])
    i, reason = recommend(rows)
    assert i == 3
    assert reason == ("concurrency 8: throughput has not saturated: output throughput rises 89% from 4 to 8, the "
                      "highest load tested; test higher loads")
    i, reason = recommend(rows, slo_p99_latency_ms=860)
    assert i == 2 and "the highest load within the P99 latency SLO of 860 ms" in reason


def test_recommend_single_point_and_flat_start():
    i, reason = recommend(_rows([10], [500], [1000]))
    assert i == 0 and reason.startswith("concurrency 10: the only point tested (500 output tok/s")
    i, reason = recommend(_rows([1, 10, 50], [100, 104, 90], [800, 2400, 9000]))
    assert i == 0
    assert reason == "concurrency 1: output throughput rises only 4% from 1 to 10 while P99 latency grows 3.0x"


def test_recommend_open_loop_rows():
    rows = [LoadTestRow(request_rate_rps=r, output_throughput_tok_s=t, p99_latency_ms=p)
            for r, t, p in [(2, 200, 900), (4, 400, 950), (8, 420, 3000)]]
    i, reason = recommend(rows)
    assert i == 1
    assert reason.startswith("rate 4 req/s: output throughput rises 100% from 2 to 4 but only 5% from 4 to 8")


def test_loadtest_cli_json_is_the_issue_example(capsys):
    """simllm loadtest --model llama-3.1-8b --hardware h100-sxm --parallel 1 10 50 100 200
    --number 10 20 100 200 400 --format json: five rows, throughput rising until it
    saturates, latency never falling, a recommended concurrency among the five."""
    import simllm.cli

    args = ["loadtest", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--parallel", "1", "10", "50", "100",
            "200", "--number", "10", "20", "100", "200", "400", "--format", "json"]
    assert simllm.cli.main(args) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["rows"]
    assert [r["concurrency"] for r in rows] == [1, 10, 50, 100, 200]
    tput = [r["output_throughput_tok_s"] for r in rows]
    lat = [r["avg_latency_ms"] for r in rows]
    assert all(b >= 0.97 * a for a, b in zip(tput, tput[1:]))
    assert all(b >= a for a, b in zip(lat, lat[1:]))
    assert data["recommendation"]["concurrency"] in (1, 10, 50, 100, 200)


def test_loadtest_cli_bad_pairing_is_one_line(capsys):
    import simllm.cli

    assert simllm.cli.main(["loadtest", "--parallel", "1", "10", "--number", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--number" in err
