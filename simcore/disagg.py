"""Disaggregated prefill/decode: a prefill pool and a decode pool of engine replicas in one event
loop, the requests' KV caches moving between them over links.

A request arrives at the prefill pool (routed as ``engine.route_nb`` routes), which runs it as an
engine replica runs a one-token request (``EngineSettings.handoff``: emitting that token hands it
over instead of ending it, ``scheduler.finish_nb``). Its prompt's KV cache (``XF_BYTES``) then moves
over its prefill instance's link: ``Transfer.latency_s`` after the token, its bytes start to
flow, every transfer on the link getting an equal share of ``Transfer.bandwidth`` (processor
sharing: two equal transfers started together take twice as long as one). When the last byte
arrives the request joins a decode replica's waiting queue with its prompt computed; admission
then waits for KV blocks for the prompt and its next token as for any request. With
``Transfer.first_token_on_decode`` (vLLM's NIXL connector) the decode pool recomputes the prompt's
last token and samples the first output token itself; otherwise (SGLang, TensorRT-LLM) the
prefill's token arrives with the cache and the decode instance streams it when it admits the
request (``codes.FIRST_TOKEN_ON_ADMISSION``): the first token's time is the start of the decode
step that admits it, the transfer's end when a decode slot and blocks are free, later when the
request waits for them (every framework streams a request's tokens from its decode instance:
SGLang's decode server, TensorRT-LLM's generation server, Dynamo's decode worker).

The prefill pool releases a request's blocks when it hands it over (the real servers keep them
until the decode side has read them); the decode pool allocates its blocks when the cache has
arrived (vLLM's NIXL connector allocates them first and pulls into them).
"""
import numpy as np

from simcore._jit import jit, jit_alloc, jit_inline
from simcore.codes import (
    CLOCK_DEADLINE,
    CLOCK_NOW,
    FIRST_TOKEN_ON_ADMISSION,
    GLOBAL_ENDED,
    GLOBAL_HANDOFFS,
    GLOBAL_NEXT_ARRIVAL,
    GLOBAL_NEXT_SEND,
    N_GLOBALS,
    N_PLAN,
    RF_ARRIVAL,
    RF_FIRST_TOKEN,
    RF_LAST_EMIT,
    RI_CACHED,
    RI_COMPUTED,
    RI_DONE,
    RI_FIXED_BLOCKS,
    RI_GENERATED,
    RI_INPUT,
    RI_OUTPUT,
    RI_REPLICA,
    STATUS_REJECTED,
    WIN_ARRIVALS,
    WIN_OUTPUT_TOKENS,
    XF_BYTES,
    XF_DONE,
    XF_LEFT,
    XF_OUTPUT,
    XF_PREFILL_DONE,
    XF_START,
)
from simcore.engine import (
    close_replicas_nb,
    earliest_nb,
    init_replicas_nb,
    last_finish_nb,
    lockstep_step_nb,
    route_nb,
    step_bound_nb,
    step_nb,
    wake_nb,
)
from simcore.metrics import win_add_nb, window_of_nb
from simcore.scheduler import end_status_nb, enqueue_nb, finish_nb, never_fits_nb


@jit_inline
def _heap_push_nb(ht, hr, size, t, r):
    """Push (``t``, ``r``) on the min-heap of the first ``size`` entries; returns the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if ht[parent] <= t:
            break
        ht[i] = ht[parent]
        hr[i] = hr[parent]
        i = parent
    ht[i] = t
    hr[i] = r
    return size + 1


@jit_inline
def _heap_pop_nb(ht, hr, size):
    """Remove the heap's top (read it from ``ht[0]``, ``hr[0]`` first); returns the new size."""
    size -= 1
    t = ht[size]
    r = hr[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and ht[c + 1] < ht[c]:
            c += 1
        if ht[c] >= t:
            break
        ht[i] = ht[c]
        hr[i] = hr[c]
        i = c
    if size > 0:
        ht[i] = t
        hr[i] = r
    return size


@jit_inline
def _link_advance_nb(x, xfer, members, count, last, k, t):
    """Link ``k``'s transfers each move their share of the bandwidth from ``last[k]`` to ``t``."""
    m = count[k]
    if m > 0 and t > last[k]:
        share = (t - last[k]) * x.bandwidth / m
        for j in range(m):
            xfer[members[k, j], XF_LEFT] -= share
    last[k] = t


@jit_inline
def _link_least_nb(xfer, members, count, k):
    """The fewest bytes any transfer on link ``k`` has left (inf: none on it)."""
    least = np.inf
    for j in range(count[k]):
        least = min(least, xfer[members[k, j], XF_LEFT])
    return least


@jit_inline
def _link_next_nb(x, xfer, members, count, last, k):
    """When link ``k``'s next transfer ends at the current share (inf: none on it)."""
    m = count[k]
    if m == 0:
        return np.inf
    return last[k] + max(_link_least_nb(xfer, members, count, k), 0.0) * m / x.bandwidth


@jit
def _step_pool_nb(p, sp, e, lay, now, bound, reqi, reqf, ws, glob, acc, plan, k, group):
    """Run the iteration of pool replica ``k`` starting at ``now``: its instance's lockstep step
    (ranks ``group`` at a time) or its own."""
    clk = lay.off_clock
    if e.lockstep and group > 1:
        g0 = (k // group) * group
        t = lockstep_step_nb(p, sp, e, lay, now, reqi, reqf, ws[g0:g0 + group], glob, acc[g0:g0 + group], plan)
        for j in range(g0, g0 + group):
            if acc[j, clk + CLOCK_NOW] < t:
                acc[j, clk + CLOCK_NOW] = t
    else:
        # None: no pipeline stages in a disaggregated pool (simllm.sim.disagg refuses them)
        acc[k, clk + CLOCK_NOW] = step_nb(p, sp, e, lay, now, bound, reqi, reqf, ws[k], glob, acc[k], None, True)


@jit
def _join_pool_nb(e, lay, t, reqi, reqf, ws, acc, r, routed, group):
    """Request ``r`` joins a replica of a pool at ``t`` (routed, woken, queued); returns it."""
    k = route_nb(e, lay, t, ws, acc, routed)
    reqi[r, RI_REPLICA] = k
    t_ranks = -np.inf
    if e.lockstep and group > 1:
        g0 = (k // group) * group
        busy, t_busy = earliest_nb(lay, ws[g0:g0 + group], acc[g0:g0 + group])
        if busy >= 0:
            t_ranks = t_busy
    wake_nb(lay, t, ws, acc, k, t_ranks)
    enqueue_nb(lay, reqi, ws[k], r)
    if e.timeout_s > 0.0:
        clk = lay.off_clock
        acc[k, clk + CLOCK_DEADLINE] = min(acc[k, clk + CLOCK_DEADLINE], reqf[r, RF_ARRIVAL] + e.timeout_s)
    return k


@jit_alloc
def simulate_disagg_nb(pp, sp_p, ep, pd, sp_d, ed, x, lay, reqi, reqf, xfer, glob, acc_p, acc_d):
    """Simulate a prefill pool and a decode pool serving the requests of ``reqi``/``reqf``.

    Parameters
    ----------
    pp, pd : CostParams
        One GPU of the prefill pool, of the decode pool.
    sp_p, sp_d : Speculation
        Each pool's speculative decoding (None without it): the decode pool
        verifies drafts, the prefill pool's drafter runs over the prompts.
    ep, ed : EngineSettings
        Each pool's replicas (``n_replicas``: the ranks of one instance; ``ep.handoff`` set).
        Client settings (``n_clients``, ``timeout_s``, ``frontend_s``, ``warmup``, ``window_s``,
        the ITL histogram) must be equal.
    x : Transfer
    lay : Layout
        Sized for the larger pool's ``max_num_seqs``.
    reqi, reqf : ndarray
        As ``engine.simulate``'s; ``RI_OUTPUT`` is set to 1 while a request prefills.
    xfer : ndarray of float64, shape (n, N_XF)
        In: ``XF_OUTPUT``, ``XF_BYTES``. Out: ``XF_PREFILL_DONE``, ``XF_START``, ``XF_DONE`` (-1
        for the requests that never got there).
    glob : ndarray of int64, shape (N_GLOBALS + n,), zeroed
        The shared counters, then room to list the requests a prefill step hands over.
    acc_p, acc_d : ndarray of float64, shape (instances x ranks, lay.acc_len), zeroed
        Each pool's replicas' accumulators (``engine.simulate``'s ``acc``).

    Returns
    -------
    float
        Time the last request ended.
    """
    n = reqi.shape[0]
    gp = ep.n_replicas
    gd = ed.n_replicas
    Rp = acc_p.shape[0]
    Rd = acc_d.shape[0]
    ws_p = np.zeros((Rp, lay.ws_len), dtype=np.int64)
    ws_d = np.zeros((Rd, lay.ws_len), dtype=np.int64)
    init_replicas_nb(ep, lay, ws_p, acc_p)
    init_replicas_nb(ed, lay, ws_d, acc_d)
    plan = np.zeros((max(gp, gd), N_PLAN))
    n_links = Rp // gp
    members = np.zeros((n_links, max(n, 1)), dtype=np.int64)
    count = np.zeros(n_links, dtype=np.int64)
    last = np.zeros(n_links)
    link_next = np.full(n_links, np.inf)
    ht = np.empty(max(n, 1))
    hr = np.empty(max(n, 1), dtype=np.int64)
    n_heap = 0
    for r in range(n):
        reqi[r, RI_DONE] = -1
        xfer[r, XF_PREFILL_DONE] = -1.0
        xfer[r, XF_START] = -1.0
        xfer[r, XF_DONE] = -1.0
    glob[GLOBAL_NEXT_SEND] = ep.n_clients if ep.n_clients < n else n
    glob[GLOBAL_NEXT_ARRIVAL] = 0
    glob[GLOBAL_HANDOFFS] = 0
    # int64, not the literal 0: numba's first typing pass would compile _join_pool_nb (and, through
    # earliest_nb's -1, _step_pool_nb) once more for a Literal[int] argument, minutes of compile
    routed_p = np.int64(0)
    routed_d = np.int64(0)
    while glob[GLOBAL_ENDED] < n:
        nxt = glob[GLOBAL_NEXT_ARRIVAL]
        a = reqf[nxt, RF_ARRIVAL] if nxt < n else np.inf
        kp, tp = earliest_nb(lay, ws_p, acc_p)
        kd, td = earliest_nb(lay, ws_d, acc_d)
        t_heap = ht[0] if n_heap > 0 else np.inf
        lk = -1
        t_link = np.inf
        for k in range(n_links):
            if link_next[k] < t_link:
                lk = k
                t_link = link_next[k]
        t_event = min(t_heap, t_link)
        t_step = min(tp, td)
        if a <= t_step and a <= t_event:
            if a == np.inf:
                break  # nothing left that can arrive
            r = nxt
            glob[GLOBAL_NEXT_ARRIVAL] = nxt + 1
            win_add_nb(lay, acc_p[0], window_of_nb(ep, lay, a), WIN_ARRIVALS, 1.0)
            inp = reqi[r, RI_INPUT]
            out = reqi[r, RI_OUTPUT]
            cached = reqi[r, RI_CACHED]
            fixed = reqi[r, RI_FIXED_BLOCKS]
            # The prefill pool sees the prompt and one token (vLLM's proxy: max_tokens 1), the
            # decode pool the whole request.
            if never_fits_nb(ep, inp + 1, cached, fixed) or never_fits_nb(ed, inp + out, cached, fixed):
                finish_nb(ed, lay, a, reqi, reqf, glob, acc_d[0], r, STATUS_REJECTED)
                continue
            xfer[r, XF_OUTPUT] = out
            reqi[r, RI_OUTPUT] = 1
            _join_pool_nb(ep, lay, a, reqi, reqf, ws_p, acc_p, r, routed_p, gp)
            routed_p += 1
            continue
        if t_event <= t_step:
            if t_heap <= t_link:  # a transfer's first byte: it joins its link
                r = hr[0]
                n_heap = _heap_pop_nb(ht, hr, n_heap)
                k = reqi[r, RI_REPLICA] // gp
                _link_advance_nb(x, xfer, members, count, last, k, t_heap)
                members[k, count[k]] = r
                count[k] += 1
                xfer[r, XF_LEFT] = xfer[r, XF_BYTES]
                xfer[r, XF_START] = t_heap
                link_next[k] = _link_next_nb(x, xfer, members, count, last, k)
                continue
            # Transfers end on link lk: the least left, and any within a picosecond of it.
            _link_advance_nb(x, xfer, members, count, last, lk, t_link)
            tol = _link_least_nb(xfer, members, count, lk) + x.bandwidth * 1e-12
            m = 0
            for j in range(count[lk]):
                r = members[lk, j]
                if xfer[r, XF_LEFT] > tol:
                    members[lk, m] = r
                    m += 1
                    continue
                xfer[r, XF_LEFT] = 0.0
                xfer[r, XF_DONE] = t_link
                reqi[r, RI_OUTPUT] = np.int32(xfer[r, XF_OUTPUT])
                if x.first_token_on_decode:
                    reqf[r, RF_FIRST_TOKEN] = -1.0
                    reqi[r, RI_GENERATED] = 0
                    computed = max(reqi[r, RI_INPUT] - 1, reqi[r, RI_CACHED])
                else:
                    if reqi[r, RI_OUTPUT] == 1:  # nothing left to decode: streamed as it arrives
                        reqf[r, RF_FIRST_TOKEN] = t_link
                        reqf[r, RF_LAST_EMIT] = t_link
                        finish_nb(ed, lay, t_link, reqi, reqf, glob, acc_d[0], r,
                                  end_status_nb(ed, t_link, reqf[r, RF_ARRIVAL]))
                        continue
                    reqf[r, RF_FIRST_TOKEN] = FIRST_TOKEN_ON_ADMISSION
                    computed = reqi[r, RI_INPUT]
                _join_pool_nb(ed, lay, t_link, reqi, reqf, ws_d, acc_d, r, routed_d, gd)
                routed_d += 1
                reqi[r, RI_COMPUTED] = computed  # its prompt's cache is here; blocks come at admission
            count[lk] = m
            link_next[lk] = _link_next_nb(x, xfer, members, count, last, lk)
            continue
        if tp <= td:
            _step_pool_nb(pp, sp_p, ep, lay, tp, a, reqi, reqf, ws_p, glob, acc_p, plan, np.int64(kp), gp)
            for i in range(glob[GLOBAL_HANDOFFS]):
                r = glob[N_GLOBALS + i]
                t_tok = reqf[r, RF_FIRST_TOKEN]
                xfer[r, XF_PREFILL_DONE] = t_tok
                if x.first_token_on_decode:  # the prefill's token is not the client's
                    k = reqi[r, RI_REPLICA]
                    win_add_nb(lay, acc_p[k], window_of_nb(ep, lay, t_tok), WIN_OUTPUT_TOKENS, -1.0)
                n_heap = _heap_push_nb(ht, hr, n_heap, t_tok + x.latency_s, r)
            glob[GLOBAL_HANDOFFS] = 0
        else:
            # The decode pool's runs stop before anything can join it: a transfer event, or a
            # prefill step (its handoffs join after its end) that has begun or an arrival wakes,
            # or (a closed loop) another decode replica's step, whose ends send the next requests.
            bound = step_bound_nb(ed, lay, ws_d, acc_d, kd, min(t_event, tp, a))
            _step_pool_nb(pd, sp_d, ed, lay, td, bound, reqi, reqf, ws_d, glob, acc_d, plan, np.int64(kd), gd)
    end = last_finish_nb(reqf)
    close_replicas_nb(lay, ws_p, acc_p, end)
    close_replicas_nb(lay, ws_d, acc_d, end)
    return end
