"""Fast path of the engine: a run of identical-composition decode iterations.

When every running request is in the decode cohort (cohort.py) and nothing can join (no
admissible waiting request), the next iterations differ only in that each adds one token to every
context. Only attention depends on the context, and its FLOPs and bytes are affine in the context
sum, so an iteration's time is ``C + attention(x)`` for the context sum ``x`` (with shape-aware
tables, attention's efficiency is looked up at each ``x`` too): no operator loop
and no per-request work. The run stops before anything else must happen (an arrival, a client
timeout, a KV block that is not free, the end of a time-series window) or after the advance that
completes a member: the members it completes then retire as the cohort's iteration retires them.
Per-token timing stays exact: each iteration's time is computed, and each member's token of
that iteration gets it.
"""
import math

from simcore._jit import jit_inline
from simcore.codes import (
    CLOCK_COHORT,
    COHORT_ADVANCES,
    COHORT_CONTEXT_SUM,
    COHORT_JOINERS,
    COHORT_NEXT_DONE,
    COHORT_MEASURED,
    COHORT_SIZE,
    EFF_PF_LOG2_MIN,
    FINISHED_LAST_STEP,
    FREE_BLOCKS,
    MEMO_ATTN_BYTES,
    MEMO_ATTN_BYTES_SLOPE,
    MEMO_ATTN_FLOPS,
    MEMO_ATTN_FLOPS_SLOPE,
    MEMO_LOG_B,
    MEMO_LOG_SLOPE,
    MEMO_REST_BYTES,
    MEMO_REST_FLOPS,
    MEMO_REST_S,
    MEMO_X_ROWS,
    OP_ATTENTION,
    PREFILLING_COUNT,
    RI_BLOCKS,
    RI_CACHED,
    RI_COMPUTED,
    RI_FIXED_BLOCKS,
    RI_GENERATED,
    RI_INPUT,
    RUNNING_COUNT,
    STAT_BUSY_S,
    STAT_DECODE_TOKENS,
    STAT_FAST_ITERATIONS,
    STAT_FLOPS,
    STAT_ITERATIONS,
    STAT_ITL_COUNT,
    STAT_ITL_SQSUM,
    STAT_ITL_SUM,
    STAT_KV_BLOCK_SECONDS,
    STAT_MEM_BYTES,
    STAT_MIN_FREE_BLOCKS,
    STAT_PEAK_BLOCKS,
    STAT_SEQ_SECONDS,
    UNIT_ATTN,
    WIN_BUSY_S,
    WIN_ITERATIONS,
    WIN_KV_BLOCK_SECONDS,
    WIN_OUTPUT_TOKENS,
    WIN_SEQ_SECONDS,
)
from simcore.fast.cohort import complete_members_nb, needs_block_class_nb, record_advance_itls_nb
from simcore.cost import (
    iteration_totals_nb,
    mixed_attention_nb,
    log2_nb,
    op_cost_nb,
    op_count_nb,
    op_seconds_nb,
    op_time_nb,
    shaped_attention_at_nb,
    shaped_nb,
    unsplit_attention_nb,
)
from simcore.layout import memo_slot_nb, phase_slot_nb
from simcore.metrics import batch_add_nb, itl_bin_nb, win_add_nb, window_of_nb, window_sure_until_nb
from simcore.scheduler import admission_nb, peek_nb


@jit_inline
def pure_decode_nb(e, lay, now, next_arrival, next_deadline, reqi, ws):
    """Whether the next iteration is a cohort-only decode with nothing else to do: every running
    request decodes, no event is due, and the waiting head (if any) could not be admitted. Free
    blocks only shrink during such a run (the blocks of members that complete are freed after its
    last iteration), so what holds for its first iteration holds for all of them."""
    B = ws[COHORT_SIZE]
    if B == 0 or ws[PREFILLING_COUNT] > 0 or B != ws[RUNNING_COUNT] or B > e.max_num_batched_tokens:
        return False
    if now >= next_arrival or now >= next_deadline:
        return False
    head = peek_nb(lay, reqi, ws)
    if head < 0:
        return True
    # The admission rule as the fast iteration would apply it: with chunked prefill the head
    # comes after the cohort's tokens and the blocks they take; in v0 it would run alone.
    if e.chunked_prefill:
        budget = e.max_num_batched_tokens - B
        free = ws[FREE_BLOCKS] - ws[phase_slot_nb(lay, needs_block_class_nb(e, ws[COHORT_ADVANCES]))]
    else:
        budget = e.max_num_batched_tokens
        free = ws[FREE_BLOCKS]
    c = reqi[head, RI_COMPUTED]
    new, _ = admission_nb(e, B, budget, free, not e.chunked_prefill, c, reqi[head, RI_INPUT] + reqi[head, RI_GENERATED] - c,
                          reqi[head, RI_CACHED], reqi[head, RI_FIXED_BLOCKS], reqi[head, RI_BLOCKS])
    return new == 0


@jit_inline
def decode_run_nb(p, e, lay, now, next_arrival, next_deadline, reqi, reqf, ws, glob, acc):
    """Advance as many cohort-only decode iterations as nothing else happens in (call it when
    :func:`pure_decode_nb` holds), up to and including the advance that completes a member; those
    it completes retire at its end (``cohort.complete_members_nb``; their number goes to
    ``ws[FINISHED_LAST_STEP]``).

    Returns
    -------
    k : int
        Iterations advanced (0 when some running request is not decoding, a waiting request
        could be admitted, or the first iteration would meet an event).
    now : float
        Time at the end of the run.
    """
    B = ws[COHORT_SIZE]
    d0 = ws[COHORT_ADVANCES]
    free = ws[FREE_BLOCKS]
    k_max = ws[COHORT_NEXT_DONE] - d0  # up to the advance that completes a member
    # dt(x) = rest + count * attention_time(x), x = tokens attention reads = context sum + B.
    # The coefficients depend on B only: computed once per batch size and kept in acc.
    fb = float(B)
    fm = float(ws[COHORT_MEASURED])  # members whose ITLs count (all but warm-up requests)
    x = float(ws[COHORT_CONTEXT_SUM]) + fb
    n_att = float(op_count_nb(p, OP_ATTENTION))
    m = memo_slot_nb(lay, B)
    if acc[m] != acc[m]:  # NaN: not computed yet
        t_all, f_all, b_all = iteration_totals_nb(p, fb, x, x, fb)
        fa0, ba0, _ = op_cost_nb(p, OP_ATTENTION, fb, 0.0, 0.0, fb)
        fa1, ba1, _ = op_cost_nb(p, OP_ATTENTION, fb, 1.0, 1.0, fb)
        if mixed_attention_nb(p):  # not affine in x (past a window, a linear layer's constant)
            fax, bax, _ = op_cost_nb(p, OP_ATTENTION, fb, x, x, fb)
        else:
            fax = fa0 + (fa1 - fa0) * x
            bax = ba0 + (ba1 - ba0) * x
        att, _ = op_seconds_nb(p, OP_ATTENTION, fax, bax, UNIT_ATTN, fb, x, x, fb)
        att = unsplit_attention_nb(p, att, fb, x, fb)  # as iteration_totals_nb prices it
        acc[m + MEMO_REST_S] = t_all - n_att * att
        acc[m + MEMO_REST_FLOPS] = f_all - n_att * fax
        acc[m + MEMO_REST_BYTES] = b_all - n_att * bax
        acc[m + MEMO_ATTN_FLOPS] = fa0
        acc[m + MEMO_ATTN_BYTES] = ba0
        acc[m + MEMO_ATTN_FLOPS_SLOPE] = fa1 - fa0
        acc[m + MEMO_ATTN_BYTES_SLOPE] = ba1 - ba0
        acc[m + MEMO_X_ROWS] = log2_nb(fb * p.kv_heads)
        acc[m + MEMO_LOG_B] = log2_nb(fb)
        f_slope = fa1 - fa0
        acc[m + MEMO_LOG_SLOPE] = math.log2(f_slope) - EFF_PF_LOG2_MIN if f_slope > 0.0 else 0.0
    t_rest = acc[m + MEMO_REST_S]
    f_rest = acc[m + MEMO_REST_FLOPS]
    b_rest = acc[m + MEMO_REST_BYTES]
    fa0 = acc[m + MEMO_ATTN_FLOPS]
    ba0 = acc[m + MEMO_ATTN_BYTES]
    f_slope = acc[m + MEMO_ATTN_FLOPS_SLOPE]
    b_slope = acc[m + MEMO_ATTN_BYTES_SLOPE]

    # With shape-aware tables, attention's grid coordinates over the run: rows x KV heads is fixed,
    # both context coordinates are log2(x / B), and decode attention's FLOPs are proportional to x
    # (no constant part), so one log2 per iteration gives them all. With a mix of attention kinds
    # (cost.mixed_attention_nb: windowed layers stop growing at their window, linear layers add a
    # constant) attention is priced in full each iteration instead.
    shaped = shaped_nb(p)
    mixed = mixed_attention_nb(p)
    if shaped and not mixed and not (fa0 == 0.0 and f_slope > 0.0):
        return 0, now  # not decode attention's shape: the explicit path prices it
    x_rows = acc[m + MEMO_X_ROWS]
    log_b = acc[m + MEMO_LOG_B]
    log_slope = acc[m + MEMO_LOG_SLOPE]  # used where shaped and not mixed, where f_slope > 0
    phase = needs_block_class_nb(e, d0)  # the class that needs a block at the next advance
    if shaped and not mixed:  # the tables' decode attention: a loop of its own (fewer values live)
        k, now, free, window, t_first, busy, flops, nbytes, kv_seconds, itl_sum, itl_sq = _iterations_nb(
            p, e, lay, ws, acc, True, False, now, next_arrival, next_deadline, k_max, free, phase, x, fb, fm,
            t_rest, f_rest, b_rest, fa0, ba0, f_slope, b_slope, n_att, x_rows, log_b, log_slope)
    else:
        k, now, free, window, t_first, busy, flops, nbytes, kv_seconds, itl_sum, itl_sq = _iterations_nb(
            p, e, lay, ws, acc, False, mixed, now, next_arrival, next_deadline, k_max, free, phase, x, fb, fm,
            t_rest, f_rest, b_rest, fa0, ba0, f_slope, b_slope, n_att, x_rows, log_b, log_slope)
    if k == 0:
        return 0, now
    # The first iteration's ITLs, recorded after the loop (it keeps fewer values live): members that
    # took part in the cohort's last advance count from it, joiners from their own last token. Into
    # the ITL sums they go before the later iterations' (as in the loop); the counts are whole
    # numbers, exact in any order.
    record_advance_itls_nb(e, lay, t_first, reqf, ws, acc)
    ws[COHORT_ADVANCES] = d0 + k
    ws[COHORT_CONTEXT_SUM] += B * k
    ws[COHORT_JOINERS] = 0
    acc[lay.off_clock + CLOCK_COHORT] = now
    ws[FREE_BLOCKS] = free
    used = e.num_blocks - free
    acc[STAT_BUSY_S] += busy
    acc[STAT_FLOPS] += flops
    acc[STAT_MEM_BYTES] += nbytes
    acc[STAT_ITERATIONS] += k
    acc[STAT_KV_BLOCK_SECONDS] += kv_seconds
    acc[STAT_SEQ_SECONDS] += fb * busy
    acc[STAT_DECODE_TOKENS] += fb * k
    acc[STAT_ITL_SUM] += itl_sum
    acc[STAT_ITL_SQSUM] += itl_sq
    acc[STAT_ITL_COUNT] += fm * (k - 1)  # the later iterations' (whole numbers: the loop's sum exactly)
    if used > acc[STAT_PEAK_BLOCKS]:
        acc[STAT_PEAK_BLOCKS] = used
    batch_add_nb(e, lay, acc, B, k)
    win_add_nb(lay, acc, window, WIN_BUSY_S, busy)
    win_add_nb(lay, acc, window, WIN_ITERATIONS, k)
    win_add_nb(lay, acc, window, WIN_SEQ_SECONDS, fb * busy)
    win_add_nb(lay, acc, window, WIN_KV_BLOCK_SECONDS, kv_seconds)
    win_add_nb(lay, acc, window, WIN_OUTPUT_TOKENS, fb * k)
    if free < acc[STAT_MIN_FREE_BLOCKS]:
        acc[STAT_MIN_FREE_BLOCKS] = free
    acc[STAT_FAST_ITERATIONS] += k
    if d0 + k == ws[COHORT_NEXT_DONE]:  # the last advance completed members: they retire
        ws[FINISHED_LAST_STEP] = complete_members_nb(e, lay, now, reqi, reqf, ws, glob, acc)
    return k, now


@jit_inline
def _iterations_nb(p, e, lay, ws, acc, tables, mixed, now, next_arrival, next_deadline, k_max, free, phase, x, fb, fm,
                   t_rest, f_rest, b_rest, fa0, ba0, f_slope, b_slope, n_att, x_rows, log_b, log_slope):
    """The iterations of :func:`decode_run_nb` from ``now`` (context sum read by attention ``x``,
    ``free`` blocks, block ``phase``): each priced (``tables``: the tables' decode attention at one
    log2 of ``x``; else ``mixed`` attention in full, or the scalar roofline), timed and summed, the
    ITL histogram counting every iteration's but the first. ``tables`` is a constant at each call,
    so each call site compiles a loop with one pricing.

    Returns
    -------
    k, now, free, window, t_first, busy, flops, nbytes, kv_seconds, itl_sum, itl_sq
        Iterations, the end time, the blocks left free, the time series' row, the end of the first
        iteration, and the run's sums (seconds, FLOPs, bytes, block-seconds, ITL seconds over
        measured members and their squares).
    """
    bs = e.block_size
    last_window = lay.n_windows - 1
    window = -1
    t_sure = -math.inf  # before it, an end time is in the run's window for sure
    k = 0
    busy = 0.0
    flops = 0.0
    nbytes = 0.0
    kv_seconds = 0.0
    itl_sum = 0.0
    itl_sq = 0.0
    t_first = now
    while k < k_max and now < next_arrival and now < next_deadline:
        new_blocks = ws[phase_slot_nb(lay, phase)]
        if new_blocks > free:
            break
        phase = phase - 1 if phase > 0 else bs - 1
        if tables:
            fa = fa0 + f_slope * x
            ba = ba0 + b_slope * x
            lx = math.log2(x)
            att, _ = shaped_attention_at_nb(p, fa, ba, log_slope + lx, lx - log_b, x_rows, lx - log_b, 0.0)
        elif mixed:
            fa, ba, _ = op_cost_nb(p, OP_ATTENTION, fb, x, x, fb)
            att, _ = op_seconds_nb(p, OP_ATTENTION, fa, ba, UNIT_ATTN, fb, x, x, fb)
        else:
            fa = fa0 + f_slope * x
            ba = ba0 + b_slope * x
            att, _ = op_time_nb(p, fa, ba, UNIT_ATTN)  # no tables
        att = unsplit_attention_nb(p, att, fb, x, fb)
        dt = t_rest + n_att * att
        t_end = now + dt
        if t_end >= t_sure:  # else still in the run's window
            w = window_of_nb(e, lay, t_end)
            if window < 0:
                window = w
            elif w != window and window != last_window:
                break
            t_sure = window_sure_until_nb(e, lay, window)
        free -= new_blocks
        busy += dt
        flops += f_rest + n_att * fa
        nbytes += b_rest + n_att * ba
        kv_seconds += (e.num_blocks - free) * dt
        if k == 0:
            t_first = t_end
        else:
            itl = t_end - now
            itl_sum += fm * itl
            itl_sq += fm * itl * itl
            acc[lay.off_itl + itl_bin_nb(e, lay, itl)] += fm
        now = t_end
        x += fb
        k += 1
    return k, now, free, window, t_first, busy, flops, nbytes, kv_seconds, itl_sum, itl_sq
