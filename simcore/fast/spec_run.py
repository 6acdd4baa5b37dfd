"""Fast path of the engine under speculative decoding: a run of verification steps.

When every running request decodes (one token behind, its drafts to verify) and each gets its
whole need within the token budget and its KV blocks are free, the next speculative step is one
the explicit path would take the same way (``scheduler.schedule_speculative_nb``, the step's cost,
the engine's advance), admitting the waiting requests it can after the running ones. This module
takes such steps back to back without returning to the event loop: per step the schedule's
sums (planned by the step before, else one loop over the running requests), the admission with
its chunks' sums (``scheduler.admit_speculative_nb``, the explicit scheduler's own), then one
loop that verifies, emits and plans the next step and one over the admitted rows as
``engine._advance_nb`` takes them, with the rules the explicit path calls
(:func:`simcore.scheduler.need_nb`, ``blocks_past_nb`` (``extra_blocks_nb``'s capacity form),
``add_speculative_row_nb``, ``compute_nb``, ``emit_nb``, ``retire_nb``,
:func:`simcore.speculative.accepted_at_nb` and
``count_accepted_nb`` (``verify_nb``'s parts), :func:`simcore.metrics.itl_group_nb`). The admitted
join the run when their prompts are in (they decode next); one with a prompt left to compute
ends it after that step. With one replica under an open loop (``arrivals``) the run also takes
the arrivals due before each step, by the event loop's rules (``scheduler.arrive_nb``,
``join_nb``). It stops before an arrival otherwise (or, under a closed loop with replicas,
another busy replica's next step: the caller's bound), a client deadline or a step the explicit
path must decide (a request short of budget or blocks: a partial chunk or a preemption), and,
under a closed loop, after a step that retires a request (its client's next request may arrive at
once; an open loop's arrivals are known, so the run drops the retired rows and goes on). The sums
run in the explicit path's order: results are the same bit for bit.

May import: :mod:`simcore._jit`, :mod:`simcore.codes`, :mod:`simcore.layout`,
:mod:`simcore.metrics`, :mod:`simcore.scheduler`, :mod:`simcore.speculative`.
"""
import numpy as np

from simcore._jit import jit, jit_inline
from simcore.codes import (
    CLOCK_DEADLINE,
    FINISHED_LAST_STEP,
    FREE_BLOCKS,
    GLOBAL_BASE,
    GLOBAL_NEXT_ARRIVAL,
    POLICY_CONTINUOUS,
    RF_ARRIVAL,
    RF_LAST_EMIT,
    RI_BLOCKS,
    RI_CACHED,
    RI_COMPUTED,
    RI_FIXED_BLOCKS,
    RI_GENERATED,
    RI_OUTPUT,
    RI_STATUS,
    RUNNING_COUNT,
    RUN_CAPACITY,
    RUN_COMPUTED,
    RUN_DONE,
    RUN_GENERATED,
    RUN_HASH,
    RUN_NEED,
    RUN_NEXT_CAPACITY,
    RUN_OUTPUT,
    SCHED_NEW_TOKENS,
    STATUS_RUNNING,
    STAT_DECODE_TOKENS,
    STAT_FAST_ITERATIONS,
    STAT_MIN_FREE_BLOCKS,
    STAT_PREFILL_TOKENS,
    STAT_SPEC_ACCEPTED,
    STAT_SPEC_DRAFT_TOKENS,
    STAT_SPEC_DRAFTS,
    WIN_OUTPUT_TOKENS,
)
from simcore.layout import running_nb, sched_nb, sched_row_nb, set_running_nb, set_sched_nb
from simcore.metrics import account_iteration_nb, itl_group_nb, measured_nb, record_itl_nb, win_add_nb, window_of_nb
from simcore.scheduler import (
    add_speculative_row_nb,
    admit_speculative_nb,
    arrive_nb,
    block_div_nb,
    blocks_past_nb,
    compute_nb,
    decoding_nb,
    drop_finished_nb,
    emit_nb,
    join_nb,
    need_nb,
    retire_nb,
)
from simcore.speculative import accepted_at_nb, count_accepted_nb, request_hash_nb, step_rests_nb, step_totals_at_nb

NO_SUMS = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # a step's six aggregates before its rows (add_speculative_row_nb)


@jit
def spec_run_nb(p, sp, e, lay, now, next_arrival, next_deadline, reqi, reqf, ws, glob, acc, arrivals=False):
    """Take speculative steps of decoding requests (and the waiting requests each step admits)
    from ``now`` while the explicit path would take them the same way and nothing else is due
    (continuous batching with chunked prefill, one pipeline stage).

    The running requests' state moves into the schedule rows (``RUN_*``: contiguous, the hash of
    their acceptance draws computed once) for the run and back at its end. A step's schedule is
    each row's plan (``RUN_NEED``, ``RUN_NEXT_CAPACITY``: kept unless the step is taken) and the
    sums, which the step before made while it verified (the run's first step, or one after a row
    with a negative block count, loops over the rows instead); then the admission (its rows in the
    schedule rows past the run's, then the run's own once they decode), and one loop that
    verifies, emits and plans the next step. Every step but the first starts with each decoding
    request's last token at the previous step's end: their inter-token latencies are one
    histogram entry.

    With ``arrivals`` (one replica, an open loop, every request's row present) the requests that
    arrive before a step join the replica's queue here, as the event loop would have them join
    (``next_arrival`` is then the first of them, and the deadline is read again after them).

    Returns
    -------
    k : int
        Steps taken (0: the explicit path takes the next one; nothing changed but the waiting
        queue's timed-out entries dropped and the schedule rows).
    now : float
        Time at the end of the last step.
    """
    B = ws[RUNNING_COUNT]
    if B == 0 or now >= next_arrival or now >= next_deadline or not decoding_nb(reqi, running_nb(lay, ws, B - 1)):
        return 0, now  # the newly admitted come last
    base = glob[GLOBAL_BASE]
    thresholds = sp.thresholds
    measured = 0.0
    for j in range(B):
        r = running_nb(lay, ws, j)
        if not decoding_nb(reqi, r):
            return 0, now
        _load_nb(e, sp, lay, reqi, ws, j, r, base)
        if measured_nb(e, r):
            measured += 1.0
    k = 0
    n_spec = e.num_speculative_tokens
    rests = step_rests_nb(p, sp, n_spec, acc, lay, 0.0, 0.0, 0.0)  # typed; set at the first step
    rest_key = (-1.0, -1.0, -1.0)  # the tokens, logits and sampling rows they are for
    n_rows = reqi.shape[0]
    deadline_slot = lay.off_clock + CLOCK_DEADLINE
    run_c = sched_row_nb(lay, ws, RUN_COMPUTED)  # the rows' state, as views
    run_g = sched_row_nb(lay, ws, RUN_GENERATED)
    run_out = sched_row_nb(lay, ws, RUN_OUTPUT)
    run_cap = sched_row_nb(lay, ws, RUN_CAPACITY)
    run_hash = sched_row_nb(lay, ws, RUN_HASH)
    run_need = sched_row_nb(lay, ws, RUN_NEED)
    run_next = sched_row_nb(lay, ws, RUN_NEXT_CAPACITY)
    planned = False  # whether the previous step planned this one (its totals below)
    plan = NO_SUMS
    plan_need = 0
    plan_blocks = 0
    while True:
        if arrivals:  # the event loop's arrivals before a step that starts at ``now``
            nxt = glob[GLOBAL_NEXT_ARRIVAL]
            while nxt < n_rows and reqf[nxt, RF_ARRIVAL] <= now:
                a = reqf[nxt, RF_ARRIVAL]
                if arrive_nb(e, lay, a, reqi, reqf, glob, acc, nxt):
                    join_nb(e, lay, a, reqi, ws, acc, glob, nxt, 0, deadline_slot)
                nxt += 1
            next_arrival = reqf[nxt, RF_ARRIVAL] if nxt < n_rows else np.inf
            next_deadline = acc[deadline_slot]
        if now >= next_arrival or now >= next_deadline:
            break
        # Schedule: schedule_speculative_nb's rows and sums, nothing written but the rows' plans.
        budget = e.max_num_batched_tokens
        free = ws[FREE_BLOCKS]
        if planned:  # the previous step planned this one: its rows' needs are >= 1 and blocks >= 0, so
            #          the first row short of budget or blocks exists when the totals are short
            if plan_need > budget or plan_blocks > free:
                break
            budget -= plan_need
            free -= plan_blocks
            n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = plan
        else:
            n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = NO_SUMS
            short = False
            for j in range(B):
                c = run_c[j]
                need, x = _plan_row_nb(e, run_need, run_next, j, c, run_g[j], run_out[j], run_cap[j])
                if need > budget:
                    short = True  # a partial chunk, or no row at all
                    break
                if x > free:
                    short = True  # the explicit scheduler preempts
                    break
                free -= x
                budget -= need
                n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = add_speculative_row_nb(
                    n_tokens, pairs, kv_read, logits, n_sample, ctx_sample, need, c, c + 1)
            if short:
                break
        ws[FREE_BLOCKS] = free
        # The waiting requests the explicit scheduler admits at this step, after the running rows
        # (schedule rows B.., past the run's rows), and their chunks' sums, in its order.
        n_all, budget, n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = admit_speculative_nb(
            e, lay, now, reqi, reqf, ws, B, budget, n_tokens, pairs, kv_read, logits, n_sample, ctx_sample)
        free = ws[FREE_BLOCKS]
        # speculative.step_totals_nb, its memo lookups made when a step's counts change
        key = (n_tokens, logits, n_sample)
        if key != rest_key:
            rests = step_rests_nb(p, sp, n_spec, acc, lay, n_tokens, logits, n_sample)
            rest_key = key
        dt, flops, nbytes = step_totals_at_nb(p, sp, n_spec, rests, n_tokens, pairs, kv_read, logits, n_sample,
                                              ctx_sample)
        t_end = now + dt
        account_iteration_nb(e, lay, t_end, acc, dt, flops, nbytes, n_all, e.num_blocks - free)
        if free < acc[STAT_MIN_FREE_BLOCKS]:
            acc[STAT_MIN_FREE_BLOCKS] = free
        # Verify and emit: the engine's advance of decoding rows, in row order; each row that goes on
        # plans the next step as the loop above would (its sums in the same order).
        plan = NO_SUMS
        plan_need = 0
        plan_blocks = 0
        planned = True
        finished = 0
        first_done = n_rows  # the first row that ends ...
        measured_done = 0.0  # ... and those measured of them (their last inter-token latency is this step's)
        decode_tokens = 0
        out_tokens = 0
        drafts = 0
        draft_tokens = 0
        accepted_tokens = 0
        itl_from = -1.0
        itl_n = 0.0
        for j in range(B):
            c = run_c[j]
            g = run_g[j]
            need = run_need[j]
            decode_tokens += need
            emitted = 1
            if need > 1:
                accepted = accepted_at_nb(thresholds, run_hash[j], g, need - 1)
                count_accepted_nb(lay, acc, accepted)
                drafts += 1
                draft_tokens += need - 1
                accepted_tokens += accepted
                emitted += accepted
            c += emitted
            g += emitted
            cap = run_next[j]
            run_c[j] = c
            run_g[j] = g
            run_cap[j] = cap
            out_tokens += emitted
            if k == 0:  # the requests' last tokens may differ: engine._advance_nb's groups
                r = running_nb(lay, ws, j)
                if measured_nb(e, r):
                    itl_from, itl_n = itl_group_nb(e, lay, acc, t_end, reqf[r, RF_LAST_EMIT], itl_from, itl_n)
            out = run_out[j]
            if g == out:
                r = running_nb(lay, ws, j)
                _store_nb(e, lay, reqi, reqf, ws, j, r, t_end)
                retire_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, r, True)
                run_need[j] = RUN_DONE
                if measured_nb(e, r):
                    measured_done += 1.0
                if finished == 0:
                    first_done = j
                finished += 1
            else:
                need, x = _plan_row_nb(e, run_need, run_next, j, c, g, out, cap)
                plan_need += need
                plan_blocks += x
                planned = planned and x >= 0
                plan = add_speculative_row_nb(plan[0], plan[1], plan[2], plan[3], plan[4], plan[5], need, c, c + 1)
        if k > 0:  # every last token at the previous step's end: one group
            itl_from = now
            itl_n = measured
        joined = True  # every admitted row still running decodes after the step: the run goes on
        if n_all > B:
            prefill_tokens = 0
            for j in range(B, n_all):  # engine._advance_nb's rows, in its order
                r = running_nb(lay, ws, j)
                new = sched_nb(lay, ws, SCHED_NEW_TOKENS, j)
                _, after, g, total, decoding = compute_nb(reqi, r, new)
                if decoding:  # its one token left (a cached prefix): no drafts
                    decode_tokens += new
                else:
                    prefill_tokens += new
                if after == total:
                    out_tokens += 1
                    done, itl_from, itl_n = emit_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, r, g, 1, True, itl_from,
                                                    itl_n)
                    if done:
                        run_need[j] = RUN_DONE
                        if finished == 0:
                            first_done = j
                        finished += 1
                        continue
                    _load_nb(e, sp, lay, reqi, ws, j, r, glob[GLOBAL_BASE])
                    c = run_c[j]  # its plan of the next step (not RUN_DONE)
                    need, x = _plan_row_nb(e, run_need, run_next, j, c, run_g[j], run_out[j], run_cap[j])
                    plan_need += need
                    plan_blocks += x
                    planned = planned and x >= 0
                    plan = add_speculative_row_nb(plan[0], plan[1], plan[2], plan[3], plan[4], plan[5], need, c, c + 1)
                    if measured_nb(e, r):
                        measured += 1.0
                else:
                    joined = False  # a partial chunk: the explicit path goes on
            acc[STAT_PREFILL_TOKENS] += prefill_tokens
            if joined:
                B = n_all
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
        if not joined:
            break
        if finished > 0:
            if e.n_clients > 0:  # a client's next request may arrive at once
                break
            B = _drop_finished_rows_nb(lay, ws, B, first_done)  # open loop: the batch goes on
            measured -= measured_done
            if B == 0:
                break
    if k > 0:
        for j in range(B):
            r = running_nb(lay, ws, j)
            if reqi[r, RI_STATUS] == STATUS_RUNNING:
                _store_nb(e, lay, reqi, reqf, ws, j, r, now)
        if ws[FINISHED_LAST_STEP] > 0:
            drop_finished_nb(lay, reqi, ws)
    acc[STAT_FAST_ITERATIONS] += k
    return k, now


@jit_inline
def _plan_row_nb(e, run_need, run_next, j, c, g, out, cap):
    """Row ``j``'s next step (``c`` tokens computed, ``g`` of ``out`` output tokens emitted, KV
    blocks for ``cap`` tokens): its need (:func:`simcore.scheduler.need_nb`) and its blocks past
    ``cap`` (``blocks_past_nb``), written to entry ``j`` of the ``RUN_NEED`` and
    ``RUN_NEXT_CAPACITY`` rows (the rows keep their state if the step is not taken). Returns the
    need and the blocks."""
    bs = e.block_size
    need = need_nb(e, c + 1, c, g, out)
    x = blocks_past_nb(c + need, cap, bs)
    run_need[j] = need
    run_next[j] = cap + x * bs
    return need, x


@jit_inline
def _drop_finished_rows_nb(lay, ws, B, first):
    """After a step that ended some of the ``B`` rows (``RUN_NEED`` is ``RUN_DONE``; ``first``, the
    first of them): the schedule rows and the running list keep the requests still running, in
    order (``scheduler.drop_finished_nb``'s, from the rows' marks instead of each request's
    status). Returns how many."""
    n = first
    for j in range(first + 1, B):
        if sched_nb(lay, ws, RUN_NEED, j) != RUN_DONE:
            for row in (RUN_COMPUTED, RUN_GENERATED, RUN_OUTPUT, RUN_CAPACITY, RUN_HASH, RUN_NEED, RUN_NEXT_CAPACITY):
                set_sched_nb(lay, ws, row, n, sched_nb(lay, ws, row, j))
            set_running_nb(lay, ws, n, running_nb(lay, ws, j))
            n += 1
    ws[RUNNING_COUNT] = n
    return n


@jit_inline
def _load_nb(e, sp, lay, reqi, ws, j, r, base):
    """Running request ``r``'s state into schedule entry ``j`` (``RUN_*``; ``base``: the rows'
    first request's number in the whole run, for its acceptance draws' hash)."""
    set_sched_nb(lay, ws, RUN_COMPUTED, j, reqi[r, RI_COMPUTED])
    set_sched_nb(lay, ws, RUN_GENERATED, j, reqi[r, RI_GENERATED])
    set_sched_nb(lay, ws, RUN_OUTPUT, j, reqi[r, RI_OUTPUT])
    set_sched_nb(lay, ws, RUN_CAPACITY, j,
                 (reqi[r, RI_BLOCKS] - reqi[r, RI_FIXED_BLOCKS]) * e.block_size + reqi[r, RI_CACHED])
    set_sched_nb(lay, ws, RUN_HASH, j, request_hash_nb(sp.seed, r + base))


@jit_inline
def _store_nb(e, lay, reqi, reqf, ws, j, r, t_last):
    """Running request ``r``'s state back from schedule entry ``j``, its last token at ``t_last``."""
    reqi[r, RI_COMPUTED] = sched_nb(lay, ws, RUN_COMPUTED, j)
    reqi[r, RI_GENERATED] = sched_nb(lay, ws, RUN_GENERATED, j)
    reqi[r, RI_BLOCKS] = block_div_nb(e, sched_nb(lay, ws, RUN_CAPACITY, j) - reqi[r, RI_CACHED]) + reqi[r, RI_FIXED_BLOCKS]
    reqf[r, RF_LAST_EMIT] = t_last


@jit_inline
def spec_run_possible(e):
    """Whether engine ``e`` takes speculative runs: speculative decoding under continuous batching
    with chunked prefill and the fast path on, one pipeline stage."""
    return (e.fast_forward and e.num_speculative_tokens > 0 and e.policy == POLICY_CONTINUOUS and e.chunked_prefill
            and e.pipeline_stages == 1)
