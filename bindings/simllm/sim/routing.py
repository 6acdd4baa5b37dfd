"""Expert routing with expert parallelism: how much more than the mean the slowest GPU gets.

A MoE layer's router sends each token to ``k`` of its ``E`` experts; with expert parallelism the
experts are split over ``ep`` GPU groups, ``E / ep`` consecutive experts each (vLLM's, SGLang's and
TensorRT-LLM's placement without a balancer), and the layer waits for the GPU that finishes last.
Balanced routing gives every GPU its mean share. Random routing draws each token's ``k`` experts
uniformly without replacement: the least spread a real router has (a skewed one has more, which
``--expert-load-imbalance`` states). A few tokens' choices land unevenly, so at small batches the
slowest GPU holds well over the mean: one token's 8 of DeepSeek-V3's 256 experts over 8 GPUs put
a mean of 2.6 assignments on the busiest GPU against the mean 1; at thousands of tokens the spread
is a few percent.

:func:`slowest_rank_factors` samples routings at ``2**i`` tokens per engine rank and keeps, per
routing, the GPU whose expert GEMMs take longest on the roofline (its assignments' FLOPs against
its hit experts' weight bytes): the kernel prices that GPU (``simcore.cost.moe_local_nb``; the
curve is the first ``codes.ROUTE_SIZE`` slots of ``CostParams.eff``). It is
the expectation over routings at each batch size, not a draw per engine step: step times stay a
function of the batch, as the engine's fast paths need, and vary less from step to step than a
real router's.
"""
import functools

import numpy as np

from simcore import codes

DRAWS = 512  # routings sampled at each batch size
SEED = 20261204  # the sampling is part of the model, not of a run: one fixed seed
EXACT_MAX_ASSIGNMENTS = 1 << 10  # beyond this many token-expert assignments, a multinomial draw


def _counts_exact(rng, n_experts, k, n_tokens, draws):
    """Per-expert assignment counts, shape (draws, n_experts): each token picks ``k`` distinct
    experts uniformly (duplicates redrawn until none)."""
    picks = rng.integers(0, n_experts, size=(draws * n_tokens, k))
    while k > 1:
        s = np.sort(picks, axis=1)
        dup = (s[:, 1:] == s[:, :-1]).any(axis=1)
        if not dup.any():
            break
        picks[dup] = rng.integers(0, n_experts, size=(int(dup.sum()), k))
    flat = picks.reshape(draws, n_tokens * k) + (np.arange(draws) * n_experts)[:, None]
    return np.bincount(flat.ravel(), minlength=draws * n_experts).reshape(draws, n_experts)


def slowest_rank_at(rng, n_experts, experts_per_token, ep, tokens, hit_weight=1.0, draws=DRAWS):
    """The slowest GPU's (assignments, hit experts) over the mean when ``tokens`` tokens meet in
    the layer, from ``draws`` routings drawn with ``rng`` (``numpy.random.Generator``); the
    parameters as :func:`slowest_rank_factors`'s. Each factor at least 1."""
    e, k = n_experts, experts_per_token
    if tokens * k <= EXACT_MAX_ASSIGNMENTS:
        c = _counts_exact(rng, e, k, tokens, draws)
    else:  # many tokens: each expert's count binomial on its own (the without-replacement and
        #    fixed-total corrections are below the sampling noise there)
        c = rng.binomial(tokens * k, 1.0 / e, size=(draws, e))
    c = c.reshape(draws, ep, e // ep)
    assign = c.sum(axis=2)
    hit = (c > 0).sum(axis=2)
    # the roofline's slowest GPU; among equals (every GPU streaming all its experts) the one with
    # the most assignments
    time = np.maximum(assign, hit_weight * hit)
    slowest = np.argmax(np.where(time == time.max(axis=1, keepdims=True), assign, -1), axis=1)
    rows = np.arange(draws)
    return (max(assign[rows, slowest].mean() / (tokens * k / ep), 1.0),
            max(hit[rows, slowest].mean() / hit.mean(), 1.0))


# validate's silicon CSV asks for 68 distinct curves (models x EP sizes x ranks x GPUs), 0.16 s each
# to sample: a cache of 64 re-sampled some of them all run long (17 s of its 423 CPU-seconds)
@functools.lru_cache(maxsize=1024)
def slowest_rank_factors(n_experts, experts_per_token, ep, ranks=1, hit_weight=1.0, draws=DRAWS, seed=SEED):
    """The slowest GPU's token-expert assignments and hit experts over the mean, by batch size.

    Parameters
    ----------
    n_experts : int
        Routed experts of the layer, all GPUs together (divisible by ``ep``).
    experts_per_token : int
        Experts each token is sent to (``k``).
    ep : int
        Expert-parallel GPU groups; each holds ``n_experts / ep`` consecutive experts.
    ranks : int
        Engine ranks whose tokens meet in the layer (attention data parallelism; 1 without).
    hit_weight : float
        Seconds of one hit expert's weights over seconds of one assignment's FLOPs on the GPU
        (``w_bytes x peak FLOP/s / (2 x bandwidth)``): a GPU's expert time is
        ``max(assignments, hit_weight x hits)``, and the slowest is the largest.
    draws : int
        Routings sampled per batch size.
    seed : int
        Seed of the sampling (``numpy.random.default_rng``).

    Returns
    -------
    numpy.ndarray
        float64, shape ``(codes.ROUTE_SIZE,)``, read-only: at ``codes.ROUTE_ASSIGN + i`` the slowest
        GPU's assignments over ``tokens x k / ep`` and at ``codes.ROUTE_HIT + i`` its hit experts over
        the mean GPU's, at ``2**i`` tokens per rank (``2**i x ranks`` in the layer); each at least 1.
    """
    e, k, ep = int(n_experts), int(experts_per_token), int(ep)
    if ep < 1 or e % ep or not 1 <= k <= e:
        raise ValueError(f"routing needs experts ({e}) divisible by the expert-parallel size ({ep}) "
                         f"and 1 <= experts per token ({k}) <= experts")
    out = np.ones(codes.ROUTE_SIZE, dtype=np.float64)
    if ep == 1:  # one group holds every expert: it is the mean
        out.flags.writeable = False
        return out
    rng = np.random.default_rng(seed)
    for i in range(codes.ROUTE_POINTS):
        out[codes.ROUTE_ASSIGN + i], out[codes.ROUTE_HIT + i] = slowest_rank_at(
            rng, e, k, ep, (1 << i) * int(ranks), hit_weight, draws)
    out.flags.writeable = False
    return out
