"""Speculative decoding in the engine: the acceptance draws, the kernels against the reference
engine, and the closed forms (full acceptance, none, the expected tokens per step, lookahead KV)."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import naive
from helpers import build
from simcore import acceptance_thresholds, codes, draft_totals_nb, iteration_time_nb, uniform_nb
from simcore.engine import simulate
from simcore.layout import accepted_per_position, make_layout
from simcore.scheduler import blocks_past_nb
from simllm.config.speculative import SpeculativeConfig
from simllm.sim.speculative import pack_drafter, speculation
from test_engine import P, assert_same, engine, run_kernel, workload

# heavy: speculative decoding's kernel variant (CI's second step)
pytestmark = pytest.mark.heavy

MODEL, HW, SERVING = build("llama-3.1-8b", "h100-sxm")[:3]


def spec(k, rates, method="eagle", seed=0):
    """A Speculation for llama-3.1-8b on an H100 with ``k`` drafts at ``rates``."""
    sc = SpeculativeConfig(method, k, tuple(float(r) for r in rates))
    return speculation(P, pack_drafter(MODEL, HW, SERVING, sc), seed, sc)


def test_acceptance_draws_match_the_reference_hash_and_are_uniform():
    cases = [(0, 0, 0), (1, 2, 3), (2**31, 2**32 + 5, 7), (12345, 10**6, 4095)]
    for seed, r, g in cases:
        assert uniform_nb(seed, r, g) == naive.spec_uniform(seed, r, g)
    u = np.array([uniform_nb(7, r, g) for r in range(200) for g in range(50)])
    assert 0.0 < u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs((u < 0.25).mean() - 0.25) < 0.01
    assert len(set(u.tolist())) > 0.99 * u.size


def test_acceptance_thresholds_decide_as_the_uniform_draws_do():
    """The kernels test a draw's 32-bit hash m against an integer threshold: for every rate, the
    hashes on both sides of it decide as (m + 0.5) / 2**32 < rate does, at the ends too."""
    rng = np.random.default_rng(0)
    rates = [0.0, 1.0, 0.5, 1e-12, 1.0 - 2**-40, (7 + 0.5) / 2**32, (7 + 0.25) / 2**32, 0.73, 0.521]
    rates += rng.random(200).tolist()
    th = acceptance_thresholds(rates)
    assert th.dtype == np.int64 and not th.flags.writeable and th.tolist()[:2] == [0, 2**32]
    for r, t in zip(rates, th.tolist()):
        for m in (t - 2, t - 1, t, t + 1):
            if 0 <= m < 2**32:
                assert ((m + 0.5) / 2**32 < r) == (m < t), (r, m, t)


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("blocks", [400, 60])  # 60 blocks of 16 force preemptions
@pytest.mark.parametrize("method", ["eagle", "ngram"])
def test_kernel_matches_reference(chunked, blocks, method):
    rng = np.random.default_rng(3 + blocks + chunked)
    arrival, ready, prompt, output = workload(rng, 100, 30.0, 600, 200)
    e = engine(chunked_prefill=chunked, num_blocks=blocks, max_num_batched_tokens=512 if chunked else 1024,
               max_model_len=1024, num_speculative_tokens=3)
    ref, stats = assert_same(e, arrival, ready, prompt, output, sp=spec(3, [0.8, 0.5, 0.3], method))
    assert stats[codes.STAT_SPEC_ACCEPTED] > 0 and stats[codes.STAT_SPEC_DRAFT_TOKENS] > stats[codes.STAT_SPEC_ACCEPTED]
    if chunked:  # the fast path's speculative runs (simcore.fast.spec_run) took part
        assert 0 < stats[codes.STAT_FAST_ITERATIONS] < stats[codes.STAT_ITERATIONS]
    if blocks == 60:
        assert sum(r.preemptions for r in ref) > 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), chunked=st.booleans(), blocks=st.integers(40, 300), max_seqs=st.integers(1, 12),
       budget=st.sampled_from([4, 64, 2048]), clients=st.sampled_from([0, 3]), timeout=st.sampled_from([0.0, 0.5]),
       k=st.integers(1, 5), rate=st.floats(0.0, 1.0), warmup=st.sampled_from([0, 5]))
def test_kernel_matches_reference_on_random_configurations(seed, chunked, blocks, max_seqs, budget, clients, timeout,
                                                           k, rate, warmup):
    rng = np.random.default_rng(seed)
    arrival, ready, prompt, output = workload(rng, 40, 50.0, 300, 80, clients)
    rates = np.sort(rng.random(k) * rate)[::-1]
    e = engine(chunked_prefill=chunked, num_blocks=blocks, max_num_seqs=max_seqs,
               max_num_batched_tokens=budget if chunked else 600, max_model_len=600, n_clients=clients,
               timeout_s=timeout, warmup=warmup, num_speculative_tokens=k)
    assert_same(e, arrival, ready, prompt, output, sp=spec(k, rates, seed=seed))


@settings(max_examples=300, deadline=None)
@given(cap_blocks=st.integers(0, 50), tokens=st.integers(0, 1000), block_size=st.sampled_from([1, 2, 16, 64]))
def test_blocks_past_capacity_is_the_ceiling_division(cap_blocks, tokens, block_size):
    """scheduler.blocks_past_nb (no division within a block of the capacity) is
    ceil((tokens - cap) / block_size) for a capacity of whole blocks, on both sides of it."""
    cap = cap_blocks * block_size
    assert blocks_past_nb(tokens, cap, block_size) == -((cap - tokens) // block_size)


@pytest.mark.parametrize("blocks", [400, 70])
def test_prefix_cache_and_fixed_blocks_match_the_reference(blocks):
    """The speculative scheduler's blocks check without a division (scheduler.extra_blocks_nb)
    against the reference, with cached prefixes (whole blocks) and per-request fixed blocks."""
    rng = np.random.default_rng(11 + blocks)
    n = 80
    arrival, ready, prompt, output = workload(rng, n, 40.0, 500, 150)
    prefix = 6
    cached = np.where(rng.random(n) < 0.5, np.minimum(prefix * 16, ((prompt - 1) // 16) * 16), 0)
    fixed = rng.integers(0, 3, n)
    e = engine(num_blocks=blocks, prefix_blocks=prefix, max_num_batched_tokens=256, max_model_len=800,
               num_speculative_tokens=4)
    ref, _ = assert_same(e, arrival, ready, prompt, output, cached, fixed=fixed, sp=spec(4, [0.9, 0.6, 0.4, 0.2]))
    if blocks == 70:
        assert sum(r.preemptions for r in ref) > 0


def test_drafts_accepted_by_position_match_the_reference():
    """The kernel counts the drafts accepted at each position (vLLM's num_accepted_tokens_per_pos):
    the reference engine's counts, non-increasing, adding up to the accepted drafts."""
    rng = np.random.default_rng(5)
    arrival, ready, prompt, output = workload(rng, 80, 30.0, 400, 120)
    e = engine(num_speculative_tokens=4, max_model_len=1024)
    sp = spec(4, [0.9, 0.6, 0.4, 0.2])
    n = len(prompt)
    reqi = np.zeros((n, codes.N_RI), dtype=np.int32)
    reqi[:, codes.RI_INPUT] = prompt
    reqi[:, codes.RI_OUTPUT] = output
    reqf = np.full((n, codes.N_RF), -1.0)
    reqf[:, codes.RF_ARRIVAL] = arrival
    lay = make_layout(e.max_num_seqs, e.block_size, n, 50, 34 << 9, spec_positions=4)
    acc = np.zeros((1, lay.acc_len))
    simulate(P, sp, e, lay, reqi, reqf, acc)
    counts = accepted_per_position(lay, acc)
    ref = naive.simulate(P, e, arrival.copy(), ready, prompt, output, np.zeros(n, dtype=np.int64), sp=sp)
    want = sum((r.spec_accepted_at for r in ref), Counter())
    assert counts.tolist() == [float(want[i]) for i in range(4)]
    assert counts.sum() == acc[0, codes.STAT_SPEC_ACCEPTED] and (np.diff(counts) <= 0).all() and counts[3] > 0


def step_s(sp, c, d):
    """One request's speculative step at ``c`` computed tokens verifying ``d`` drafts (k = 3): the
    target over 1 + d tokens with logits at each, then the drafter's passes."""
    q = 1.0 + d
    pairs, kv = q * c + q * (q + 1) / 2, c + q
    return iteration_time_nb(P, q, pairs, kv, q) + draft_totals_nb(sp, 3, q, pairs, kv, 1.0, kv)[0]


def test_full_acceptance_emits_k_plus_one_tokens_every_step():
    """One request of 200 + 100 tokens, k = 3, every draft accepted: after the prefill's token, 24
    steps of 4 tokens and one of 3 (2 drafts left to verify): 25 inter-token latencies, each the
    closed-form step."""
    sp = spec(3, [1, 1, 1])
    reqi, reqf, stats, *_ = run_kernel(engine(num_speculative_tokens=3), np.zeros(1), np.array([200]),
                                       np.array([100]), sp=sp)
    assert reqi[0, codes.RI_GENERATED] == 100
    assert stats[codes.STAT_ITL_COUNT] == 25
    assert (stats[codes.STAT_SPEC_DRAFTS], stats[codes.STAT_SPEC_DRAFT_TOKENS], stats[codes.STAT_SPEC_ACCEPTED]) == (
        25, 74, 74)
    want = sum(step_s(sp, 200 + 4 * j, 3) for j in range(24)) + step_s(sp, 296, 2)
    decode_s = reqf[0, codes.RF_FINISH] - reqf[0, codes.RF_FIRST_TOKEN]
    assert decode_s == pytest.approx(want, rel=1e-12)


def test_no_acceptance_makes_every_token_a_verification_plus_the_drafts():
    """Nothing accepted: one token a step, each step the target over 1 + d tokens plus the drafter,
    so TPOT is that step's time, slower than plain decoding."""
    sp = spec(3, [0, 0, 0])
    out = 50
    reqi, reqf, stats, *_ = run_kernel(engine(num_speculative_tokens=3), np.zeros(1), np.array([200]),
                                       np.array([out]), sp=sp)
    assert reqi[0, codes.RI_GENERATED] == out and stats[codes.STAT_SPEC_ACCEPTED] == 0
    assert stats[codes.STAT_ITL_COUNT] == out - 1
    want = sum(step_s(sp, 199 + g, min(3, out - g - 1)) for g in range(1, out))
    tpot = (reqf[0, codes.RF_FINISH] - reqf[0, codes.RF_FIRST_TOKEN]) / (out - 1)
    assert tpot == pytest.approx(want / (out - 1), rel=1e-12)
    plain_i, plain_f, *_ = run_kernel(engine(), np.zeros(1), np.array([200]), np.array([out]))
    plain_tpot = (plain_f[0, codes.RF_FINISH] - plain_f[0, codes.RF_FIRST_TOKEN]) / (out - 1)
    assert tpot > 1.1 * plain_tpot


@pytest.mark.slow
def test_expected_tokens_per_step_is_one_plus_the_sum_of_the_rates():
    """vLLM's mean acceptance length, 1 + sum(rates), from ~250,000 verification steps (standard
    error ~0.002; the last steps of a request verify fewer drafts, a bias of ~0.002)."""
    rates = [0.8, 0.6, 0.3]
    n, out = 400, 2000
    e = engine(num_speculative_tokens=3, num_blocks=4000, max_model_len=4096)
    reqi, reqf, stats, *_ = run_kernel(e, np.zeros(n), np.full(n, 64), np.full(n, out), sp=spec(3, rates))
    assert (reqi[:, codes.RI_GENERATED] == out).all()
    length = 1.0 + stats[codes.STAT_SPEC_ACCEPTED] / stats[codes.STAT_SPEC_DRAFTS]
    assert stats[codes.STAT_SPEC_DRAFTS] > 200_000
    assert length == pytest.approx(1.0 + sum(rates), abs=0.01)
    # every token after the first is in one of the steps, but a request's last when it is alone
    # (nothing left to draft: a plain decode step)
    in_steps = stats[codes.STAT_SPEC_DRAFTS] + stats[codes.STAT_SPEC_ACCEPTED]
    assert n * (out - 2) <= in_steps <= n * (out - 1)


def test_accepted_tokens_are_deterministic_per_seed():
    rng = np.random.default_rng(5)
    arrival, ready, prompt, output = workload(rng, 60, 40.0, 300, 200)
    e = engine(num_speculative_tokens=2)
    runs = [run_kernel(e, arrival, prompt, output, sp=spec(2, [0.7, 0.4], seed=s)) for s in (11, 11, 12)]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert runs[0][2][codes.STAT_SPEC_ACCEPTED] == runs[1][2][codes.STAT_SPEC_ACCEPTED]
    assert runs[0][2][codes.STAT_SPEC_ACCEPTED] != runs[2][2][codes.STAT_SPEC_ACCEPTED]


def test_drafts_reserve_their_kv_slots():
    """A 15-token prompt and 10 output tokens in 16-token blocks, nothing accepted: each step holds
    blocks for its context, its token and its d drafts, ceil((c + 1 + d) / 16), so the second
    block is taken at the first decode step (plain decoding takes it at the second). The KV
    block-seconds are that closed form."""
    sp = spec(3, [0, 0, 0])
    _, _, stats, *_ = run_kernel(engine(num_speculative_tokens=3), np.zeros(1), np.array([15]), np.array([10]), sp=sp)
    prefill_s = iteration_time_nb(P, 15.0, 120.0, 15.0, 1.0) + draft_totals_nb(sp, 3, 15.0, 120.0, 15.0, 1.0, 15.0)[0]
    want = prefill_s * 1
    for g in range(1, 10):
        c, d = 14 + g, min(3, 10 - g - 1)
        want += step_s(sp, c, d) * -(-(c + 1 + d) // 16)
    assert stats[codes.STAT_KV_BLOCK_SECONDS] == pytest.approx(want, rel=1e-12)
    assert stats[codes.STAT_PEAK_BLOCKS] == 2


@pytest.mark.parametrize("router", [codes.ROUTER_ROUND_ROBIN, codes.ROUTER_LEAST_OUTSTANDING])
@pytest.mark.parametrize("clients,timeout", [(0, 0.0), (6, 0.0), (0, 0.4)])
def test_speculative_runs_are_the_explicit_steps_across_replicas(router, clients, timeout):
    """Replicas (the reference engine covers one), a closed loop and client time-outs: with the
    fast path's speculative runs (simcore.fast.spec_run) every request's times, tokens and blocks
    and every replica's statistics are the explicit path's, bit for bit."""
    rng = np.random.default_rng(11 + clients)
    arrival, ready, prompt, output = workload(rng, 160, 60.0, 400, 150, clients)
    e = engine(num_blocks=150, max_num_seqs=10, max_num_batched_tokens=256, max_model_len=600, n_replicas=3,
               router=router, n_clients=clients, timeout_s=timeout, num_speculative_tokens=3)
    sp = spec(3, [0.8, 0.5, 0.3])
    fast = run_kernel(e, arrival.copy(), prompt, output, ready=ready, sp=sp)
    slow = run_kernel(e._replace(fast_forward=False), arrival.copy(), prompt, output, ready=ready, sp=sp)
    np.testing.assert_array_equal(fast[0], slow[0])
    np.testing.assert_array_equal(fast[1], slow[1])
    stats_fast, stats_slow = fast[2].copy(), slow[2].copy()
    assert stats_fast[:, codes.STAT_FAST_ITERATIONS].sum() > 0.3 * stats_fast[:, codes.STAT_ITERATIONS].sum()
    stats_fast[:, codes.STAT_FAST_ITERATIONS] = stats_slow[:, codes.STAT_FAST_ITERATIONS]
    np.testing.assert_array_equal(stats_fast, stats_slow)
    for a, b in zip(fast[3:], slow[3:]):  # ITL histogram, batch sizes, time series
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("budget,timeout", [(2048, 0.0), (256, 0.0), (2048, 0.3)])
def test_arrivals_and_admissions_are_taken_inside_the_speculative_run(budget, timeout):
    """One replica under an open loop: the speculative run (simcore.fast.spec_run) takes the
    arrivals (scheduler.arrive_nb, join_nb: the event loop's rules; some rejected, the model too
    short for them) and the steps that admit waiting requests, and goes on with them once their
    prompts are in. With prompts that fit a step, far fewer explicit steps than arrivals (each
    arrival took one before); with prompts that need several chunks, or client deadlines, the
    explicit path takes over where it must. Always the explicit path's results, bit for bit."""
    n = 300
    rng = np.random.default_rng(5)
    arrival, ready, prompt, output = workload(rng, n, 40.0, 400, 120)
    e = engine(max_num_seqs=24, max_num_batched_tokens=budget, num_blocks=600, num_speculative_tokens=3,
               max_model_len=480, timeout_s=timeout)
    sp = spec(3, [0.8, 0.5, 0.3])
    fast = run_kernel(e, arrival.copy(), prompt, output, sp=sp)
    slow = run_kernel(e._replace(fast_forward=False), arrival.copy(), prompt, output, sp=sp)
    for a, b in zip(fast[:2] + fast[3:], slow[:2] + slow[3:]):
        np.testing.assert_array_equal(a, b)
    stats = fast[2]
    np.testing.assert_array_equal(np.delete(stats, codes.STAT_FAST_ITERATIONS),
                                  np.delete(slow[2], codes.STAT_FAST_ITERATIONS))
    rejected = (fast[0][:, codes.RI_STATUS] == codes.STATUS_REJECTED).sum()
    assert 0 < rejected == (prompt + output > 480).sum()
    if timeout:
        assert (fast[0][:, codes.RI_STATUS] == codes.STATUS_TIMED_OUT).sum() > 0
    explicit = stats[codes.STAT_ITERATIONS] - stats[codes.STAT_FAST_ITERATIONS]
    if budget == 2048 and not timeout:
        assert explicit < 0.1 * n, explicit
