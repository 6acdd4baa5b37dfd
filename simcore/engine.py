"""The serving engine: a discrete-event loop over engine iterations (see ``scheduler.py`` for
who runs in an iteration and ``fast/`` for the fast path, the cohort and closed-form decode runs).

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
    CLOCK_COHORT,
    CLOCK_DEADLINE,
    CLOCK_NOW,
    COHORT_NEXT_DONE,
    COHORT_SIZE,
    FINISHED_LAST_STEP,
    FREE_BLOCKS,
    GLOBAL_BASE,
    GLOBAL_ENDED,
    GLOBAL_NEXT_ARRIVAL,
    GLOBAL_NEXT_SEND,
    GLOBAL_ROUTED,
    NEVER,
    N_GLOBALS,
    N_PLAN,
    PLAN_BYTES,
    PLAN_COHORT,
    PLAN_EXPLICIT,
    PLAN_FAST,
    PLAN_FLOPS,
    PLAN_PREFILL_ONLY,
    PLAN_SCHED,
    PLAN_USED,
    POLICY_CONTINUOUS,
    POLICY_DYNAMIC,
    PREEMPTED_COUNT,
    QUEUE_ENTRIES,
    QUEUE_HEAD,
    QUEUE_WAITING,
    RF_ARRIVAL,
    RF_FINISH,
    RI_COMPUTED,
    RI_DONE,
    RI_GENERATED,
    RI_INPUT,
    RI_STATUS,
    ROUTER_LEAST_OUTSTANDING,
    RUNNING_COUNT,
    SCHED_NEW_TOKENS,
    SCHED_REQUEST,
    STATUS_REJECTED,
    STATUS_RUNNING,
    STATUS_TIMED_OUT,
    STATUS_WAITING,
    STAT_DECODE_TOKENS,
    STAT_END_S,
    STAT_ENGINE_END_S,
    STAT_MIN_FREE_BLOCKS,
    STAT_PREEMPTIONS,
    STAT_PREFILL_TOKENS,
    STAT_SPEC_ACCEPTED,
    STAT_SPEC_DRAFT_TOKENS,
    STAT_SPEC_DRAFTS,
    WIN_OUTPUT_TOKENS,
)
from simcore.cost import iteration_totals_memo_nb, moe_experts_memo_nb, moe_experts_seconds_nb
from simcore.fast.cohort import (
    FAST_PREFILL_ONLY,
    FAST_SCHEDULED,
    fast_aggregates_nb,
    fast_commit_nb,
    fast_iteration_nb,
    fast_schedule_nb,
    materialize_nb,
    prefill_only_commit_nb,
    prefill_only_schedule_nb,
    rebuild_nb,
)
from simcore.fast.decode_run import decode_run_nb, pure_decode_nb
from simcore.fast.spec_run import spec_run_nb, spec_run_possible
from simcore.layout import queue_entry_nb, ring_nb, running_nb, sched_nb, set_running_nb
from simcore.metrics import account_iteration_nb, record_itl_nb, win_add_nb, window_of_nb
from simcore.pipeline import pipeline_next_nb, pipeline_pass_nb, pipeline_wait_nb
from simcore.scheduler import (
    add_speculative_row_nb,
    arrive_nb,
    blocks_for_nb,
    compute_nb,
    drop_finished_nb,
    emit_nb,
    finish_nb,
    form_static_batch_nb,
    join_nb,
    peek_nb,
    pop_front_nb,
    release_blocks_nb,
    schedule_aggregates_nb,
    schedule_continuous_nb,
    schedule_row_nb,
    schedule_speculative_nb,
)
from simcore.speculative import step_totals_nb, verify_nb


@jit_inline
def route_nb(e, lay, a, ws, acc, routed):
    """The replica (row of ``ws``/``acc``) a request arriving at ``a`` goes to, the ``routed``-th
    routed: round robin, or the fewest outstanding (waiting + running) requests at ``a``."""
    R = ws.shape[0]
    k = routed % R
    if e.router == ROUTER_LEAST_OUTSTANDING and R > 1:
        fewest = np.int64(1) << 62
        clk = lay.off_clock
        for j in range(R):
            # Requests that finish at the end of an iteration still running at `a` count.
            load = ws[j, RUNNING_COUNT] + ws[j, QUEUE_WAITING] + (
                ws[j, FINISHED_LAST_STEP] if acc[j, clk + CLOCK_NOW] > a else 0)
            if load < fewest:
                fewest = load
                k = j
    return k


@jit_inline
def wake_nb(lay, a, ws, acc, k, t_ranks):
    """Replica ``k`` gets a request at ``a``: idle, it wakes up then, or when its lockstep ranks
    step next (``t_ranks``; -inf: none busy or not lockstep)."""
    if ws[k, RUNNING_COUNT] == 0 and ws[k, QUEUE_WAITING] == 0:
        wake = max(a, t_ranks)
        if acc[k, lay.off_clock + CLOCK_NOW] < wake:
            acc[k, lay.off_clock + CLOCK_NOW] = wake


@jit
def init_replicas_nb(e, lay, ws, acc):
    """Replicas' workspaces and accumulators (zeroed) at the start of a run: every KV block but the
    pinned prefix free, no cohort, no deadline, the decode-run coefficients not yet computed."""
    pool = e.num_blocks - e.prefix_blocks
    for k in range(ws.shape[0]):
        acc[k, lay.off_memo:] = np.nan
        ws[k, FREE_BLOCKS] = pool
        ws[k, COHORT_NEXT_DONE] = NEVER
        acc[k, lay.off_clock + CLOCK_DEADLINE] = np.inf
        acc[k, STAT_MIN_FREE_BLOCKS] = pool


@jit
def last_finish_nb(reqf):
    """When the last request ended (0 if none did)."""
    end = 0.0
    for r in range(reqf.shape[0]):
        if reqf[r, RF_FINISH] > end:
            end = reqf[r, RF_FINISH]
    return end


@jit
def close_replicas_nb(lay, ws, acc, end):
    """At the end of a run whose last request ended at ``end``: each replica's preemptions, that
    end and the end of its own last iteration into its stats."""
    for k in range(ws.shape[0]):
        acc[k, STAT_PREEMPTIONS] = ws[k, PREEMPTED_COUNT]
        acc[k, STAT_END_S] = end
        acc[k, STAT_ENGINE_END_S] = max(end, acc[k, lay.off_clock + CLOCK_NOW])


@jit_inline
def earliest_nb(lay, ws, acc):
    """The busy replica whose next iteration starts first, and that time (-1, inf: none busy)."""
    best = -1
    t_best = np.inf
    for k in range(ws.shape[0]):
        if (ws[k, RUNNING_COUNT] > 0 or ws[k, QUEUE_WAITING] > 0) and acc[k, lay.off_clock + CLOCK_NOW] < t_best:
            best = k
            t_best = acc[k, lay.off_clock + CLOCK_NOW]
    return best, t_best


@jit_inline
def other_busy_nb(lay, ws, acc, k):
    """When the first busy replica other than ``k`` starts its next iteration (inf: none)."""
    t = np.inf
    for j in range(ws.shape[0]):
        if j != k and (ws[j, RUNNING_COUNT] > 0 or ws[j, QUEUE_WAITING] > 0):
            t = min(t, acc[j, lay.off_clock + CLOCK_NOW])
    return t


@jit_inline
def step_bound_nb(e, lay, ws, acc, k, bound):
    """What bounds replica ``k``'s fast-forward past ``bound`` (its next arrival or event): under a
    closed loop with replicas, another busy replica's next step too, since a request's end there
    sends the next one. Only continuous batching runs ahead; a dynamic batch's wait for its window
    must still end at the next arrival, not at another replica's step, which may be now."""
    if ws.shape[0] > 1 and e.n_clients > 0 and e.policy == POLICY_CONTINUOUS:
        return min(bound, other_busy_nb(lay, ws, acc, k))
    return bound


@jit
def _time_out_nb(e, lay, now, reqi, reqf, ws, glob, acc):
    """Abort every request of this replica whose client gave up by ``now``. Returns the next
    deadline among those left."""
    nxt = np.inf
    k = 0
    for i in range(ws[RUNNING_COUNT]):
        r = running_nb(lay, ws, i)
        if reqi[r, RI_STATUS] != STATUS_RUNNING:  # a finished row kept as static-batch padding
            set_running_nb(lay, ws, k, r)
            k += 1
            continue
        deadline = reqf[r, RF_ARRIVAL] + e.timeout_s
        if deadline <= now:
            release_blocks_nb(reqi, ws, r)
            finish_nb(e, lay, now, reqi, reqf, glob, acc, r, STATUS_TIMED_OUT)
        else:
            set_running_nb(lay, ws, k, r)
            k += 1
            nxt = min(nxt, deadline)
    ws[RUNNING_COUNT] = k
    cap = lay.wq_cap
    for i in range(ws[QUEUE_ENTRIES]):  # waiting requests leave the queue lazily
        r = queue_entry_nb(lay, ws, ring_nb(ws[QUEUE_HEAD] + i, cap))
        if reqi[r, RI_STATUS] == STATUS_WAITING:
            deadline = reqf[r, RF_ARRIVAL] + e.timeout_s
            if deadline <= now:
                ws[QUEUE_WAITING] -= 1
                finish_nb(e, lay, now, reqi, reqf, glob, acc, r, STATUS_TIMED_OUT)
            else:
                nxt = min(nxt, deadline)
    return nxt


@jit_inline
def _advance_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, n_sched, emit_all, thresholds, seed):
    """After an iteration: add each scheduled request's new tokens, emit tokens, retire the
    finished (their number goes to ``ws[FINISHED_LAST_STEP]``). Static batches keep finished rows
    as padding (``emit_all``). A row that verified ``d`` drafts (``scheduler.running_need_nb``)
    keeps the ``a`` accepted ones (``speculative.accepted_nb`` with ``Speculation.thresholds`` and
    ``.seed``) and emits ``a + 1`` tokens at once: one inter-token latency."""
    w_end = window_of_nb(e, lay, t_end)
    finished = 0
    # Counts add up here and go to acc once (integers in float64: exact in any order).
    decode_tokens = 0
    prefill_tokens = 0
    out_tokens = 0
    drafts = 0
    draft_tokens = 0
    accepted_tokens = 0
    # Rows that emitted their last token at the same time get the same inter-token latency: one
    # histogram lookup for each such group (the decoding rows of a step are one group).
    itl_from = -1.0
    itl_n = 0.0
    for j in range(n_sched):
        r = sched_nb(lay, ws, SCHED_REQUEST, j)
        new = sched_nb(lay, ws, SCHED_NEW_TOKENS, j)
        before, after, g, total, decoding = compute_nb(reqi, r, new)
        if reqi[r, RI_STATUS] != STATUS_RUNNING:
            continue  # padding row of a finished request in a static batch
        emitted = 1
        if decoding:
            decode_tokens += new
            if thresholds is not None:  # pruned without speculation
                if new > 1:  # drafts verified: the rejected ones' KV is dropped
                    accepted = verify_nb(lay, acc, thresholds, seed, r + glob[GLOBAL_BASE], g, new - 1)
                    drafts += 1
                    draft_tokens += new - 1
                    accepted_tokens += accepted
                    emitted += accepted
                    after = before + emitted
                    reqi[r, RI_COMPUTED] = after
                    total += emitted - 1
        else:
            prefill_tokens += new
        if after == total or (emit_all and after > total):
            out_tokens += emitted
            done, itl_from, itl_n = emit_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, r, g, emitted, not emit_all,
                                            itl_from, itl_n)
            if done:
                finished += 1
    if itl_n > 0.0:
        record_itl_nb(e, lay, acc, t_end - itl_from, itl_n)
    acc[STAT_DECODE_TOKENS] += decode_tokens
    acc[STAT_PREFILL_TOKENS] += prefill_tokens
    if out_tokens:
        win_add_nb(lay, acc, w_end, WIN_OUTPUT_TOKENS, float(out_tokens))
    if thresholds is not None and drafts:
        acc[STAT_SPEC_DRAFTS] += drafts
        acc[STAT_SPEC_DRAFT_TOKENS] += draft_tokens
        acc[STAT_SPEC_ACCEPTED] += accepted_tokens
    ws[FINISHED_LAST_STEP] = finished
    if not emit_all:
        if finished > 0:  # else the running list is unchanged: every member still runs
            drop_finished_nb(lay, reqi, ws)
        return
    for i in range(ws[RUNNING_COUNT]):  # a static batch keeps its rows until all of them are done
        if reqi[running_nb(lay, ws, i), RI_STATUS] == STATUS_RUNNING:
            return
    ws[RUNNING_COUNT] = 0


def _lockstep(e):
    return e.lockstep and e.n_replicas > 1 and e.policy == POLICY_CONTINUOUS


def lockstep_plan(e):
    """The ``plan`` argument of :func:`simulate`: the lockstep step's scratch rows (float64, shape
    (n_replicas, N_PLAN)) when ``e``'s replicas are lockstep ranks (``e.lockstep``, continuous
    batching, more than one) or it has pipeline stages, else None: numba then compiles the others
    without the lockstep step and the expert-parallel costs it alone uses. Lockstep ranks and
    pipeline stages share one compiled variant (this and :func:`pipeline_flag`; each path is
    taken by ``e``'s values at run time): one cold compile for both kinds of run instead of two
    (about 2 minutes of a 2-core machine)."""
    if _lockstep(e) or e.pipeline_stages > 1:
        return np.zeros((e.n_replicas, N_PLAN))
    return None


def cohort_args(e):
    """The trailing ``cohort`` argument of :func:`simulate` and :func:`run_events_nb` for ``e``:
    ``(None,)`` under speculative decoding, which has no cohort (numba then compiles those kernels
    without the cohort's paths, which are inlined: 15 s of a speculative kernel's 43 s cold compile
    on this project's VM), else none (its default, True: the kernels keep the one compiled variant
    that callers leaving it out get)."""
    return (None,) if e.num_speculative_tokens > 0 else ()


def pipeline_flag(e):
    """The ``pipe`` argument of :func:`simulate` and :func:`step_nb` for ``e``: True with pipeline
    stages or lockstep ranks (the variant they share: :func:`lockstep_plan`), else None. numba
    then compiles the others without pipeline parallelism's code (about 20 s of a plain run's cold
    start)."""
    return True if e.pipeline_stages > 1 or _lockstep(e) else None


@jit_inline
def step_nb(p, sp, e, lay, now, next_arrival, reqi, reqf, ws, glob, acc, pipe, cohort_paths=True, arrivals=False):
    """Advance one replica by one iteration (or a run of pure-decode iterations) that starts at
    ``now``; ``next_arrival`` bounds fast-forwarding. Returns the replica's new time.

    ``acc`` also holds the replica's clock: its next client deadline and last cohort advance. With
    ``e.fast_forward`` continuous batching keeps decoding requests in the cohort (fast/cohort.py) and
    takes the explicit scheduler only when the aggregate path cannot decide. Speculative decoding
    (``sp``, ``e.num_speculative_tokens`` > 0) has no cohort (its steps differ by request): its
    decode-only steps run back to back in fast/spec_run.py, the others take the explicit path;
    so does pipeline parallelism (``e.pipeline_stages`` > 1: micro-batches overlap).
    ``sp`` is None without it: numba then compiles the kernels with no trace of it (a Speculation,
    a second CostParams inside, passed through the loop's calls cost plain runs ~15%). ``pipe`` is
    :func:`pipeline_flag`'s, None without pipeline stages: likewise; ``cohort_paths`` is
    :func:`cohort_args`' (None under speculation, which leaves out the cohort's paths). With
    ``arrivals`` (one replica under an open loop, every row present: the event loop's call) a
    speculative run takes the arrivals due before its steps itself, and decode runs that end at an
    advance completing members go on at once while the next still starts before the next arrival
    (the event loop would step the replica again; same results, fewer trips through it).
    """
    ws[FINISHED_LAST_STEP] = 0
    cohort = False
    if cohort_paths is not None:  # pruned where cohort_args gives None: those kernels compile without them
        cohort = (e.fast_forward and e.policy == POLICY_CONTINUOUS and e.num_speculative_tokens == 0
                  and e.pipeline_stages == 1)
        if cohort:
            deadline = acc[lay.off_clock + CLOCK_DEADLINE]
            if now < deadline:
                # Decode runs back to back: one replica under an open loop (``arrivals``) would be
                # stepped again at once by the event loop while the run ended before the next
                # arrival (at an advance that completed members); anywhere else, one run a step.
                t = now
                ran = False
                while pure_decode_nb(e, lay, t, next_arrival, deadline, reqi, ws):
                    if ran:
                        ws[FINISHED_LAST_STEP] = 0  # as the next step would start
                    k, t_run = decode_run_nb(p, e, lay, t, next_arrival, deadline, reqi, reqf, ws, glob, acc)
                    if k == 0:
                        break
                    t = t_run
                    ran = True
                    if not arrivals:
                        break
                if ran:
                    return t
                handled, t = fast_iteration_nb(p, e, lay, now, reqi, reqf, ws, glob, acc)
                if handled:
                    return t
            materialize_nb(e, lay, acc[lay.off_clock + CLOCK_COHORT], reqi, reqf, ws)
    if sp is not None:  # pruned without speculation
        if spec_run_possible(e):
            deadline = acc[lay.off_clock + CLOCK_DEADLINE]
            if now < deadline:
                k, t = spec_run_nb(p, sp, e, lay, now, next_arrival, deadline, reqi, reqf, ws, glob, acc, arrivals)
                if k > 0:
                    return t
    t = _explicit_step_nb(p, sp, e, lay, now, next_arrival, reqi, reqf, ws, glob, acc, pipe)
    if cohort_paths is not None:
        if cohort:
            rebuild_nb(e, lay, reqi, ws)
    return t


@jit
def _schedule_continuous_step_nb(sp, e, lay, now, reqi, reqf, ws, glob, acc):
    """Schedule one continuous-batching iteration of a replica; returns the requests scheduled.
    With none, a head of the queue that cannot get blocks with the engine empty is rejected (it
    can never run)."""
    n_sched, preempted = schedule_continuous_nb(sp, e, lay, now, reqi, reqf, ws)
    if n_sched == 0 and not preempted and ws[RUNNING_COUNT] == 0:
        r = peek_nb(lay, reqi, ws)
        pop_front_nb(lay, ws)
        finish_nb(e, lay, now, reqi, reqf, glob, acc, r, STATUS_REJECTED)
    return n_sched


@jit
def _end_iteration_nb(e, lay, t_end, dt, flops, nbytes, n_sched, used, reqi, reqf, ws, glob, acc, emit_all, thresholds,
                      seed):
    """Account an iteration of ``dt`` seconds ending at ``t_end`` and advance its requests (the
    speculative acceptance ``thresholds`` and ``seed`` passed alone: the whole Speculation, drafter
    included, would be copied into every call)."""
    account_iteration_nb(e, lay, t_end, acc, dt, flops, nbytes, n_sched, used)
    if ws[FREE_BLOCKS] < acc[STAT_MIN_FREE_BLOCKS]:
        acc[STAT_MIN_FREE_BLOCKS] = ws[FREE_BLOCKS]
    _advance_nb(e, lay, t_end, reqi, reqf, ws, glob, acc, n_sched, emit_all, thresholds, seed)


@jit
def _spec_step_nb(p, sp, e, lay, reqi, ws, acc, n_sched):
    """Seconds, FLOPs, bytes and tokens of a speculative step of schedule rows 0..n_sched-1, in one
    pass over them: the target's forward (``scheduler.schedule_aggregates_nb``'s aggregates) with
    logits at every draft too (a row's drafts are the tokens it schedules past its tokens so far),
    then the drafter's passes (``speculative.draft_totals_nb``) over the rows that sample, those
    whose tokens so far are then all computed."""
    n_tokens = 0.0
    pairs = 0.0
    kv_read = 0.0
    n_sample = 0.0
    ctx_sample = 0.0
    logits = 0.0
    for j in range(n_sched):
        r = sched_nb(lay, ws, SCHED_REQUEST, j)
        n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = add_speculative_row_nb(
            n_tokens, pairs, kv_read, logits, n_sample, ctx_sample, sched_nb(lay, ws, SCHED_NEW_TOKENS, j),
            reqi[r, RI_COMPUTED], reqi[r, RI_INPUT] + reqi[r, RI_GENERATED])
    # Each pass's cost but attention's is looked up in the replica's memo (steps repeat their
    # tokens and rows: Layout.off_rest).
    dt, flops, nbytes = step_totals_nb(p, sp, e.num_speculative_tokens, acc, lay, n_tokens, pairs, kv_read,
                                       logits, n_sample, ctx_sample)
    return dt, flops, nbytes, n_tokens


@jit
def _explicit_step_nb(p, sp, e, lay, now, next_arrival, reqi, reqf, ws, glob, acc, pipe):
    """One iteration with every request's state explicit (the scheduler of scheduler.py); ``pipe``
    as :func:`step_nb`'s."""
    if now >= acc[lay.off_clock + CLOCK_DEADLINE]:
        acc[lay.off_clock + CLOCK_DEADLINE] = _time_out_nb(e, lay, now, reqi, reqf, ws, glob, acc)
        return now
    continuous = e.policy == POLICY_CONTINUOUS
    pad_to = 0
    fused = False  # a speculative step scheduled with its aggregates (scheduler.schedule_speculative_nb)
    n_tokens = pairs = kv_read = logits = n_sample = ctx_sample = 0.0
    if continuous:
        n_sched = 0
        if sp is not None and e.fast_forward and e.chunked_prefill and e.pipeline_stages == 1:
            n_sched, n_tokens, pairs, kv_read, logits, n_sample, ctx_sample = schedule_speculative_nb(
                e, lay, now, reqi, reqf, ws)
            fused = n_sched > 0
        if not fused:
            n_sched = _schedule_continuous_step_nb(sp, e, lay, now, reqi, reqf, ws, glob, acc)
        if n_sched == 0:
            if pipe is not None:  # pruned without pipeline stages
                if e.pipeline_stages > 1:  # every runnable request is in flight: wait for a batch
                    return pipeline_wait_nb(e, lay, acc, now)
            return now
        used = e.num_blocks - ws[FREE_BLOCKS]
    else:
        if ws[RUNNING_COUNT] == 0:
            if e.policy == POLICY_DYNAMIC and ws[QUEUE_WAITING] < e.batch_max:
                start = reqf[peek_nb(lay, reqi, ws), RF_ARRIVAL] + e.batch_window_s
                if now < start:
                    return min(start, next_arrival)
            n_sched = form_static_batch_nb(e, lay, now, reqi, reqf, ws)
            if e.pad_prompts:
                for j in range(n_sched):
                    pad_to = max(pad_to, sched_nb(lay, ws, SCHED_NEW_TOKENS, j))
        else:
            n_sched = ws[RUNNING_COUNT]
            for j in range(n_sched):
                schedule_row_nb(lay, ws, j, running_nb(lay, ws, j), 1)
        used = ws[RUNNING_COUNT] * blocks_for_nb(e, e.max_model_len, 0, 0)

    if sp is None:  # numba prunes the other branch: plain runs carry no trace of speculation
        # The iteration's cost from its batch aggregates (a static batch emits on every row).
        n_tokens, pairs, kv_read, n_emit = schedule_aggregates_nb(lay, reqi, ws, n_sched, pad_to)
        if not continuous:
            n_emit = float(n_sched)
        dt, flops, nbytes = iteration_totals_memo_nb(p, acc, lay.off_prefix, lay.prefix_slots, n_tokens, pairs, kv_read,
                                                     n_emit)
        if pipe is not None:  # pruned without pipeline stages
            if e.pipeline_stages > 1:
                # The batch passes the stages; each of a replica's GPUs holds 1 / stages of it.
                t_end = pipeline_pass_nb(p, e, lay, acc, now, n_tokens, n_emit, dt)
                share = 1.0 / e.pipeline_stages
                _end_iteration_nb(e, lay, t_end, dt * share, flops * share, nbytes * share, n_sched, used, reqi,
                                  reqf, ws, glob, acc, not continuous, None, 0)
                return pipeline_next_nb(e, lay, acc, now)
        t_end = now + dt
        _end_iteration_nb(e, lay, t_end, dt, flops, nbytes, n_sched, used, reqi, reqf, ws, glob, acc,
                          not continuous, None, 0)
    else:
        if fused:
            dt, flops, nbytes = step_totals_nb(p, sp, e.num_speculative_tokens, acc, lay, n_tokens, pairs,
                                               kv_read, logits, n_sample, ctx_sample)
        else:  # continuous batching only
            dt, flops, nbytes, _ = _spec_step_nb(p, sp, e, lay, reqi, ws, acc, n_sched)
        t_end = now + dt
        _end_iteration_nb(e, lay, t_end, dt, flops, nbytes, n_sched, used, reqi, reqf, ws, glob, acc,
                          not continuous, sp.thresholds, sp.seed)
    return t_end


@jit
def lockstep_step_nb(p, sp, e, lay, now, reqi, reqf, ws, glob, acc, plan):
    """One iteration of every busy replica together, as attention data-parallel ranks with expert
    parallelism run (vLLM's, SGLang's and TensorRT-LLM's wide-EP deployments): each MoE layer's
    dispatch and combine wait for every rank, so the step takes the slowest rank's own work (its
    attention, dense layers, router and all-to-all) plus the experts over every rank's tokens
    together (every rank at the largest one's tokens when those are at most ``e.dp_pad_tokens``, a
    CUDA-graph step); a rank with nothing to run joins with an empty batch. Continuous batching only.
    ``plan`` is scratch, float64 ``(n_replicas, N_PLAN)``. Returns the step's end, or ``now`` when
    clients timed out or no replica could schedule anything (the queues changed: the caller routes
    what arrived and tries again).

    With ``e.fast_forward`` and no speculation each rank keeps its decoding requests in a cohort
    (fast/cohort.py) as one replica's step does: a rank's step is scheduled in aggregate
    (``fast_schedule_nb``; a v0 prefill-only step beside the cohort as one replica's step runs it)
    unless it needs the explicit scheduler, which then runs on its materialised requests, so that a step costs O(ranks + requests joining or finishing) instead of
    O(requests running): a wide-EP decode pool runs hundreds of requests per rank."""
    clk = lay.off_clock
    cohort = False
    if sp is None:  # pruned under speculation, which has no cohort
        cohort = e.fast_forward and e.pipeline_stages == 1
    timed_out = False
    for k in range(e.n_replicas):
        if now >= acc[k, clk + CLOCK_DEADLINE]:
            if cohort:
                materialize_nb(e, lay, acc[k, clk + CLOCK_COHORT], reqi, reqf, ws[k])
            acc[k, clk + CLOCK_DEADLINE] = _time_out_nb(e, lay, now, reqi, reqf, ws[k], glob, acc[k])
            if cohort:
                rebuild_nb(e, lay, reqi, ws[k])
            timed_out = True
    if timed_out:
        return now  # as one replica's step: clients' next requests are routed first
    slowest = 0.0
    all_tokens = 0.0
    most_tokens = 0.0
    k_most = 0
    for k in range(e.n_replicas):
        plan[k, PLAN_SCHED] = 0.0
        plan[k, PLAN_FAST] = PLAN_EXPLICIT
        if ws[k, RUNNING_COUNT] == 0 and ws[k, QUEUE_WAITING] == 0:
            continue
        if sp is None:
            fast = False
            prefill_only = False
            n_sched = 0
            if cohort:
                what, n_sched = fast_schedule_nb(e, lay, now, reqi, reqf, ws[k])
                # an empty fast schedule changed nothing: the explicit one rejects what cannot run
                fast = what == FAST_SCHEDULED and ws[k, COHORT_SIZE] + n_sched > 0
                # a v0 prefill-only step (SGLang's decode ranks admitting a request whose cache
                # arrived) leaves the cohort as it is, as one replica's step does
                prefill_only = what == FAST_PREFILL_ONLY
                if prefill_only:
                    n_sched = prefill_only_schedule_nb(e, lay, now, reqi, reqf, ws[k])
                    prefill_only = n_sched > 0
                if not (fast or prefill_only):
                    materialize_nb(e, lay, acc[k, clk + CLOCK_COHORT], reqi, reqf, ws[k])
            if fast:
                n_tokens, pairs, kv_read, n_emit = fast_aggregates_nb(lay, reqi, ws[k], n_sched)
            elif prefill_only:
                n_tokens, pairs, kv_read, _ = schedule_aggregates_nb(lay, reqi, ws[k], n_sched, 0)
                n_emit = float(n_sched)
            else:
                n_sched = _schedule_continuous_step_nb(sp, e, lay, now, reqi, reqf, ws[k], glob, acc[k])
                if n_sched == 0:
                    if cohort:
                        rebuild_nb(e, lay, reqi, ws[k])
                    continue
                n_tokens, pairs, kv_read, n_emit = schedule_aggregates_nb(lay, reqi, ws[k], n_sched, 0)
            dt, flops, nbytes = iteration_totals_memo_nb(p, acc[k], lay.off_prefix, lay.prefix_slots, n_tokens, pairs,
                                                         kv_read, n_emit)
            plan[k, PLAN_FAST] = PLAN_COHORT if fast else (PLAN_PREFILL_ONLY if prefill_only else PLAN_EXPLICIT)
        else:  # the drafts' logits and the drafter's passes, on each rank's own batch
            n_sched = _schedule_continuous_step_nb(sp, e, lay, now, reqi, reqf, ws[k], glob, acc[k])
            if n_sched == 0:
                continue
            dt, flops, nbytes, n_tokens = _spec_step_nb(p, sp, e, lay, reqi, ws[k], acc[k], n_sched)
        slowest = max(slowest, dt - moe_experts_memo_nb(p, acc[k], lay.off_prefix, lay.prefix_slots, n_tokens))
        all_tokens += n_tokens
        if n_tokens > most_tokens:
            most_tokens = n_tokens
            k_most = k
        plan[k, PLAN_SCHED] = n_sched
        plan[k, PLAN_FLOPS] = flops
        plan[k, PLAN_BYTES] = nbytes
        plan[k, PLAN_USED] = e.num_blocks - ws[k, FREE_BLOCKS]
    if all_tokens == 0.0:
        return now
    # The experts' cost at a rank's mean tokens is their cost over all ranks' tokens (moe_dp); a
    # CUDA-graph step pads every rank to the largest one's tokens (vLLM).
    if most_tokens <= e.dp_pad_tokens:
        dt = slowest + moe_experts_memo_nb(p, acc[k_most], lay.off_prefix, lay.prefix_slots, most_tokens)
    else:
        dt = slowest + moe_experts_seconds_nb(p, all_tokens / e.n_replicas)
    t_end = now + dt
    # False (continuous batching only), as a value: a literal False would have numba compile
    # _end_iteration_nb once more than the steps' own calls do (Literal[bool] against bool)
    emit_all = e.policy != POLICY_CONTINUOUS
    for k in range(e.n_replicas):
        n_sched = np.int64(plan[k, PLAN_SCHED])
        if sp is None:
            if plan[k, PLAN_FAST] == PLAN_PREFILL_ONLY:
                prefill_only_commit_nb(e, lay, t_end, dt, plan[k, PLAN_FLOPS], plan[k, PLAN_BYTES], n_sched, reqi, reqf,
                                       ws[k], glob, acc[k])
            elif plan[k, PLAN_FAST] == PLAN_COHORT:
                fast_commit_nb(e, lay, t_end, dt, plan[k, PLAN_FLOPS], plan[k, PLAN_BYTES], n_sched, reqi, reqf, ws[k],
                               glob, acc[k])
            elif n_sched > 0:
                _end_iteration_nb(e, lay, t_end, dt, plan[k, PLAN_FLOPS], plan[k, PLAN_BYTES], n_sched,
                                  np.int64(plan[k, PLAN_USED]), reqi, reqf, ws[k], glob, acc[k], emit_all, None, 0)
                if cohort:
                    rebuild_nb(e, lay, reqi, ws[k])
        elif n_sched > 0:
            _end_iteration_nb(e, lay, t_end, dt, plan[k, PLAN_FLOPS], plan[k, PLAN_BYTES], n_sched,
                              np.int64(plan[k, PLAN_USED]), reqi, reqf, ws[k], glob, acc[k], emit_all, sp.thresholds,
                              sp.seed)
    return t_end


def simulate(p, sp, e, lay, reqi, reqf, acc, glob=None):
    """Simulate ``e.n_replicas`` engine replicas behind a router serving the requests of
    ``reqi``/``reqf``: :func:`start_run_nb`, :func:`run_events_nb` over every row,
    :func:`last_finish_nb` and :func:`close_replicas_nb`, called from Python (four calls of a few
    microseconds), so that an in-memory run, a run reporting progress and a streamed run
    (``simcore.stream``) share one compiled event loop per argument types instead of each
    compiling its own (a whole cold compile each: minutes on a 2-core machine). The loop's
    type-level arguments come from ``e`` alone (:func:`pipeline_flag`, :func:`lockstep_plan`,
    :func:`cohort_args`), so every caller of a kind of run reaches the same compiled variant.

    Requests are routed when they arrive: round robin in send order, or to the replica with the
    fewest outstanding (waiting + running) requests at that moment. Replicas advance one
    iteration at a time, earliest first, so every arrival is routed before any replica starts
    an iteration after it.

    Parameters
    ----------
    p : CostParams
    sp : Speculation or None
        Speculative decoding's acceptance and drafter (None without it).
    e : EngineSettings
    lay : Layout
        Offsets of ``acc`` and of the replicas' workspaces (``simcore.layout.make_layout``).
    reqi : ndarray of int32, shape (n, N_RI)
        Per-request integer state (columns ``RI_*``). In: ``RI_INPUT``, ``RI_OUTPUT`` (>= 1),
        ``RI_CACHED`` (a multiple of ``block_size``, below the prompt), the rest 0. Out:
        ``RI_GENERATED``, ``RI_PREEMPTIONS``, ``RI_STATUS``, ``RI_REPLICA``.
    reqf : ndarray of float64, shape (n, N_RF)
        Per-request times (columns ``RF_*``). In: ``RF_ARRIVAL`` non-decreasing (closed loop: the
        first ``n_clients`` set, the rest ``inf``, filled in as clients free up, in send-time order:
        see ``scheduler.client_next_nb``); ``RF_FINISH`` the closed loop's ready times (0, or
        open-loop times under a rate limit) or -1; ``RF_CLIENT_DELAY`` (``RF_LAST_EMIT``'s
        column) the closed loop's client delays (<= 0: none); the others -1. Out: first
        scheduled, first token and finish times.
    acc : ndarray of float64, shape (n_replicas, lay.acc_len)
        Per replica, zeroed: the ``STAT_*`` totals, then (at the offsets in ``lay``) the batch-size
        histogram (iterations by sequences in the batch), the time series (``n_windows`` rows of
        ``N_WIN`` columns, by ``window_s``; the last row takes all later times), the
        inter-token-latency histogram (``metrics.itl_bin_nb``) and the clock.
    glob : ndarray of int64, shape (N_GLOBALS,), optional
        The shared counters, zeroed: ``glob[GLOBAL_ENDED]`` counts ended requests as the run goes,
        so another thread can report progress while this one (which holds no GIL) simulates.
        Default: a new one.

    Returns
    -------
    float
        Time the last request ended.
    """
    if glob is None:
        glob = np.zeros(N_GLOBALS, dtype=np.int64)
    ws = np.zeros((e.n_replicas, lay.ws_len), dtype=np.int64)  # per replica: slots, cohort phases, lists, queue
    reqi[:, RI_DONE] = -1
    start_run_nb(e, lay, reqi.shape[0], ws, glob, acc)
    run_events_nb(p, sp, e, lay, reqi, reqf, ws, glob, acc, lockstep_plan(e), pipeline_flag(e), False, *cohort_args(e))
    end = last_finish_nb(reqf)
    close_replicas_nb(lay, ws, acc, end)
    return end


@jit
def start_run_nb(e, lay, n_requests, ws, glob, acc):
    """Set up a run of ``n_requests`` requests in all: the replicas' zeroed workspaces ``ws`` (shape
    (n_replicas, lay.ws_len)) and accumulators ``acc``, and the counters ``glob``. The request rows'
    ``RI_DONE`` must be -1 (not in a cohort)."""
    glob[GLOBAL_NEXT_SEND] = e.n_clients if e.n_clients < n_requests else n_requests
    glob[GLOBAL_NEXT_ARRIVAL] = 0  # requests arrive in index order
    init_replicas_nb(e, lay, ws, acc)


@jit
def run_events_nb(p, sp, e, lay, reqi, reqf, ws, glob, acc, plan, pipe, more, cohort=True):
    """The event loop of :func:`simulate` after :func:`start_run_nb`: route each arrival, step the
    replica whose next iteration starts first, until every request of ``reqi``/``reqf`` has ended.
    ``plan`` (float64, shape (n_replicas, N_PLAN) with lockstep ranks, else (0, N_PLAN)) is the
    lockstep step's scratch (:func:`lockstep_plan`, None unless lockstep); ``pipe`` is
    :func:`pipeline_flag`'s, ``cohort`` :func:`cohort_args`'.

    With ``more`` (a streamed run, ``simcore.stream``: rows after these are still to come), it
    returns True instead, before anything else happens, once the next arrival is not among the
    rows, or a closed loop's clients could send past them (``e.n_clients`` requests can end in
    one step, each sending the next). Called again with the rows extended, it goes on exactly as
    one call over all the rows would. Returns True when it stopped for more rows, False when
    every request of the rows has ended (or none can arrive any more)."""
    n = reqi.shape[0]
    R = e.n_replicas
    continuous = e.policy == POLICY_CONTINUOUS
    clk = lay.off_clock
    ws0, acc0 = ws[0], acc[0]
    lockstep = e.lockstep and R > 1 and continuous
    # One replica of an open loop whose rows are all here: a speculative run takes the arrivals
    # itself (the rules below: arrive_nb, join_nb) and goes on.
    inline_arrivals = R == 1 and e.n_clients == 0 and not more
    if pipe is None and e.pipeline_stages > 1:
        raise ValueError("pipeline stages need simcore.engine.pipeline_flag(e)")
    if plan is None and lockstep:
        raise ValueError("lockstep ranks need simcore.engine.lockstep_plan(e)")
    while glob[GLOBAL_ENDED] - glob[GLOBAL_BASE] < n:
        nxt = glob[GLOBAL_NEXT_ARRIVAL]
        if more and (nxt >= n or (e.n_clients > 0 and glob[GLOBAL_NEXT_SEND] + e.n_clients >= n)):
            return True
        a = reqf[nxt, RF_ARRIVAL] if nxt < n else np.inf
        best, t_best = earliest_nb(lay, ws, acc)
        if best < 0 or a <= t_best:
            if a == np.inf:
                break  # nothing left that can arrive
            if not arrive_nb(e, lay, a, reqi, reqf, glob, acc0, nxt):
                continue
            k = route_nb(e, lay, a, ws, acc, glob[GLOBAL_ROUTED])
            wake_nb(lay, a, ws, acc, k, t_best if lockstep and best >= 0 else -np.inf)
            join_nb(e, lay, a, reqi, ws0 if R == 1 else ws[k], acc0 if R == 1 else acc[k], glob, nxt, k,
                    clk + CLOCK_DEADLINE)
            continue
        if plan is not None and lockstep:  # pruned without lockstep_plan's rows
            t = lockstep_step_nb(p, sp, e, lay, t_best, reqi, reqf, ws, glob, acc, plan)
            for k in range(R):  # idle ranks step too (with an empty batch)
                if acc[k, clk + CLOCK_NOW] < t:
                    acc[k, clk + CLOCK_NOW] = t
        else:  # one inlined step (the common case, one replica, without a per-step row view)
            ws_k = ws0 if R == 1 else ws[best]
            acc_k = acc0 if R == 1 else acc[best]
            bound = step_bound_nb(e, lay, ws, acc, best, a)
            acc_k[clk + CLOCK_NOW] = step_nb(p, sp, e, lay, t_best, bound, reqi, reqf, ws_k, glob, acc_k, pipe, cohort,
                                             inline_arrivals)
    return False
