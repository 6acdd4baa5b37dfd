"""The scheduler: waiting queue, running set, paged KV-cache blocks, preemption by recompute,
and vLLM's per-iteration choice of who runs — chunked prefill (v1) or prefill-first (v0).

Per-request state is the two arrays ``reqi``/``reqf`` (columns ``RI_*``/``RF_*`` in codes.py).
A replica's own integers live in one int64 workspace ``ws`` (layout in ``EngineParams``, computed
by simcore.layout): the state slots below, the decode cohort's block-phase counts, the running
list in admission order (``off_run``), four schedule rows of ``sched_cap`` entries (``off_sched``:
request, new tokens, cohort joiners, prefilling requests) and the waiting queue, a ring buffer
(``off_wq``) whose front takes preempted requests. One array instead of five keeps kernel calls
cheap: each array argument costs two atomic reference-count updates per call.
"""
from simcore._jit import jit, jit_inline
from simcore.codes import (
    RF_ARRIVAL,
    RF_FINISH,
    RF_FIRST_SCHED,
    RI_BLOCKS,
    RI_CACHED,
    RI_COMPUTED,
    RI_GENERATED,
    RI_INPUT,
    RI_PREEMPTIONS,
    RI_STATUS,
    STATUS_DONE,
    STATUS_RUNNING,
    STATUS_WAITING,
    WIN_COMPLETED,
)
from simcore.metrics import win_add_nb, window_of_nb

# Slots of the scalar state vector ``st``.
Q_HEAD = 0  # ring-buffer head of the waiting queue
Q_COUNT = 1  # entries in the ring (timed-out ones are dropped lazily)
Q_ALIVE = 2  # entries still waiting
FREE = 3  # free KV blocks
N_RUN = 4  # running requests
DONE = 5  # requests finished, rejected or timed out
NEXT_ASSIGN = 6  # closed loop: next request to hand to a free client
PREEMPTED = 7  # preemptions so far
LAST_DONE = 8  # requests that ended with the replica's last iteration
C_N = 9  # decode cohort (cohort.py): members
C_D = 10  # cohort advances so far
C_S = 11  # sum of the members' computed tokens
C_MIN_DONE = 12  # advance count at which the first member completes
C_JOIN_N = 13  # members that joined since the last advance
P_N = 14  # running requests outside the cohort (prefilling), listed in schedule row 3
N_STATE = 15


@jit_inline
def push_back_nb(e, ws, r):
    cap = e.wq_cap
    ws[e.off_wq + ((ws[Q_HEAD] + ws[Q_COUNT]) % cap)] = r
    ws[Q_COUNT] += 1
    ws[Q_ALIVE] += 1


@jit_inline
def peek_nb(reqi, e, ws):
    """First request still waiting (dropping timed-out entries), or -1."""
    cap = e.wq_cap
    while ws[Q_COUNT] > 0:
        r = ws[e.off_wq + (ws[Q_HEAD])]
        if reqi[r, RI_STATUS] == STATUS_WAITING:
            return r
        ws[Q_HEAD] = (ws[Q_HEAD] + 1) % cap
        ws[Q_COUNT] -= 1
    return -1


@jit_inline
def blocks_for_nb(tokens, cached, block_size):
    """Blocks a request owns to hold ``tokens`` tokens, its ``cached`` prefix being shared."""
    return (tokens + block_size - 1) // block_size - cached // block_size


@jit_inline
def enqueue_nb(reqi, e, ws, r):
    """A request arrives: it waits with its cached prefix already computed."""
    reqi[r, RI_STATUS] = STATUS_WAITING
    reqi[r, RI_COMPUTED] = reqi[r, RI_CACHED]
    push_back_nb(e, ws, r)


@jit_inline
def client_next_nb(e, reqf, ws, t):
    """Closed loop: the client whose request ended at ``t`` sends the next request, once that
    request is ready (its open-loop time under a rate limit, else at once); the engine sees it
    ``e.frontend_s`` later."""
    if e.n_clients > 0 and ws[NEXT_ASSIGN] < reqf.shape[0]:
        i = ws[NEXT_ASSIGN]
        ready = reqf[i, RF_FINISH]  # holds the ready time until the request ends
        reqf[i, RF_ARRIVAL] = (t if t > ready else ready) + e.frontend_s
        ws[NEXT_ASSIGN] += 1


@jit_inline
def finish_nb(e, reqi, reqf, glob, acc, r, t, code):
    """Request ``r`` ends at ``t`` (done, rejected or timed out); its client may send the next.
    ``glob`` holds the counters all replicas share (``DONE``, ``NEXT_ASSIGN``)."""
    reqi[r, RI_STATUS] = code
    reqf[r, RF_FINISH] = t
    glob[DONE] += 1
    if code == STATUS_DONE:
        win_add_nb(e, acc, window_of_nb(e, t), WIN_COMPLETED, 1.0)
    client_next_nb(e, reqf, glob, t)


@jit_inline
def _preempt_last_nb(reqi, e, ws):
    """Preempt (recompute) the most recently admitted running request; it goes back to the
    front of the waiting queue with its blocks freed. Returns it."""
    ws[N_RUN] -= 1
    v = ws[e.off_run + (ws[N_RUN])]
    ws[FREE] += reqi[v, RI_BLOCKS]
    reqi[v, RI_BLOCKS] = 0
    reqi[v, RI_PREEMPTIONS] += 1
    reqi[v, RI_STATUS] = STATUS_WAITING
    reqi[v, RI_COMPUTED] = reqi[v, RI_CACHED]
    cap = e.wq_cap
    ws[Q_HEAD] = (ws[Q_HEAD] - 1 + cap) % cap
    ws[e.off_wq + (ws[Q_HEAD])] = v
    ws[Q_COUNT] += 1
    ws[Q_ALIVE] += 1
    ws[PREEMPTED] += 1
    return v


@jit_inline
def admit_nb(reqi, reqf, e, ws, r, now):
    cap = e.wq_cap
    ws[Q_HEAD] = (ws[Q_HEAD] + 1) % cap
    ws[Q_COUNT] -= 1
    ws[Q_ALIVE] -= 1
    reqi[r, RI_STATUS] = STATUS_RUNNING
    ws[e.off_run + (ws[N_RUN])] = r
    ws[N_RUN] += 1
    if reqf[r, RF_FIRST_SCHED] < 0.0:
        reqf[r, RF_FIRST_SCHED] = now


@jit_inline
def admit_waiting_nb(e, now, reqi, reqf, ws, n, budget, whole):
    """Admit waiting requests FCFS while sequences, token budget and free blocks allow, writing
    each to schedule row ``n``, ``n + 1``, ...: its next chunk within the budget, or with
    ``whole`` (v0, no chunked prefill) its whole prompt or nothing. Returns (n, budget left)."""
    bs = e.block_size
    while ws[N_RUN] < e.max_num_seqs and budget > 0:
        r = peek_nb(reqi, e, ws)
        if r < 0:
            break
        c = reqi[r, RI_COMPUTED]
        need = reqi[r, RI_INPUT] + reqi[r, RI_GENERATED] - c
        if whole and need > budget:
            break
        new = need if need < budget else budget
        extra = blocks_for_nb(c + new, reqi[r, RI_CACHED], bs) - reqi[r, RI_BLOCKS]
        if extra > ws[FREE]:
            break
        admit_nb(reqi, reqf, e, ws, r, now)
        ws[FREE] -= extra
        reqi[r, RI_BLOCKS] += extra
        ws[e.off_sched + n] = r
        ws[e.off_sched + e.sched_cap + n] = new
        n += 1
        budget -= new
    return n, budget


@jit_inline
def _allocate_running_nb(e, reqi, ws, r, new):
    """Blocks for running request ``r`` to compute ``new`` more tokens, preempting the most
    recently admitted requests while they are short. Returns (``r`` got them, anything was
    preempted); ``r`` itself may be the last one preempted."""
    extra = blocks_for_nb(reqi[r, RI_COMPUTED] + new, reqi[r, RI_CACHED], e.block_size) - reqi[r, RI_BLOCKS]
    victim = -1
    preempted = False
    while extra > ws[FREE] and victim != r:
        victim = _preempt_last_nb(reqi, e, ws)
        preempted = True
    if victim == r:
        return False, preempted
    ws[FREE] -= extra
    reqi[r, RI_BLOCKS] += extra
    return True, preempted


@jit_inline
def schedule_aggregates_nb(e, reqi, ws, n_sched, pad_to):
    """The cost kernels' batch aggregates of schedule rows 0..n_sched-1 (``pad_to`` > 0 pads every
    row to that many new tokens): (tokens, attention pairs, KV tokens read, rows whose tokens so
    far are then all computed). Same reduction as cost.batch_aggregates_nb, over the workspace."""
    n_tokens = 0.0
    pairs = 0.0
    kv_read = 0.0
    caught_up = 0.0
    for j in range(n_sched):
        r = ws[e.off_sched + j]
        new = ws[e.off_sched + e.sched_cap + j]
        q = float(pad_to if pad_to > 0 else new)
        c = float(reqi[r, RI_COMPUTED])
        n_tokens += q
        pairs += q * c + q * (q + 1.0) * 0.5
        kv_read += c + q
        if reqi[r, RI_COMPUTED] + new == reqi[r, RI_INPUT] + reqi[r, RI_GENERATED]:
            caught_up += 1.0
    return n_tokens, pairs, kv_read, caught_up


@jit
def schedule_continuous_nb(e, now, reqi, reqf, ws):
    """Choose this iteration's requests and their new tokens (continuous batching).

    Writes request ids to ``sched[0]`` and new tokens to ``sched[1]``.

    Returns
    -------
    n_scheduled : int
    preempted : bool
        Whether a running request was preempted for lack of blocks.
    """
    n = 0
    preempted = False
    budget = e.max_num_batched_tokens
    if e.chunked_prefill:
        # Running requests first, in admission order: a decode token or the next chunk.
        i = 0
        while i < ws[N_RUN] and budget > 0:
            r = ws[e.off_run + i]
            need = reqi[r, RI_INPUT] + reqi[r, RI_GENERATED] - reqi[r, RI_COMPUTED]
            new = need if need < budget else budget
            ok, pre = _allocate_running_nb(e, reqi, ws, r, new)
            preempted = preempted or pre
            if not ok:
                break
            ws[e.off_sched + n] = r
            ws[e.off_sched + e.sched_cap + n] = new
            n += 1
            budget -= new
            i += 1
        if preempted:
            return n, preempted
        # Then waiting requests, FCFS, while sequences, budget and blocks allow.
        n, budget = admit_waiting_nb(e, now, reqi, reqf, ws, n, budget, False)
        return n, preempted
    # v0: admit whole prompts first; an iteration with prefills runs only those.
    n, budget = admit_waiting_nb(e, now, reqi, reqf, ws, n, budget, True)
    if n > 0:
        return n, preempted
    # Otherwise decode every running request, preempting from the back when blocks run out.
    i = 0
    while i < ws[N_RUN]:
        r = ws[e.off_run + i]
        ok, pre = _allocate_running_nb(e, reqi, ws, r, 1)
        preempted = preempted or pre
        if not ok:
            break
        ws[e.off_sched + n] = r
        ws[e.off_sched + e.sched_cap + n] = 1
        n += 1
        i += 1
    return n, preempted


@jit
def form_static_batch_nb(e, now, reqi, reqf, ws):
    """Static / dynamic batching: admit up to the batch limit from the waiting queue and schedule
    their prompts. Returns the number admitted."""
    cap = min(e.max_num_seqs, e.static_slots)
    if e.batch_max > 0:
        cap = min(cap, e.batch_max)
    n = 0
    while n < cap:
        r = peek_nb(reqi, e, ws)
        if r < 0:
            break
        admit_nb(reqi, reqf, e, ws, r, now)
        ws[e.off_sched + n] = r
        ws[e.off_sched + e.sched_cap + n] = reqi[r, RI_INPUT] - reqi[r, RI_COMPUTED]
        n += 1
    return n
