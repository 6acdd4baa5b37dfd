"""Speculative decoding in the engine: how many of a step's drafts pass, and what the drafter's
passes cost (``params.Speculation``).

vLLM v1 (``vllm/v1/core/sched/scheduler.py``, ``vllm/v1/sample/rejection_sampler.py``): a decoding
request schedules its last token and its ``d`` drafts (``1 + d`` tokens against the budget, KV slots
for all of them), the target scores them in one forward (logits at every position), the drafts are
kept up to the first rejection and the target adds one token of its own: ``a + 1`` tokens for ``a``
accepted, streamed as one chunk. The rejected drafts' KV is dropped: the request's computed tokens
grow by ``1 + a``.

The accepted count is drawn from ``Speculation.rates``, the unconditional per-position rates
(``P(a > i) = rates[i]``), with one uniform number per request and step: a counter-based hash of
(seed, request, tokens generated so far), so a request's draws do not depend on what else runs,
on preemption or on the fast paths, and a seed reproduces them. The hash is 32-bit integer
arithmetic (Chris Wellons' ``lowbias32`` mixer) whose products are masked to 32 bits, so numba's
wrapping int64 and Python's exact integers agree; the kernels compare it with the rates as integer
thresholds (``Speculation.thresholds``, :func:`acceptance_thresholds`), which decide exactly as
the uniform number does.

The drafter (``simllm.sim.speculative``) then proposes the next drafts: its first pass runs over
every token the step scheduled (it needs their hidden states or KV), sampling one token for each
request that samples; its next ``k - 1`` passes run over one token of each such request.

May import: :mod:`simcore._jit`, :mod:`simcore.codes`, :mod:`simcore.cost`.
"""
import math
from fractions import Fraction

import numpy as np

from simcore._jit import jit, jit_inline
from simcore.codes import N_REST, UNIT_GEMM
from simcore.cost import (
    attention_params_nb,
    decode_attention_totals_nb,
    decode_rows_coord_nb,
    iteration_totals_nb,
    mixed_attention_nb,
    op_time_nb,
    rest_memo_nb,
    totals_from_rest_nb,
)

MASK32 = 0xFFFFFFFF
SEED_SALT = 0x9E3779B9  # the golden ratio's 32 bits: seed 0 does not start the chain at 0
TWO_POW_32 = 4294967296.0


@jit_inline
def mix32_nb(x):
    """``lowbias32``: a 32-bit integer ``x`` (0 <= x < 2**32) to a well-mixed 32-bit integer."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK32
    x ^= x >> 16
    return x


@jit_inline
def request_hash_nb(seed, r):
    """The part of :func:`uniform_nb`'s chain that depends on ``seed`` and request ``r`` only."""
    h = mix32_nb((int(seed) & MASK32) ^ SEED_SALT)
    return mix32_nb(h ^ (int(r) & MASK32))


@jit_inline
def draw_at_nb(h, g):
    """The 32-bit draw of a request at output token ``g`` from its :func:`request_hash_nb` ``h``."""
    # int(): ``h`` read back from an int64 array is a numpy integer when uncompiled, whose
    # products would overflow (with a warning) instead of growing as Python's do.
    return mix32_nb((int(h) & MASK32) ^ (int(g) & MASK32))


@jit_inline
def uniform_at_nb(h, g):
    """:func:`uniform_nb` at output token ``g`` from the request's :func:`request_hash_nb` ``h``."""
    return (draw_at_nb(h, g) + 0.5) / TWO_POW_32


@jit_inline
def uniform_nb(seed, r, g):
    """A uniform number in (0, 1) for request ``r`` at its ``g``-th output token, under ``seed``."""
    return uniform_at_nb(request_hash_nb(seed, r), g)


def acceptance_thresholds(rates):
    """``rates`` (per position, in [0, 1]) as integer thresholds on the draws' 32-bit hash ``m``:
    the uniform number :func:`uniform_at_nb` draws, ``u = (m + 0.5) / 2**32``, is below
    ``rates[i]`` exactly when ``m`` is below entry ``i`` (``ceil(rates[i] * 2**32 - 1/2)``, in
    exact arithmetic), so the kernels compare integers and count the same drafts. Returns a
    read-only int64 array of ``len(rates)``."""
    out = np.array([min(max(math.ceil(Fraction(float(r)) * 2**32 - Fraction(1, 2)), 0), 2**32) for r in rates],
                   dtype=np.int64)
    out.flags.writeable = False
    return out


@jit_inline
def accepted_at_nb(thresholds, h, g, drafts):
    """:func:`accepted_nb` from the request's :func:`request_hash_nb` ``h``."""
    m = draw_at_nb(h, g)  # uniform_at_nb's, as an integer
    a = 0
    for i in range(drafts):  # counted without a branch on where the prefix ends (a coin toss)
        a += m < thresholds[i]
    return a


@jit_inline
def accepted_nb(thresholds, seed, r, g, drafts):
    """Drafts accepted (0 .. ``drafts``) of request ``r`` verifying ``drafts`` drafts after its
    ``g``-th output token: the positions ``i`` with the draw under ``seed`` below the rate
    (``Speculation.rates[i]``, as ``Speculation.thresholds[i]``: :func:`acceptance_thresholds`; a
    prefix, the rates being non-increasing)."""
    return accepted_at_nb(thresholds, request_hash_nb(seed, r), g, drafts)


@jit_inline
def verify_nb(lay, acc, thresholds, seed, r, g, drafts):
    """The verification rule: request ``r`` (its number in the whole run) verifying ``drafts``
    drafts after its ``g``-th output token keeps :func:`accepted_nb`'s count of them, counted in
    the histogram at ``acc[lay.off_spec]`` (:func:`count_accepted_nb`). Returns the count. The
    explicit step and the speculative run (``simcore.fast.spec_run``) both call it."""
    return count_accepted_nb(lay, acc, accepted_nb(thresholds, seed, r, g, drafts))


@jit_inline
def count_accepted_nb(lay, acc, accepted):
    """Count a verification that kept ``accepted`` drafts: ``acc[lay.off_spec + accepted]``, the
    histogram of verifications by drafts kept (``simcore.layout.accepted_per_position`` turns it
    into the count at each position: one add per verification, not one per position); returns
    ``accepted``."""
    acc[lay.off_spec + accepted] += 1.0
    return accepted


@jit_inline
def _proj_totals_nb(d, proj_params, tokens):
    """Seconds, FLOPs and bytes of the drafter's input projection over ``tokens`` tokens."""
    if proj_params <= 0.0 or tokens <= 0.0:
        return 0.0, 0.0, 0.0
    flops = 2.0 * tokens * proj_params
    nbytes = proj_params * d.w_bytes + tokens * 3.0 * d.hidden * d.a_bytes
    return op_time_nb(d, flops, nbytes, UNIT_GEMM)[0], flops, nbytes


@jit_inline
def _pass_totals_nb(d, rest, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """One drafter pass's totals: from its memo ``rest`` (:func:`step_rests_nb`), or without one
    (None) the whole iteration's."""
    if rest is None:
        return iteration_totals_nb(d, n_tokens, attn_pairs, kv_read_tokens, n_emit)
    return totals_from_rest_nb(d, rest, n_tokens, attn_pairs, kv_read_tokens, n_emit)


@jit_inline
def _draft_totals_nb(sp, k, n_tokens, attn_pairs, kv_read_tokens, n_sample, ctx_sample, first, later):
    """The drafter's passes, each from its memo rest (``first``, ``later``; None: without)."""
    if not sp.has_drafter or n_tokens <= 0.0:
        return 0.0, 0.0, 0.0
    d = sp.drafter
    t, flops, nbytes = _pass_totals_nb(d, first, n_tokens, attn_pairs, kv_read_tokens, n_sample)
    pt, pf, pb = _proj_totals_nb(d, sp.proj_params, n_tokens)
    t += pt
    flops += pf
    nbytes += pb
    if n_sample <= 0.0:
        return t, flops, nbytes
    pt, pf, pb = _proj_totals_nb(d, sp.proj_params, n_sample)  # the same for each later pass
    if later is not None and not mixed_attention_nb(d):
        return _later_passes_nb(attention_params_nb(d), later, d.iter_overhead_s, k, n_sample, ctx_sample, pt, pf, pb,
                                t, flops, nbytes)
    for i in range(1, k):
        ctx = ctx_sample + n_sample * i
        st, sf, sb = _pass_totals_nb(d, later, n_sample, ctx, ctx, n_sample)
        t += st + pt
        flops += sf + pf
        nbytes += sb + pb
    return t, flops, nbytes


@jit
def _later_passes_nb(a, rest, overhead_s, k, n_sample, ctx_sample, pt, pf, pb, t, flops, nbytes):
    """The drafter's passes 1 .. ``k - 1`` added to ``t``, ``flops``, ``nbytes`` as
    :func:`_draft_totals_nb` adds them (each pass's totals from its memo ``rest`` and per-step
    ``overhead_s``, then its projection ``pt``, ``pf``, ``pb``), for a drafter whose every layer
    attends to all its keys (``a``: its :class:`simcore.params.AttentionParams`): one real call of
    a few fields per step, attention's rows coordinate taken once for its passes and one keys
    coordinate per pass (``cost.decode_attention_totals_nb``). The same sums, bit for bit."""
    x_rows = decode_rows_coord_nb(a, n_sample)
    for i in range(1, k):
        ctx = ctx_sample + n_sample * i
        a_s, af, ab = decode_attention_totals_nb(a, n_sample, ctx, x_rows)
        t += (rest[0] + a_s + overhead_s) + pt  # totals_from_rest_nb's sums
        flops += (rest[1] + af) + pf
        nbytes += (rest[2] + ab) + pb
    return t, flops, nbytes


@jit
def draft_totals_nb(sp, k, n_tokens, attn_pairs, kv_read_tokens, n_sample, ctx_sample):
    """Seconds, FLOPs and memory bytes of the drafter's ``k`` passes in one step.

    Parameters
    ----------
    sp : Speculation
    k : int
        Draft tokens proposed per request.
    n_tokens, attn_pairs, kv_read_tokens : float
        The step's batch aggregates (the first pass runs over all of its tokens).
    n_sample : float
        Requests that sample in the step (decoding, or at the end of their prompt).
    ctx_sample : float
        Their tokens computed after the step, summed.

    Returns (0, 0, 0) without a GPU drafter or tokens.
    """
    return _draft_totals_nb(sp, k, n_tokens, attn_pairs, kv_read_tokens, n_sample, ctx_sample, None, None)


NO_REST = (0.0, 0.0, 0.0)


@jit_inline
def step_rests_nb(p, sp, k, acc, lay, n_tokens, logits, n_sample):
    """The memo rests (``cost.rest_memo_nb``) a speculative step's passes take, from the tables at
    ``acc[lay.off_rest]`` (the target's, then the drafter's, ``lay.rest_slots`` entries each): the
    target's over ``n_tokens`` tokens with ``logits`` rows of logits, the drafter's first pass
    over them with ``n_sample`` sampling rows, its later passes over ``n_sample`` tokens
    (``NO_REST`` for a pass that does not run). They depend on these three counts alone: a run of
    steps that repeats them keeps them (``simcore.fast.spec_run``)."""
    if n_tokens <= 0.0:
        return NO_REST, NO_REST, NO_REST
    slots = lay.rest_slots
    target = rest_memo_nb(p, acc, lay.off_rest, slots, n_tokens, logits)
    if not sp.has_drafter:
        return target, NO_REST, NO_REST
    off_d = lay.off_rest + slots * N_REST
    first = rest_memo_nb(sp.drafter, acc, off_d, slots, n_tokens, n_sample)
    later = rest_memo_nb(sp.drafter, acc, off_d, slots, n_sample, n_sample) if n_sample > 0.0 and k > 1 else NO_REST
    return target, first, later


@jit_inline
def step_totals_at_nb(p, sp, k, rests, n_tokens, attn_pairs, kv_read_tokens, logits, n_sample, ctx_sample):
    """:func:`step_totals_nb` from the step's :func:`step_rests_nb` ``rests``."""
    if n_tokens <= 0.0:
        return 0.0, 0.0, 0.0
    dt, flops, nbytes = totals_from_rest_nb(p, rests[0], n_tokens, attn_pairs, kv_read_tokens, logits)
    if sp.has_drafter:
        ddt, dflops, dbytes = _draft_totals_nb(sp, k, n_tokens, attn_pairs, kv_read_tokens, n_sample, ctx_sample,
                                               rests[1], rests[2])
        dt += ddt
        flops += dflops
        nbytes += dbytes
    return dt, flops, nbytes


@jit_inline
def step_totals_nb(p, sp, k, acc, lay, n_tokens, attn_pairs, kv_read_tokens, logits, n_sample, ctx_sample):
    """Seconds, FLOPs and memory bytes of a speculative step: the target's forward over the batch
    with ``logits`` rows of logits (one per sampling row plus its drafts), then the drafter's ``k``
    passes (:func:`draft_totals_nb`), each with its cost but attention's in the memo tables at
    ``acc[lay.off_rest]`` (:func:`step_rests_nb`, :func:`step_totals_at_nb`)."""
    return step_totals_at_nb(p, sp, k, step_rests_nb(p, sp, k, acc, lay, n_tokens, logits, n_sample), n_tokens,
                             attn_pairs, kv_read_tokens, logits, n_sample, ctx_sample)
