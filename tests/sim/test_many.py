"""simllm.simulate_many: every run's numbers equal the single run's bit for bit (over configurations,
seeds, batching modes, open and closed loops, threads and processes), failed runs become statuses,
the workload draws are shared only where the requests are the same, and the columns read as the
summaries do."""
from dataclasses import replace

import numpy as np
import pytest

import simllm
from simllm.config.workload import NOT_DRAWN, LengthDist, draw_key, fixed
from simllm.sim.many import _numbers
from simllm.sim.runner import OK, OOM, SharedDraws, Task

MODEL = simllm.load_model("llama-3.1-8b")
H100 = simllm.load_hardware("h100-sxm")
H200 = simllm.load_hardware("h200-sxm")


def uniform(low, high):
    return LengthDist(kind="uniform", low=low, high=high)


def _grid():
    runs = []
    for seed in (0, 3):
        for conc, rate in ((8, float("inf")), (0, 40.0)):
            w = simllm.Workload(num_prompts=40, max_concurrency=conc, request_rate=rate, seed=seed,
                                input_len=uniform(64, 512), output_len=uniform(4, 48))
            for hw in (H100, H200):
                for serving in (simllm.ServingConfig(), simllm.ServingConfig(max_num_seqs=4),
                                simllm.ServingConfig(batching="static", max_num_seqs=8),
                                simllm.ServingConfig(batching="dynamic", max_num_seqs=8),
                                simllm.ServingConfig(enable_chunked_prefill=False)):
                    runs.append({"hardware": hw, "serving": serving, "workload": w})
    return runs


def _single(run, percentiles=(50, 90, 95, 99)):
    summary = simllm.simulate(run.get("model", MODEL), run["hardware"], run["serving"], run["workload"],
                              keep_requests=False, percentiles=percentiles).summary
    return _numbers(summary)


@pytest.mark.parametrize("executor", [None, "threads"])
def test_every_run_equals_the_single_run_bit_for_bit(executor):
    runs = _grid()
    many = simllm.simulate_many(runs, model=MODEL, executor=executor, workers=1 if executor is None else 2)
    assert len(many) == len(runs) == 40
    assert many.ok.all()
    for i, run in enumerate(runs):
        keys, values = _single(run)
        assert many.summary(i) == dict(zip(keys, values))  # exact: the same kernels on the same requests
    assert np.array_equal(many["completed"], np.full(40, 40.0))


@pytest.mark.slow
def test_processes_give_the_same_columns_as_threads():
    runs = _grid()[:12]
    threads = simllm.simulate_many(runs, model=MODEL, executor="threads", workers=2)
    procs = simllm.simulate_many(runs, model=MODEL, executor="processes", workers=2)
    assert threads.metrics == procs.metrics
    assert np.array_equal(threads.values, procs.values) and np.array_equal(threads.present, procs.present)


def test_failed_runs_are_statuses_and_their_rows_hold_no_numbers():
    w = simllm.Workload(num_prompts=16, max_concurrency=4)
    runs = [{"serving": simllm.ServingConfig(tensor_parallel_size=3)},  # 32 heads: TP 3 is invalid
            (simllm.load_model("llama-3.1-405b"), H100),  # does not fit one H100
            Task(serving=simllm.ServingConfig(tensor_parallel_size=2))]
    many = simllm.simulate_many(runs, model=MODEL, hardware=H100, workload=w, workers=1)
    assert list(many.status) == ["invalid", OOM, OK]
    assert many.errors[0] and many.errors[1] and many.errors[2] == ""
    assert not many.present[:2].any() and not many.values[:2].any()
    assert np.isfinite(many.values).all()
    keys, values = _single({"hardware": H100, "serving": simllm.ServingConfig(tensor_parallel_size=2),
                            "workload": w})
    assert many.summary(2) == dict(zip(keys, values))


def test_a_malformed_run_or_a_missing_model_is_a_config_error():
    with pytest.raises(simllm.ConfigError, match=r"runs\[0\].*tp"):
        simllm.simulate_many([{"tp": 2}], model=MODEL, hardware=H100)
    with pytest.raises(simllm.ConfigError, match=r"runs\[1\].*model"):
        simllm.simulate_many([{"model": MODEL}, {}], hardware=H100)
    with pytest.raises(simllm.ConfigError, match=r"runs\[0\]"):
        simllm.simulate_many([42], model=MODEL, hardware=H100)


def test_kept_requests_are_the_single_runs_requests():
    w = simllm.Workload(num_prompts=12, max_concurrency=3, input_len=uniform(16, 128), output_len=fixed(9))
    many = simllm.simulate_many([{}, {"hardware": H200}], model=MODEL, hardware=H100, workload=w,
                                keep_requests=True, workers=1)
    for res, hw in zip(many.results, (H100, H200)):
        single = simllm.simulate(MODEL, hw, workload=w)
        for k in single.requests:
            assert np.array_equal(res.requests[k], single.requests[k]), k


def test_draws_are_shared_only_between_workloads_that_draw_the_same_requests():
    w = simllm.Workload(num_prompts=30, request_rate=5.0, input_len=uniform(8, 64), seed=4)
    same = [replace(w, max_concurrency=7), replace(w, client_jitter_ms=3.0, name="other", warmup_requests=2)]
    differ = [replace(w, seed=5), replace(w, request_rate=6.0), replace(w, input_len=uniform(8, 65)),
              replace(w, prefix_hit_ratio=0.5)]
    draws = SharedDraws()
    first = draws.requests(w)
    for other in same:
        assert draw_key(other) == draw_key(w)
        assert draws.requests(other) is first
    for other in differ:
        assert draw_key(other) != draw_key(w)
        got = draws.requests(other)
        assert got is not first
        fresh = simllm.generate(other)
        assert np.array_equal(got.arrival_s, fresh.arrival_s) and np.array_equal(got.input_len, fresh.input_len)
    # What generate reads is exactly what the key holds: a field outside NOT_DRAWN changes the draw.
    assert {"max_concurrency", "client_jitter_ms"} <= NOT_DRAWN and "seed" not in NOT_DRAWN


def test_large_draws_are_not_kept_and_a_pickled_memo_is_empty():
    import pickle

    draws = SharedDraws(size=2, max_requests=20)
    assert draws.requests(simllm.Workload(num_prompts=21)) is None  # the caller draws it (and streams a big one)
    for seed in range(3):
        draws.requests(simllm.Workload(num_prompts=5, seed=seed))
    assert len(draws._draws) == 2  # the last two
    copy = pickle.loads(pickle.dumps(draws))
    assert copy.size == 2 and copy.max_requests == 20 and not copy._draws


@pytest.mark.heavy
def test_a_disaggregated_run_equals_simulate_disagg():
    w = simllm.Workload(num_prompts=24, max_concurrency=6, input_len=uniform(64, 256), output_len=fixed(12))
    disagg = simllm.DisaggConfig()
    many = simllm.simulate_many([{"disagg": disagg}, {}], model=MODEL, hardware=H100, workload=w, workers=1)
    single = simllm.simulate_disagg(MODEL, H100, simllm.ServingConfig(), w, disagg, keep_requests=False).summary
    assert many.summary(0) == dict(zip(*_numbers(single)))
    assert many.present[0].sum() > many.present[1].sum()  # the pools' own figures


def test_to_pandas_has_a_row_per_run_and_no_number_where_a_run_has_none():
    pd = pytest.importorskip("pandas")
    w = simllm.Workload(num_prompts=8, max_concurrency=2)
    many = simllm.simulate_many([{}, {"serving": simllm.ServingConfig(tensor_parallel_size=3)}], model=MODEL,
                                hardware=H100, workload=w, workers=1)
    df = many.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df["status"]) == [OK, "invalid"]
    assert df["mean_ttft_ms"].iloc[0] == many["mean_ttft_ms"][0] and df["mean_ttft_ms"].isna().iloc[1]


@pytest.mark.slow
def test_a_dask_local_cluster_gives_the_local_columns():
    """The Dask path: chunks of runs go to the workers of a LocalCluster, each holding the shared
    objects (the runs' base, its draws) once; every number equals the local run's."""
    pytest.importorskip("dask.distributed")
    runs = _grid()[:10]
    local = simllm.simulate_many(runs, model=MODEL, workers=1)
    remote = simllm.simulate_many(runs, model=MODEL, executor="dask", workers=2)
    assert remote.metrics == local.metrics and list(remote.status) == list(local.status)
    assert np.array_equal(remote.values, local.values) and np.array_equal(remote.present, local.present)


def test_kept_results_share_no_array():
    w = simllm.Workload(num_prompts=6, max_concurrency=2)
    many = simllm.simulate_many([{}, {"hardware": H200}], model=MODEL, hardware=H100, workload=w,
                                keep_requests=True, workers=1)
    a, b = (r.requests for r in many.results)
    for k in a:
        assert not np.shares_memory(a[k], b[k]), k
