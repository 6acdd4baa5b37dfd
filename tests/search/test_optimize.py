"""``simllm.search.pareto`` and ``simllm.search.optimize``: Pareto frontiers (hand-made points, ties, three
objectives, a brute-force check on random points), SLO parsing, the SLO-constrained search (its
answer re-simulated directly meets the SLOs; every configuration with more goodput per GPU fails
them), the cost objective, and the frontier figure."""
import dataclasses
import json
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simllm
from simllm.config.workload import Workload, fixed
from simllm.errors import ConfigError
from simllm.search import optimize as sla
from simllm.search import pareto as fr
from simllm.sim import stats
from simllm.sim.results import TIMING_KEYS

SLO_TEXT = "ttft_p99<=2000,tpot_p99<=50"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def rows_of(points, names=("a", "b", "c")):
    return [dict(zip(names, p)) for p in points]


def brute_force(values):
    """Non-dominated rows of ``values`` (n x k, all maximised), by definition."""
    n = len(values)
    keep = []
    for i in range(n):
        dominated = any(all(values[j][k] >= values[i][k] for k in range(len(values[i])))
                        and any(values[j][k] > values[i][k] for k in range(len(values[i]))) for j in range(n))
        if not dominated:
            keep.append(i)
    return sorted(keep)


# ----------------------------------------------------------------------------- Pareto

def test_pareto_known_frontier_with_ties_and_duplicates():
    pts = [(1, 5), (2, 4), (3, 3), (2, 2), (1, 1), (3, 3), (0, 5), (3, 1), (2, 4)]
    idx = fr.pareto(rows_of(pts), maximize=("a", "b"))
    # (0, 5) loses to (1, 5) and (3, 1) to (3, 3) on one objective, tied on the other;
    # duplicates (2, 4) and (3, 3) are all kept; sorted by the first objective, then index.
    assert idx.tolist() == [0, 1, 8, 2, 5]


def test_pareto_minimize_and_one_objective():
    rows = rows_of([(10, 100), (20, 300), (15, 300), (20, 250), (5, 50)], names=("thr", "ttft"))
    assert fr.pareto(rows, maximize=("thr",), minimize=("ttft",)).tolist() == [4, 0, 3]
    assert fr.pareto(rows, maximize=("thr",)).tolist() == [1, 3]  # both maxima
    assert fr.pareto(rows, maximize=(), minimize=("ttft",)).tolist() == [4]


def test_pareto_three_objectives():
    pts = [(1, 1, 1), (2, 1, 1), (1, 2, 0), (0, 0, 3), (2, 1, 1), (1, 1, 0)]
    assert fr.pareto(rows_of(pts), maximize=("a", "b", "c")).tolist() == [3, 2, 1, 4]


def test_pareto_skips_nan_missing_and_errors():
    rows = [{"a": 5, "b": 5, "error": "simulated OOM"}, {"a": math.nan, "b": 9}, {"b": 10},
            {"a": 1, "b": 1, "error": ""}, {"a": 2, "b": 0}]
    assert fr.pareto(rows, maximize=("a", "b")).tolist() == [3, 4]
    assert fr.pareto([], maximize=("a", "b")).tolist() == []
    with pytest.raises(ConfigError):
        fr.pareto(rows, maximize=(), minimize=())


def test_derived_columns_and_structured_arrays():
    row = {"output_throughput": 3000.0, "mean_tpot_ms": 20.0, "tensor_parallel_size": 2, "data_parallel_size": 3}
    assert fr.per_user_speed(row) == 50.0
    assert fr.per_gpu(row) == 500.0
    assert math.isnan(fr.per_user_speed({"mean_tpot_ms": 0.0}))
    # A sweep-like table: swept paths as columns, gpus, an error column for the failed row.
    dtype = [("serving.max_num_seqs", "i8"), ("hardware", "U16"), ("gpus", "i8"), ("output_throughput", "f8"),
             ("mean_tpot_ms", "f8"), ("error", "U64")]
    table = np.array([(16, "h100-sxm", 1, 1000.0, 10.0, ""), (64, "h100-sxm", 1, 3000.0, 20.0, ""),
                      (256, "h100-sxm", 1, 4000.0, 40.0, ""), (64, "h100-sxm", 2, 3000.0, 10.0, ""),
                      (512, "h100-sxm", 1, 9000.0, 5.0, "simulated OOM")], dtype=dtype)
    assert fr.column(table, "output_throughput_per_gpu").tolist()[:4] == [1000.0, 3000.0, 4000.0, 1500.0]
    idx = fr.pareto(table)  # default: output tok/s per GPU vs per user
    assert idx.tolist() == [3, 1, 2]  # (1000, 100) loses to (1500, 100); the OOM row is never on it
    assert fr.config_label(table[1]) == "max_num_seqs=64 hardware=h100-sxm"
    assert fr.config_labels(table)[:2] == ["max_num_seqs=16", "max_num_seqs=64"]  # only what varies
    ttft_rows = [{"output_throughput": 100.0, "p99_ttft_ms": 50.0}, {"output_throughput": 200.0, "p99_ttft_ms": 80.0},
                 {"output_throughput": 150.0, "p99_ttft_ms": 90.0}]
    assert fr.frontier(ttft_rows, "ttft").tolist() == [0, 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=0, max_size=40))
def test_pareto_2d_matches_brute_force(points):
    got = fr.pareto(rows_of(points, ("a", "b")), maximize=("a", "b"))
    assert sorted(got.tolist()) == brute_force(points)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)), min_size=0, max_size=30))
def test_pareto_3d_matches_brute_force(points):
    got = fr.pareto(rows_of(points), maximize=("a", "b", "c"))
    assert sorted(got.tolist()) == brute_force(points)


@pytest.mark.parametrize("seed", range(5))
def test_pareto_random_floats_and_minimize_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 300
    a = rng.normal(size=n)
    b = np.round(rng.normal(size=n), 1)  # ties on b
    rows = [{"a": x, "b": y} for x, y in zip(a, b)]
    want = brute_force([(x, -y) for x, y in zip(a, b)])
    got = fr.pareto(rows, maximize=("a",), minimize=("b",))
    assert sorted(got.tolist()) == want
    assert np.all(np.diff(a[got]) >= 0)  # sorted along the first objective


# ----------------------------------------------------------------------------- SLOs

def test_parse_slo_good():
    slos = sla.parse_slo(SLO_TEXT)
    assert [(s.key, s.op, s.value) for s in slos] == [("p99_ttft_ms", "<=", 2000.0), ("p99_tpot_ms", "<=", 50.0)]
    more = sla.parse_slo(" e2el_p90 < 10s , ttft_mean<=500ms,itl_p99<=40, p95_ttft<300, latency_p99.9<=9000,"
                         "error_rate<=1%,request_throughput>=10, tpot_median>2")
    assert [(s.key, s.op, s.value) for s in more] == [
        ("p90_e2el_ms", "<", 10000.0), ("mean_ttft_ms", "<=", 500.0), ("p99_itl_ms", "<=", 40.0),
        ("p95_ttft_ms", "<", 300.0), ("p99.9_e2el_ms", "<=", 9000.0), ("error_rate", "<=", 0.01),
        ("request_throughput", ">=", 10.0), ("median_tpot_ms", ">", 2.0)]
    assert sla.parse_slo(["ttft_p99<=1", "tpot_p99<=2"])[1].key == "p99_tpot_ms"
    assert sla.goodput_from_slos(slos) == {"ttft": 2000.0, "tpot": 50.0}
    # Mean bounds are summary-only; the tightest percentile bound wins.
    assert sla.goodput_from_slos(sla.parse_slo("ttft_mean<=10,ttft_p99<=300,ttft_p90<=200,e2el_p99<=5000")) == \
        {"ttft": 200.0, "e2el": 5000.0}
    summary = {"p99_ttft_ms": 2500.0, "p99_tpot_ms": 20.0}
    assert sla.check_slos(summary, slos) == ["ttft_p99 2,500 ms > 2000 ms"]
    assert not slos[0].met({})  # missing counts as broken


@pytest.mark.parametrize("text, piece", [
    ("", ""),
    ("ttft_p99=2000", "ttft_p99=2000"),
    ("ttft_p99<=abc", "ttft_p99<=abc"),
    ("ttft_p99<=2000,,tpot_p99<=5", "ttft_p99<=2000,,tpot_p99<=5"),
    ("ttft_p99<=2000,tpot_p99 => 5", "tpot_p99 => 5"),
    ("error_rate<=5ms", "error_rate<=5ms"),
    ("ttft_p101<=5", "ttft_p101<=5"),
    ("request_throughput>=5%", "request_throughput>=5%"),
])
def test_parse_slo_bad(text, piece):
    with pytest.raises(ConfigError) as info:
        sla.parse_slo(text)
    msg = str(info.value)
    assert "\n" not in msg and "--slo" in msg and repr(piece) in msg and "expected" in msg


def test_parse_over_and_prices():
    over = sla.parse_over(["tp=1,2,4", "replicas=1,2", "max_num_seqs=64,128", "dtype=bf16,fp8",
                           "hardware=h100-sxm,h200-sxm", "gpu_memory_utilization=0.9,0.95",
                           "enable_chunked_prefill=true,false"])
    assert over == {"tp": [1, 2, 4], "replicas": [1, 2], "max_num_seqs": [64, 128], "dtype": ["bf16", "fp8"],
                    "hardware": ["h100-sxm", "h200-sxm"], "gpu_memory_utilization": [0.9, 0.95],
                    "enable_chunked_prefill": [True, False]}
    for bad in (["tp"], ["tp=1,,2"], ["tp=1.5"], ["colour=red"], ["tp=1", "tp=2"], ["enable_prefix_caching=maybe"]):
        with pytest.raises(ConfigError, match="--over"):
            sla.parse_over(bad)
    assert sla.parse_prices(["h100-sxm=2.5", "h200-sxm=3.1"]) == {"h100-sxm": 2.5, "h200-sxm": 3.1}
    for bad in (["h100-sxm"], ["h100-sxm=-1"], ["=2"], ["h100-sxm=abc"]):
        with pytest.raises(ConfigError, match="--price"):
            sla.parse_prices(bad)


# ----------------------------------------------------------------------------- the search

MODEL = "llama-3.1-8b"
GRID = {"tp": [1, 2], "max_num_seqs": [16, 64, 256]}


def small_workload():
    return Workload(num_prompts=200, request_rate=20.0)


#: The issue's SLOs, and the same with a mean-TTFT bound (not a per-request goodput threshold)
#: that the TP=1 configurations, with the most goodput per GPU, break (mean TTFT ~37 ms against
#: TP=2's ~23 ms with h100-sxm's measured kernel tables and the vllm framework profile).
SEARCH_SLOS = (SLO_TEXT, SLO_TEXT + ",ttft_mean<=30")


@pytest.fixture(scope="module", params=SEARCH_SLOS)
def search(request):
    return sla.optimize(MODEL, "h100-sxm", simllm.ServingConfig(), small_workload(), request.param, over=GRID,
                        prices={"h100-sxm": 2.5})


def direct(candidate, result):
    """The candidate simulated directly, as ``simllm run`` would."""
    return simllm.simulate(simllm.load_model(MODEL), simllm.load_hardware(candidate.hardware), candidate.serving,
                           small_workload(), keep_requests=False, percentiles=result.percentiles,
                           goodput=result.goodput).summary


@pytest.mark.slow
def test_answer_meets_the_slos_when_rerun_and_better_ones_do_not(search):
    res = search
    assert len(res.candidates) == 6 and [c.index for c in res.candidates] == list(range(6))
    assert res.goodput == {"ttft": 2000.0, "tpot": 50.0}
    a = res.answer
    assert a is not None and a.feasible
    rerun = direct(a, res)
    for key in ("request_goodput", "output_throughput", "p99_ttft_ms", "p99_tpot_ms", "mean_tpot_ms"):
        assert rerun[key] == pytest.approx(a.summary[key], rel=1e-12)
    assert not sla.check_slos(rerun, res.slos)
    assert rerun["request_goodput"] / a.gpus == pytest.approx(a.goodput_per_gpu)
    # Every configuration with more goodput per GPU fails some SLO when simulated directly.
    better = [c for c in res.candidates if c.simulated and c.goodput_per_gpu > a.goodput_per_gpu]
    for c in better:
        assert c.status == "slo"
        assert sla.check_slos(direct(c, res), res.slos)
    assert better == res.better_rejected()
    if "ttft_mean" in ",".join(s.name for s in res.slos):
        assert a.serving.tensor_parallel_size == 2 and len(better) == 2
        assert "2 configurations with better goodput per GPU fail the SLOs" in sla.format_optimize(res)
    else:
        assert a.label == "tp=1 max_num_seqs=64" and not better
    # The rejected for SLOs fail them directly too; the feasible ones are ranked best first.
    for c in res.rejected:
        assert c.status == "slo" and c.violations and sla.check_slos(direct(c, res), res.slos)
    values = [c.goodput_per_gpu for c in res.ranked]
    assert values == sorted(values, reverse=True) and res.ranked[0] is a
    assert len(res.runner_ups) == min(len(res.ranked), res.top) - 1


def test_a_lead_within_noise_is_called_a_tie(search):
    """The answer and the runner-up compared on four workload draws: two configurations that serve
    the same requests identically (max_num_seqs 64 and 256 never bind at this load) tie with no
    noise at all; the margin is the paired statistic of direct simulations on the same seeds."""
    res = search
    m, a, b = res.margin, res.ranked[0], res.ranked[1]
    assert m is not None and m.seeds == sla.NOISE_SEEDS
    draws = [small_workload().seed] + [int(x.generate_state(1)[0])
                                       for x in np.random.SeedSequence(small_workload().seed).spawn(m.seeds - 1)]
    va, vb = [], []
    for seed in draws:
        w = dataclasses.replace(small_workload(), seed=seed)
        for c, out in ((a, va), (b, vb)):
            s = simllm.simulate(simllm.load_model(MODEL), simllm.load_hardware(c.hardware), c.serving, w,
                                keep_requests=False, percentiles=res.percentiles, goodput=res.goodput).summary
            out.append(s["request_goodput"] / c.gpus)
    mean, se = stats.paired_difference(va, vb)
    assert m.lead_pct == pytest.approx(mean / np.mean(vb) * 100, abs=1e-9)
    assert m.noise_pct == pytest.approx(2 * se / np.mean(vb) * 100, abs=1e-9)
    assert m.tie == (abs(m.lead_pct) <= m.noise_pct)
    if va == vb:
        assert m.tie and m.lead_pct == 0.0 and "within noise: a tie" in sla.format_optimize(res)
    assert sla.optimize_to_dict(res)["runner_up_margin"] == m.to_dict()


def test_a_clear_lead_is_beyond_noise_and_one_seed_checks_nothing():
    """TP=1 against TP=2 at a load both serve: about the same goodput on half the GPUs, nearly
    twice the goodput per GPU on every draw (TP=1 meets the per-request thresholds a little less
    often)."""
    res = sla.optimize(MODEL, "h100-sxm", simllm.ServingConfig(), small_workload(), SLO_TEXT, over={"tp": [1, 2]})
    m = res.margin
    assert res.answer.serving.tensor_parallel_size == 1 and not m.tie
    assert 50.0 < m.lead_pct <= 100.0 and m.noise_pct < m.lead_pct / 4
    assert "beyond noise" in sla.format_optimize(res)
    once = sla.optimize(MODEL, "h100-sxm", simllm.ServingConfig(), small_workload(), SLO_TEXT, over={"tp": [1, 2]},
                        noise_seeds=1)
    assert once.margin is None and sla.optimize_to_dict(once)["runner_up_margin"] is None
    with pytest.raises(ConfigError, match="noise-seeds"):
        sla.optimize(MODEL, "h100-sxm", simllm.ServingConfig(), small_workload(), SLO_TEXT, over={"tp": [1, 2]},
                     noise_seeds=0)


@pytest.mark.slow
def test_reports_rows_and_frontier(search):
    res = search
    text = sla.format_optimize(res)
    assert "answer: " + res.answer.label in text and "why: highest goodput per GPU" in text
    assert f"simllm run --model {MODEL} --hardware h100-sxm" in text
    data = sla.optimize_to_dict(res)
    json.dumps(data, allow_nan=False)
    assert data["answer"]["label"] == res.answer.label and len(data["candidates"]) == 6
    assert data["slos"][0]["key"] == "p99_ttft_ms"
    rows = res.rows()
    assert [r["meets_slo"] for r in rows] == [c.feasible for c in res.candidates]
    idx = res.frontier()
    want = brute_force([(r["output_throughput_per_gpu"], r["output_throughput_per_user"]) for r in rows])
    assert sorted(idx.tolist()) == want
    assert res.frontier("ttft").size >= 1


@pytest.mark.slow
def test_cost_objective(search):
    prices = {"h100-sxm": 2.5}
    res = sla.optimize(MODEL, "h100-sxm", None, small_workload(), SLO_TEXT, over=GRID, objective="cost_per_token",
                       prices=prices, top=3)
    for c in res.candidates:
        if c.simulated:
            want = 2.5 * c.gpus / (c.summary["output_throughput"] * 3600.0) * 1e6
            assert c.cost_per_million_tokens == pytest.approx(want)
    costs = [c.cost_per_million_tokens for c in res.ranked]
    assert costs == sorted(costs) and res.answer.cost_per_million_tokens == min(costs)
    assert len(res.runner_ups) == 2
    assert "$/M tok" in sla.format_optimize(res)
    with pytest.raises(ConfigError) as info:
        sla.optimize(MODEL, ["h100-sxm", "h200-sxm"], None, small_workload(), SLO_TEXT, over={"tp": [1]},
                     objective="cost_per_token", prices=prices)
    msg = str(info.value)
    assert "h200-sxm" in msg and "price_per_hour" in msg and "\n" not in msg


@pytest.mark.slow
def test_rejections_executor_and_no_answer():
    over = {"tp": [1, 3], "gpu_memory_utilization": [0.9, 0.15]}
    with ThreadPoolExecutor(max_workers=2) as pool:
        res = sla.optimize(MODEL, "h100-sxm", None, small_workload(), "ttft_p99<=2000", over=over, executor=pool)
    serial = sla.optimize(MODEL, "h100-sxm", None, small_workload(), "ttft_p99<=2000", over=over, max_workers=1)
    status = {c.label: c.status for c in res.candidates}
    assert status == {"tp=1 gpu_memory_utilization=0.9": "ok", "tp=1 gpu_memory_utilization=0.15": "oom",
                      "tp=3 gpu_memory_utilization=0.9": "invalid", "tp=3 gpu_memory_utilization=0.15": "invalid"}
    assert status == {c.label: c.status for c in serial.candidates}
    timing = TIMING_KEYS
    assert {k: v for k, v in res.answer.summary.items() if k not in timing} == \
        {k: v for k, v in serial.answer.summary.items() if k not in timing}
    assert "num_attention_heads" in res.candidates[2].reason
    by_status, _ = res.rejected_counts()
    assert by_status == {"oom": 1, "invalid": 2}
    none = sla.optimize(MODEL, "h100-sxm", None, small_workload(), "tpot_p99<=0.001", over={"tp": [1, 2]})
    assert none.answer is None and len(none.better_rejected()) == 2
    assert "no configuration meets the SLOs" in sla.format_optimize(none)
    assert sla.optimize_to_dict(none)["answer"] is None


def test_bad_search_inputs():
    w = small_workload()
    with pytest.raises(ConfigError, match="--over"):
        sla.optimize(MODEL, "h100-sxm", None, w, SLO_TEXT, over={"colour": ["red"]})
    with pytest.raises(ConfigError, match="--over"):
        sla.optimize(MODEL, "h100-sxm", None, w, SLO_TEXT, over={"tp": []})
    with pytest.raises(ConfigError, match="--over"):
        sla.optimize(MODEL, "h100-sxm", None, w, SLO_TEXT, over={"tp": [0]})
    with pytest.raises(ConfigError, match="--objective"):
        sla.optimize(MODEL, "h100-sxm", None, w, SLO_TEXT, over={"tp": [1]}, objective="speed")
    with pytest.raises(ConfigError, match="--slo"):
        sla.optimize(MODEL, "h100-sxm", None, w, "ttft_p99<=2000,tpot_p99", over={"tp": [1]})


@pytest.mark.slow
def test_unknown_slo_key_fails_after_the_first_summary():
    with pytest.raises(ConfigError) as info:
        sla.optimize(MODEL, "h100-sxm", None, small_workload(), "ttft_p99<=2000,request_goodputt>=1",
                     over={"tp": [1, 2]})
    msg = str(info.value)
    assert "--slo" in msg and "request_goodputt" in msg and "request_goodput" in msg.split("did you mean")[1]


# ----------------------------------------------------------------------------- frontier files and figure

def test_read_rows_csv_and_format_frontier(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("hardware,serving.max_num_seqs,gpus,output_throughput,mean_tpot_ms,p99_ttft_ms,error\n"
                    "h100-sxm,16,1,1000,10,50,\n"
                    "h100-sxm,64,1,3000,20,80,\n"
                    "h100-sxm,256,1,4000,40,300,\n"
                    "h100-sxm,1024,1,,,,simulated OOM\n")
    rows = fr.read_rows(path)
    assert rows[0]["serving.max_num_seqs"] == 16 and rows[3]["error"] == "simulated OOM"
    idx = fr.frontier_rows(rows)
    assert idx.tolist() == [2, 1, 0]  # along x: tokens/s per user ascending
    text = fr.format_frontier(rows, idx)
    assert "3 of 3 configurations" in text and "max_num_seqs=64" in text
    ttft = fr.frontier_rows(rows, x="p99_ttft_ms", y="output_throughput_per_gpu")
    assert ttft.tolist() == [0, 1, 2]
    json.dumps(fr.frontier_to_dict(rows, idx), allow_nan=False)
    with pytest.raises(ConfigError):
        fr.read_rows(tmp_path / "missing.csv")


def test_frontier_aggregates_the_seeds_of_a_configuration_into_one_point_with_its_spread(tmp_path, capsys):
    """A sweep's table holds a row per configuration x seed: the frontier's points are the
    configurations, each the mean over its seeds that ran, with their min-max."""
    path = tmp_path / "seeds.csv"
    path.write_text("config_id,seed,serving.max_num_seqs,gpus,output_throughput,mean_tpot_ms,error\n"
                    "0,1,16,1,1000,10,\n0,2,16,1,1200,12.5,\n"
                    "1,1,64,1,3000,20,\n1,2,64,1,3400,25,\n1,3,64,1,,,simulated OOM\n"
                    "2,1,256,1,2000,40,\n2,2,256,1,2200,50,\n")
    rows, aggregated = fr.aggregate_seeds(fr.read_rows(path))
    assert aggregated and len(rows) == 3
    one = rows[1]
    assert (one["seeds"], one["ran"]) == (3, 2) and "seed" not in one
    assert one["output_throughput_per_gpu"] == pytest.approx(3200.0)
    assert one["output_throughput_per_user"] == pytest.approx((50.0 + 40.0) / 2)  # 1000 / TPOT, then the mean
    assert (one["output_throughput_per_gpu_min"], one["output_throughput_per_gpu_max"]) == (3000.0, 3400.0)
    assert fr.frontier_rows(rows).tolist() == [1, 0]  # 256 is dominated by 64 on both means
    text = fr.format_frontier(rows, fr.frontier_rows(rows))
    assert "mean over its seeds" in text and "2/3" in text and "3,200 (3,000-3,400)" in text
    assert "45.00 (40.00-50.00)" in text
    assert fr.frontier_to_dict(rows, fr.frontier_rows(rows))["frontier"][0]["seeds"] == 3
    # One row per configuration comes back as it is; --per-seed keeps the draws apart.
    single = fr.read_rows(path)[:1]
    assert fr.aggregate_seeds(single) == (single, False)
    from simllm.cli.app import main

    assert main(["frontier", str(path), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["frontier"]) == 2
    assert main(["frontier", str(path), "--format", "json", "--per-seed"]) == 0
    assert all("seeds" not in p for p in json.loads(capsys.readouterr().out)["frontier"])


def check_png(path):
    import matplotlib.image

    assert path.is_file() and path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 0 and image.shape[1] > 0


def test_plot_frontier_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    from simllm.report.plots import plot_frontier

    rng = np.random.default_rng(0)
    rows = [{"config": f"c{i}", "output_throughput": float(t), "mean_tpot_ms": float(p), "gpus": int(g),
             "p99_ttft_ms": float(f), "meets_slo": bool(i % 3)}
            for i, (t, p, g, f) in enumerate(zip(rng.uniform(500, 5000, 30), rng.uniform(5, 60, 30),
                                                 rng.integers(1, 4, 30), rng.uniform(50, 3000, 30)))]
    rows.append({"config": "oom", "error": "simulated OOM"})
    idx = fr.pareto(rows)
    chosen = int(idx[0])
    path = plot_frontier(rows, idx, tmp_path / "plots", chosen=chosen)
    assert path.name == "frontier.png"
    check_png(path)
    path = plot_frontier(rows, None, tmp_path / "plots", x="p99_ttft_ms")
    assert path.name == "frontier_output_throughput_per_gpu_vs_p99_ttft_ms.png"
    check_png(path)
    check_png(plot_frontier([], [], tmp_path / "empty"))


@pytest.mark.slow
def test_plot_frontier_of_a_search(search, tmp_path):
    pytest.importorskip("matplotlib")
    from simllm.report.plots import plot_frontier

    rows = search.rows()
    check_png(plot_frontier(rows, search.frontier(), tmp_path, chosen=search.answer.index))


@pytest.mark.slow
def test_optimize_and_frontier_cli(tmp_path, capsys):
    import json

    import simllm.cli

    args = ["optimize", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--slo", "ttft_p99<=2000,tpot_p99<=50",
            "--over", "tp=1,2", "max_num_seqs=16,64", "--num-prompts", "100", "--request-rate", "20", "-q",
            "--format", "json", "--output", str(tmp_path / "opt.json")]
    assert simllm.cli.main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert json.loads((tmp_path / "opt.json").read_text()) == data
    assert simllm.cli.main(["optimize", "--slo", "ttft_p99<=oops", "--over", "tp=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--slo" in err
    rows = tmp_path / "rows.csv"
    rows.write_text("output_throughput_per_gpu,output_throughput_per_user\n100,10\n50,20\n40,15\n", encoding="utf-8")
    assert simllm.cli.main(["frontier", str(rows), "--format", "json"]) == 0
    front = json.loads(capsys.readouterr().out)
    assert front


# --------------------------------------------------------------------------- aggregated or disaggregated
PD_MODEL, PD_HW = "llama-3.1-70b", "h200-sxm"


def pd_workload():
    return Workload(num_prompts=256, max_concurrency=64, input_len=fixed(4000), output_len=fixed(300))


@pytest.fixture(scope="module")
def pd_search():
    """Llama-3.1-70B on H200s, 4k-token prompts, a tight TPOT SLO: aggregated TP 4/8 x DP 1/2
    against 1-2 prefill instances of TP 4/8 and one decode instance of TP 4/8, within 16 GPUs."""
    return sla.optimize(PD_MODEL, PD_HW, simllm.ServingConfig(), pd_workload(), "ttft_p99<=10000,tpot_p99<=20",
                        over={"tp": [4, 8], "replicas": [1, 2]},
                        over_disagg={"prefill_instances": [1, 2], "prefill_tp": [4, 8], "decode_tp": [4, 8]},
                        max_gpus=16)


@pytest.mark.heavy
@pytest.mark.slow
def test_disaggregated_grid_is_simulated_as_simulate_disagg_does(pd_search):
    res = pd_search
    assert res.modes == ("agg", "disagg") and len(res.candidates) == 4 + 8
    for c in res.candidates:
        if c.disagg is None:
            continue
        d = c.disagg
        p_tp, d_tp = c.params["prefill_tp"], c.params["decode_tp"]
        assert (d.prefill_instances, dict(d.prefill), dict(d.decode)) == (
            c.params["prefill_instances"], {"tensor_parallel_size": p_tp}, {"tensor_parallel_size": d_tp})
        assert c.gpus == c.params["prefill_instances"] * p_tp + d_tp
        if c.gpus > 16:  # over the budget: rejected, never simulated
            assert c.status == "budget" and c.summary is None and "over the budget of 16" in c.reason
            continue
        direct_pd = simllm.simulate_disagg(simllm.load_model(PD_MODEL), simllm.load_hardware(PD_HW), c.serving,
                                           pd_workload(), d, keep_requests=False, percentiles=res.percentiles,
                                           goodput=res.goodput).summary
        for key in ("request_goodput", "p99_ttft_ms", "p99_tpot_ms", "output_throughput", "num_gpus"):
            assert c.summary[key] == pytest.approx(direct_pd[key], rel=1e-12)
        assert c.goodput_per_gpu == pytest.approx(direct_pd["request_goodput"] / c.gpus)
    assert sum(c.status == "budget" for c in res.candidates) == 2  # 2 x TP 8 prefill + decode


@pytest.mark.heavy
@pytest.mark.slow
def test_aggregated_or_disaggregated_answer_and_frontiers(pd_search, tmp_path):
    """The answer is the best feasible of both grids; best_by_mode gives each grid's; the verdict
    names the winner; each grid has its own frontier, drawn on one figure."""
    res = pd_search
    best = res.best_by_mode()
    feasible = [c for c in res.candidates if c.feasible]
    assert res.answer is max(feasible, key=lambda c: (c.goodput_per_gpu, -c.gpus))
    for mode in ("agg", "disagg"):
        mine = [c for c in feasible if c.mode == mode]
        assert best[mode] is (max(mine, key=lambda c: c.goodput_per_gpu) if mine else None)
    # Decode apart from 4k-token prefills meets the 20 ms TPOT that no aggregated layout here does.
    assert best["agg"] is None and best["disagg"] is res.answer
    text = sla.format_optimize(res)
    assert "aggregated or disaggregated: no aggregated configuration meets the SLOs" in text
    assert f"--prefill-instances {res.answer.disagg.prefill_instances}" in text
    data = sla.optimize_to_dict(res)
    assert data["best_by_mode"]["agg"] is None and data["best_by_mode"]["disagg"]["mode"] == "disagg"
    assert data["answer"]["disagg"]["prefill_instances"] == res.answer.disagg.prefill_instances
    rows = res.rows()
    for mode in ("agg", "disagg"):
        idx = res.frontier("speed", mode)
        assert idx and all(rows[i]["mode"] == mode for i in idx)
    pytest.importorskip("matplotlib")
    from simllm.report.plots import plot_frontier

    check_png(plot_frontier(rows, {sla.MODES[m]: res.frontier("speed", m) for m in res.modes}, tmp_path,
                            chosen=res.answer.index))


def test_disaggregated_grid_inputs_are_checked():
    assert sla.parse_over_disagg(["prefill_instances=1,2", "decode_tp=4,8", "decode_max_num_seqs=64"]) == {
        "prefill_instances": [1, 2], "decode_tp": [4, 8], "decode_max_num_seqs": [64]}
    for items, piece in ((["pre_tp=1"], "prefill_instances, decode_instances"), (["decode_tp=two"], "integers"),
                         (["decode_tp=1", "decode_tp=2"], "given twice")):
        with pytest.raises(simllm.ConfigError) as err:
            sla.parse_over_disagg(items)
        assert piece in str(err.value) and "--over-disagg" in str(err.value)
    with pytest.raises(simllm.ConfigError) as err:
        sla.optimize(MODEL, "h100-sxm", workload=small_workload(), over_disagg={"decode_tp": [0]})
    assert "--over-disagg" in str(err.value)
    with pytest.raises(simllm.ConfigError) as err:
        sla.optimize(MODEL, "h100-sxm", workload=small_workload(), max_gpus=-1)
    assert "--max-gpus" in str(err.value)
    assert sla.grid_size({"tp": [1, 2]}, ["h100-sxm"], {"prefill_instances": [1, 2], "decode_tp": [1, 2]}) == 6


@pytest.mark.heavy
@pytest.mark.slow
def test_optimize_cli_aggregated_or_disaggregated(capsys):
    import simllm.cli

    args = ["optimize", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--slo", "tpot_p99<=50",
            "--over", "tp=1,2", "--over-disagg", "prefill_instances=1,2", "--max-gpus", "2",
            "--num-prompts", "100", "--max-concurrency", "16", "-q", "--no-error-band"]
    assert simllm.cli.main(args) == 0
    text = capsys.readouterr().out
    assert "aggregated or disaggregated:" in text and "1 over the GPU budget" in text
    assert simllm.cli.main(args + ["--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {c["mode"] for c in data["candidates"]} == {"agg", "disagg"} and "mode_verdict" in data
    assert simllm.cli.main(args + ["--over-disagg", "decode_bogus=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--over-disagg" in err
