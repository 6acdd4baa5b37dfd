"""The serving engine: a discrete-event loop over engine iterations (see ``scheduler.py`` for
who runs in an iteration and ``decode_run.py`` for the closed-form fast path).

Continuous batching follows vLLM. With chunked prefill (v1) every iteration first schedules the
running requests in admission order (a decode token each, or the next prefill chunk, within the
``max_num_batched_tokens`` budget), preempting the most recently admitted request by recompute
when KV blocks run out, and then, if nothing was preempted, admits waiting requests FCFS while
sequences, budget and blocks allow. Without chunked prefill (v0) an iteration either prefills
newly admitted prompts whole or decodes every running request. Static batching runs a batch to
completion (finished rows keep computing as padding); dynamic batching starts one at
``batch_max`` requests or once the oldest has waited ``batch_window_s``.

A request computes its prompt (minus a cached prefix), then one token per iteration; it emits a
token at the end of every iteration after which all its tokens so far are computed. Preemption
frees its blocks and requeues it at the front; it later recomputes prompt plus generated tokens.
"""
import numpy as np

from simcore._jit import jit, jit_inline
from simcore.codes import (
    POLICY_CONTINUOUS,
    POLICY_DYNAMIC,
    RF_ARRIVAL,
    RF_FINISH,
    RF_FIRST_TOKEN,
    RF_LAST_EMIT,
    RI_BLOCKS,
    RI_CACHED,
    RI_COMPUTED,
    RI_GENERATED,
    RI_INPUT,
    RI_OUTPUT,
    RI_STATUS,
    STAT_DECODE_TOKENS,
    STAT_END_S,
    STAT_MIN_FREE_BLOCKS,
    STAT_PREEMPTIONS,
    STAT_PREFILL_TOKENS,
    STATUS_DONE,
    STATUS_REJECTED,
    STATUS_RUNNING,
    STATUS_TIMED_OUT,
    STATUS_WAITING,
    WIN_ARRIVALS,
    WIN_COMPLETED,
    WIN_OUTPUT_TOKENS,
)
from simcore.cost import iteration_totals_nb
from simcore.decode_run import decode_run_nb
from simcore.metrics import account_iteration_nb, record_itl_nb, window_of_nb
from simcore.scheduler import (
    DONE,
    FREE,
    N_RUN,
    N_STATE,
    NEXT_ASSIGN,
    PREEMPTED,
    Q_ALIVE,
    Q_COUNT,
    Q_HEAD,
    blocks_for_nb,
    client_next_nb,
    enqueue_nb,
    form_static_batch_nb,
    peek_nb,
    schedule_continuous_nb,
)


@jit_inline
def _finish_nb(e, reqi, reqf, st, windows, r, t, code):
    """Request ``r`` ends at ``t`` (done, rejected or timed out); its client may send the next."""
    reqi[r, RI_STATUS] = code
    reqf[r, RF_FINISH] = t
    st[DONE] += 1
    if code == STATUS_DONE:
        windows[window_of_nb(e, t, windows), WIN_COMPLETED] += 1.0
    client_next_nb(e, reqf, st, t)


@jit
def _time_out_nb(e, now, reqi, reqf, st, run, windows):
    """Abort every waiting or running request whose client gave up by ``now``. Returns the next
    deadline among those left."""
    nxt = np.inf
    k = 0
    for i in range(st[N_RUN]):
        r = run[i]
        deadline = reqf[r, RF_ARRIVAL] + e.timeout_s
        if deadline <= now:
            st[FREE] += reqi[r, RI_BLOCKS]
            reqi[r, RI_BLOCKS] = 0
            _finish_nb(e, reqi, reqf, st, windows, r, now, STATUS_TIMED_OUT)
        else:
            run[k] = r
            k += 1
            nxt = min(nxt, deadline)
    st[N_RUN] = k
    for r in range(reqi.shape[0]):  # waiting requests leave the queue lazily
        if reqi[r, RI_STATUS] == STATUS_WAITING:
            deadline = reqf[r, RF_ARRIVAL] + e.timeout_s
            if deadline <= now:
                st[Q_ALIVE] -= 1
                _finish_nb(e, reqi, reqf, st, windows, r, now, STATUS_TIMED_OUT)
            else:
                nxt = min(nxt, deadline)
    return nxt


@jit
def _advance_nb(e, t_end, reqi, reqf, st, run, sched, n_sched, stats, itl_hist, windows, emit_all):
    """After an iteration: add each scheduled request's new tokens, emit tokens, retire the
    finished. Static batches keep finished rows as padding (``emit_all``)."""
    w_end = window_of_nb(e, t_end, windows)
    for j in range(n_sched):
        r = sched[0, j]
        new = sched[1, j]
        before = reqi[r, RI_COMPUTED]
        after = before + new
        reqi[r, RI_COMPUTED] = after
        if reqi[r, RI_STATUS] != STATUS_RUNNING:
            continue  # padding row of a finished request in a static batch
        g = reqi[r, RI_GENERATED]
        total = reqi[r, RI_INPUT] + g
        if new == 1 and g >= 1 and before == total - 1:
            stats[STAT_DECODE_TOKENS] += 1.0
        else:
            stats[STAT_PREFILL_TOKENS] += new
        if after == total or (emit_all and after > total):
            if g == 0:
                reqf[r, RF_FIRST_TOKEN] = t_end
            else:
                record_itl_nb(e, t_end - reqf[r, RF_LAST_EMIT], 1.0, stats, itl_hist)
            reqf[r, RF_LAST_EMIT] = t_end
            reqi[r, RI_GENERATED] = g + 1
            windows[w_end, WIN_OUTPUT_TOKENS] += 1.0
            if g + 1 == reqi[r, RI_OUTPUT]:
                if not emit_all:
                    st[FREE] += reqi[r, RI_BLOCKS]
                    reqi[r, RI_BLOCKS] = 0
                late = e.timeout_s > 0.0 and t_end - reqf[r, RF_ARRIVAL] > e.timeout_s
                _finish_nb(e, reqi, reqf, st, windows, r, t_end, STATUS_TIMED_OUT if late else STATUS_DONE)
    k = 0
    for i in range(st[N_RUN]):
        r = run[i]
        if reqi[r, RI_STATUS] == STATUS_RUNNING:
            k += 1
            if not emit_all:
                run[k - 1] = r
    if not emit_all or k == 0:
        st[N_RUN] = k  # a static batch keeps its rows until all of them are done


@jit
def simulate_nb(p, e, reqi, reqf, stats, itl_hist, batch_hist, windows):
    """Simulate one engine replica serving the requests of ``reqi``/``reqf``.

    Parameters
    ----------
    p : CostParams
    e : EngineParams
    reqi : ndarray of int64, shape (n, N_RI)
        Per-request integer state (columns ``RI_*``). In: ``RI_INPUT``, ``RI_OUTPUT`` (>= 1),
        ``RI_CACHED`` (a multiple of ``block_size``, below the prompt), the rest 0. Out:
        ``RI_GENERATED``, ``RI_PREEMPTIONS``, ``RI_STATUS``.
    reqf : ndarray of float64, shape (n, N_RF)
        Per-request times (columns ``RF_*``). In: ``RF_ARRIVAL`` non-decreasing (closed loop: the
        first ``n_clients`` set, the rest ``inf``, filled in as clients free up) and ``RF_READY``;
        the others -1. Out: first scheduled, first token and finish times.
    stats : ndarray of float64, shape (N_STATS,)
        Totals (``STAT_*``), zeroed.
    itl_hist : ndarray of float64, shape (n_bins,)
        Inter-token latency histogram (see ``metrics.itl_bin_nb``), zeroed.
    batch_hist : ndarray of float64, shape (max_num_seqs + 1,)
        Iterations by the number of sequences they ran.
    windows : ndarray of float64, shape (n_windows, N_WIN)
        Time series by ``window_s`` windows; the last row takes all later times.

    Returns
    -------
    float
        Time the last request ended.
    """
    n = reqi.shape[0]
    continuous = e.policy == POLICY_CONTINUOUS
    st = np.zeros(N_STATE, dtype=np.int64)
    st[FREE] = e.num_blocks - e.prefix_blocks
    st[NEXT_ASSIGN] = e.n_clients if e.n_clients < n else n
    wq = np.empty(max(n, 1), dtype=np.int64)
    cap = max(e.max_num_seqs, 1)
    run = np.empty(cap, dtype=np.int64)
    sched = np.empty((2, cap), dtype=np.int64)
    scratch = np.empty(e.block_size, dtype=np.int64)
    static_blocks = (e.max_model_len + e.block_size - 1) // e.block_size
    pool = e.num_blocks - e.prefix_blocks
    stats[STAT_MIN_FREE_BLOCKS] = st[FREE]
    now = 0.0
    nxt = 0  # next request to arrive (requests arrive in index order)
    next_deadline = np.inf
    while st[DONE] < n:
        while nxt < n and reqf[nxt, RF_ARRIVAL] <= now:
            r = nxt
            nxt += 1
            t_arr = reqf[r, RF_ARRIVAL]
            windows[window_of_nb(e, t_arr, windows), WIN_ARRIVALS] += 1.0
            tokens = reqi[r, RI_INPUT] + reqi[r, RI_OUTPUT]
            if tokens > e.max_model_len or (
                continuous and blocks_for_nb(tokens - 1, reqi[r, RI_CACHED], e.block_size) > pool
            ):
                # Longer than the model takes, or than the whole KV pool holds: it could never finish.
                _finish_nb(e, reqi, reqf, st, windows, r, t_arr, STATUS_REJECTED)
                continue
            enqueue_nb(reqi, wq, st, r)
            if e.timeout_s > 0.0:
                next_deadline = min(next_deadline, t_arr + e.timeout_s)
        if now >= next_deadline:
            next_deadline = _time_out_nb(e, now, reqi, reqf, st, run, windows)
            continue
        if st[N_RUN] == 0 and peek_nb(reqi, wq, st) < 0:
            if nxt < n and reqf[nxt, RF_ARRIVAL] < np.inf:
                now = max(now, reqf[nxt, RF_ARRIVAL])
                continue
            break  # nothing can arrive any more

        pad_to = 0
        if continuous:
            if e.fast_forward:
                next_arrival = reqf[nxt, RF_ARRIVAL] if nxt < n else np.inf
                k, now = decode_run_nb(p, e, now, next_arrival, next_deadline, reqi, reqf, wq, st, run, scratch,
                                       stats, itl_hist, batch_hist, windows)
                if k > 0:
                    continue
            n_sched, preempted = schedule_continuous_nb(e, now, reqi, reqf, wq, st, run, sched)
            if n_sched == 0:
                if not preempted and st[N_RUN] == 0:
                    # The head cannot get blocks with the engine empty: it can never run.
                    r = peek_nb(reqi, wq, st)
                    st[Q_HEAD] = (st[Q_HEAD] + 1) % wq.shape[0]
                    st[Q_COUNT] -= 1
                    st[Q_ALIVE] -= 1
                    _finish_nb(e, reqi, reqf, st, windows, r, now, STATUS_REJECTED)
                continue
            used = e.num_blocks - st[FREE]
        else:
            if st[N_RUN] == 0:
                if e.policy == POLICY_DYNAMIC and st[Q_ALIVE] < e.batch_max:
                    start = reqf[peek_nb(reqi, wq, st), RF_ARRIVAL] + e.batch_window_s
                    if now < start:
                        later = reqf[nxt, RF_ARRIVAL] if nxt < n else np.inf
                        now = min(start, later)
                        continue
                n_sched = form_static_batch_nb(e, now, reqi, reqf, wq, st, run, sched)
                if e.pad_prompts:
                    for j in range(n_sched):
                        pad_to = max(pad_to, sched[1, j])
            else:
                n_sched = st[N_RUN]
                for j in range(n_sched):
                    sched[0, j] = run[j]
                    sched[1, j] = 1
            used = st[N_RUN] * static_blocks

        # The iteration's cost from its batch aggregates.
        n_tokens = 0.0
        pairs = 0.0
        kv_read = 0.0
        n_emit = 0.0
        for j in range(n_sched):
            r = sched[0, j]
            q = float(pad_to if pad_to > 0 else sched[1, j])
            c = float(reqi[r, RI_COMPUTED])
            n_tokens += q
            pairs += q * c + q * (q + 1.0) * 0.5
            kv_read += c + q
            if not continuous or reqi[r, RI_COMPUTED] + sched[1, j] == reqi[r, RI_INPUT] + reqi[r, RI_GENERATED]:
                n_emit += 1.0
        dt, flops, nbytes = iteration_totals_nb(p, n_tokens, pairs, kv_read, n_emit)
        t_end = now + dt
        account_iteration_nb(e, dt, flops, nbytes, t_end, n_sched, used, stats, batch_hist, windows)
        if st[FREE] < stats[STAT_MIN_FREE_BLOCKS]:
            stats[STAT_MIN_FREE_BLOCKS] = st[FREE]
        _advance_nb(e, t_end, reqi, reqf, st, run, sched, n_sched, stats, itl_hist, windows, not continuous)
        now = t_end
    stats[STAT_PREEMPTIONS] = st[PREEMPTED]
    end = 0.0
    for r in range(n):
        if reqf[r, RF_FINISH] > end:
            end = reqf[r, RF_FINISH]
    stats[STAT_END_S] = end
    return end
