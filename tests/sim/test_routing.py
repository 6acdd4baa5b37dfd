"""Random expert routing: the sampled slowest GPU against exact distributions, and its use."""
from math import comb

import numpy as np
import pytest

import simllm
from helpers import build
from simcore import codes, moe_local_nb, routing_factors_nb
from simllm.config.workload import fixed
from simllm.sim.routing import slowest_rank_at, slowest_rank_factors

P = codes.ROUTE_POINTS


def exact_max_per_group(n_experts, k, groups):
    """E[max over ``groups`` equal groups of the experts one token's ``k`` distinct choices land in]:
    P(max <= m) = [x^k] (sum_{j <= m} C(g, j) x^j)^groups / C(E, k), g = E / groups."""
    g = n_experts // groups
    total = comb(n_experts, k)
    expected = 0.0
    for m in range(k):  # E[max] = sum over m >= 0 of P(max > m)
        poly = np.zeros(k + 1, dtype=object)
        poly[0] = 1
        one = [comb(g, j) for j in range(min(m, g) + 1)]
        for _ in range(groups):
            nxt = np.zeros(k + 1, dtype=object)
            for a in range(k + 1):
                if poly[a]:
                    for j, c in enumerate(one):
                        if a + j <= k:
                            nxt[a + j] += poly[a] * c
            poly = nxt
        expected += 1.0 - poly[k] / total
    return expected


@pytest.mark.parametrize("n_experts, k, ep", [(8, 2, 2), (256, 8, 8), (128, 8, 4)])
def test_one_token_matches_the_exact_distribution(n_experts, k, ep):
    """One token, one rank: its k experts fall in the GPUs' groups as a multivariate
    hypergeometric draw; the busiest GPU's count over the mean k / ep is the exact E[max] / (k / ep)
    (Mixtral's 2 of 8 over 2 GPUs: both in one group with probability 3/7, E[max] = 10/7). Each
    assignment hits its own expert, so the hit factor is the same."""
    assign, hit = slowest_rank_at(np.random.default_rng(1), n_experts, k, ep, 1, draws=40000)
    want = exact_max_per_group(n_experts, k, ep) / (k / ep)
    if (n_experts, k, ep) == (8, 2, 2):
        assert want == pytest.approx(10 / 7, rel=1e-12)
    assert assign == pytest.approx(want, rel=0.01) and hit == assign
    f = slowest_rank_factors(n_experts, k, ep)  # the shipped draws: within a few percent
    assert f[codes.ROUTE_ASSIGN] == pytest.approx(want, rel=0.04)


def test_curves_share_their_routings_and_equal_drawing_them_afresh(monkeypatch):
    """Curves of one layout at other ``hit_weight`` (other GPUs, other precisions) pick their
    slowest GPU from the routings drawn once (routing.sampled_loads), and each equals drawing its
    routings again from the seed, batch size after batch size; the kept routings stay within
    their byte budget."""
    from simllm.sim import routing

    monkeypatch.setattr(routing, "_samples", type(routing._samples)())
    drawn = []
    real = routing.sample_loads
    monkeypatch.setattr(routing, "sample_loads", lambda *a, **k: drawn.append(a[1:]) or real(*a, **k))
    layout = (96, 6, 4)
    weights = (0.5, 3.0, 40.0)
    curves = [routing.slowest_rank_factors.__wrapped__(*layout, ranks=2, hit_weight=w) for w in weights]
    assert len(drawn) == P  # the first curve's P batch sizes; the others drew nothing
    for hit_weight, curve in zip(weights, curves):
        rng = np.random.default_rng(routing.SEED)
        want = [slowest_rank_at(rng, *layout, (1 << i) * 2, hit_weight) for i in range(P)]
        assert curve[codes.ROUTE_ASSIGN:codes.ROUTE_ASSIGN + P].tolist() == [w[0] for w in want]
        assert curve[codes.ROUTE_HIT:codes.ROUTE_HIT + P].tolist() == [w[1] for w in want]
    monkeypatch.setattr(routing, "SAMPLES_BYTES", 1)
    routing.sampled_loads(96, 6, 2)
    routing.sampled_loads(96, 6, 3)
    assert len(routing._samples) == 1  # over budget: only the last is kept


def test_many_tokens_even_out_and_one_gpu_is_its_own_mean():
    f = slowest_rank_factors(256, 8, 8, ranks=8, hit_weight=300.0)
    assert f.shape == (codes.ROUTE_SIZE,) and not f.flags.writeable and np.isfinite(f).all()
    assert (f >= 1.0).all()
    # 2**17 tokens a rank x 8 ranks x 8 experts over 8 GPUs: a spread of ~0.1% of the mean
    assert f[codes.ROUTE_ASSIGN + P - 1] < 1.01 and f[codes.ROUTE_HIT + P - 1] == pytest.approx(1.0)
    assert f[codes.ROUTE_ASSIGN] > f[codes.ROUTE_ASSIGN + 4] > f[codes.ROUTE_ASSIGN + 8]
    assert (slowest_rank_factors(64, 6, 1) == 1.0).all()  # one expert-parallel group: no spread
    with pytest.raises(ValueError, match="divisible"):
        slowest_rank_factors(60, 4, 8)


@pytest.mark.heavy
def test_the_kernel_prices_the_busiest_gpu():
    """DeepSeek-V3, attention DP 8 x EP 8: at 2**i tokens a rank the kernel's assignments and hit
    experts are the balanced ones times the curve's factors, linear in log2 of the tokens between."""
    rand = build("deepseek-v3", "h200-sxm", tables=False, data_parallel_size=8, expert_parallel_size=8)[4]
    flat = build("deepseek-v3", "h200-sxm", tables=False, data_parallel_size=8, expert_parallel_size=8,
                 expert_routing="balanced")[4]
    assert flat.eff.shape == (0,) and rand.eff.shape == (codes.ROUTE_SIZE,)
    r = rand.eff
    for i in (0, 3, 5, P - 1):
        t = float(2**i)
        a, h = moe_local_nb(rand, t)
        a0, h0 = moe_local_nb(flat, t)
        assert a == pytest.approx(a0 * r[codes.ROUTE_ASSIGN + i], rel=1e-12)
        assert h == pytest.approx(min(h0 * r[codes.ROUTE_HIT + i], 32.0), rel=1e-12)
    fa, fh = routing_factors_nb(rand, 2**3.5)
    assert fa == pytest.approx(0.5 * (r[3] + r[4]), rel=1e-12)
    assert fh == pytest.approx(0.5 * (r[P + 3] + r[P + 4]), rel=1e-12)
    assert routing_factors_nb(flat, 7.0) == (1.0, 1.0)
    assert routing_factors_nb(rand, 1e9) == (r[P - 1], r[-1])  # clamped beyond the grid
    # the hit-experts factor never puts more experts on a GPU than it holds
    assert moe_local_nb(rand, 1.0)[1] <= rand.n_experts
    # with kernel tables the curve leads CostParams.eff (ones when balanced)
    shaped = build("deepseek-v3", "h200-sxm", data_parallel_size=8, expert_parallel_size=8)[4]
    shaped_flat = build("deepseek-v3", "h200-sxm", data_parallel_size=8, expert_parallel_size=8,
                        expert_routing="balanced")[4]
    assert shaped.eff.shape == (codes.EFF_SIZE,) and (shaped.eff[:codes.ROUTE_SIZE] == r).all()
    assert (shaped_flat.eff[:codes.ROUTE_SIZE] == 1.0).all()
    assert routing_factors_nb(shaped, 8.0) == (r[3], r[P + 3])


@pytest.mark.heavy
def test_random_routing_slows_small_batches_and_not_without_expert_parallelism():
    model, hw = simllm.load_model("deepseek-v3"), simllm.load_hardware("h200-sxm")
    wl = simllm.Workload(num_prompts=64, max_concurrency=8, input_len=fixed(512), output_len=fixed(64))

    def tpot(**kw):
        return simllm.simulate(model, hw, simllm.ServingConfig(**kw), wl, keep_requests=False).summary["mean_tpot_ms"]

    ep = dict(data_parallel_size=8, expert_parallel_size=8)
    assert tpot(expert_routing="random", **ep) > 1.05 * tpot(expert_routing="balanced", **ep)
    tp = dict(tensor_parallel_size=8)
    assert tpot(expert_routing="random", **tp) == tpot(expert_routing="balanced", **tp)
    r = simllm.ServingConfig(tensor_parallel_size=8, expert_routing="balanced")
    warn = simllm.config.serving.resolve(model, hw, r).warnings
    assert not any("--expert-routing" in w for w in warn)
    with pytest.raises(simllm.ConfigError, match="expert-routing"):
        simllm.ServingConfig(expert_routing="zipf")
