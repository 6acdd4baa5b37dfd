"""Fast path of the engine under speculative decoding: a run of decode-only verification steps.

When every running request decodes (one token behind, its drafts to verify), each gets its whole
need within the token budget and its KV blocks are free, and the waiting head could not be
admitted, the next speculative step is one the explicit path would take the same way
(``scheduler.schedule_speculative_nb``, the step's cost, the engine's advance). This module takes
such steps back to back without returning to the event loop: per step one loop over the running
list that schedules and sums, then one that verifies and emits, with the rules the explicit path
calls (:func:`simcore.scheduler.need_nb`, ``extra_blocks_nb``, ``admission_nb``, ``retire_nb``,
:func:`simcore.speculative.verify_nb`, :func:`simcore.metrics.itl_group_nb`). It stops before an
arrival, a client deadline or a step the explicit path must decide (a request short of budget
or blocks, an admissible waiting head), and after a step that retires a request. The sums run in
the explicit path's order: results are the same bit for bit.

May import: :mod:`simcore._jit`, :mod:`simcore.codes`, :mod:`simcore.layout`,
:mod:`simcore.metrics`, :mod:`simcore.scheduler`, :mod:`simcore.speculative`.
"""
from simcore._jit import jit, jit_inline
from simcore.codes import (
    FINISHED_LAST_STEP,
    FREE_BLOCKS,
    GLOBAL_BASE,
    POLICY_CONTINUOUS,
    RF_LAST_EMIT,
    RI_BLOCKS,
    RI_CACHED,
    RI_COMPUTED,
    RI_FIXED_BLOCKS,
    RI_GENERATED,
    RI_INPUT,
    RI_OUTPUT,
    RUNNING_COUNT,
    STAT_DECODE_TOKENS,
    STAT_FAST_ITERATIONS,
    STAT_MIN_FREE_BLOCKS,
    STAT_SPEC_ACCEPTED,
    STAT_SPEC_DRAFT_TOKENS,
    STAT_SPEC_DRAFTS,
    WIN_OUTPUT_TOKENS,
)
from simcore.layout import running_nb
from simcore.metrics import account_iteration_nb, itl_group_nb, measured_nb, record_itl_nb, win_add_nb, window_of_nb
from simcore.scheduler import admission_nb, drop_finished_nb, extra_blocks_nb, need_nb, peek_nb, retire_nb
from simcore.speculative import step_totals_nb, verify_nb


@jit_inline
def _decoding_nb(reqi, r):
    """Whether running request ``r`` decodes: it emitted a token and computed all but the last."""
    g = reqi[r, RI_GENERATED]
    return g >= 1 and reqi[r, RI_COMPUTED] == reqi[r, RI_INPUT] + g - 1


@jit_inline
def _head_admissible_nb(e, lay, reqi, ws, n_sched, budget, free):
    """Whether the explicit scheduler (``scheduler.admit_waiting_nb``) would admit the waiting head
    after ``n_sched`` rows, with ``budget`` tokens and ``free`` blocks left."""
    cap = e.pipeline_batch_seqs if e.pipeline_batch_seqs > 0 else e.max_num_seqs
    if ws[RUNNING_COUNT] >= e.max_num_seqs or budget <= 0 or n_sched >= cap:
        return False
    h = peek_nb(lay, reqi, ws)
    if h < 0:
        return False
    c = reqi[h, RI_COMPUTED]
    new, _ = admission_nb(e, ws[RUNNING_COUNT], budget, free, False, c, reqi[h, RI_INPUT] + reqi[h, RI_GENERATED] - c,
                          reqi[h, RI_CACHED], reqi[h, RI_FIXED_BLOCKS], reqi[h, RI_BLOCKS])
    return new > 0


@jit
def spec_run_nb(p, sp, e, lay, now, next_arrival, next_deadline, reqi, reqf, ws, glob, acc):
    """Take decode-only speculative steps from ``now`` while the explicit path would take them the
    same way and nothing else is due (continuous batching with chunked prefill, one pipeline
    stage). Each step is two loops over the running list: one schedules and sums, writing
    nothing, the other verifies and emits (one loop doing a step's emission and the next step's
    schedule measured 4% slower).

    Returns
    -------
    k : int
        Steps taken (0: the explicit path takes the next one; nothing changed but the waiting
        queue's timed-out entries dropped).
    now : float
        Time at the end of the last step.
    """
    B = ws[RUNNING_COUNT]
    if B == 0 or not _decoding_nb(reqi, running_nb(lay, ws, B - 1)):  # the newly admitted come last
        return 0, now
    if _head_admissible_nb(e, lay, reqi, ws, B, e.max_num_batched_tokens - B, ws[FREE_BLOCKS]):
        return 0, now  # most likely admitted at this step (checked exactly below otherwise)
    bs = e.block_size
    base = glob[GLOBAL_BASE]
    rates = sp.rates
    seed = sp.seed
    k = 0
    while now < next_arrival and now < next_deadline:
        # Schedule: schedule_speculative_nb's rows and sums, nothing written yet.
        budget = e.max_num_batched_tokens
        free = ws[FREE_BLOCKS]
        n_tokens = 0.0
        pairs = 0.0
        kv_read = 0.0
        logits = 0.0
        ctx_sample = 0.0
        short = False
        for j in range(B):
            r = running_nb(lay, ws, j)
            c = reqi[r, RI_COMPUTED]
            g = reqi[r, RI_GENERATED]
            total = reqi[r, RI_INPUT] + g
            if g < 1 or c != total - 1:
                short = True  # not decoding
                break
            need = need_nb(e, total, c, g, reqi[r, RI_OUTPUT])
            if need > budget:
                short = True  # a partial chunk, or no row at all
                break
            after = c + need
            x = extra_blocks_nb(after, reqi[r, RI_CACHED], reqi[r, RI_FIXED_BLOCKS], reqi[r, RI_BLOCKS], bs)
            if x > free:
                short = True  # the explicit scheduler preempts
                break
            free -= x
            budget -= need
            q = float(need)
            cf = float(c)
            n_tokens += q
            pairs += q * cf + q * (q + 1.0) * 0.5
            kv_read += cf + q
            ctx_sample += after
            logits += 1.0 + (after - total)  # its own logits and its drafts'
        if short or _head_admissible_nb(e, lay, reqi, ws, B, budget, free):
            break
        ws[FREE_BLOCKS] = free
        dt, flops, nbytes = step_totals_nb(p, sp, e.num_speculative_tokens, acc, lay.off_rest, n_tokens, pairs,
                                           kv_read, logits, float(B), ctx_sample)
        t_end = now + dt
        account_iteration_nb(e, lay, t_end, acc, dt, flops, nbytes, B, e.num_blocks - free)
        if free < acc[STAT_MIN_FREE_BLOCKS]:
            acc[STAT_MIN_FREE_BLOCKS] = free
        # Verify and emit: the engine's advance of decoding rows, in row order.
        finished = 0
        decode_tokens = 0
        out_tokens = 0
        drafts = 0
        draft_tokens = 0
        accepted_tokens = 0
        itl_from = -1.0
        itl_n = 0.0
        for j in range(B):
            r = running_nb(lay, ws, j)
            c = reqi[r, RI_COMPUTED]
            g = reqi[r, RI_GENERATED]
            out = reqi[r, RI_OUTPUT]
            need = need_nb(e, reqi[r, RI_INPUT] + g, c, g, out)
            reqi[r, RI_BLOCKS] += extra_blocks_nb(c + need, reqi[r, RI_CACHED], reqi[r, RI_FIXED_BLOCKS],
                                                  reqi[r, RI_BLOCKS], bs)
            decode_tokens += need
            emitted = 1
            if need > 1:
                accepted = verify_nb(lay, acc, rates, seed, r + base, g, need - 1)
                drafts += 1
                draft_tokens += need - 1
                accepted_tokens += accepted
                emitted += accepted
            reqi[r, RI_COMPUTED] = c + emitted
            if measured_nb(e, r):
                itl_from, itl_n = itl_group_nb(e, lay, acc, t_end, reqf[r, RF_LAST_EMIT], itl_from, itl_n)
            reqf[r, RF_LAST_EMIT] = t_end
            reqi[r, RI_GENERATED] = g + emitted
            out_tokens += emitted
            if g + emitted == out:
                retire_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, r, True)
                finished += 1
        if itl_n > 0.0:
            record_itl_nb(e, lay, acc, t_end - itl_from, itl_n)
        acc[STAT_DECODE_TOKENS] += decode_tokens
        win_add_nb(lay, acc, window_of_nb(e, lay, t_end), WIN_OUTPUT_TOKENS, float(out_tokens))
        if drafts:
            acc[STAT_SPEC_DRAFTS] += drafts
            acc[STAT_SPEC_DRAFT_TOKENS] += draft_tokens
            acc[STAT_SPEC_ACCEPTED] += accepted_tokens
        ws[FINISHED_LAST_STEP] = finished
        now = t_end
        k += 1
        if finished > 0:  # an arrival may follow (a client's next request) and the batch changed
            drop_finished_nb(lay, reqi, ws)
            break
    acc[STAT_FAST_ITERATIONS] += k
    return k, now


@jit_inline
def spec_run_possible(e):
    """Whether engine ``e`` takes speculative runs: speculative decoding under continuous batching
    with chunked prefill and the fast path on, one pipeline stage."""
    return (e.fast_forward and e.num_speculative_tokens > 0 and e.policy == POLICY_CONTINUOUS and e.chunked_prefill
            and e.pipeline_stages == 1)
