"""The scheduler: waiting queue, running set, paged KV-cache blocks, preemption by recompute,
and vLLM's per-iteration choice of who runs — chunked prefill (v1) or prefill-first (v0).

Per-request state is the two arrays ``reqi``/``reqf`` (columns ``RI_*``/``RF_*`` in codes.py).
A replica's own integers live in one int64 workspace ``ws`` (slots in codes.py, offsets in
:class:`simcore.layout.Layout`): the workspace slots, the decode cohort's block-phase counts, the
running list in admission order, the schedule rows (``SCHED_*``) and the waiting queue, a ring
buffer whose front takes preempted requests. One array instead of five keeps kernel signatures
short (kernels run without reference counting: see ``_jit.py``).

Two rules are written once here and called by both the explicit path (this module and
engine.py) and the fast path (the cohort and decode runs): whether the waiting head can be
admitted now (:func:`admission_nb`), and how a request that emitted its last token ends
(:func:`retire_nb`: its blocks freed, done or timed out when its client gave up first).
"""
from simcore._jit import jit, jit_inline
from simcore.codes import (
    FIRST_TOKEN_ON_ADMISSION,
    FREE_BLOCKS,
    GLOBAL_ENDED,
    GLOBAL_HANDOFFS,
    GLOBAL_NEXT_ARRIVAL,
    GLOBAL_NEXT_SEND,
    GLOBAL_ROUTED,
    N_GLOBALS,
    POLICY_CONTINUOUS,
    PREEMPTED_COUNT,
    QUEUE_ENTRIES,
    QUEUE_HEAD,
    QUEUE_WAITING,
    RF_ARRIVAL,
    RF_CLIENT_DELAY,
    RF_FINISH,
    RF_FIRST_SCHED,
    RF_FIRST_TOKEN,
    RF_LAST_EMIT,
    RI_BLOCKS,
    RI_CACHED,
    RI_COMPUTED,
    RI_FIXED_BLOCKS,
    RI_GENERATED,
    RI_INPUT,
    RI_OUTPUT,
    RI_PREEMPTIONS,
    RI_REPLICA,
    RI_STATUS,
    RUNNING_COUNT,
    RUNNING_HOLES,
    SCHED_NEW_BLOCKS,
    SCHED_NEW_TOKENS,
    SCHED_REQUEST,
    STATUS_DONE,
    STATUS_REJECTED,
    STATUS_RUNNING,
    STATUS_TIMED_OUT,
    STATUS_TRANSFER,
    STATUS_WAITING,
    WIN_ARRIVALS,
    WIN_COMPLETED,
)
from simcore.layout import (
    compact_running_nb,
    queue_entry_nb,
    ring_nb,
    running_end_nb,
    running_nb,
    sched_nb,
    set_queue_entry_nb,
    set_running_done_nb,
    set_running_nb,
    set_sched_nb,
)
from simcore.metrics import itl_group_nb, measured_nb, win_add_nb, window_of_nb


@jit_inline
def block_div_nb(e, x):
    """``x // e.block_size`` (floor, any sign): a shift where the block size is a power of two
    (``EngineSettings.block_shift``; an arithmetic shift floors as ``//`` does)."""
    if e.block_shift >= 0:
        return x >> e.block_shift
    return x // e.block_size


@jit_inline
def block_mod_nb(e, x):
    """``x % e.block_size`` (in ``[0, block_size)``, any sign): a mask where the block size is a
    power of two."""
    if e.block_shift >= 0:
        return x & (e.block_size - 1)
    return x % e.block_size


@jit_inline
def push_back_nb(lay, ws, r):
    set_queue_entry_nb(lay, ws, ring_nb(ws[QUEUE_HEAD] + ws[QUEUE_ENTRIES], lay.wq_cap), r)
    ws[QUEUE_ENTRIES] += 1
    ws[QUEUE_WAITING] += 1


@jit_inline
def peek_nb(lay, reqi, ws):
    """First request still waiting (dropping timed-out entries), or -1."""
    cap = lay.wq_cap
    while ws[QUEUE_ENTRIES] > 0:
        r = queue_entry_nb(lay, ws, ws[QUEUE_HEAD])
        if reqi[r, RI_STATUS] == STATUS_WAITING:
            return r
        ws[QUEUE_HEAD] = ring_nb(ws[QUEUE_HEAD] + 1, cap)
        ws[QUEUE_ENTRIES] -= 1
    return -1


@jit_inline
def pop_front_nb(lay, ws):
    """The waiting head leaves the queue (admitted or rejected)."""
    ws[QUEUE_HEAD] = ring_nb(ws[QUEUE_HEAD] + 1, lay.wq_cap)
    ws[QUEUE_ENTRIES] -= 1
    ws[QUEUE_WAITING] -= 1


@jit_inline
def blocks_for_nb(e, tokens, cached, fixed):
    """Blocks a request owns to hold ``tokens`` tokens, its ``cached`` prefix being shared, and its
    ``fixed`` blocks (``RI_FIXED_BLOCKS``: what its windowed layers and recurrent states hold,
    reserved at its first block, see ``simllm.sim.memory``), in blocks of ``e.block_size``."""
    return block_div_nb(e, tokens + e.block_size - 1) - block_div_nb(e, cached) + fixed


@jit_inline
def extra_blocks_nb(tokens, cached, fixed, blocks, block_size):
    """Blocks a request that owns ``blocks`` needs besides them to hold ``tokens`` tokens
    (:func:`blocks_for_nb` less ``blocks``; negative: it could give some back). Without a
    division when it needs none: ``blocks`` hold up to ``cap`` tokens, ``cached`` being whole
    blocks."""
    return blocks_past_nb(tokens, (blocks - fixed) * block_size + cached, block_size)


@jit_inline
def blocks_past_nb(tokens, cap, block_size):
    """:func:`extra_blocks_nb` of a request whose blocks hold up to ``cap`` tokens (a multiple of
    ``block_size``, ``cached`` being whole blocks): 0 without a division when ``tokens`` fill its
    last block, else the blocks past (or, negative, short of) ``cap``: 1 without one either when
    they spill into one more (a decode step's case; an int64 division takes tens of cycles)."""
    if tokens <= cap:
        if tokens > cap - block_size:
            return 0
    elif tokens <= cap + block_size:
        return 1
    return (tokens - cap + block_size - 1) // block_size


@jit_inline
def never_fits_nb(e, tokens, cached, fixed):
    """The arrival rule: a request that will hold ``tokens`` tokens (prompt + output) can never
    finish when it is longer than the model takes or, under continuous batching, than the whole
    KV pool holds (its last token's KV is never written)."""
    return tokens > e.max_model_len or (
        e.policy == POLICY_CONTINUOUS
        and blocks_for_nb(e, tokens - 1, cached, fixed) > e.num_blocks - e.prefix_blocks)


@jit_inline
def arrive_nb(e, lay, a, reqi, reqf, glob, acc, r):
    """The arrival rule, before routing: request ``r``, the next to arrive (at ``a``), counts in the
    time series' arrivals (``acc``: the first replica's) and ends rejected when it can never finish
    (:func:`never_fits_nb`). Returns whether it is routed to a replica (:func:`join_nb`)."""
    glob[GLOBAL_NEXT_ARRIVAL] = r + 1
    win_add_nb(lay, acc, window_of_nb(e, lay, a), WIN_ARRIVALS, 1.0)
    if never_fits_nb(e, reqi[r, RI_INPUT] + reqi[r, RI_OUTPUT], reqi[r, RI_CACHED], reqi[r, RI_FIXED_BLOCKS]):
        finish_nb(e, lay, a, reqi, reqf, glob, acc, r, STATUS_REJECTED)
        return False
    return True


@jit_inline
def join_nb(e, lay, a, reqi, ws, acc, glob, r, k, deadline_slot):
    """Request ``r``, arrived at ``a``, joins replica ``k`` (``ws``, ``acc``: its rows; the caller
    wakes it first if idle): it waits in its queue, and its client's deadline, if any, bounds the replica's clock
    (``acc[deadline_slot]``)."""
    glob[GLOBAL_ROUTED] += 1
    reqi[r, RI_REPLICA] = k
    enqueue_nb(lay, reqi, ws, r)
    if e.timeout_s > 0.0:
        acc[deadline_slot] = min(acc[deadline_slot], a + e.timeout_s)


@jit_inline
def enqueue_nb(lay, reqi, ws, r):
    """A request arrives: it waits with its cached prefix already computed."""
    reqi[r, RI_STATUS] = STATUS_WAITING
    reqi[r, RI_COMPUTED] = reqi[r, RI_CACHED]
    push_back_nb(lay, ws, r)


@jit_inline
def client_next_nb(e, t, reqf, glob):
    """Closed loop: the client whose request ended at ``t`` sends the next request, once that
    request is ready (its open-loop time under a rate limit, else at once) and the client's own
    delay (``RF_CLIENT_DELAY``, drawn by the caller; none when <= 0) has passed; the engine sees it
    ``e.frontend_s`` later.

    Requests reach the engine in index order, so a send that overtakes requests sent before it
    but not yet arrived (a longer delay, or another replica's earlier end) takes the first of
    their arrival slots and shifts theirs back: row k holds the k-th arrival. The requests of a
    closed loop are drawn alike, so which row gets which slot changes no statistic."""
    if e.n_clients > 0 and glob[GLOBAL_NEXT_SEND] < reqf.shape[0]:
        i = glob[GLOBAL_NEXT_SEND]
        ready = reqf[i, RF_FINISH]  # holds the ready time until the request ends
        s = t if t > ready else ready
        delay = reqf[i, RF_CLIENT_DELAY]
        if delay > 0.0:
            s += delay
        reqf[i, RF_CLIENT_DELAY] = -1.0  # the column's own meaning from now on
        s += e.frontend_s
        j = i
        while j > glob[GLOBAL_NEXT_ARRIVAL] and reqf[j - 1, RF_ARRIVAL] > s:
            reqf[j, RF_ARRIVAL] = reqf[j - 1, RF_ARRIVAL]
            j -= 1
        reqf[j, RF_ARRIVAL] = s
        glob[GLOBAL_NEXT_SEND] += 1


@jit_inline
def finish_nb(e, lay, t, reqi, reqf, glob, acc, r, code):
    """Request ``r`` ends at ``t`` (done, rejected or timed out); its client may send the next.
    ``glob`` holds the counters all replicas share (``GLOBAL_*``). A disaggregated prefill pool
    (``e.handoff``) hands a done request over instead: it is listed for the decode pool."""
    if e.handoff and code == STATUS_DONE:
        reqi[r, RI_STATUS] = STATUS_TRANSFER
        glob[N_GLOBALS + glob[GLOBAL_HANDOFFS]] = r
        glob[GLOBAL_HANDOFFS] += 1
        return
    reqi[r, RI_STATUS] = code
    reqf[r, RF_FINISH] = t
    glob[GLOBAL_ENDED] += 1
    if code == STATUS_DONE:
        win_add_nb(lay, acc, window_of_nb(e, lay, t), WIN_COMPLETED, 1.0)
    client_next_nb(e, t, reqf, glob)


@jit_inline
def _preempt_last_nb(lay, reqi, ws):
    """Preempt (recompute) the most recently admitted running request; it goes back to the
    front of the waiting queue with its blocks freed. Returns it."""
    ws[RUNNING_COUNT] -= 1
    v = running_nb(lay, ws, ws[RUNNING_COUNT])
    ws[FREE_BLOCKS] += reqi[v, RI_BLOCKS]
    reqi[v, RI_BLOCKS] = 0
    reqi[v, RI_PREEMPTIONS] += 1
    reqi[v, RI_STATUS] = STATUS_WAITING
    reqi[v, RI_COMPUTED] = reqi[v, RI_CACHED]
    cap = lay.wq_cap
    ws[QUEUE_HEAD] = ring_nb(ws[QUEUE_HEAD] - 1 + cap, cap)
    set_queue_entry_nb(lay, ws, ws[QUEUE_HEAD], v)
    ws[QUEUE_ENTRIES] += 1
    ws[QUEUE_WAITING] += 1
    ws[PREEMPTED_COUNT] += 1
    return v


@jit_inline
def admit_nb(lay, now, reqi, reqf, ws, r):
    pop_front_nb(lay, ws)
    reqi[r, RI_STATUS] = STATUS_RUNNING
    if running_end_nb(ws) == lay.run_cap:  # no room after the holes: they go
        compact_running_nb(lay, ws)
    end = running_end_nb(ws)
    set_running_nb(lay, ws, end, r)
    set_running_done_nb(lay, ws, end, -1)  # not in the cohort (yet)
    ws[RUNNING_COUNT] += 1
    if reqf[r, RF_FIRST_SCHED] < 0.0:
        reqf[r, RF_FIRST_SCHED] = now
    if reqf[r, RF_FIRST_TOKEN] == FIRST_TOKEN_ON_ADMISSION:
        reqf[r, RF_FIRST_TOKEN] = now
        reqf[r, RF_LAST_EMIT] = now


@jit_inline
def schedule_row_nb(lay, ws, j, r, new):
    """Schedule row ``j``: request ``r`` computes ``new`` tokens in this iteration."""
    set_sched_nb(lay, ws, SCHED_REQUEST, j, r)
    set_sched_nb(lay, ws, SCHED_NEW_TOKENS, j, new)


@jit_inline
def release_blocks_nb(reqi, ws, r):
    """``r``'s KV blocks go back to the pool."""
    ws[FREE_BLOCKS] += reqi[r, RI_BLOCKS]
    reqi[r, RI_BLOCKS] = 0


@jit_inline
def drop_finished_nb(lay, reqi, ws):
    """The running list keeps the requests still running, in admission order (after an iteration
    that retired some), and no holes."""
    for i in range(running_end_nb(ws)):
        r = running_nb(lay, ws, i)
        if r >= 0 and reqi[r, RI_STATUS] != STATUS_RUNNING:
            set_running_nb(lay, ws, i, -1)
            ws[RUNNING_COUNT] -= 1
            ws[RUNNING_HOLES] += 1
    compact_running_nb(lay, ws)


# ------------------------------------------------------------------ rules both paths call
@jit_inline
def admission_nb(e, n_running, budget, free, whole, computed, need, cached, fixed, blocks):
    """The admission rule: whether the waiting head can be admitted now, with ``n_running``
    requests running, ``budget`` tokens left in the iteration and ``free`` KV blocks for it; it has
    ``computed`` tokens, ``need`` more to compute, a ``cached`` prefix, ``fixed`` blocks whatever its
    context and ``blocks`` blocks. It
    needs a sequence slot, some budget, and blocks for its next chunk within the budget (with
    ``whole``, v0 without chunked prefill: for its whole prompt, which must fit the budget).

    Returns (new tokens, extra blocks); new tokens is 0 when it cannot be admitted.
    """
    new = 0
    extra = 0
    if n_running < e.max_num_seqs and budget > 0 and not (whole and need > budget):
        n = need if need < budget else budget
        x = blocks_for_nb(e, computed + n, cached, fixed) - blocks
        if x <= free:
            new = n
            extra = x
    return new, extra


@jit_inline
def running_need_nb(e, reqi, r):
    """The speculation rule: tokens running request ``r`` schedules to catch up with its tokens so
    far, plus, when it is decoding (``RI_GENERATED`` >= 1, one token behind) under speculative
    decoding, its drafts: ``num_speculative_tokens``, but no more than the output tokens it has
    left after this step's own (drafts past the request's end would be discarded, and the request
    then never holds more than prompt + output - 1 tokens' KV, the arrival rule's bound)."""
    return need_nb(e, reqi[r, RI_INPUT] + reqi[r, RI_GENERATED], reqi[r, RI_COMPUTED], reqi[r, RI_GENERATED],
                   reqi[r, RI_OUTPUT])


@jit_inline
def need_nb(e, total, computed, generated, output):
    """:func:`running_need_nb` of a request with ``total`` tokens so far (prompt + generated),
    ``computed`` of them computed, ``generated`` output tokens of ``output``."""
    need = total - computed
    if e.num_speculative_tokens > 0 and generated >= 1 and need == 1:
        left = output - generated - 1
        need += e.num_speculative_tokens if e.num_speculative_tokens < left else left
    return need


@jit_inline
def in_flight_nb(now, reqi, reqf, r):
    """The pipeline rule: decoding request ``r`` is in a batch still in flight at ``now`` (its
    last token is emitted after ``now``: see ``simcore.pipeline``), so it has nothing to schedule."""
    return reqi[r, RI_GENERATED] >= 1 and reqf[r, RF_LAST_EMIT] > now


@jit_inline
def end_status_nb(e, t, arrival):
    """The retire rule: a request that emitted its last token at ``t`` ends done, or timed out
    when its client (whose request reached the engine at ``arrival``) gave up before."""
    return STATUS_TIMED_OUT if e.timeout_s > 0.0 and t - arrival > e.timeout_s else STATUS_DONE


@jit_inline
def decoding_nb(reqi, r):
    """Whether request ``r`` decodes: it emitted a token and computed all but the last (what it
    computes next is a decode token and its drafts, not a prompt chunk)."""
    g = reqi[r, RI_GENERATED]
    return g >= 1 and reqi[r, RI_COMPUTED] == reqi[r, RI_INPUT] + g - 1


@jit_inline
def compute_nb(reqi, r, new):
    """The advance rule's first part: scheduled request ``r`` computes its ``new`` tokens. Returns
    its tokens computed before and after, its output tokens so far and its tokens so far (prompt +
    emitted), and whether it was decoding (:func:`decoding_nb`, before)."""
    decoding = decoding_nb(reqi, r)
    before = reqi[r, RI_COMPUTED]
    after = before + new
    reqi[r, RI_COMPUTED] = after
    g = reqi[r, RI_GENERATED]
    return before, after, g, reqi[r, RI_INPUT] + g, decoding


@jit_inline
def emit_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, r, g, emitted, release, itl_from, itl_n):
    """The emit rule: running request ``r``, ``g`` tokens emitted so far, emits ``emitted`` more at
    ``t_end``: its first token's time, or (measured) their inter-token latency in
    ``metrics.itl_group_nb``'s groups (``itl_from``, ``itl_n``); at its last token it retires
    (:func:`retire_nb`, ``release`` as there). Returns (whether it retired, itl_from, itl_n)."""
    if g == 0:
        reqf[r, RF_FIRST_TOKEN] = t_end
    elif measured_nb(e, r):
        itl_from, itl_n = itl_group_nb(e, lay, acc, t_end, reqf[r, RF_LAST_EMIT], itl_from, itl_n)
    reqf[r, RF_LAST_EMIT] = t_end
    reqi[r, RI_GENERATED] = g + emitted
    if g + emitted == reqi[r, RI_OUTPUT]:
        retire_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, r, release)
        return True, itl_from, itl_n
    return False, itl_from, itl_n


@jit_inline
def retire_nb(e, lay, t, reqi, reqf, ws, glob, acc, r, release):
    """The retire rule: ``r`` emitted its last token at ``t``. Its blocks go back to the pool
    (``release``; a static batch keeps its rows' blocks until it ends) and it ends done, or timed
    out when its client gave up before."""
    if release:
        release_blocks_nb(reqi, ws, r)
    finish_nb(e, lay, t, reqi, reqf, glob, acc, r, end_status_nb(e, t, reqf[r, RF_ARRIVAL]))


# ------------------------------------------------------------------------ the explicit scheduler
@jit_inline
def admit_waiting_nb(e, lay, now, reqi, reqf, ws, n, budget, whole):
    """Admit waiting requests FCFS while :func:`admission_nb` allows, writing each to
    schedule row ``n``, ``n + 1``, ...: its next chunk within the budget, or with ``whole`` (v0,
    no chunked prefill) its whole prompt. Returns (n, budget left)."""
    # The guard repeats the rule's cheapest test; a pipelined engine may cap a micro-batch's rows.
    cap = e.pipeline_batch_seqs if e.pipeline_batch_seqs > 0 else e.max_num_seqs
    while ws[RUNNING_COUNT] < e.max_num_seqs and budget > 0 and n < cap:
        r = peek_nb(lay, reqi, ws)
        if r < 0:
            break
        c = reqi[r, RI_COMPUTED]
        new, extra = admission_nb(e, ws[RUNNING_COUNT], budget, ws[FREE_BLOCKS], whole, c,
                                  reqi[r, RI_INPUT] + reqi[r, RI_GENERATED] - c, reqi[r, RI_CACHED],
                                  reqi[r, RI_FIXED_BLOCKS], reqi[r, RI_BLOCKS])
        if new == 0:
            break
        admit_nb(lay, now, reqi, reqf, ws, r)
        ws[FREE_BLOCKS] -= extra
        reqi[r, RI_BLOCKS] += extra
        schedule_row_nb(lay, ws, n, r, new)
        n += 1
        budget -= new
    return n, budget


@jit_inline
def add_speculative_row_nb(n_tokens, pairs, kv_read, logits, n_sample, ctx_sample, new, c, total):
    """A speculative step's aggregates with a row that computes ``new`` tokens after its ``c``
    computed, of ``total`` tokens so far (prompt + emitted): its tokens, query-key pairs and keys
    read, and when it then samples (every token so far computed; what it computes past them are
    its drafts) one sampling row at its context and logits at its token and each draft. Every
    speculative step sums its rows with it, in row order (:func:`schedule_speculative_nb`,
    :func:`admit_speculative_nb`, ``engine._spec_step_nb``, ``simcore.fast.spec_run``). Returns
    the six aggregates."""
    q = float(new)
    cf = float(c)
    n_tokens += q
    pairs += q * cf + q * (q + 1.0) * 0.5
    kv_read += cf + q
    after = c + new
    over = after - total
    if over >= 0:  # it samples: 1 + its drafts logits
        n_sample += 1.0
        ctx_sample += after
        logits += 1.0 + over
    return n_tokens, pairs, kv_read, logits, n_sample, ctx_sample


@jit_inline
def admit_speculative_nb(e, lay, now, reqi, reqf, ws, n, budget, n_tokens, pairs, kv_read, logits, n_sample,
                         ctx_sample):
    """A speculative step's admission after its ``n`` running rows (:func:`admit_waiting_nb`,
    chunked) with the admitted chunks added to the step's aggregates, in row order (those of
    :func:`schedule_speculative_nb`; a row that samples adds its logit). Returns (n, budget left,
    and the six aggregates); :func:`schedule_speculative_nb` and the speculative run
    (``simcore.fast.spec_run``) both call it."""
    n_run = n
    n, budget = admit_waiting_nb(e, lay, now, reqi, reqf, ws, n, budget, False)
    for j in range(n_run, n):  # the admitted: their first chunk
        r = sched_nb(lay, ws, SCHED_REQUEST, j)
        n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = add_speculative_row_nb(
            n_tokens, pairs, kv_read, logits, n_sample, ctx_sample, sched_nb(lay, ws, SCHED_NEW_TOKENS, j),
            reqi[r, RI_COMPUTED], reqi[r, RI_INPUT] + reqi[r, RI_GENERATED])
    return n, budget, n_tokens, pairs, kv_read, logits, n_sample, ctx_sample


@jit_inline
def _allocate_running_nb(e, lay, reqi, ws, r, new):
    """Blocks for running request ``r`` to compute ``new`` more tokens, preempting the most
    recently admitted requests while they are short. Returns (``r`` got them, anything was
    preempted); ``r`` itself may be the last one preempted."""
    extra = extra_blocks_nb(reqi[r, RI_COMPUTED] + new, reqi[r, RI_CACHED], reqi[r, RI_FIXED_BLOCKS],
                            reqi[r, RI_BLOCKS], e.block_size)
    victim = -1
    preempted = False
    while extra > ws[FREE_BLOCKS] and victim != r:
        victim = _preempt_last_nb(lay, reqi, ws)
        preempted = True
    if victim == r:
        return False, preempted
    ws[FREE_BLOCKS] -= extra
    reqi[r, RI_BLOCKS] += extra
    return True, preempted


@jit_inline
def schedule_aggregates_nb(lay, reqi, ws, n_sched, pad_to):
    """The cost kernels' batch aggregates of schedule rows 0..n_sched-1 (``pad_to`` > 0 pads every
    row to that many new tokens): (tokens, attention pairs, KV tokens read, rows with logits: one
    for each row whose tokens so far are then all computed; a speculative step's
    ``engine._spec_step_nb`` sums the same with logits at the drafts too). Same reduction as
    cost.batch_aggregates_nb, over the workspace."""
    n_tokens = 0.0
    pairs = 0.0
    kv_read = 0.0
    caught_up = 0.0
    for j in range(n_sched):
        r = sched_nb(lay, ws, SCHED_REQUEST, j)
        new = sched_nb(lay, ws, SCHED_NEW_TOKENS, j)
        q = float(pad_to if pad_to > 0 else new)
        c = float(reqi[r, RI_COMPUTED])
        n_tokens += q
        pairs += q * c + q * (q + 1.0) * 0.5
        kv_read += c + q
        if reqi[r, RI_COMPUTED] + new == reqi[r, RI_INPUT] + reqi[r, RI_GENERATED]:
            caught_up += 1.0
    return n_tokens, pairs, kv_read, caught_up


@jit
def schedule_continuous_nb(sp, e, lay, now, reqi, reqf, ws):
    """Choose this iteration's requests and their new tokens (continuous batching); with
    speculative decoding (``sp`` not None) a decoding request's drafts too (:func:`running_need_nb`).
    Under pipeline parallelism a running request in a batch still in flight sits out
    (:func:`in_flight_nb`), and a batch takes at most ``e.pipeline_batch_seqs`` rows (0: no cap).

    Writes request ids to schedule row ``SCHED_REQUEST`` and new tokens to ``SCHED_NEW_TOKENS``.

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
        while i < ws[RUNNING_COUNT] and budget > 0 and (e.pipeline_batch_seqs == 0 or n < e.pipeline_batch_seqs):
            r = running_nb(lay, ws, i)
            if e.pipeline_stages > 1 and in_flight_nb(now, reqi, reqf, r):
                i += 1
                continue
            need = reqi[r, RI_INPUT] + reqi[r, RI_GENERATED] - reqi[r, RI_COMPUTED]
            if sp is not None:  # pruned by numba when sp is None
                need = running_need_nb(e, reqi, r)
            new = need if need < budget else budget
            ok, pre = _allocate_running_nb(e, lay, reqi, ws, r, new)
            preempted = preempted or pre
            if not ok:
                break
            schedule_row_nb(lay, ws, n, r, new)
            n += 1
            budget -= new
            i += 1
        if preempted:
            return n, preempted
        # Then waiting requests, FCFS, while sequences, budget and blocks allow.
        n, budget = admit_waiting_nb(e, lay, now, reqi, reqf, ws, n, budget, False)
        return n, preempted
    # v0: admit whole prompts first; an iteration with prefills runs only those.
    n, budget = admit_waiting_nb(e, lay, now, reqi, reqf, ws, n, budget, True)
    if n > 0:
        return n, preempted
    # Otherwise decode every running request, preempting from the back when blocks run out.
    i = 0
    while i < ws[RUNNING_COUNT] and (e.pipeline_batch_seqs == 0 or n < e.pipeline_batch_seqs):
        r = running_nb(lay, ws, i)
        if e.pipeline_stages > 1 and in_flight_nb(now, reqi, reqf, r):
            i += 1
            continue
        need = 1
        if sp is not None:
            need = running_need_nb(e, reqi, r)
        ok, pre = _allocate_running_nb(e, lay, reqi, ws, r, need)
        preempted = preempted or pre
        if not ok:
            break
        schedule_row_nb(lay, ws, n, r, need)
        n += 1
        i += 1
    return n, preempted


@jit
def schedule_speculative_nb(e, lay, now, reqi, reqf, ws):
    """:func:`schedule_continuous_nb` under speculative decoding with chunked prefill (no pipeline)
    when it preempts nobody, in one pass that also sums the batch aggregates the speculative
    step's cost takes (as ``engine._spec_step_nb`` sums them over the rows: same order, same
    numbers).

    Returns
    -------
    n_scheduled : int
        -1, with nothing changed but the schedule rows, when a running request would need more
        blocks than are free: :func:`schedule_continuous_nb` then preempts.
    n_tokens, attn_pairs, kv_read_tokens, logits, n_sample, ctx_sample : float
        The target's aggregates (``logits``: one per sampling row plus its drafts), the rows that
        sample and their tokens computed after the step.
    """
    bs = e.block_size
    free = ws[FREE_BLOCKS]
    budget = e.max_num_batched_tokens
    n_tokens = 0.0
    pairs = 0.0
    kv_read = 0.0
    logits = 0.0
    n_sample = 0.0
    ctx_sample = 0.0
    n = 0
    n_run = ws[RUNNING_COUNT]
    any_blocks = False
    while n < n_run and budget > 0:
        r = running_nb(lay, ws, n)
        c = reqi[r, RI_COMPUTED]
        g = reqi[r, RI_GENERATED]
        total = reqi[r, RI_INPUT] + g
        need = need_nb(e, total, c, g, reqi[r, RI_OUTPUT])
        new = need if need < budget else budget
        after = c + new
        x = extra_blocks_nb(after, reqi[r, RI_CACHED], reqi[r, RI_FIXED_BLOCKS], reqi[r, RI_BLOCKS], bs)
        if x > free:
            return -1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        free -= x
        any_blocks = any_blocks or x != 0
        schedule_row_nb(lay, ws, n, r, new)
        set_sched_nb(lay, ws, SCHED_NEW_BLOCKS, n, x)
        budget -= new
        n += 1
        n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = add_speculative_row_nb(
            n_tokens, pairs, kv_read, logits, n_sample, ctx_sample, new, c, total)
    if any_blocks:  # no preemption: the blocks are taken
        for j in range(n):
            x = sched_nb(lay, ws, SCHED_NEW_BLOCKS, j)
            if x != 0:
                reqi[sched_nb(lay, ws, SCHED_REQUEST, j), RI_BLOCKS] += x
    ws[FREE_BLOCKS] = free
    n, budget, n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = admit_speculative_nb(
        e, lay, now, reqi, reqf, ws, n, budget, n_tokens, pairs, kv_read, logits, n_sample, ctx_sample)
    return n, n_tokens, pairs, kv_read, logits, n_sample, ctx_sample


@jit
def form_static_batch_nb(e, lay, now, reqi, reqf, ws):
    """Static / dynamic batching: admit up to the batch limit from the waiting queue and schedule
    their prompts. Returns the number admitted."""
    cap = min(e.max_num_seqs, e.static_slots)
    if e.batch_max > 0:
        cap = min(cap, e.batch_max)
    n = 0
    while n < cap:
        r = peek_nb(lay, reqi, ws)
        if r < 0:
            break
        admit_nb(lay, now, reqi, reqf, ws, r)
        schedule_row_nb(lay, ws, n, r, reqi[r, RI_INPUT] - reqi[r, RI_COMPUTED])
        n += 1
    return n
