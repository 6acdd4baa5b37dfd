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
import threading
from collections import OrderedDict

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


def sample_loads(rng, n_experts, experts_per_token, ep, tokens, draws=DRAWS):
    """Each expert-parallel GPU's (assignments, hit experts) in ``draws`` routings of ``tokens``
    tokens drawn with ``rng`` (``numpy.random.Generator``): two int64 arrays of shape
    ``(draws, ep)``; the parameters as :func:`slowest_rank_factors`'s."""
    e, k = n_experts, experts_per_token
    if tokens * k <= EXACT_MAX_ASSIGNMENTS:
        c = _counts_exact(rng, e, k, tokens, draws)
    else:  # many tokens: each expert's count binomial on its own (the without-replacement and
        #    fixed-total corrections are below the sampling noise there)
        c = rng.binomial(tokens * k, 1.0 / e, size=(draws, e))
    c = c.reshape(draws, ep, e // ep)
    return c.sum(axis=2), (c > 0).sum(axis=2)


def slowest_of(assign, hit, experts_per_token, ep, tokens, hit_weight=1.0):
    """The slowest GPU's (assignments, hit experts) over the mean in the routings
    :func:`sample_loads` drew: per routing the GPU whose expert GEMMs take longest on the roofline,
    ``max(assignments, hit_weight x hits)`` (among equals, every GPU streaming all its experts,
    the one with the most assignments). Each factor at least 1."""
    time = np.maximum(assign, hit_weight * hit)
    slowest = np.argmax(np.where(time == time.max(axis=1, keepdims=True), assign, -1), axis=1)
    rows = np.arange(assign.shape[0])
    return (max(assign[rows, slowest].mean() / (tokens * experts_per_token / ep), 1.0),
            max(hit[rows, slowest].mean() / hit.mean(), 1.0))


def slowest_rank_at(rng, n_experts, experts_per_token, ep, tokens, hit_weight=1.0, draws=DRAWS):
    """The slowest GPU's (assignments, hit experts) over the mean when ``tokens`` tokens meet in
    the layer, from ``draws`` routings drawn with ``rng`` (``numpy.random.Generator``); the
    parameters as :func:`slowest_rank_factors`'s. Each factor at least 1."""
    assign, hit = sample_loads(rng, n_experts, experts_per_token, ep, tokens, draws)
    return slowest_of(assign, hit, experts_per_token, ep, tokens, hit_weight)


#: Bytes of sampled routings a process keeps (:func:`sampled_loads`): the GPUs' loads do not depend
#: on ``hit_weight``, so curves of one layout on other GPUs or at other precisions pick their
#: slowest GPU from the same routings instead of drawing them again.
SAMPLES_BYTES = 128 << 20
_samples = OrderedDict()
_samples_lock = threading.Lock()


def sampled_loads(n_experts, experts_per_token, ep, ranks=1, draws=DRAWS, seed=SEED):
    """:func:`sample_loads` at ``2**i x ranks`` tokens for i = 0 .. ``codes.ROUTE_POINTS`` - 1, in
    that order from one ``numpy.random.default_rng(seed)``: a tuple of ``(assign, hit)`` pairs,
    read-only. The last :data:`SAMPLES_BYTES` of them are kept (thread-safe)."""
    key = (n_experts, experts_per_token, ep, ranks, draws, seed)
    with _samples_lock:
        loads = _samples.get(key)
        if loads is not None:
            _samples.move_to_end(key)
            return loads
    rng = np.random.default_rng(seed)
    loads = []
    for i in range(codes.ROUTE_POINTS):
        assign, hit = sample_loads(rng, n_experts, experts_per_token, ep, (1 << i) * ranks, draws)
        pair = (assign, hit.astype(np.int32))  # at most n_experts / ep hits per GPU
        for a in pair:
            a.flags.writeable = False
        loads.append(pair)
    loads = tuple(loads)
    with _samples_lock:  # outside it two threads may draw one layout at once, alike
        _samples[key] = loads
        total = sum(a.nbytes + h.nbytes for v in _samples.values() for a, h in v)
        while total > SAMPLES_BYTES and len(_samples) > 1:
            _, old = _samples.popitem(last=False)
            total -= sum(a.nbytes + h.nbytes for a, h in old)
    return loads


# validate's silicon CSV asks for 68 distinct curves (models x EP sizes x ranks x GPUs and precisions),
# of 31 layouts sampled once each (sampled_loads, ~0.16 s each): a cache of 64 curves re-sampled some
# of them all run long (17 s of its 423 CPU-seconds)
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
    for i, (assign, hit) in enumerate(sampled_loads(e, k, ep, int(ranks), draws, seed)):
        out[codes.ROUTE_ASSIGN + i], out[codes.ROUTE_HIT + i] = slowest_of(
            assign, hit, k, ep, (1 << i) * int(ranks), hit_weight)
    out.flags.writeable = False
    return out
