"""Pipeline parallelism in the engine: vLLM's layer split, a lone request's sum of stages and
sends, micro-batches approaching the slowest stage, and the kernels against the reference engine."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcore import codes, iteration_time_nb
from helpers import build
from simcore.pipeline import ffn_split_nb, pipeline_ends_nb, stage_layers_nb
from test_engine import P, assert_same, engine, run_kernel, workload

# heavy: pipeline parallelism's kernel variant (CI's second step)
pytestmark = pytest.mark.heavy

# Four stages, two a node: the boundary after stage 1 crosses the network, the others NVLink.
PIPE = dict(pipeline_stages=4, pipeline_stages_per_node=2, pipeline_latency_s=1e-5, pipeline_s_per_token=1e-7,
            pipeline_net_latency_s=5e-5, pipeline_net_s_per_token=1e-6)


def sends_s(n_tokens):
    """The three sends of a batch of ``n_tokens`` through PIPE's stages."""
    return 2 * (1e-5 + n_tokens * 1e-7) + (5e-5 + n_tokens * 1e-6)


def stage_seconds(n_tokens, pairs, kv, n_emit, stages=4, p=P):
    """Each stage's time for a batch: its share of the layers (a MoE model's dense first layers'
    FFNs on their stage, the experts on the others), the embedding and CPU step on the first, the
    head and sampler on the last."""
    dt = iteration_time_nb(p, n_tokens, pairs, kv, n_emit)
    first, last = pipeline_ends_nb(p, n_tokens, n_emit)
    dense, moe = ffn_split_nb(p, n_tokens, n_emit)
    alike = dt - p.iter_overhead_s - first - last - dense - moe
    sizes = [stage_layers_nb(p.n_layers, stages, s) for s in range(stages)]
    n_dense = p.n_layers - p.n_moe_layers
    out = []
    for s, layers in enumerate(sizes):
        d = len(set(range(sum(sizes[:s]), sum(sizes[:s + 1]))) & set(range(n_dense)))
        out.append(alike * layers / p.n_layers + (dense * d / n_dense + moe * (layers - d) / p.n_moe_layers
                                                  if dense or moe else 0.0))
    out[0] += first + p.iter_overhead_s
    out[-1] += last
    return out


def test_layers_split_as_vllm_does():
    """vLLM's get_pp_indices: L // P a stage, the remainder one each to the stages before the last."""
    assert [stage_layers_nb(61, 4, s) for s in range(4)] == [15, 15, 16, 15]
    assert [stage_layers_nb(32, 3, s) for s in range(3)] == [11, 11, 10]
    assert [stage_layers_nb(80, 6, s) for s in range(6)] == [13, 13, 13, 14, 14, 13]
    for n_layers in (1, 7, 32, 61, 94):
        for stages in range(1, min(n_layers, 9) + 1):
            sizes = [stage_layers_nb(n_layers, stages, s) for s in range(stages)]
            assert sum(sizes) == n_layers and max(sizes) - min(sizes) <= 1


def test_lone_request_waits_the_sum_of_stages_and_sends():
    """One request of 200 + 10 tokens on four stages: its first token after the prefill's four
    stages and three sends (one over the network), each later token after a decode step's."""
    reqi, reqf, stats, *_ = run_kernel(engine(**PIPE), np.zeros(1), np.array([200]), np.array([10]))
    prefill = stage_seconds(200.0, 200 * 201 / 2, 200.0, 1.0)
    assert reqf[0, codes.RF_FIRST_TOKEN] == pytest.approx(sum(prefill) + sends_s(200), rel=1e-12)
    decode = [sum(stage_seconds(1.0, 201.0 + g, 201.0 + g, 1.0)) + sends_s(1) for g in range(9)]
    assert reqf[0, codes.RF_FINISH] - reqf[0, codes.RF_FIRST_TOKEN] == pytest.approx(sum(decode), rel=1e-12)
    # the sum of the stages is the whole model's step: sends are the only price of the split
    assert sum(prefill) == pytest.approx(iteration_time_nb(P, 200.0, 200 * 201 / 2, 200.0, 1.0), rel=1e-12)
    # each GPU of the replica is busy with a quarter of every step
    whole = sum(prefill) + sum(d - sends_s(1) for d in decode)
    assert stats[codes.STAT_BUSY_S] == pytest.approx(whole / 4, rel=1e-12)
    assert stats[codes.STAT_ITERATIONS] == 10


def decode_tpot(e, n, out=400):
    """Mean TPOT of ``n`` closed-loop clients' requests of 16 + ``out`` tokens, all sent at once."""
    reqi, reqf, stats, *_ = run_kernel(e, np.zeros(n), np.full(n, 16), np.full(n, out), ready=np.zeros(n))
    assert (reqi[:, codes.RI_GENERATED] == out).all()
    return float(np.mean((reqf[:, codes.RF_FINISH] - reqf[:, codes.RF_FIRST_TOKEN]) / (out - 1)))


def test_enough_micro_batches_approach_the_slowest_stage():
    """64 decoding requests in four micro-batches of 16 (--pp-max-micro-batch-size 16): a batch
    returns every slowest-stage time, so 64 tokens take four of them (here more than the sum of
    the stages and sends): throughput is one micro-batch per slowest stage, within 1% (contexts
    grow over the run; the closed form takes the mean)."""
    m = 16
    e = engine(max_num_seqs=256, num_blocks=4000, max_num_batched_tokens=8192, n_clients=4 * m,
               pipeline_batch_seqs=m, **PIPE)
    tpot = decode_tpot(e, 4 * m)
    c = 16 + 200.0  # the mean context of a decode step
    stages = stage_seconds(float(m), m * (c + 1), m * (c + 1), float(m))
    assert 4 * max(stages) > sum(stages) + sends_s(m)  # the slowest stage binds
    assert 4 * m / tpot == pytest.approx(m / max(stages), rel=0.01)


def test_a_burst_fills_one_batch_as_vllm_does():
    """Without a micro-batch cap vLLM's scheduler puts every runnable request in the first batch
    (vllm-project/vllm#41682): 64 requests sent at once decode as one batch, each token after the
    sum of the stages and sends; no pipelining."""
    e = engine(max_num_seqs=256, num_blocks=4000, max_num_batched_tokens=8192, n_clients=64, **PIPE)
    tpot = decode_tpot(e, 64)
    c = 16 + 200.0
    stages = stage_seconds(64.0, 64 * (c + 1), 64 * (c + 1), 64.0)
    assert tpot == pytest.approx(sum(stages) + sends_s(64), rel=0.01)


def test_a_moe_models_dense_layers_lighten_their_stage():
    """DeepSeek-V3 (3 dense layers, then 58 MoE layers) on four stages of 15, 15, 16 and 15 layers:
    the first stage holds the three dense FFNs, cheaper than experts at a decode batch, and the
    third stage's 16 MoE layers are the slowest. Micro-batches of 16 decode at one batch per that
    stage's time, within 1%, and the kernel equals the reference engine."""
    p = build("deepseek-v3", "h200-sxm", tensor_parallel_size=8, max_model_len=8192)[4]
    m = 16
    c = 16 + 100.0
    stages = stage_seconds(float(m), m * (c + 1), m * (c + 1), float(m), p=p)
    dense, moe = ffn_split_nb(p, float(m), float(m))
    assert 0 < dense / 3 < moe / 58  # a dense FFN per layer costs less than a MoE layer's experts here
    assert max(stages) == stages[2] > stages[1] > stages[0] - p.iter_overhead_s
    e = engine(max_num_seqs=256, num_blocks=4000, max_num_batched_tokens=8192, n_clients=4 * m,
               pipeline_batch_seqs=m, **PIPE)
    reqi, reqf, stats, *_ = run_kernel(e, np.zeros(4 * m), np.full(4 * m, 16), np.full(4 * m, 200),
                                       ready=np.zeros(4 * m), p=p)
    tpot = float(np.mean((reqf[:, codes.RF_FINISH] - reqf[:, codes.RF_FIRST_TOKEN]) / 199))
    assert 4 * max(stages) > sum(stages) + sends_s(m)
    assert 4 * m / tpot == pytest.approx(m / max(stages), rel=0.01)
    rng = np.random.default_rng(2)
    arrival, ready, prompt, output = workload(rng, 40, 20.0, 300, 60)
    assert_same(engine(max_model_len=1024, pipeline_batch_seqs=3, **PIPE), arrival, ready, prompt, output, p=p)


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("blocks", [400, 60])  # 60 blocks of 16 force preemptions
@pytest.mark.parametrize("cap", [0, 5])
def test_kernel_matches_reference(chunked, blocks, cap):
    rng = np.random.default_rng(11 + blocks + chunked + cap)
    arrival, ready, prompt, output = workload(rng, 120, 30.0, 600, 200)
    e = engine(chunked_prefill=chunked, num_blocks=blocks, max_num_batched_tokens=512 if chunked else 1024,
               max_model_len=1024, pipeline_batch_seqs=cap, **PIPE)
    ref, stats = assert_same(e, arrival, ready, prompt, output)
    if blocks == 60:
        assert sum(r.preemptions for r in ref) > 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), chunked=st.booleans(), blocks=st.integers(40, 300), max_seqs=st.integers(1, 12),
       budget=st.sampled_from([4, 64, 2048]), clients=st.sampled_from([0, 3]), timeout=st.sampled_from([0.0, 0.5]),
       stages=st.integers(2, 5), per_node=st.integers(1, 3), cap=st.sampled_from([0, 1, 3]),
       warmup=st.sampled_from([0, 5]))
def test_kernel_matches_reference_on_random_configurations(seed, chunked, blocks, max_seqs, budget, clients, timeout,
                                                           stages, per_node, cap, warmup):
    rng = np.random.default_rng(seed)
    arrival, ready, prompt, output = workload(rng, 40, 50.0, 300, 80, clients)
    e = engine(chunked_prefill=chunked, num_blocks=blocks, max_num_seqs=max_seqs,
               max_num_batched_tokens=budget if chunked else 600, max_model_len=600, n_clients=clients,
               timeout_s=timeout, warmup=warmup, pipeline_batch_seqs=cap,
               **{**PIPE, "pipeline_stages": stages, "pipeline_stages_per_node": per_node})
    assert_same(e, arrival, ready, prompt, output)
