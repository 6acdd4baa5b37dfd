"""Fast path of the engine: a run of identical-composition decode iterations.

When every running request is decoding and nothing can join (no admissible waiting request), the
next iterations differ only in that each adds one token to every context. Only attention depends
on the context, and its FLOPs and bytes are affine in the context sum, so an iteration's time is
``C + attention(x)`` for the context sum ``x``: no operator loop and no per-request work per
iteration. The run stops before anything the full scheduler must handle: a completion, an
arrival, a client timeout, a KV block that is not free, the end of a time-series window.
Per-token timing stays exact: each iteration's time is computed, and each request's token of that
iteration gets it.
"""
import numpy as np

from simcore._jit import jit
from simcore.codes import (
    OP_ATTENTION,
    RF_LAST_EMIT,
    STAT_BUSY_S,
    STAT_FLOPS,
    STAT_ITERATIONS,
    STAT_ITL_COUNT,
    STAT_ITL_SQSUM,
    STAT_ITL_SUM,
    STAT_KV_BLOCK_SECONDS,
    STAT_MEM_BYTES,
    STAT_PEAK_BLOCKS,
    STAT_SEQ_SECONDS,
    WIN_BUSY_S,
    WIN_ITERATIONS,
    WIN_KV_BLOCK_SECONDS,
    WIN_SEQ_SECONDS,
    RI_BLOCKS,
    RI_CACHED,
    RI_COMPUTED,
    RI_GENERATED,
    RI_INPUT,
    RI_OUTPUT,
    STAT_DECODE_TOKENS,
    STAT_FAST_ITERATIONS,
    STAT_MIN_FREE_BLOCKS,
    UNIT_ATTN,
    WIN_OUTPUT_TOKENS,
)
from simcore.cost import iteration_totals_nb, op_cost_nb, op_count_nb, op_time_nb
from simcore.metrics import itl_bin_nb, record_itl_nb, window_of_nb
from simcore.scheduler import FREE, N_RUN, blocks_for_nb, peek_nb


@jit
def decode_run_nb(p, e, now, next_arrival, next_deadline, reqi, reqf, wq, st, run, scratch, stats, itl_hist,
                  batch_hist, windows):
    """Advance as many pure-decode iterations as nothing else happens in.

    Returns
    -------
    k : int
        Iterations advanced (0 when the state is not a pure-decode one, or its first iteration
        would meet an event).
    now : float
        Time at the end of the run.
    """
    B = st[N_RUN]
    if B == 0 or B > e.max_num_batched_tokens:
        return 0, now
    bs = e.block_size
    free = st[FREE]
    # Would the full scheduler admit the waiting head? Then this is not a pure-decode state.
    # Free blocks only shrink during a run, so the first iteration decides for all of them.
    head = peek_nb(reqi, wq, st)
    if head >= 0 and B < e.max_num_seqs:
        c = reqi[head, RI_COMPUTED]
        need = reqi[head, RI_INPUT] + reqi[head, RI_GENERATED] - c
        if e.chunked_prefill:
            budget = e.max_num_batched_tokens - B
            if budget > 0:
                new = need if need < budget else budget
                extra = blocks_for_nb(c + new, reqi[head, RI_CACHED], bs) - reqi[head, RI_BLOCKS]
                if extra <= free - B:
                    return 0, now  # admitted whatever the decodes take this iteration
                if extra <= free:
                    first_blocks = 0  # decodes that need a new block in the first iteration
                    for i in range(B):
                        if reqi[run[i], RI_COMPUTED] % bs == 0:
                            first_blocks += 1
                    if extra <= free - first_blocks:
                        return 0, now
        elif need <= e.max_num_batched_tokens:
            extra = blocks_for_nb(c + need, reqi[head, RI_CACHED], bs) - reqi[head, RI_BLOCKS]
            if extra <= free:
                return 0, now
    k_max = np.int64(1) << 62
    S = 0
    for i in range(B):
        r = run[i]
        g = reqi[r, RI_GENERATED]
        c = reqi[r, RI_COMPUTED]
        if g < 1 or c != reqi[r, RI_INPUT] + g - 1:
            return 0, now  # a prefill (or a recompute) is in progress
        left = reqi[r, RI_OUTPUT] - g - 1
        if left < k_max:
            k_max = left  # stop before the iteration that completes a request
        S += c
    if k_max <= 0:
        return 0, now
    cnt = scratch[:bs]  # decoding requests by context mod block size
    cnt[:] = 0
    for i in range(B):
        cnt[reqi[run[i], RI_COMPUTED] % bs] += 1

    # dt(x) = rest + count * attention_time(x), x = tokens attention reads = context sum + B.
    fb = float(B)
    x = float(S) + fb
    t_all, f_all, b_all = iteration_totals_nb(p, fb, x, x, fb)
    n_att = float(op_count_nb(p, OP_ATTENTION))
    fa0, ba0, _ = op_cost_nb(p, OP_ATTENTION, fb, 0.0, 0.0, fb)
    fa1, ba1, _ = op_cost_nb(p, OP_ATTENTION, fb, 1.0, 1.0, fb)
    f_slope = fa1 - fa0
    b_slope = ba1 - ba0
    att, _ = op_time_nb(p, fa0 + f_slope * x, ba0 + b_slope * x, UNIT_ATTN)
    t_rest = t_all - n_att * att
    f_rest = f_all - n_att * (fa0 + f_slope * x)
    b_rest = b_all - n_att * (ba0 + b_slope * x)

    last_window = windows.shape[0] - 1
    window = -1
    k = 0
    busy = 0.0
    flops = 0.0
    nbytes = 0.0
    kv_seconds = 0.0
    itl_sum = 0.0
    itl_sq = 0.0
    n_bins = itl_hist.shape[0]
    while k < k_max and now < next_arrival and now < next_deadline:
        new_blocks = cnt[(bs - k % bs) % bs]
        if new_blocks > free:
            break
        fa = fa0 + f_slope * x
        ba = ba0 + b_slope * x
        att, _ = op_time_nb(p, fa, ba, UNIT_ATTN)
        dt = t_rest + n_att * att
        t_end = now + dt
        w = window_of_nb(e, t_end, windows)
        if window < 0:
            window = w
        elif w != window and window != last_window:
            break
        free -= new_blocks
        busy += dt
        flops += f_rest + n_att * fa
        nbytes += b_rest + n_att * ba
        kv_seconds += (e.num_blocks - free) * dt
        if k == 0:
            for i in range(B):
                record_itl_nb(e, t_end - reqf[run[i], RF_LAST_EMIT], 1.0, stats, itl_hist)
        else:
            itl = t_end - now
            itl_sum += fb * itl
            itl_sq += fb * itl * itl
            itl_hist[itl_bin_nb(e, itl, n_bins)] += fb
        now = t_end
        x += fb
        k += 1
    if k == 0:
        return 0, now
    for i in range(B):
        r = run[i]
        reqi[r, RI_COMPUTED] += k
        reqi[r, RI_GENERATED] += k
        reqf[r, RF_LAST_EMIT] = now
        reqi[r, RI_BLOCKS] = blocks_for_nb(reqi[r, RI_COMPUTED], reqi[r, RI_CACHED], bs)
    st[FREE] = free
    used = e.num_blocks - free
    stats[STAT_BUSY_S] += busy
    stats[STAT_FLOPS] += flops
    stats[STAT_MEM_BYTES] += nbytes
    stats[STAT_ITERATIONS] += k
    stats[STAT_KV_BLOCK_SECONDS] += kv_seconds
    stats[STAT_SEQ_SECONDS] += fb * busy
    stats[STAT_DECODE_TOKENS] += fb * k
    stats[STAT_ITL_SUM] += itl_sum
    stats[STAT_ITL_SQSUM] += itl_sq
    stats[STAT_ITL_COUNT] += fb * (k - 1)
    if used > stats[STAT_PEAK_BLOCKS]:
        stats[STAT_PEAK_BLOCKS] = used
    batch_hist[B if B < batch_hist.shape[0] else batch_hist.shape[0] - 1] += k
    windows[window, WIN_BUSY_S] += busy
    windows[window, WIN_ITERATIONS] += k
    windows[window, WIN_SEQ_SECONDS] += fb * busy
    windows[window, WIN_KV_BLOCK_SECONDS] += kv_seconds
    windows[window, WIN_OUTPUT_TOKENS] += fb * k
    if free < stats[STAT_MIN_FREE_BLOCKS]:
        stats[STAT_MIN_FREE_BLOCKS] = free
    stats[STAT_FAST_ITERATIONS] += k
    return k, now
