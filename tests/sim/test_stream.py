"""Streamed runs: the kernel over rows loaded a chunk at a time and dropped once ended gives the
same run, bit for bit, as one call over all the rows, for every engine path; memory holds the
requests in flight; ``simulate`` streams long summary-only runs and their summary matches the
in-memory one (counts and means exactly, percentiles within one histogram bin)."""
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simllm
from simcore import codes
from simcore.engine import simulate
from simcore.layout import make_layout
from simllm.config import workload as workload_mod
from simllm.config.workload import random_range
from simllm.sim.results import TIMING_KEYS
from simllm.sim.stream import StreamStats, run_streamed

sys.path.insert(0, str(Path(__file__).parents[1] / "simcore"))
from test_engine import P, P_EP, engine, request_arrays, workload  # noqa: E402
from test_engine_pipeline import PIPE  # noqa: E402
from test_engine_speculative import spec  # noqa: E402

N_BINS = 34 << 9


def whole_and_streamed(e, reqi, reqf, chunk, p=P, sp=None):
    """(reqi, reqf, acc) of one call over all rows and of a streamed run in chunks of ``chunk``
    rows (the ended rows gathered in send order), and the streamed run's StreamStats."""
    n = len(reqi)
    lay = make_layout(e.max_num_seqs, e.block_size, n, 30, N_BINS, e.pipeline_stages, e.num_speculative_tokens)
    acc = np.zeros((e.n_replicas, lay.acc_len))
    wi, wf = reqi.copy(), reqf.copy()
    simulate(p, sp, e, lay, wi, wf, acc)
    got_i, got_f = np.zeros_like(reqi), np.zeros_like(reqf)
    seen = []

    def on_rows(ri, rf, first):
        seen.append((first, len(ri)))
        got_i[first:first + len(ri)] = ri
        got_f[first:first + len(ri)] = rf

    slay = make_layout(e.max_num_seqs, e.block_size, chunk, 30, N_BINS, e.pipeline_stages, e.num_speculative_tokens)
    sacc = np.zeros((e.n_replicas, slay.acc_len))
    glob = np.zeros(codes.N_GLOBALS, dtype=np.int64)
    held = StreamStats()
    chunks = ((reqi[f:f + chunk].copy(), reqf[f:f + chunk].copy()) for f in range(0, n, chunk))
    run_streamed(p, sp, e, slay, chunks, n, on_rows, glob, sacc, held)
    assert [f for f, _ in seen] == list(np.cumsum([0] + [m for _, m in seen])[:-1])  # in send order, once each
    assert sum(m for _, m in seen) == n
    assert glob[codes.GLOBAL_ENDED] == n
    return (wi, wf, acc), (got_i, got_f, sacc), held


def assert_identical(e, reqi, reqf, chunk, p=P, sp=None):
    (wi, wf, acc), (si, sf, sacc), held = whole_and_streamed(e, reqi, reqf, chunk, p, sp)
    cols = [c for c in range(codes.N_RI) if c != codes.RI_DONE]  # a cohort member's last advance: run-relative
    np.testing.assert_array_equal(si[:, cols], wi[:, cols])
    np.testing.assert_array_equal(sf, wf)
    np.testing.assert_array_equal(sacc, acc)
    return held


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    chunk=st.integers(1, 30),
    policy=st.sampled_from(["v1", "v0", "static", "dynamic"]),
    replicas=st.sampled_from([1, 1, 2, 3]),
    router=st.sampled_from([codes.ROUTER_ROUND_ROBIN, codes.ROUTER_LEAST_OUTSTANDING]),
    blocks=st.integers(40, 300),
    max_seqs=st.integers(1, 12),
    clients=st.sampled_from([0, 0, 3]),
    timeout=st.sampled_from([0.0, 0.0, 0.3]),
    warmup=st.sampled_from([0, 7]),
    cached=st.booleans(),
)
def test_streamed_run_is_the_whole_run(seed, chunk, policy, replicas, router, blocks, max_seqs, clients, timeout,
                                       warmup, cached):
    """Every scheduling rule (v1, v0, static and dynamic batches), routers, preemption, timeouts,
    closed loops with client delays, prefix-cache hits, warm-up: row for row and accumulator for
    accumulator, the streamed run is the whole run, for any chunk size."""
    rng = np.random.default_rng(seed)
    n = 90
    arrival, ready, prompt, output = workload(rng, n, 60.0, 300, 60, clients)
    chunked = policy == "v1"
    budget = 256 if chunked else 600
    e = engine(policy={"static": codes.POLICY_STATIC, "dynamic": codes.POLICY_DYNAMIC}.get(policy, 0),
               chunked_prefill=chunked, num_blocks=blocks, max_num_seqs=max_seqs, max_num_batched_tokens=budget,
               max_model_len=600, static_slots=max(1, min(max_seqs, 4)), batch_max=3 if policy == "dynamic" else 0,
               batch_window_s=0.05, n_clients=clients, timeout_s=timeout, n_replicas=replicas, router=router,
               warmup=warmup, prefix_blocks=4 if cached else 0, frontend_s=0.01)
    delay = rng.exponential(0.02, n) if clients else None
    hit = np.minimum(64, ((prompt - 1) // 16) * 16) * (rng.random(n) < 0.5) if cached else None
    reqi, reqf = request_arrays(e, arrival, prompt, output, hit, ready, delay)
    assert_identical(e, reqi, reqf, max(chunk, clients + 1))


@pytest.mark.heavy  # each kind compiles a kernel variant of its own
@pytest.mark.parametrize("kind", ["lockstep", "pipeline", "eagle", "ngram"])
def test_streamed_run_is_the_whole_run_on_the_other_paths(kind):
    """Lockstep data-parallel ranks, pipeline stages and speculative decoding (whose acceptance
    draws key on the request, not its row) stream to the same run too."""
    rng = np.random.default_rng(3)
    n = 150
    arrival, ready, prompt, output = workload(rng, n, 40.0, 400, 90)
    p, sp = P, None
    if kind == "lockstep":
        e, p = engine(n_replicas=4, lockstep=True, dp_pad_tokens=64, max_num_seqs=8, num_blocks=200), P_EP
    elif kind == "pipeline":
        e = engine(max_num_seqs=8, num_blocks=300, **PIPE)
    else:
        sp = spec(3, (0.8, 0.6, 0.4)) if kind == "eagle" else spec(5, (0.7,) * 5, method="ngram")
        e = engine(num_speculative_tokens=len(sp.rates), num_blocks=300, max_num_seqs=12)
    reqi, reqf = request_arrays(e, arrival, prompt, output, ready=ready)
    for chunk in (1, 17, 64):
        assert_identical(e, reqi, reqf, chunk, p, sp)


def test_rows_held_are_the_requests_in_flight_not_the_run():
    """Under a load the engine keeps up with, a streamed run of 4,000 requests in chunks of 100
    holds a few chunks of rows, not the run."""
    rng = np.random.default_rng(1)
    n = 4000
    arrival, ready, prompt, output = workload(rng, n, 20.0, 400, 100)
    e = engine(num_blocks=2000)
    reqi, reqf = request_arrays(e, arrival, prompt, output, ready=ready)
    held = assert_identical(e, reqi, reqf, 100)
    assert held.peak_rows <= 300
    assert held.capacity <= 400
    assert held.pauses >= n // 100 - 1


# ----------------------------------------------------------------------------- simulate
def _summary(chunk, monkeypatch, **kw):
    monkeypatch.setattr(workload_mod, "CHUNK_REQUESTS", chunk)
    model, hw = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    w = simllm.Workload(**{"num_prompts": 3000, "request_rate": 40.0, **kw})
    return {k: v for k, v in simllm.simulate(model, hw, simllm.ServingConfig(max_num_seqs=64), w,
                                             keep_requests=False, goodput={"ttft": 200, "tpot": 15}).summary.items()
            if k not in TIMING_KEYS}


@pytest.mark.parametrize("kw", [{}, {"warmup_requests": 100}, {"max_concurrency": 16, "request_rate": float("inf")}])
def test_streamed_summary_matches_the_in_memory_one(monkeypatch, kw):
    """``simulate`` streams a summary-only run longer than one chunk. The same requests (drawn a
    chunk at a time either way), the same simulation: counts, tokens, the engine's figures and the
    ITL statistics equal; latency means and deviations to rounding; percentiles within one bin."""
    monkeypatch.setattr(workload_mod, "CHUNK_REQUESTS", 1000)
    model, hw = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    w = simllm.Workload(**{"num_prompts": 3000, "request_rate": 40.0, **kw})
    requests = simllm.generate(w)  # drawn in chunks of 1,000
    whole = {k: v for k, v in simllm.simulate(model, hw, simllm.ServingConfig(max_num_seqs=64), w, requests=requests,
                                              keep_requests=True, goodput={"ttft": 200, "tpot": 15}).summary.items()
             if k not in TIMING_KEYS}
    streamed = _summary(1000, monkeypatch, **kw)
    assert streamed.keys() == whole.keys()
    assert list(streamed) == list(whole)
    for k, v in whole.items():
        got = streamed[k]
        if k in ("timeseries",) or not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if "_ms" in k and ("itl" not in k) and not k.startswith(("mean_", "std_")):
            assert got == pytest.approx(v, rel=2**-9, abs=1e-6), k  # one bin
        elif k in ("duration", "request_throughput", "output_throughput", "total_token_throughput",
                   "request_goodput") or k.startswith(("mean_", "std_")) or "utilization" in k or "usage" in k \
                or "fraction" in k or k == "mean_batch_size":
            assert got == pytest.approx(v, rel=1e-9, abs=1e-12), k
        else:
            assert got == v, k


@pytest.mark.slow
def test_streamed_memory_does_not_grow_with_the_run(monkeypatch):
    """Python-side allocations (numpy's included, through tracemalloc) of a streamed summary-only
    run are the same for 4,000 and 16,000 requests: nothing is kept per request that has ended."""
    import tracemalloc

    monkeypatch.setattr(workload_mod, "CHUNK_REQUESTS", 1000)
    model, hw = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    serving = simllm.ServingConfig(max_num_seqs=64)
    peaks = []
    for n in (4000, 4000, 16_000):  # the first run compiles
        w = simllm.Workload(num_prompts=n, request_rate=10.0, input_len=random_range(512, 0.5),
                            output_len=random_range(64, 0.5))
        tracemalloc.start()
        summary = simllm.simulate(model, hw, serving, w, keep_requests=False).summary
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert summary["completed"] == n
    assert peaks[2] < 1.2 * peaks[1], peaks


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_streamed_detailed_rows_are_the_in_memory_file(monkeypatch, tmp_path, suffix):
    """``save_detailed`` of a streamed run writes, a batch at a time, the file the in-memory run
    writes for the same requests: byte for byte as CSV, row for row as Parquet."""
    if suffix == ".parquet":
        pq = pytest.importorskip("pyarrow.parquet")
    monkeypatch.setattr(workload_mod, "CHUNK_REQUESTS", 500)
    model, hw = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    w = simllm.Workload(num_prompts=1800, request_rate=100.0, warmup_requests=20, timeout_s=3.0,
                        output_len=random_range(64, 0.9))
    serving = simllm.ServingConfig(max_num_seqs=32)
    requests = simllm.generate(w)
    whole = simllm.simulate(model, hw, serving, w, requests=requests)
    assert whole.summary["num_timed_out"] > 0  # NaN latencies in the file too
    path = tmp_path / f"streamed{suffix}"
    streamed = simllm.simulate(model, hw, serving, w, keep_requests=False, save_detailed=path)
    assert streamed.requests is None
    if suffix == ".csv":
        whole.save_detailed(tmp_path / "whole.csv")
        assert path.read_bytes() == (tmp_path / "whole.csv").read_bytes()
    else:
        table = pq.read_table(path).to_pydict()
        assert table["request"] == list(range(1800))
        for name, values in whole.requests.items():
            got = np.asarray(table[name])
            if name == "status":
                np.testing.assert_array_equal(got, np.asarray(codes.STATUS_NAMES)[values.astype(int)])
            else:
                np.testing.assert_array_equal(got, values)
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary left


def test_streamed_trace_and_given_requests(monkeypatch, tmp_path):
    """A trace replay and pre-drawn requests stream too (sliced a chunk at a time): the same
    summary as the in-memory run of the same requests, counts and tokens exact; a trace's prompt
    too long for the model is named by its line even in a later chunk."""
    monkeypatch.setattr(workload_mod, "CHUNK_REQUESTS", 1000)
    rng = np.random.default_rng(5)
    n = 2600
    t = np.cumsum(rng.exponential(1 / 30.0, n))
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,input_len,output_len\n" + "".join(
        f"{a:.6f},{b},{c}\n" for a, b, c in zip(t, rng.integers(50, 2000, n), rng.integers(1, 200, n))))
    model, hw = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    serving = simllm.ServingConfig(max_num_seqs=64)
    w = simllm.Workload(trace=str(path), num_prompts=0)
    whole = simllm.simulate(model, hw, serving, w).summary
    streamed = simllm.simulate(model, hw, serving, w, keep_requests=False).summary
    given = simllm.simulate(model, hw, serving, w, requests=simllm.generate(w), keep_requests=False).summary
    for s in (streamed, given):
        for k in ("completed", "failed", "total_input_tokens", "total_output_tokens", "iterations", "num_preemptions"):
            assert s[k] == whole[k], k
        for k in ("duration", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "mean_itl_ms", "p99_itl_ms"):
            assert s[k] == pytest.approx(whole[k], rel=1e-9), k
        assert s["p99_ttft_ms"] == pytest.approx(whole["p99_ttft_ms"], rel=2**-9)
    lines = path.read_text().splitlines()
    lines[2345] = lines[2345].rsplit(",", 2)[0] + ",200000,5"  # line 2346 of the file: past the first chunks
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(simllm.ConfigError) as err:
        simllm.simulate(model, hw, serving, simllm.Workload(trace=str(path), num_prompts=0), keep_requests=False)
    assert "trace.csv:2346: input_len" in str(err.value)
