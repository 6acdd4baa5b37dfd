"""simllm.simulate's closed loops: client jitter breaks the t=0 lockstep of identical requests,
jitter 0 is the old behaviour to the bit, the same seed gives the same result; warm-up requests
stay out of the summary; ramp-ups follow vllm bench serve."""
import dataclasses

import numba
import numpy as np
import pytest

import simllm
from helpers import JIT_DISABLED, build
from simcore import iteration_time_nb
from simcore.params import Speculation
from simllm.config.workload import fixed, random_range
from simllm.sim.results import TIMING_KEYS
from simllm.sim.simulate import argument_kinds

MODEL, HW, SERVING, _, P = build("llama-3.1-8b", "h100-sxm")


def closed_loop(n, clients, inp, out, **kw):
    return simllm.Workload(num_prompts=n, max_concurrency=clients, input_len=fixed(inp), output_len=fixed(out), **kw)


def md1_ttft_s(clients, inp, out, jitter_s):
    """An independent estimate of a steady closed loop's mean TTFT, from the cost kernel alone
    (no engine): one prefill iteration takes S (the prompt plus the other clients' decode tokens),
    one decode iteration d (all clients decoding at the mean context). A client's cycle is
    C = TTFT + (out - 1) d + its mean delay (TTFT counts from the send, frontend included), so prefills arrive at rate N / C and keep
    the prefill "server" busy a fraction rho = S N / C. Treating arrivals as Poisson (M/D/1,
    which a de-synchronised loop approaches; a closed loop of N clients queues a little less),
    a request waits Wq = rho S / (2 (1 - rho)) for the prefills ahead of it, plus half a decode
    iteration for the one in progress; TTFT = frontend + d / 2 + Wq + S."""
    ctx = inp + out / 2.0
    others = clients - 1.0
    s = iteration_time_nb(P, inp + others, inp * (inp + 1) / 2.0 + others * (ctx + 1.0),
                          inp + others * (ctx + 1.0), float(clients))
    d = iteration_time_nb(P, float(clients), clients * (ctx + 1.0), clients * (ctx + 1.0), float(clients))
    f = simllm.load_framework(SERVING.framework).frontend_latency_ms / 1e3
    ttft = f + d / 2.0 + s  # first guess: no queueing
    for _ in range(20):  # the cycle depends on TTFT a little: iterate to the fixed point
        cycle = ttft + (out - 1) * d + jitter_s
        rho = s * clients / cycle
        ttft = f + d / 2.0 + rho * s / (2.0 * (1.0 - rho)) + s
    return ttft, rho


def md1_cycle_s(clients, inp, out, jitter_s):
    """The client cycle of :func:`md1_ttft_s`: the time between one client's sends."""
    ttft, rho = md1_ttft_s(clients, inp, out, jitter_s)
    ctx = inp + out / 2.0
    d = iteration_time_nb(P, float(clients), clients * (ctx + 1.0), clients * (ctx + 1.0), float(clients))
    return ttft + (out - 1) * d + jitter_s


def steady_ttft_and_estimate(inp, out, clients, jitter_ms, n_per_client=100):
    """Mean TTFT after a warm-up of a quarter of the requests, its M/D/1 estimate, the load, and
    the same loop's mean TTFT without jitter."""
    n = n_per_client * clients
    w = closed_loop(n, clients, inp, out, warmup_requests=n // 4, client_jitter_ms=jitter_ms)
    est, rho = md1_ttft_s(clients, inp, out, jitter_ms / 1e3)
    jittered = simllm.simulate(MODEL, HW, SERVING, w, keep_requests=False).summary["mean_ttft_ms"] / 1e3
    lockstep = simllm.simulate(MODEL, HW, SERVING, dataclasses.replace(w, client_jitter_ms=0.0))
    return jittered, est, rho, lockstep


def test_open_loop_poisson_meets_the_estimate():
    """The estimate itself, checked where M/D/1's assumption holds: Poisson arrivals at a closed
    loop's rate (16 clients of 256/64 tokens, rho ~ 0.3) give its TTFT within 5%."""
    est, rho = md1_ttft_s(16, 256, 64, 0.0)
    cycle = md1_cycle_s(16, 256, 64, 0.0)
    w = simllm.Workload(num_prompts=1600, request_rate=16 / cycle, input_len=fixed(256), output_len=fixed(64),
                        warmup_requests=400)
    r = simllm.simulate(MODEL, HW, SERVING, w, keep_requests=False)
    assert r.summary["mean_ttft_ms"] / 1e3 == pytest.approx(est, rel=0.05)


def test_closed_loop_at_moderate_load_reaches_the_queueing_steady_state():
    """16 clients of 256-token prompts and 64-token outputs (prefill load rho ~ 0.3). Without
    jitter the t=0 burst stays in step forever: each wave's 16 prefills share one iteration and
    every request waits for all of them (2.4x the estimate). With clients' delays of 100 ms on
    average the loop de-synchronises and, after a warm-up, its mean TTFT is within 20% of the
    M/D/1 estimate. (It takes delays about as long as a clustered prefill iteration: the default
    20 ms breaks the lockstep only at light load, next test, since an engine iteration admits
    every request that arrived while it ran, which pulls delayed clients back together.)"""
    jittered, est, rho, lockstep = steady_ttft_and_estimate(256, 64, 16, 100.0)
    assert 0.2 < rho < 0.4
    assert jittered == pytest.approx(est, rel=0.2)
    assert lockstep.summary["mean_ttft_ms"] / 1e3 > 1.8 * est  # the artefact the jitter removes
    assert np.ptp(lockstep.requests["ttft_s"][400:]) < 1e-9  # every request of every wave alike


def test_default_jitter_desynchronises_a_lightly_loaded_loop():
    """8 clients of 256/256 tokens (rho ~ 0.05) with the default 20 ms: within 20% of the
    estimate, where the lockstep is 2.4x it."""
    jittered, est, rho, lockstep = steady_ttft_and_estimate(256, 256, 8, simllm.Workload().client_jitter_ms, 200)
    assert rho < 0.1
    assert jittered == pytest.approx(est, rel=0.2)
    assert lockstep.summary["mean_ttft_ms"] / 1e3 > 1.8 * est


def test_jitter_zero_is_the_previous_closed_loop_to_the_bit():
    """With client_jitter_ms 0 the closed loop is what it was before client delays existed: the
    figures matched commit 2b1237d's to the bit when client delays landed, and were re-recorded
    when kernel tables and framework profiles changed every preset's costs, and (the second case,
    whose 900-token prompts share iterations with decodes) when prefill tokens' attention queries
    and outputs stopped being priced at the decode kernel's efficiency (a plain loop, and a
    rate-limited loop with frontend latency, varied lengths and a sequence cap)."""
    cases = [
        (HW, SERVING, closed_loop(200, 8, 700, 60, client_jitter_ms=0.0),
         (1400.4036598039663, 1317.0738759300773, 1292.6803013575072, 7.061846091007522)),
        (dataclasses.replace(HW, frontend_latency_ms=3.0), dataclasses.replace(SERVING, max_num_seqs=16),
         simllm.Workload(num_prompts=300, max_concurrency=24, input_len=random_range(900, 0.5),
                         output_len=random_range(80, 0.5), seed=3, request_rate=30.0, client_jitter_ms=0.0),
         (2579.9964806163775, 2334.2544304156268, 2207.4985453933996, 10.383759410155944)),
    ]
    for hw, serving, w, want in cases:
        r = simllm.simulate(MODEL, hw, serving, w)
        got = (np.sum(r.requests["finish_s"]), np.sum(r.requests["first_token_s"]), np.sum(r.requests["arrival_s"]),
               r.summary["mean_itl_ms"])
        assert got == pytest.approx(want, rel=1e-12, abs=0)


def test_jitter_is_seeded_bit_for_bit():
    w = closed_loop(300, 16, 600, 80, seed=5)
    a = simllm.simulate(MODEL, HW, SERVING, w)
    b = simllm.simulate(MODEL, HW, SERVING, w)
    for k, v in a.requests.items():
        assert np.array_equal(v, b.requests[k], equal_nan=True), k
    skip = set(TIMING_KEYS)
    assert {k: v for k, v in a.summary.items() if k not in skip} == {k: v for k, v in b.summary.items() if k not in skip}
    c = simllm.simulate(MODEL, HW, SERVING, dataclasses.replace(w, seed=6))
    assert not np.array_equal(a.requests["finish_s"], c.requests["finish_s"])
    # The jitter delays sends: requests reach the engine in send order, never before their client is free.
    arrival = a.requests["arrival_s"]
    assert np.all(np.diff(arrival) >= 0)
    ends = np.sort(a.requests["finish_s"])
    assert np.all(arrival[16:] >= ends[:-16])  # the k-th send after the first wave follows the k-th end


def test_warmup_requests_leave_the_summary_but_stay_in_the_table():
    w = closed_loop(240, 8, 400, 40, warmup_requests=40)
    r = simllm.simulate(MODEL, HW, SERVING, w)
    q, s = r.requests, r.summary
    measured = ~q["warmup"]
    assert q["warmup"][:40].all() and not q["warmup"][40:].any()
    assert np.isfinite(q["ttft_s"][:40]).all()  # the warm-up rows keep their figures
    assert s["completed"] == 200 and s["num_requests"] == 200 and s["warmup_requests"] == 40
    assert s["mean_ttft_ms"] == pytest.approx(np.mean(q["ttft_s"][measured]) * 1e3, rel=1e-12)
    assert s["mean_tpot_ms"] == pytest.approx(np.mean(q["tpot_s"][measured]) * 1e3, rel=1e-12)
    span = q["finish_s"][measured].max() - q["arrival_s"][measured].min()
    assert s["duration"] == pytest.approx(span, rel=1e-12)
    assert s["request_throughput"] == pytest.approx(200 / span, rel=1e-12)
    assert s["total_output_tokens"] == 200 * 40
    # ITL comes from the kernel: fixed outputs make it the measured requests' TPOT exactly.
    assert s["mean_itl_ms"] == pytest.approx(s["mean_tpot_ms"], rel=1e-9)
    full = simllm.simulate(MODEL, HW, SERVING, dataclasses.replace(w, warmup_requests=0))
    assert np.array_equal(full.requests["finish_s"], q["finish_s"])  # the warm-up changes no request
    assert full.summary["completed"] == 240 and "warmup_requests" not in full.summary


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_ramp_up_follows_vllm_bench_serve(strategy):
    """Request i is sent at vLLM's ramped rate: progress i / (n - 1), linear start + (end -
    start) progress or exponential start (end / start) ** progress; with constant gaps the gap
    before request i is exactly 1 / rate_i."""
    n, start, end = 50, 2.0, 40.0
    w = simllm.Workload(num_prompts=n, arrival="constant", ramp_up_strategy=strategy, ramp_up_start_rps=start,
                        ramp_up_end_rps=end, input_len=fixed(100), output_len=fixed(10))
    progress = np.arange(n) / (n - 1)
    rate = start + (end - start) * progress if strategy == "linear" else start * (end / start) ** progress
    sent = simllm.config.workload.generate(w).arrival_s
    assert sent[0] == 0.0
    np.testing.assert_allclose(np.diff(sent), 1.0 / rate[1:], rtol=1e-12)
    r = simllm.simulate(MODEL, HW, SERVING, w)
    np.testing.assert_allclose(r.requests["arrival_s"], sent, rtol=1e-12)
    assert "ramp-up" in w.describe()


def test_ramp_up_with_clients_spreads_the_first_wave():
    """A ramp-up under --max-concurrency: the clients' first requests wait for their ramped send
    times instead of leaving together at t=0."""
    w = simllm.Workload(num_prompts=64, max_concurrency=8, ramp_up_strategy="linear", ramp_up_start_rps=4.0,
                        ramp_up_end_rps=400.0, arrival="constant", input_len=fixed(300), output_len=fixed(30),
                        client_jitter_ms=0.0)
    r = simllm.simulate(MODEL, HW, SERVING, w)
    rate = 4.0 + 396.0 * np.arange(64) / 63
    np.testing.assert_allclose(r.requests["arrival_s"][:8], np.concatenate([[0.0], np.cumsum(1.0 / rate[1:8])]),
                               rtol=1e-12)
    assert np.all(np.diff(r.requests["arrival_s"]) >= 0)


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="compiled signatures are what is checked")
@pytest.mark.parametrize("speculative", [False, pytest.param(True, marks=pytest.mark.heavy)])
def test_the_kernel_is_compiled_once_for_the_call_it_makes_with_or_without_speculation(speculative):
    """simulate compiles the kernel before its clock starts (compile_for) for exactly the types of
    the call it then makes: a plain run leaves the cohort argument out (its default, one variant
    for every caller), a speculative run passes None (engine.cohort_args: the cohort's inlined
    paths pruned); neither compiles a second signature when it runs, with or without progress."""
    from numba import types

    from simcore.engine import run_events_nb

    spec = {"method": "ngram", "num_speculative_tokens": 2, "synthetic_acceptance_length": 1.5}
    serving, last = ((dataclasses.replace(SERVING, speculative_config=spec), types.none) if speculative
                     else (SERVING, types.Omitted(True)))
    simllm.simulate(MODEL, HW, serving, closed_loop(6, 2, 32, 8))
    before = list(run_events_nb.signatures)
    simllm.simulate(MODEL, HW, serving, closed_loop(6, 2, 32, 8))
    # A run reporting progress (the command line's) calls the same event loop, not a kernel of its own.
    simllm.simulate(MODEL, HW, serving, closed_loop(6, 2, 32, 8), progress=lambda ended, total: None)
    assert list(run_events_nb.signatures) == before
    assert any(sig[-1] == last for sig in before), (last, [sig[-1] for sig in before])
    assert all(sig[-1] in (types.Omitted(True), types.none) for sig in before)


def _kinds_cases():
    base = np.zeros((3, 4))
    return [
        base, np.zeros((3, 4), dtype=np.int64), np.zeros(4), np.asfortranarray(base), base[:, ::2], base.T,
        np.frombuffer(b"\0" * 96), np.zeros((3, 4), dtype=np.float32), 0, 1 << 62, 1 << 63, True, 0.5, np.float64(0.5),
        np.int32(3), None, (None,), (1, 2), (1, 2.0), (base, 1),
        Speculation(*[0] * len(Speculation._fields)), Speculation(*[0.0] * len(Speculation._fields)),
    ]


@pytest.mark.skipif(JIT_DISABLED, reason="compares with numba.typeof")
def test_argument_kinds_tell_apart_what_numba_types_apart():
    """compile_for skips what this process compiled for arguments of equal kinds: equal kinds must
    be equal numba types, so different types are different kinds (the kinds may split a type:
    a float and a numpy float64 are both float64)."""
    values = _kinds_cases()
    for a in values:
        for b in values:
            if argument_kinds(a) == argument_kinds(b):
                assert numba.typeof(a) == numba.typeof(b), (a, b)
            elif numba.typeof(a) == numba.typeof(b):
                assert {type(a), type(b)} <= {float, np.float64}, (a, b)


def test_prepare_pool_gives_back_the_pool_of_equal_arguments():
    """A sweep's rows ask again for the pool an earlier row packed: equal serving settings on the
    same model and GPU objects give the very same pool; other settings, or another (equal) model
    object, pack afresh, and the pool packed afresh is the same as the kept one."""
    from simllm.sim.simulate import prepare_pool

    m, h = simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm")
    a = prepare_pool(m, h, simllm.ServingConfig(max_num_seqs=64))
    assert prepare_pool(m, h, simllm.ServingConfig(max_num_seqs=64)) is a
    other = prepare_pool(m, h, simllm.ServingConfig(max_num_seqs=128))
    assert other is not a and other.memory != a.memory  # activations grow with max_num_seqs
    twin = dataclasses.replace(m)
    fresh = prepare_pool(twin, h, simllm.ServingConfig(max_num_seqs=64))
    assert fresh is not a
    assert fresh.params._replace(eff=None) == a.params._replace(eff=None) and fresh.memory == a.memory
    np.testing.assert_array_equal(fresh.params.eff, a.params.eff)
