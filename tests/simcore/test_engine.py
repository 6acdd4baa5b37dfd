"""The engine kernel: agreement with the pure-Python reference, closed forms, determinism, and
hypothesis invariants over random configurations."""
import dataclasses
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import naive
import simllm
from helpers import build
from simcore import codes, iteration_time_nb, moe_experts_seconds_nb
from simcore.engine import simulate
from simcore.layout import make_layout, ring_nb, split_accumulator
from simcore.params import EngineSettings, block_shift_of
from simcore.scheduler import block_div_nb, block_mod_nb
from simllm.sim.results import TIMING_KEYS

P = build("llama-3.1-8b", "h100-sxm")[4]


def engine(**kw):
    base = dict(policy=codes.POLICY_CONTINUOUS, chunked_prefill=True, max_num_seqs=16, max_num_batched_tokens=512,
                block_size=16, num_blocks=400, prefix_blocks=0, max_model_len=4096, static_slots=4,
                pad_prompts=False, batch_max=0, batch_window_s=0.0, timeout_s=0.0, n_clients=0, fast_forward=True,
                itl_min_exp=-20, itl_sub_bits=9, window_s=1.0)
    base.update(kw)
    base.setdefault("block_shift", block_shift_of(base["block_size"]))  # as simllm sets it
    return EngineSettings(**base)


def request_arrays(e, arrival, prompt, output, cached=None, ready=None, delay=None, fixed=None):
    """The kernel's request arrays ``(reqi, reqf)`` for these requests under settings ``e``."""
    n = len(prompt)
    reqi = np.zeros((n, codes.N_RI), dtype=np.int32)
    reqi[:, codes.RI_INPUT] = prompt
    reqi[:, codes.RI_OUTPUT] = output
    reqi[:, codes.RI_CACHED] = 0 if cached is None else cached
    reqi[:, codes.RI_FIXED_BLOCKS] = 0 if fixed is None else fixed
    reqi[:, codes.RI_DONE] = -1
    reqf = np.full((n, codes.N_RF), -1.0)
    reqf[:, codes.RF_ARRIVAL] = arrival
    reqf[:, codes.RF_FINISH] = -1.0 if ready is None or not e.n_clients else ready
    if delay is not None:
        reqf[:, codes.RF_CLIENT_DELAY] = delay
    return reqi, reqf


def run_kernel(e, arrival, prompt, output, cached=None, ready=None, p=P, delay=None, fixed=None, sp=None):
    n = len(prompt)
    reqi, reqf = request_arrays(e, arrival, prompt, output, cached, ready, delay, fixed)
    lay = make_layout(e.max_num_seqs, e.block_size, n, 50, 34 << 9, e.pipeline_stages, e.num_speculative_tokens)
    acc = np.zeros((e.n_replicas, lay.acc_len))
    simulate(p, sp, e, lay, reqi, reqf, acc)
    stats, batch, windows, itl = split_accumulator(lay, acc)
    return reqi, reqf, stats[0] if e.n_replicas == 1 else stats, itl, batch, windows


def workload(rng, n, rate, max_in, max_out, clients=0):
    prompt = rng.integers(1, max_in + 1, n)
    output = rng.integers(1, max_out + 1, n)
    if clients:
        ready = np.zeros(n)
        arrival = np.full(n, np.inf)
        arrival[:clients] = 0.0
    else:
        ready = np.zeros(n)
        gaps = rng.exponential(1.0 / rate, n)
        gaps[0] = 0.0
        arrival = np.cumsum(gaps)
    return arrival, ready, prompt, output


def assert_same(e, arrival, ready, prompt, output, cached=None, delay=None, p=P, fixed=None, sp=None):
    cached = np.zeros(len(prompt), dtype=np.int64) if cached is None else cached
    ref = naive.simulate(p, e, arrival.copy(), ready, prompt, output, cached, delay, fixed, sp)
    for ff in (False, True):
        reqi, reqf, stats, *_ = run_kernel(e._replace(fast_forward=ff), arrival.copy(), prompt, output, cached, ready,
                                           p=p, delay=delay, fixed=fixed, sp=sp)
        for r in ref:
            i = r.idx
            assert reqi[i, codes.RI_STATUS] == r.status, (ff, i)
            assert reqi[i, codes.RI_GENERATED] == r.generated, (ff, i)
            assert reqi[i, codes.RI_PREEMPTIONS] == r.preemptions, (ff, i)
            for col, want in ((codes.RF_FIRST_TOKEN, r.first_token), (codes.RF_FINISH, r.finish),
                              (codes.RF_FIRST_SCHED, r.first_sched), (codes.RF_ARRIVAL, r.arrival)):
                assert reqf[i, col] == pytest.approx(want, rel=1e-9, abs=1e-12), (ff, i, col)
        if stats.ndim == 2:  # replicas: their totals
            stats = stats.sum(axis=0)
        itls = [x for r in ref if r.idx >= e.warmup for x in r.itls]  # warm-up requests' ITLs do not count
        assert stats[codes.STAT_ITL_COUNT] == len(itls)
        assert stats[codes.STAT_ITL_SUM] == pytest.approx(sum(itls), rel=1e-9, abs=1e-12)
        for slot, attr in ((codes.STAT_SPEC_DRAFTS, "spec_drafts"), (codes.STAT_SPEC_DRAFT_TOKENS, "spec_draft_tokens"),
                           (codes.STAT_SPEC_ACCEPTED, "spec_accepted")):
            assert stats[slot] == sum(getattr(r, attr) for r in ref), attr
    return ref, stats


# --------------------------------------------------------------------------- block and queue arithmetic
@pytest.mark.parametrize("block_size, shift", [(1, 0), (2, 1), (16, 4), (64, 6), (65536, 16), (3, -1), (24, -1),
                                               (48, -1)])
def test_block_shift_is_log2_of_a_power_of_two_else_minus_one(block_size, shift):
    assert block_shift_of(block_size) == shift


@settings(max_examples=200, deadline=None)
@given(x=st.integers(-10**7, 10**7), block=st.sampled_from([1, 2, 16, 64, 3, 24]), shifted=st.booleans())
def test_block_division_and_modulo_are_pythons(x, block, shifted):
    """Shifts and masks (a power-of-two block size) and divisions (any) give Python's floor division
    and modulo, negative numbers included (the cohort's block classes take ``-d``)."""
    e = engine(block_size=block, block_shift=block_shift_of(block) if shifted else -1)
    assert block_div_nb(e, x) == x // block
    assert block_mod_nb(e, x) == x % block


@given(cap=st.integers(1, 10**6), data=st.data())
def test_ring_position_is_the_modulo(cap, data):
    i = data.draw(st.integers(0, 2 * cap - 1))
    assert ring_nb(i, cap) == i % cap


# --------------------------------------------------------------------------- reference agreement
@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("blocks", [400, 60])  # 60 blocks of 16 force preemptions
def test_kernel_matches_reference(chunked, blocks):
    rng = np.random.default_rng(1 + blocks + chunked)
    arrival, ready, prompt, output = workload(rng, 120, 30.0, 600, 200)
    e = engine(chunked_prefill=chunked, num_blocks=blocks, max_num_batched_tokens=512 if chunked else 1024,
               max_model_len=1024)
    ref, stats = assert_same(e, arrival, ready, prompt, output)
    if blocks == 60:
        assert sum(r.preemptions for r in ref) > 0  # the case is really exercised
        assert stats[codes.STAT_PREEMPTIONS] == sum(r.preemptions for r in ref)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    chunked=st.booleans(),
    policy=st.sampled_from([codes.POLICY_CONTINUOUS] * 3 + [codes.POLICY_STATIC, codes.POLICY_DYNAMIC]),
    blocks=st.integers(40, 300),
    max_seqs=st.integers(1, 12),
    budget=st.sampled_from([64, 256, 2048]),
    clients=st.sampled_from([0, 0, 3]),
    timeout=st.sampled_from([0.0, 0.0, 0.5]),
    prefix=st.sampled_from([0, 2]),
    pad=st.booleans(),
    frontend=st.sampled_from([0.0, 0.0, 0.03]),
    jitter=st.sampled_from([0.0, 0.0, 0.02]),
    warmup=st.sampled_from([0, 0, 7]),
    block=st.sampled_from([16, 16, 16, 8, 24]),  # 24: the kernels divide; powers of two: they shift
)
@example(seed=0, chunked=False, policy=codes.POLICY_STATIC, blocks=76, max_seqs=2, budget=64, clients=3,
         timeout=0.5, prefix=0, pad=False, frontend=0.0, jitter=0.0, warmup=0, block=16)  # padding rows of a static batch must not time out again
@example(seed=0, chunked=False, policy=codes.POLICY_STATIC, blocks=75, max_seqs=2, budget=64, clients=0,
         timeout=0.0, prefix=0, pad=False, frontend=0.0, jitter=0.0, warmup=0, block=16)  # two 600-token slots need 76 whole blocks, not 75
def test_kernel_matches_reference_on_random_configurations(seed, chunked, policy, blocks, max_seqs, budget, clients,
                                                           timeout, prefix, pad, frontend, jitter, warmup, block):
    rng = np.random.default_rng(seed)
    n = 40
    arrival, ready, prompt, output = workload(rng, n, 50.0, 300, 80, clients)
    max_len = 600
    if not chunked:
        budget = max(budget, max_len)
    cached = np.zeros(n, dtype=np.int64)
    if prefix:
        cached = np.where(rng.random(n) < 0.5, np.minimum(prefix * block, ((prompt - 1) // block) * block), 0)
    e = engine(policy=policy, chunked_prefill=chunked, num_blocks=blocks * 16 // block, prefix_blocks=prefix,
               max_num_seqs=max_seqs, max_num_batched_tokens=budget, max_model_len=max_len, n_clients=clients,
               timeout_s=timeout, static_slots=max(1, blocks * 16 // block // -(-max_len // block)), pad_prompts=pad,
               block_size=block,
               batch_max=4 if policy == codes.POLICY_DYNAMIC else 0, batch_window_s=0.02, frontend_s=frontend,
               warmup=warmup)
    # Client delays: sends overtake each other and must reach the engine in time order.
    delay = rng.exponential(jitter, n) if jitter and clients else None
    assert_same(e, arrival, ready, prompt, output, cached, delay)


@pytest.mark.parametrize("tables", [False, True], ids=["scalar", "tables"])
@pytest.mark.parametrize("blocks", [400, 90])  # 90 blocks of 16 force preemptions
@pytest.mark.parametrize("name", ["gpt-oss-120b", "qwen3.5-397b-a17b"])
def test_kernel_matches_reference_with_windowed_or_linear_layers(tables, blocks, name):
    """gpt-oss-120b (18 sliding-window layers of 128 keys) and Qwen3.5 (45 linear-attention layers):
    attention stops growing at the window, or keeps a constant state, in the explicit and the fast
    paths alike, and each request holds its fixed blocks (windows, states) from its first block on
    (as ``simllm.sim.memory`` sizes them)."""
    rng = np.random.default_rng(7 + blocks)
    arrival, ready, prompt, output = workload(rng, 80, 30.0, 600, 200)
    if name == "gpt-oss-120b":
        p = build(name, "h100-sxm", tables=tables)[4]
        assert p.window == 128.0 and p.window_frac == 0.5
        fixed = np.minimum(9, -(-(prompt + output) // 16))  # ratio 1: one sliding layer per full one
    else:
        p = build(name, "b200", tables=tables, tensor_parallel_size=8)[4]
        assert p.lin_frac == 0.75
        fixed = np.full(len(prompt), 5)  # a state the size of 5 blocks, whatever the length
    e = engine(num_blocks=blocks, max_model_len=1024)
    ref, stats = assert_same(e, arrival, ready, prompt, output, p=p, fixed=fixed)
    if blocks == 90:
        assert sum(r.preemptions for r in ref) > 0
    assert stats[codes.STAT_FAST_ITERATIONS] > 0  # the decode runs took the windowed branch


@pytest.mark.parametrize("name, tables, floor", [
    ("llama-3.1-8b", False, False), ("llama-3.1-8b", True, False), ("gpt-oss-120b", True, False),
    ("llama-3.1-8b", False, True), ("llama-3.1-8b", True, True), ("gpt-oss-120b", True, True),
], ids=["scalar", "tables", "windowed", "scalar-floor", "tables-floor", "windowed-floor"])
def test_decode_runs_price_and_record_itls_as_the_explicit_path(name, tables, floor):
    """Each pricing of a decode run's iterations (``fast.decode_run._iterations_nb``: the scalar
    roofline, the tables' decode attention at one log2 of the context, windowed attention in full),
    with warm-up requests among the members: per-request times and the ITL count and sums against
    the reference, and the ITL sum of squares and histogram against the explicit path. The first
    advance's ITLs (members since the last advance, joiners since their own token) are recorded
    after the run's loop, the later ones summed in it. ``floor``: with a per-sequence overhead and a
    one-block decode-attention floor (``cost.unsplit_attention_nb``) that binds at the small
    batches and not at the large ones."""
    rng = np.random.default_rng(11)
    arrival, ready, prompt, output = workload(rng, 100, 25.0, 600, 200)
    p = build(name, "h100-sxm", tables=tables)[4]
    if floor:
        p = p._replace(attn_token_s=2e-8, seq_overhead_s=3e-5)
    fixed = np.minimum(9, -(-(prompt + output) // 16)) if p.window > 0 else None
    e = engine(num_blocks=400, max_model_len=1024, warmup=5)
    ref, stats = assert_same(e, arrival, ready, prompt, output, p=p, fixed=fixed)
    assert stats[codes.STAT_FAST_ITERATIONS] > 0.3 * stats[codes.STAT_ITERATIONS]  # the runs are exercised
    itls = [x for r in ref if r.idx >= e.warmup for x in r.itls]
    assert stats[codes.STAT_ITL_SQSUM] == pytest.approx(sum(x * x for x in itls), rel=1e-9, abs=1e-15)
    slow = run_kernel(e._replace(fast_forward=False), arrival.copy(), prompt, output, p=p, fixed=fixed)
    assert stats[codes.STAT_ITL_SQSUM] == pytest.approx(slow[2][codes.STAT_ITL_SQSUM], rel=1e-9)
    fast = run_kernel(e, arrival.copy(), prompt, output, p=p, fixed=fixed)
    assert fast[3].sum() == slow[3].sum() == len(itls)
    assert np.abs(fast[3] - slow[3]).sum() <= 2  # an ITL on a bin edge may round to either side


# Attention data parallelism with expert parallelism: DeepSeek-V3 over 4 ranks of one GPU, EP 4.
P_EP = build("deepseek-v3", "h200-sxm", tensor_parallel_size=1, data_parallel_size=4, expert_parallel_size=4,
             dtype="fp8")[4]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    ranks=st.integers(2, 4),
    chunked=st.booleans(),
    blocks=st.integers(40, 300),
    max_seqs=st.integers(1, 12),
    budget=st.sampled_from([64, 256, 2048]),
    clients=st.sampled_from([0, 0, 5]),
    timeout=st.sampled_from([0.0, 0.0, 0.5]),
    frontend=st.sampled_from([0.0, 0.0, 0.03]),
    pad=st.sampled_from([0, 0, 64, 512]),
)
@pytest.mark.heavy
def test_lockstep_ranks_match_reference(seed, ranks, chunked, blocks, max_seqs, budget, clients, timeout, frontend, pad):
    """Attention data-parallel ranks of one expert-parallel engine step together (round robin, every
    scheduling rule of one replica on each rank, preemption, timeouts, closed loops): the kernel
    matches the reference engine request by request."""
    rng = np.random.default_rng(seed)
    n = 40
    arrival, ready, prompt, output = workload(rng, n, 80.0, 300, 80, clients)
    max_len = 600
    if not chunked:
        budget = max(budget, max_len)
    e = engine(chunked_prefill=chunked, num_blocks=blocks, max_num_seqs=max_seqs, max_num_batched_tokens=budget,
               max_model_len=max_len, n_clients=clients, timeout_s=timeout, frontend_s=frontend,
               n_replicas=ranks, lockstep=True, dp_pad_tokens=pad)
    assert_same(e, arrival, ready, prompt, output, p=P_EP)


@pytest.mark.heavy
def test_lockstep_step_is_the_slowest_rank_plus_the_experts_over_all_tokens():
    """Two ranks: a 2,048-token prompt on rank 0 and a 16-token one on rank 1 arrive together. Their
    first step ends for both when the slowest rank's own work (attention, dense layers, router,
    all-to-all) and the experts over both ranks' 2,064 tokens are done; independent replicas would
    give the short prompt its own, much shorter step."""
    p = build("deepseek-v3", "h200-sxm", tensor_parallel_size=1, data_parallel_size=2, expert_parallel_size=2,
              dtype="fp8")[4]
    e = engine(max_num_batched_tokens=4096, n_replicas=2, lockstep=True)
    long_, short = 2048.0, 16.0

    def own(t):  # a rank's work outside the experts (a prompt's pairs and keys as the engine counts them)
        return iteration_time_nb(p, float(t), t * (t + 1) / 2, float(t), 1.0) - moe_experts_seconds_nb(p, float(t))

    want = max(own(long_), own(short)) + moe_experts_seconds_nb(p, (long_ + short) / 2)
    reqi, reqf, *_ = run_kernel(e, np.zeros(2), np.array([2048, 16]), np.array([3, 3]), p=p)
    assert list(reqi[:, codes.RI_REPLICA]) == [0, 1]
    assert reqf[0, codes.RF_FIRST_TOKEN] == pytest.approx(want, rel=1e-12)
    assert reqf[1, codes.RF_FIRST_TOKEN] == pytest.approx(want, rel=1e-12)
    assert reqf[0, codes.RF_FINISH] == reqf[1, codes.RF_FINISH]  # and every later step together
    # The experts' share is the all-ranks one: the moe_dp-scaled cost at the ranks' mean tokens.
    assert moe_experts_seconds_nb(p, (long_ + short) / 2) < moe_experts_seconds_nb(p, long_)
    free = run_kernel(e._replace(lockstep=False), np.zeros(2), np.array([2048, 16]), np.array([3, 3]), p=p)[1]
    assert free[1, codes.RF_FIRST_TOKEN] < 0.5 * want
    # A CUDA-graph step (vLLM: its largest rank's tokens at most the padding size) runs every rank
    # at the largest rank's tokens: the experts see 2 x 2048.
    padded = run_kernel(e._replace(dp_pad_tokens=2048), np.zeros(2), np.array([2048, 16]), np.array([3, 3]), p=p)[1]
    want = max(own(long_), own(short)) + moe_experts_seconds_nb(p, long_)
    assert padded[1, codes.RF_FIRST_TOKEN] == pytest.approx(want, rel=1e-12)


# --------------------------------------------------------------------------- closed forms
def test_one_request_alone_has_the_closed_form_ttft_and_tpot():
    prompt, out = 700, 50
    reqi, reqf, stats, *_ = run_kernel(engine(max_num_batched_tokens=8192), np.array([0.0]), [prompt], [out])
    ttft = reqf[0, codes.RF_FIRST_TOKEN]
    # Float arguments throughout: an int would compile another specialisation of the operator loop.
    assert ttft == pytest.approx(iteration_time_nb(P, float(prompt), prompt * (prompt + 1) / 2, float(prompt), 1.0),
                                 rel=1e-12)
    decode = [iteration_time_nb(P, 1.0, prompt + i + 1.0, prompt + i + 1.0, 1.0) for i in range(out - 1)]
    assert reqf[0, codes.RF_FINISH] - ttft == pytest.approx(sum(decode), rel=1e-12)
    tpot = (reqf[0, codes.RF_FINISH] - ttft) / (out - 1)
    assert min(decode) <= tpot <= max(decode)
    assert stats[codes.STAT_ITL_SUM] == pytest.approx(sum(decode), rel=1e-9)
    assert stats[codes.STAT_FAST_ITERATIONS] > 0  # the closed-form path produced it


def test_chunked_prompt_takes_ceil_prompt_over_budget_iterations():
    prompt = 1000
    reqi, reqf, stats, *_ = run_kernel(engine(max_num_batched_tokens=256), np.array([0.0]), [prompt], [1])
    chunks = [(256, 0), (256, 256), (256, 512), (232, 768)]
    expected = sum(iteration_time_nb(P, float(q), q * c + q * (q + 1) / 2, float(c + q), 1.0 if c + q == prompt else 0.0)
                   for q, c in chunks)
    assert reqf[0, codes.RF_FIRST_TOKEN] == pytest.approx(expected, rel=1e-12)
    assert stats[codes.STAT_ITERATIONS] == 4


def test_throughput_never_exceeds_the_decode_roofline():
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    res = simllm.simulate(model, hw, s, simllm.Workload(num_prompts=600, input_len=simllm.config.workload.fixed(200),
                                                        output_len=simllm.config.workload.fixed(300)))
    from simcore import streamed_weight_bytes_nb

    # Every iteration streams the weights at least once at peak bandwidth; it emits at most
    # max_num_seqs tokens.
    floor_s = streamed_weight_bytes_nb(p, 1.0) / p.mem_bw
    assert res.summary["output_throughput"] <= s.max_num_seqs / floor_s
    assert res.summary["mean_itl_ms"] / 1e3 >= floor_s


def test_same_seed_same_result_bit_for_bit():
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    w = simllm.Workload(num_prompts=500, request_rate=15.0, input_len=simllm.config.workload.random_range(600, 0.5),
                        output_len=simllm.config.workload.random_range(150, 0.5), seed=7)
    a = simllm.simulate(model, hw, s, w)
    b = simllm.simulate(model, hw, s, w)
    for k, v in a.requests.items():
        assert np.array_equal(v, b.requests[k], equal_nan=True), k
    skip = set(TIMING_KEYS)
    assert {k: v for k, v in a.summary.items() if k not in skip} == {k: v for k, v in b.summary.items() if k not in skip}
    c = simllm.simulate(model, hw, s, dataclasses.replace(w, seed=8))
    assert not np.array_equal(a.requests["finish_s"], c.requests["finish_s"])


def test_fast_path_equals_iteration_by_iteration_at_scale():
    rng = np.random.default_rng(3)
    arrival, ready, prompt, output = workload(rng, 3000, 20.0, 1000, 400)
    e = engine(max_num_seqs=256, max_num_batched_tokens=8192, num_blocks=20000, window_s=10.0)
    slow = run_kernel(e._replace(fast_forward=False), arrival, prompt, output)
    fast = run_kernel(e, arrival, prompt, output)
    np.testing.assert_allclose(fast[1], slow[1], rtol=1e-9)
    assert np.array_equal(fast[0], slow[0])
    for k in (codes.STAT_BUSY_S, codes.STAT_FLOPS, codes.STAT_MEM_BYTES, codes.STAT_KV_BLOCK_SECONDS,
              codes.STAT_ITL_SUM, codes.STAT_ITERATIONS, codes.STAT_DECODE_TOKENS, codes.STAT_SEQ_SECONDS):
        assert fast[2][k] == pytest.approx(slow[2][k], rel=1e-9), k
    assert fast[2][codes.STAT_FAST_ITERATIONS] > 0.5 * fast[2][codes.STAT_ITERATIONS]
    assert np.abs(fast[3] - slow[3]).sum() <= 1e-6 * slow[3].sum() + 2  # ITL histogram
    np.testing.assert_allclose(fast[5], slow[5], rtol=1e-9, atol=1e-9)  # time series


# --------------------------------------------------------------------------- invariants
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    chunked=st.booleans(),
    blocks=st.integers(40, 2000),
    max_seqs=st.integers(1, 64),
    rate=st.sampled_from([1.0, 20.0, 1e9]),
    clients=st.sampled_from([0, 0, 5]),
    timeout=st.sampled_from([0.0, 2.0]),
)
def test_invariants(seed, chunked, blocks, max_seqs, rate, clients, timeout):
    rng = np.random.default_rng(seed)
    n = 150
    arrival, ready, prompt, output = workload(rng, n, rate, 500, 300, clients)
    max_len = 700
    e = engine(chunked_prefill=chunked, num_blocks=blocks, max_num_seqs=max_seqs,
               max_num_batched_tokens=256 if chunked else max_len, max_model_len=max_len, n_clients=clients,
               timeout_s=timeout)
    reqi, reqf, stats, itl, batch, windows = run_kernel(e, arrival, prompt, output)
    status = reqi[:, codes.RI_STATUS]
    done = status == codes.STATUS_DONE
    # Every request finishes or is counted as failed; each produces exactly its output tokens.
    assert np.isin(status, [codes.STATUS_DONE, codes.STATUS_REJECTED, codes.STATUS_TIMED_OUT]).all()
    assert (reqi[done, codes.RI_GENERATED] == output[done]).all()
    never_fits = np.ceil((prompt + output - 1) / 16) > blocks
    assert (status[(prompt + output > max_len) | never_fits] == codes.STATUS_REJECTED).all()
    # No request is scheduled before it arrives; time never goes backwards.
    a = reqf[:, codes.RF_ARRIVAL]
    sched = reqf[:, codes.RF_FIRST_SCHED]
    first = reqf[:, codes.RF_FIRST_TOKEN]
    fin = reqf[:, codes.RF_FINISH]
    ran = sched >= 0
    assert (sched[ran] >= a[ran]).all()
    assert (first[done] > sched[done]).all() and (fin[done] >= first[done]).all()
    assert (fin >= a).all()
    if timeout:
        assert (fin[done] - a[done] <= timeout).all()
    # KV use never exceeds capacity.
    assert stats[codes.STAT_PEAK_BLOCKS] <= blocks
    assert stats[codes.STAT_MIN_FREE_BLOCKS] >= 0
    # Batches respect max_num_seqs; tokens add up.
    assert not batch[max_seqs + 1:].any()
    assert windows[:, codes.WIN_OUTPUT_TOKENS].sum() == reqi[:, codes.RI_GENERATED].sum()
    assert stats[codes.STAT_ITL_COUNT] == (reqi[:, codes.RI_GENERATED] - (reqi[:, codes.RI_GENERATED] > 0)).sum()
    if clients:
        # A closed loop never has more than `clients` requests in flight.
        times = np.sort(np.concatenate([a[ran], fin[ran]]))
        for t in times:
            assert ((a <= t) & (fin > t)).sum() <= clients


def test_too_long_requests_are_rejected_and_counted():
    model, hw, s, r, p = build("jalapeno", "custom-gpu")
    w = simllm.Workload(num_prompts=200, request_rate=5.0,
                        input_len=simllm.LengthDist("uniform", low=100, high=1900),
                        output_len=simllm.LengthDist("uniform", low=100, high=400))
    res = simllm.simulate(model, hw, s, w)
    too_long = res.requests["input_tokens"] + simllm.generate(w).output_len > 2048
    assert too_long.any()
    assert res.summary["num_rejected"] == too_long.sum() == res.summary["failed"]
    assert res.summary["error_rate"] == pytest.approx(too_long.mean())


def test_client_timeout_counts_as_error():
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    w = simllm.Workload(num_prompts=100, input_len=simllm.config.workload.fixed(2000), output_len=simllm.config.workload.fixed(200))
    timeout = float(np.median(simllm.simulate(model, hw, s, w, keep_requests=True).requests["e2el_s"]))
    res = simllm.simulate(model, hw, s, dataclasses.replace(w, timeout_s=timeout))
    assert 0 < res.summary["num_timed_out"] < 100
    assert res.summary["failed"] == res.summary["num_timed_out"]
    assert np.nanmax(res.requests["e2el_s"]) <= timeout  # a response finishing after the client gave up is an error


def test_data_parallel_replicas_share_the_load():
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    w = simllm.Workload(num_prompts=2000, input_len=simllm.config.workload.fixed(500), output_len=simllm.config.workload.fixed(200))
    one = simllm.simulate(model, hw, s, w)
    two = simllm.simulate(model, hw, dataclasses.replace(s, data_parallel_size=2), w)
    assert two.summary["completed"] == 2000
    assert two.summary["output_throughput"] > 1.6 * one.summary["output_throughput"]
    assert two.summary["duration"] < 0.65 * one.summary["duration"]


@pytest.mark.parametrize("chunked", [True, False])
def test_round_robin_replicas_run_as_separate_engines(chunked):
    """Independent replicas (no lockstep) share nothing but the arrivals: under round robin each
    one serves every third request exactly as a one-replica engine given those requests alone
    (the event loop steps whichever replica is due, on its own rows of the workspace)."""
    rng = np.random.default_rng(7)
    n, R = 150, 3
    arrival, ready, prompt, output = workload(rng, n, 60.0, 500, 120)
    e = engine(chunked_prefill=chunked, num_blocks=120, max_num_batched_tokens=512 if chunked else 1024,
               max_model_len=1024, n_replicas=R)
    reqi, reqf, stats, *_ = run_kernel(e, arrival, prompt, output)
    assert list(reqi[:, codes.RI_REPLICA]) == [r % R for r in range(n)]
    cols = [codes.RF_FIRST_SCHED, codes.RF_FIRST_TOKEN, codes.RF_FINISH]
    for k in range(R):
        mine = np.arange(k, n, R)
        _, alone_f, alone, *_ = run_kernel(e._replace(n_replicas=1), arrival[mine], prompt[mine], output[mine])
        np.testing.assert_array_equal(reqf[mine][:, cols], alone_f[:, cols])
        for slot in (codes.STAT_ITERATIONS, codes.STAT_PREEMPTIONS, codes.STAT_DECODE_TOKENS):
            assert stats[k, slot] == alone[slot]
        assert stats[k, codes.STAT_BUSY_S] == pytest.approx(alone[codes.STAT_BUSY_S], rel=1e-12)


@pytest.mark.parametrize("router", [codes.ROUTER_ROUND_ROBIN, codes.ROUTER_LEAST_OUTSTANDING])
def test_closed_loop_replicas_fast_path_is_the_explicit_path(router):
    """Replicas under a closed loop: a request ending on one replica sends the client's next,
    which may go to another replica whose decode run would already be past that time. The runs
    stop before any other busy replica's next iteration (engine.run_events_nb); without that the
    round-robin case below was 1.6 s off the explicit path."""
    rng = np.random.default_rng(17)
    arrival, ready, prompt, output = workload(rng, 160, 60.0, 400, 150, 6)
    e = engine(num_blocks=150, max_num_seqs=10, max_num_batched_tokens=256, max_model_len=600, n_replicas=3,
               router=router, n_clients=6)
    fast = run_kernel(e, arrival.copy(), prompt, output, ready=ready)
    slow = run_kernel(e._replace(fast_forward=False), arrival.copy(), prompt, output, ready=ready)
    assert fast[2][:, codes.STAT_FAST_ITERATIONS].sum() > 0
    np.testing.assert_array_equal(fast[0], slow[0])
    np.testing.assert_allclose(fast[1], slow[1], rtol=1e-9, atol=1e-12)


DYNAMIC_CLOSED_LOOP = """
import numpy as np
from simcore import codes
from test_engine import engine, run_kernel, workload
rng = np.random.default_rng(5)
arrival, ready, prompt, output = workload(rng, 60, 30.0, 300, 50, 4)
e = engine(policy=codes.POLICY_DYNAMIC, batch_max=4, batch_window_s=0.05, static_slots=4, max_num_seqs=4,
           n_replicas=2, n_clients=4, chunked_prefill=False, max_num_batched_tokens=2048)
reqi, *_ = run_kernel(e, arrival, prompt, output, ready=ready)
assert (reqi[:, codes.RI_STATUS] == codes.STATUS_DONE).all()
"""


def test_dynamic_batches_of_closed_loop_replicas_end():
    """Dynamic batching over two replicas under a closed loop: a replica waiting for its batch
    window wakes at the next arrival, not at the other replica's next step (which can be the same
    instant: the run's bound of the test above, applied here, looped forever). In a child process:
    a compiled loop that never ends cannot be interrupted from Python."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", DYNAMIC_CLOSED_LOOP], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_static_batching_waits_for_the_longest_and_continuous_does_not():
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm", max_model_len=4096)
    w = simllm.Workload(num_prompts=64, input_len=simllm.config.workload.fixed(200),
                        output_len=simllm.LengthDist("uniform", low=10, high=1000), seed=1)
    cont = simllm.simulate(model, hw, s, w)
    static = simllm.simulate(model, hw, simllm.ServingConfig(max_model_len=4096, batching="static", max_num_seqs=16), w)
    assert static.summary["completed"] == 64
    assert static.summary["output_throughput"] < cont.summary["output_throughput"]
    assert static.summary["mean_e2el_ms"] > cont.summary["mean_e2el_ms"]


def test_prefix_caching_skips_cached_prefill():
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    w = simllm.Workload(num_prompts=300, request_rate=10.0, input_len=simllm.config.workload.fixed(2000),
                        output_len=simllm.config.workload.fixed(50), prefix_len=1600, prefix_hit_ratio=1.0)
    off = simllm.simulate(model, hw, s, w)
    on = simllm.simulate(model, hw, simllm.ServingConfig(enable_prefix_caching=True), w)
    assert on.summary["prefill_tokens_computed"] == 300 * (2000 - 1600)
    assert on.summary["mean_ttft_ms"] < 0.6 * off.summary["mean_ttft_ms"]
    assert math.isclose(off.summary["prefill_tokens_computed"], 300 * 2000)


def test_least_outstanding_router_balances_in_flight_requests():
    # Two replicas; alternate requests are long, so round robin piles the long ones on one
    # replica while least-outstanding spreads the load by what is in flight.
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    n = 400
    out = np.where(np.arange(n) % 2 == 0, 2000, 20)
    req = simllm.config.workload.Requests(np.arange(n) * 0.05, np.full(n, 300, dtype=np.int64), out.astype(np.int64),
                                   np.zeros(n, dtype=bool))
    w = simllm.Workload(num_prompts=n, request_rate=20.0)
    rr = simllm.simulate(model, hw, simllm.ServingConfig(data_parallel_size=2), w, requests=req)
    lor = simllm.simulate(model, hw, simllm.ServingConfig(data_parallel_size=2, router="least_outstanding"), w,
                          requests=req)
    assert np.array_equal(rr.requests["replica"], np.arange(n) % 2)
    long_on_0 = (lor.requests["replica"][out == 2000] == 0).mean()
    assert 0.3 < long_on_0 < 0.7
    assert lor.summary["completed"] == n
    assert lor.summary["p99_e2el_ms"] < rr.summary["p99_e2el_ms"]


def test_summary_only_run_gives_the_same_summary():
    model, hw, s, r, p = build("llama-3.1-8b", "h100-sxm")
    w = simllm.Workload(num_prompts=800, request_rate=12.0, input_len=simllm.config.workload.random_range(700, 0.6),
                        output_len=simllm.config.workload.random_range(200, 0.9), seed=4, timeout_s=30.0)
    full = simllm.simulate(model, hw, s, w, goodput={"ttft": 200, "tpot": 20})
    lean = simllm.simulate(model, hw, s, w, goodput={"ttft": 200, "tpot": 20}, keep_requests=False)
    skip = set(TIMING_KEYS)
    assert {k: v for k, v in lean.summary.items() if k not in skip} == {
        k: v for k, v in full.summary.items() if k not in skip}
    assert lean.requests is None
    with pytest.raises(ValueError, match="keep_requests"):
        lean.to_pandas()
    ok = full.requests["status"] == codes.STATUS_DONE
    assert full.summary["mean_ttft_ms"] == pytest.approx(np.mean(full.requests["ttft_s"][ok]) * 1e3)
    assert full.summary["p99_tpot_ms"] == pytest.approx(np.nanpercentile(full.requests["tpot_s"][ok], 99) * 1e3)


def test_frontend_latency_adds_to_ttft_and_spaces_a_closed_loop():
    """A request reaches the engine frontend_latency_ms after its client sends it: one client
    alone sees TTFT and E2E latency grow by exactly that, TPOT unchanged, and its requests (each
    sent when the last ends) take that much longer per request."""
    model, hw, s, _, _ = build("llama-3.1-8b", "h100-sxm")
    w = simllm.Workload(num_prompts=5, max_concurrency=1, input_len=simllm.config.workload.fixed(500),
                        output_len=simllm.config.workload.fixed(40), client_jitter_ms=0.0)  # exact spacing
    hw = dataclasses.replace(hw, frontend_latency_ms=0.0)
    base = simllm.simulate(model, hw, s, w, keep_requests=True)
    slow = simllm.simulate(model, dataclasses.replace(hw, frontend_latency_ms=25.0), s, w, keep_requests=True)
    for key in ("mean_ttft_ms", "mean_e2el_ms"):
        assert slow.summary[key] == pytest.approx(base.summary[key] + 25.0, rel=1e-9)
    assert slow.summary["mean_tpot_ms"] == pytest.approx(base.summary["mean_tpot_ms"], rel=1e-9)
    sent = slow.requests["arrival_s"].to_numpy() if hasattr(slow.requests, "to_numpy") else slow.requests["arrival_s"]
    assert np.diff(sent) == pytest.approx(np.full(4, base.summary["mean_e2el_ms"] / 1e3 + 0.025), rel=1e-9)


def test_progress_reports_ended_requests_and_changes_nothing():
    model, hw, s, _, _ = build("llama-3.1-8b", "h100-sxm")
    w = simllm.Workload(num_prompts=3000, max_concurrency=64)
    seen = []
    with_progress = simllm.simulate(model, hw, s, w, keep_requests=False, progress=lambda d, n: seen.append((d, n)))
    plain = simllm.simulate(model, hw, s, w, keep_requests=False)
    assert seen[-1] == (3000, 3000) and all(n == 3000 and 0 <= d <= n for d, n in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    for key in ("mean_ttft_ms", "p99_tpot_ms", "output_throughput", "duration"):
        assert with_progress.summary[key] == plain.summary[key]


def test_queue_time_is_the_engines_not_the_frontends():
    model, hw, s, _, _ = build("llama-3.1-8b", "h100-sxm")
    w = simllm.Workload(num_prompts=3, max_concurrency=1, input_len=simllm.config.workload.fixed(100),
                        output_len=simllm.config.workload.fixed(10))
    res = simllm.simulate(model, dataclasses.replace(hw, frontend_latency_ms=40.0), s, w)
    assert res.summary["mean_queue_ms"] == pytest.approx(0.0, abs=1e-9)  # alone: scheduled as it arrives
    assert res.summary["mean_ttft_ms"] > 40.0
