"""The decode cohort: running requests that are decoding, kept lazily so that an iteration costs
O(1) in them instead of O(batch).

Every cohort member gets exactly one token in every cohort *advance*, so a member's state is its
state when it joined plus the number of advances since: ``RI_COMPUTED``/``RI_GENERATED`` hold the
values at joining and ``RI_DONE`` the replica's advance count ``ws[COHORT_ADVANCES]`` whose advance
emits its last token (it joined at the *epoch* ``RI_DONE - RI_OUTPUT + RI_GENERATED``), kept too in
the row beside the running list (``Layout.off_run_done``), and the member is filed in the bucket of
its ``RI_DONE`` (``layout.link_done_nb``): a completion takes its members from one bucket and leaves
holes in the running list where they were, removed (``layout.compact_running_nb``) when the cohort
dissolves or the list is full, so it costs O(finishers), not O(batch). The replica keeps what
iterations need in aggregate: members
(``COHORT_SIZE``), the sum of their contexts (``COHORT_CONTEXT_SUM``), when the first of them
completes (``COHORT_NEXT_DONE``), and how many need a new KV block at each advance (the phase
counts at ``Layout.off_phase``, by ``(computed - epoch) mod block_size``). Members that joined since
the last advance (listed in schedule row ``SCHED_JOINER``) get their first inter-token latency
individually; the others share ``t_cohort``, the time of the last advance.

Anything the aggregate path does not cover (preemption, a budget too small for everyone, client
timeouts, v0 prefill iterations, static batches) first materialises every member
(:func:`materialize_nb`), runs the explicit scheduler, and rebuilds the cohort
(:func:`rebuild_nb`). Results are identical to the explicit path (the tests check it).
"""
from simcore._jit import jit_inline
from simcore.codes import (
    CLOCK_COHORT,
    COHORT_ADVANCES,
    COHORT_CONTEXT_SUM,
    COHORT_JOINERS,
    COHORT_NEXT_DONE,
    COHORT_MEASURED,
    COHORT_SIZE,
    DONE_RING,
    FINISHED_LAST_STEP,
    FREE_BLOCKS,
    NEVER,
    PREFILLING_COUNT,
    RF_FIRST_TOKEN,
    RF_LAST_EMIT,
    RI_BLOCKS,
    RI_CACHED,
    RI_COMPUTED,
    RI_DONE,
    RI_FIXED_BLOCKS,
    RI_GENERATED,
    RI_INPUT,
    RI_OUTPUT,
    RI_STATUS,
    RUNNING_COUNT,
    RUNNING_HOLES,
    SCHED_FINISHING,
    SCHED_JOINER,
    SCHED_NEW_TOKENS,
    SCHED_PREFILLING,
    SCHED_REQUEST,
    STATUS_RUNNING,
    STAT_DECODE_TOKENS,
    STAT_MIN_FREE_BLOCKS,
    STAT_PREFILL_TOKENS,
    WIN_OUTPUT_TOKENS,
)
from simcore.cost import iteration_totals_memo_inline_nb, iteration_totals_memo_nb
from simcore.layout import (
    compact_running_nb,
    find_running_nb,
    link_done_nb,
    next_done_nb,
    phase_slot_nb,
    running_end_nb,
    running_nb,
    running_rows_nb,
    sched_nb,
    sched_row_nb,
    set_running_done_nb,
    set_sched_nb,
)
from simcore.metrics import account_iteration_nb, measured_nb, record_itl_nb, record_request_itl_nb, win_add_nb, window_of_nb
from simcore.scheduler import (
    admission_nb,
    admit_waiting_nb,
    block_mod_nb,
    blocks_for_nb,
    compute_nb,
    decoding_nb,
    drop_finished_nb,
    peek_nb,
    retire_nb,
    schedule_aggregates_nb,
    schedule_row_nb,
)


@jit_inline
def needs_block_class_nb(e, d):
    """Cohort class whose members need a new block at the advance after ``d`` advances:
    ``(block_size - d % block_size) % block_size``, which is ``-d`` modulo the block size."""
    return block_mod_nb(e, -d)


@jit_inline
def joined_at_nb(reqi, r):
    """The cohort advance count when member ``r`` joined."""
    return reqi[r, RI_DONE] - reqi[r, RI_OUTPUT] + reqi[r, RI_GENERATED]


@jit_inline
def join_nb(e, lay, reqi, ws, r, slot):
    """``r`` (decoding, state explicit; entry ``slot`` of the running list) joins the cohort."""
    d = ws[COHORT_ADVANCES]
    c = reqi[r, RI_COMPUTED]
    done = d + reqi[r, RI_OUTPUT] - reqi[r, RI_GENERATED]
    reqi[r, RI_DONE] = done
    set_running_done_nb(lay, ws, slot, done)
    link_done_nb(lay, ws, slot, done)
    ws[phase_slot_nb(lay, block_mod_nb(e, c - d))] += 1
    ws[COHORT_SIZE] += 1
    if measured_nb(e, r):
        ws[COHORT_MEASURED] += 1
    ws[COHORT_CONTEXT_SUM] += c
    if done < ws[COHORT_NEXT_DONE]:
        ws[COHORT_NEXT_DONE] = done
    set_sched_nb(lay, ws, SCHED_JOINER, ws[COHORT_JOINERS], r)
    ws[COHORT_JOINERS] += 1


@jit_inline
def leave_nb(e, lay, reqi, ws, r):
    """``r`` leaves the cohort: its explicit state is brought up to date (blocks included)."""
    d = ws[COHORT_ADVANCES]
    epoch = joined_at_nb(reqi, r)
    k = d - epoch
    c0 = reqi[r, RI_COMPUTED]
    ws[phase_slot_nb(lay, block_mod_nb(e, c0 - epoch))] -= 1
    ws[COHORT_SIZE] -= 1
    if measured_nb(e, r):
        ws[COHORT_MEASURED] -= 1
    c = c0 + k
    ws[COHORT_CONTEXT_SUM] -= c
    reqi[r, RI_COMPUTED] = c
    reqi[r, RI_GENERATED] += k
    reqi[r, RI_BLOCKS] = blocks_for_nb(e, c, reqi[r, RI_CACHED], reqi[r, RI_FIXED_BLOCKS])
    reqi[r, RI_DONE] = -1


@jit_inline
def regular_members_nb(e, lay, ws):
    """Measured members (past the warm-up) that took part in the cohort's last advance: their
    next token's ITL is the time since that advance (joiners' count from their own last token)."""
    n = ws[COHORT_MEASURED]
    for j in range(ws[COHORT_JOINERS]):
        if measured_nb(e, sched_nb(lay, ws, SCHED_JOINER, j)):
            n -= 1
    return n


@jit_inline
def record_advance_itls_nb(e, lay, t_end, reqf, ws, acc):
    """The ITLs of a cohort advance ending at ``t_end``: members that took part in the last advance
    count from it, joiners from their own last token."""
    regular = regular_members_nb(e, lay, ws)
    if regular > 0:
        record_itl_nb(e, lay, acc, t_end - acc[lay.off_clock + CLOCK_COHORT], float(regular))
    for j in range(ws[COHORT_JOINERS]):
        r = sched_nb(lay, ws, SCHED_JOINER, j)
        record_request_itl_nb(e, lay, acc, r, t_end - reqf[r, RF_LAST_EMIT])


@jit_inline
def materialize_nb(e, lay, t_cohort, reqi, reqf, ws):
    """Every member leaves the cohort with its explicit state (and last emit time) restored; the
    running list loses its holes and the buckets their members."""
    if ws[COHORT_SIZE] > 0:
        d = ws[COHORT_ADVANCES]
        run, done, _, ring = running_rows_nb(lay, ws)
        for i in range(running_end_nb(ws)):
            r = run[i]
            if r >= 0 and reqi[r, RI_DONE] >= 0:
                if joined_at_nb(reqi, r) < d:  # took part in the last advance
                    reqf[r, RF_LAST_EMIT] = t_cohort
                ring[done[i] & (DONE_RING - 1)] = 0
                done[i] = -1
                leave_nb(e, lay, reqi, ws, r)
        ws[COHORT_JOINERS] = 0
        ws[COHORT_NEXT_DONE] = NEVER
    compact_running_nb(lay, ws)


@jit_inline
def rebuild_nb(e, lay, reqi, ws):
    """After an explicit iteration (the running list has no holes, the buckets no members): running
    requests that are decoding (all their tokens so far computed but the last one emitted) join the
    cohort; the others are listed in schedule row ``SCHED_PREFILLING``. The running list's
    ``RI_DONE`` row is written afresh."""
    ws[PREFILLING_COUNT] = 0
    for i in range(ws[RUNNING_COUNT]):
        r = running_nb(lay, ws, i)
        if decoding_nb(reqi, r):
            join_nb(e, lay, reqi, ws, r, i)
        else:
            set_running_done_nb(lay, ws, i, -1)
            set_sched_nb(lay, ws, SCHED_PREFILLING, ws[PREFILLING_COUNT], r)
            ws[PREFILLING_COUNT] += 1


@jit_inline
def complete_members_nb(e, lay, t_end, reqi, reqf, ws, glob, acc):
    """Members whose last token came with the advance just made finish, in running-list order;
    returns how many. They are the members of the advance's bucket (``layout.link_done_nb``) whose
    ``RI_DONE`` is the advance: each leaves its entry of the running list a hole, is listed in
    schedule row ``SCHED_FINISHING`` (in entry order), then leaves and retires. The next completion
    comes from the buckets after it (``layout.next_done_nb``)."""
    d = ws[COHORT_ADVANCES]
    run, done, chain, ring = running_rows_nb(lay, ws)
    fin = sched_row_nb(lay, ws, SCHED_FINISHING)
    b = d & (DONE_RING - 1)
    finished = 0
    prev = -1  # the last member kept in the bucket (-1: its head)
    j = ring[b]
    while j != 0:
        i = j - 1
        j = chain[i]
        if done[i] == d:  # out of the bucket, into the finishers in entry order
            if prev < 0:
                ring[b] = j
            else:
                chain[prev] = j
            f = finished
            while f > 0 and fin[f - 1] > i:
                fin[f] = fin[f - 1]
                f -= 1
            fin[f] = i
            finished += 1
        else:
            prev = i
    for f in range(finished):
        i = fin[f]
        fin[f] = run[i]
        run[i] = -1
        done[i] = -1
    ws[RUNNING_COUNT] -= finished
    ws[RUNNING_HOLES] += finished
    ws[COHORT_NEXT_DONE] = next_done_nb(lay, ws, d) if ws[COHORT_SIZE] > finished else NEVER
    for f in range(finished):
        r = fin[f]
        leave_nb(e, lay, reqi, ws, r)
        reqf[r, RF_LAST_EMIT] = t_end
        retire_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, r, True)
    return finished


@jit_inline
def _advance_rows_nb(e, lay, t_end, w_end, reqi, reqf, ws, glob, acc, n_sched):
    """The explicitly scheduled rows of an iteration: new tokens, emission, then joining the cohort
    or finishing. Keeps the prefilling list (row ``SCHED_PREFILLING``) and the running list up to
    date; returns how many requests finished."""
    finished = 0
    any_done = False
    for j in range(n_sched):
        r = sched_nb(lay, ws, SCHED_REQUEST, j)
        new = sched_nb(lay, ws, SCHED_NEW_TOKENS, j)
        _, after, g, total, decoding = compute_nb(reqi, r, new)
        if new == 1 and decoding:
            acc[STAT_DECODE_TOKENS] += 1.0
        else:
            acc[STAT_PREFILL_TOKENS] += new
        if after == total:
            if g == 0:
                reqf[r, RF_FIRST_TOKEN] = t_end
            else:
                record_request_itl_nb(e, lay, acc, r, t_end - reqf[r, RF_LAST_EMIT])
            reqf[r, RF_LAST_EMIT] = t_end
            reqi[r, RI_GENERATED] = g + 1
            win_add_nb(lay, acc, w_end, WIN_OUTPUT_TOKENS, 1.0)
            if g + 1 == reqi[r, RI_OUTPUT]:
                retire_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, r, True)
                finished += 1
                any_done = True
            else:
                join_nb(e, lay, reqi, ws, r, find_running_nb(lay, ws, r))
    # The prefilling list keeps those still prefilling, in admission order; the running list
    # drops requests that finished.
    k = 0
    for j in range(n_sched):
        r = sched_nb(lay, ws, SCHED_REQUEST, j)
        if reqi[r, RI_STATUS] == STATUS_RUNNING and reqi[r, RI_DONE] < 0:
            set_sched_nb(lay, ws, SCHED_PREFILLING, k, r)
            k += 1
    ws[PREFILLING_COUNT] = k
    if any_done:
        drop_finished_nb(lay, reqi, ws)
    return finished


@jit_inline
def prefill_only_schedule_nb(e, lay, now, reqi, reqf, ws):
    """Schedule a v0 prefill-only iteration (vLLM v0 without chunked prefill, SGLang's prefill
    batches: :data:`FAST_PREFILL_ONLY`): newly admitted whole prompts and nothing else, the cohort
    waiting. Returns its explicit schedule rows; :func:`prefill_only_commit_nb` ends it."""
    n_sched, _ = admit_waiting_nb(e, lay, now, reqi, reqf, ws, 0, e.max_num_batched_tokens, True)
    return n_sched


@jit_inline
def prefill_only_commit_nb(e, lay, t_end, dt, flops, nbytes, n_sched, reqi, reqf, ws, glob, acc):
    """End a prefill-only iteration (``n_sched`` explicit rows, :func:`prefill_only_schedule_nb`)
    of ``dt`` seconds ending at ``t_end``: account it and advance its rows (the cohort does not
    advance)."""
    account_iteration_nb(e, lay, t_end, acc, dt, flops, nbytes, n_sched, e.num_blocks - ws[FREE_BLOCKS])
    if ws[FREE_BLOCKS] < acc[STAT_MIN_FREE_BLOCKS]:
        acc[STAT_MIN_FREE_BLOCKS] = ws[FREE_BLOCKS]
    ws[FINISHED_LAST_STEP] = _advance_rows_nb(e, lay, t_end, window_of_nb(e, lay, t_end), reqi, reqf, ws, glob,
                                              acc, n_sched)


@jit_inline
def _prefill_only_nb(p, e, lay, now, reqi, reqf, ws, glob, acc):
    """A whole v0 prefill-only iteration of one replica: :func:`prefill_only_schedule_nb`, its
    cost, :func:`prefill_only_commit_nb`."""
    n_sched = prefill_only_schedule_nb(e, lay, now, reqi, reqf, ws)
    n_tokens, pairs, kv_read, _ = schedule_aggregates_nb(lay, reqi, ws, n_sched, 0)
    dt, flops, nbytes = iteration_totals_memo_nb(p, acc, lay.off_prefix, lay.prefix_slots, n_tokens, pairs, kv_read,
                                                 float(n_sched))
    t_end = now + dt
    prefill_only_commit_nb(e, lay, t_end, dt, flops, nbytes, n_sched, reqi, reqf, ws, glob, acc)
    return True, t_end


#: What :func:`fast_schedule_nb` did: nothing (the explicit path must run the iteration) ...
FAST_NONE = 0
#: ... scheduled the iteration with the cohort in aggregate ...
FAST_SCHEDULED = 1
#: ... nothing, the iteration being a v0 prefill-only one (``_prefill_only_nb``).
FAST_PREFILL_ONLY = 2


@jit_inline
def fast_schedule_nb(e, lay, now, reqi, reqf, ws):
    """Schedule one continuous-batching iteration with the cohort in aggregate, when nothing needs
    the explicit scheduler: every running request gets all its demand within the token budget and
    the free blocks (no preemption); then admissions, FCFS, while sequences, budget and blocks
    allow. Returns ``(what, n_sched)``: one of ``FAST_*`` (anything but ``FAST_SCHEDULED`` changed
    nothing) and the explicit schedule rows. :func:`fast_aggregates_nb` gives the iteration's
    aggregates for its cost, :func:`fast_commit_nb` ends it."""
    n_c = ws[COHORT_SIZE]
    d = ws[COHORT_ADVANCES]
    free = ws[FREE_BLOCKS]
    need_c = ws[phase_slot_nb(lay, needs_block_class_nb(e, d))] if n_c > 0 else 0
    budget = e.max_num_batched_tokens - n_c
    extra = need_c
    n_pre = ws[PREFILLING_COUNT]
    if not e.chunked_prefill:
        if n_pre > 0:
            return FAST_NONE, 0
        # v0: an admissible prompt makes this a prefill-only iteration: the explicit path's.
        head = peek_nb(lay, reqi, ws)
        if head >= 0:
            c = reqi[head, RI_COMPUTED]
            new, _ = admission_nb(e, ws[RUNNING_COUNT], e.max_num_batched_tokens, free, True, c,
                                  reqi[head, RI_INPUT] + reqi[head, RI_GENERATED] - c, reqi[head, RI_CACHED],
                                  reqi[head, RI_FIXED_BLOCKS], reqi[head, RI_BLOCKS])
            if new > 0:
                return FAST_PREFILL_ONLY, 0
    for i in range(n_pre):
        r = sched_nb(lay, ws, SCHED_PREFILLING, i)
        c = reqi[r, RI_COMPUTED]
        need = reqi[r, RI_INPUT] + reqi[r, RI_GENERATED] - c
        budget -= need
        extra += blocks_for_nb(e, c + need, reqi[r, RI_CACHED], reqi[r, RI_FIXED_BLOCKS]) - reqi[r, RI_BLOCKS]
    if budget < 0 or extra > free:
        return FAST_NONE, 0
    n_sched = 0
    for i in range(n_pre):
        r = sched_nb(lay, ws, SCHED_PREFILLING, i)
        c = reqi[r, RI_COMPUTED]
        need = reqi[r, RI_INPUT] + reqi[r, RI_GENERATED] - c
        x = blocks_for_nb(e, c + need, reqi[r, RI_CACHED], reqi[r, RI_FIXED_BLOCKS]) - reqi[r, RI_BLOCKS]
        reqi[r, RI_BLOCKS] += x
        schedule_row_nb(lay, ws, n_sched, r, need)
        n_sched += 1
    free -= extra
    ws[FREE_BLOCKS] = free
    if e.chunked_prefill:
        n_sched, budget = admit_waiting_nb(e, lay, now, reqi, reqf, ws, n_sched, budget, False)
    return FAST_SCHEDULED, n_sched


@jit_inline
def fast_aggregates_nb(lay, reqi, ws, n_sched):
    """The aggregates of an iteration :func:`fast_schedule_nb` scheduled (``n_sched`` explicit rows
    after its admissions): ``(tokens, pairs, kv_read, emit)``, the cohort's included."""
    fc = float(ws[COHORT_SIZE])
    ctx = float(ws[COHORT_CONTEXT_SUM]) + fc
    n_tokens, pairs, kv_read, n_emit = schedule_aggregates_nb(lay, reqi, ws, n_sched, 0)
    return fc + n_tokens, ctx + pairs, ctx + kv_read, fc + n_emit


@jit_inline
def fast_commit_nb(e, lay, t_end, dt, flops, nbytes, n_sched, reqi, reqf, ws, glob, acc):
    """End an iteration :func:`fast_schedule_nb` scheduled (``n_sched`` explicit rows), of ``dt``
    seconds ending at ``t_end``: account it, advance the cohort (its members' ITLs, completions)
    and the explicit rows."""
    n_c = ws[COHORT_SIZE]
    d = ws[COHORT_ADVANCES]
    account_iteration_nb(e, lay, t_end, acc, dt, flops, nbytes, n_c + n_sched, e.num_blocks - ws[FREE_BLOCKS])
    if ws[FREE_BLOCKS] < acc[STAT_MIN_FREE_BLOCKS]:
        acc[STAT_MIN_FREE_BLOCKS] = ws[FREE_BLOCKS]
    w_end = window_of_nb(e, lay, t_end)
    finished = 0
    if n_c > 0:
        fc = float(n_c)
        record_advance_itls_nb(e, lay, t_end, reqf, ws, acc)
        ws[COHORT_JOINERS] = 0
        ws[COHORT_ADVANCES] = d + 1
        ws[COHORT_CONTEXT_SUM] += n_c
        acc[lay.off_clock + CLOCK_COHORT] = t_end
        acc[STAT_DECODE_TOKENS] += fc
        win_add_nb(lay, acc, w_end, WIN_OUTPUT_TOKENS, fc)
        if ws[COHORT_ADVANCES] >= ws[COHORT_NEXT_DONE]:
            finished += complete_members_nb(e, lay, t_end, reqi, reqf, ws, glob, acc)
    finished += _advance_rows_nb(e, lay, t_end, w_end, reqi, reqf, ws, glob, acc, n_sched)
    ws[FINISHED_LAST_STEP] = finished


@jit_inline
def fast_iteration_nb(p, e, lay, now, reqi, reqf, ws, glob, acc):
    """One continuous-batching iteration with the cohort in aggregate (:func:`fast_schedule_nb`,
    its cost, :func:`fast_commit_nb`), or the v0 prefill-only iteration it finds instead. Returns
    (handled, end time)."""
    what, n_sched = fast_schedule_nb(e, lay, now, reqi, reqf, ws)
    if what == FAST_PREFILL_ONLY:
        return _prefill_only_nb(p, e, lay, now, reqi, reqf, ws, glob, acc)
    if what != FAST_SCHEDULED:
        return False, now
    tokens, pairs, kv_read, emit = fast_aggregates_nb(lay, reqi, ws, n_sched)
    dt, flops, nbytes = iteration_totals_memo_inline_nb(p, acc, lay.off_prefix, lay.prefix_slots, tokens, pairs,
                                                        kv_read, emit)
    t_end = now + dt
    fast_commit_nb(e, lay, t_end, dt, flops, nbytes, n_sched, reqi, reqf, ws, glob, acc)
    return True, t_end
