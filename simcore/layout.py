"""Where things live in a replica's two arrays: the :class:`Layout` NamedTuple of offsets and
capacities, the one function that computes it (:func:`make_layout`, for simllm and the tests), and
the small inline accessors kernels use instead of offset arithmetic.

The float accumulator ``acc`` holds the ``STAT_*`` totals, a batch-size histogram of
``max_num_seqs + 1`` bins, ``n_windows`` time-series rows of ``N_WIN`` columns, ``n_bins`` ITL bins,
the clock (``CLOCK_*``), a pipelined replica's stage and batch times (``simcore.pipeline``), the
accepted drafts by position, the decode-run coefficients by batch size (``MEMO_*``, ``N_MEMO`` per
size) and the memo tables of batch costs (``REST_*``, ``PREFIX_*``, ``EMIT_*``). The int64
workspace ``ws`` holds the workspace slots (``QUEUE_HEAD`` ... in codes.py), the decode cohort's
``block_size`` phase counts, the running list in admission order and beside it each running
request's ``RI_DONE`` and the cohort's buckets of members by ``RI_DONE`` (a completion finds its
members there, without a pass over the running list), ``N_SCHED_ROWS`` schedule rows of
``sched_cap`` entries (``SCHED_*``) and the waiting queue, a ring buffer of ``wq_cap`` entries
whose front takes preempted requests. Fixed slot indices are in codes.py; the
offsets here depend on sizes.
"""
from typing import NamedTuple

import numpy as np

from simcore._jit import jit_inline
from simcore.codes import (
    COHORT_SIZE,
    DONE_RING,
    NEVER,
    N_CLOCK,
    N_EMIT,
    N_MEMO,
    N_PREFIX,
    N_REST,
    N_SCHED_ROWS,
    N_STATS,
    N_WIN,
    N_WORKSPACE_SLOTS,
    PREFIX_SLOTS,
    REST_SLOTS,
    RUNNING_COUNT,
    RUNNING_HOLES,
)


class Layout(NamedTuple):
    """Offsets and capacities of a replica's accumulator ``acc`` and workspace ``ws``."""

    # float64 accumulator
    n_windows: int  # time-series rows
    n_bins: int  # ITL histogram bins
    off_batch: int  # batch-size histogram (max_num_seqs + 1 bins)
    off_win: int  # time series (n_windows rows of N_WIN columns)
    off_itl: int  # ITL histogram
    off_clock: int  # CLOCK_* slots
    off_pipe: int  # pipeline parallelism (simcore.pipeline): stages' free times, then the ring of
    #                the last batches' completion times (pipeline_stages each; none without it)
    off_spec: int  # speculative decoding: verifications by drafts accepted (0 .. positions: one
    #                slot each, up to off_memo; none without it)
    off_memo: int  # MEMO_* slots, N_MEMO per batch size 0..max_num_seqs
    off_rest: int  # REST_* memo tables: the model's, then the drafter's (N_REST x rest_slots each)
    rest_slots: int  # entries of each (a power of two: REST_SLOTS under speculation, else 1)
    off_prefix: int  # PREFIX_* memo table (N_PREFIX x prefix_slots), then EMIT_* (N_EMIT x prefix_slots)
    prefix_slots: int  # its entries (a power of two: PREFIX_SLOTS without speculation, else 1)
    acc_len: int
    # int64 workspace
    sched_cap: int  # entries of a schedule row
    run_cap: int  # entries of the running list and its rows: twice sched_cap, room for its holes
    wq_cap: int  # entries of the waiting queue's ring
    off_phase: int  # the cohort's members by block phase (block_size counts)
    off_run: int  # running list (-1: a hole, RUNNING_HOLES)
    off_run_done: int  # RI_DONE of each running request, entry for entry (-1 outside the cohort)
    off_run_chain: int  # entry for entry, the next member (entry + 1; 0 ends) in the member's bucket
    off_done_ring: int  # DONE_RING buckets: each the first member (entry + 1; 0: none) by RI_DONE mod DONE_RING
    off_sched: int  # N_SCHED_ROWS schedule rows
    off_queue: int  # waiting queue
    ws_len: int


def make_layout(max_num_seqs, block_size, n_requests, n_windows, n_bins, pipeline_stages=1, spec_positions=0):
    """The :class:`Layout` of a replica of an engine with these sizes."""
    off_batch = N_STATS
    off_win = off_batch + max_num_seqs + 1
    off_itl = off_win + n_windows * N_WIN
    off_clock = off_itl + n_bins
    off_pipe = off_clock + N_CLOCK
    off_spec = off_pipe + (2 * pipeline_stages if pipeline_stages > 1 else 0)
    off_memo = off_spec + (spec_positions + 1 if spec_positions > 0 else 0)
    off_rest = off_memo + (max_num_seqs + 1) * N_MEMO
    rest_slots = REST_SLOTS if spec_positions > 0 else 1
    off_prefix = off_rest + 2 * rest_slots * N_REST
    prefix_slots = 1 if spec_positions > 0 else PREFIX_SLOTS
    cap = max(max_num_seqs, 1)
    off_phase = N_WORKSPACE_SLOTS
    run_cap = 2 * cap
    off_run = off_phase + block_size
    off_run_done = off_run + run_cap
    off_run_chain = off_run_done + run_cap
    off_done_ring = off_run_chain + run_cap
    off_sched = off_done_ring + DONE_RING
    off_queue = off_sched + N_SCHED_ROWS * cap
    wq_cap = max(n_requests, 1)
    return Layout(n_windows=n_windows, n_bins=n_bins, off_batch=off_batch, off_win=off_win, off_itl=off_itl,
                  off_clock=off_clock, off_pipe=off_pipe, off_spec=off_spec,
                  off_memo=off_memo, off_rest=off_rest, rest_slots=rest_slots, off_prefix=off_prefix,
                  prefix_slots=prefix_slots, acc_len=off_prefix + prefix_slots * (N_PREFIX + N_EMIT),
                  sched_cap=cap, run_cap=run_cap, wq_cap=wq_cap, off_phase=off_phase, off_run=off_run,
                  off_run_done=off_run_done, off_run_chain=off_run_chain, off_done_ring=off_done_ring,
                  off_sched=off_sched,
                  off_queue=off_queue, ws_len=off_queue + wq_cap)


def accepted_per_position(lay, acc):
    """Verified drafts accepted at each position, summed over the replicas of ``acc`` (shape
    (n_replicas, acc_len)): float64 counts, one per speculative position (empty without). Position
    ``i`` was accepted by every verification that kept more than ``i`` drafts: the histogram's
    tail sums (exact: integer counts)."""
    hist = acc[:, lay.off_spec:lay.off_memo].sum(axis=0)
    return np.cumsum(hist[::-1])[::-1][1:].copy()


def split_accumulator(lay, acc):
    """Views of ``acc`` (shape (n_replicas, acc_len)): stats (n_replicas, N_STATS), batch-size
    histogram, time series (n_windows, N_WIN) and ITL histogram, each summed over replicas."""
    stats = acc[:, :N_STATS]
    batch = acc[:, lay.off_batch:lay.off_win].sum(axis=0)
    windows = acc[:, lay.off_win:lay.off_itl].sum(axis=0).reshape(lay.n_windows, N_WIN)
    itl = acc[:, lay.off_itl:lay.off_clock].sum(axis=0)
    return stats, batch, windows, itl


# ----------------------------------------------------------------------------- accessors of ws
@jit_inline
def sched_nb(lay, ws, row, j):
    """Entry ``j`` of schedule row ``row`` (``SCHED_*``)."""
    return ws[lay.off_sched + row * lay.sched_cap + j]


@jit_inline
def set_sched_nb(lay, ws, row, j, value):
    ws[lay.off_sched + row * lay.sched_cap + j] = value


@jit_inline
def sched_row_nb(lay, ws, row):
    """Schedule row ``row`` as a view of ``ws`` (``lay.sched_cap`` entries): entry ``j`` is
    :func:`sched_nb`'s, and a loop over the entries indexes the view without recomputing (and
    bounds-wrapping) the offset at each."""
    o = lay.off_sched + row * lay.sched_cap
    return ws[o:o + lay.sched_cap]


@jit_inline
def running_nb(lay, ws, i):
    """The ``i``-th entry of the running list in admission order: a request, or -1 (a hole: see
    :func:`running_end_nb`)."""
    return ws[lay.off_run + i]


@jit_inline
def set_running_nb(lay, ws, i, r):
    ws[lay.off_run + i] = r


@jit_inline
def running_end_nb(ws):
    """Entries of the running list: its ``ws[RUNNING_COUNT]`` requests and the ``ws[RUNNING_HOLES]``
    holes (-1) that cohort members completing left (``cohort.complete_members_nb``). Holes exist only
    while the cohort runs: :func:`compact_running_nb` removes them before anything else reads the
    list (the explicit scheduler, a preemption, a static batch)."""
    return ws[RUNNING_COUNT] + ws[RUNNING_HOLES]


@jit_inline
def running_rows_nb(lay, ws):
    """The running list, each entry's ``RI_DONE`` (-1 outside the cohort and for holes; the explicit
    scheduler leaves none) and each member's next in its bucket, as views of ``ws`` of
    ``lay.run_cap`` entries, then the ``DONE_RING`` buckets (see :func:`link_done_nb`). For kernels:
    numba cannot return views to Python without reference counting."""
    o = lay.off_run
    c = lay.run_cap
    return (ws[o:o + c], ws[lay.off_run_done:lay.off_run_done + c], ws[lay.off_run_chain:lay.off_run_chain + c],
            ws[lay.off_done_ring:lay.off_done_ring + DONE_RING])


@jit_inline
def set_running_done_nb(lay, ws, i, done):
    ws[lay.off_run_done + i] = done


@jit_inline
def find_running_nb(lay, ws, r):
    """Where running request ``r`` is in the running list (searched from the end: the newest
    admitted, those that finish their prefill first, are last); -1 if it is not there."""
    i = running_end_nb(ws) - 1
    o = lay.off_run
    while i >= 0 and ws[o + i] != r:
        i -= 1
    return i


@jit_inline
def link_done_nb(lay, ws, i, done):
    """Entry ``i`` of the running list, a cohort member completing at advance ``done``, goes into
    bucket ``done % DONE_RING``: a chain through ``Layout.off_run_chain`` (entries + 1, 0 ends it),
    in no particular order. A bucket holds the members completing at ``done``, ``done +
    DONE_RING``, ... ; a completion walks one bucket instead of the whole running list."""
    b = lay.off_done_ring + (done & (DONE_RING - 1))
    ws[lay.off_run_chain + i] = ws[b]
    ws[b] = i + 1


@jit_inline
def next_done_nb(lay, ws, d):
    """The smallest ``RI_DONE`` above advance ``d`` among the cohort's members (NEVER if there is
    none): the buckets from ``d + 1`` on, one lap of the ring, then (members further than a lap
    ahead) the running list's row."""
    ring = lay.off_done_ring
    chain = lay.off_run_chain
    row = lay.off_run_done
    for v in range(d + 1, d + DONE_RING + 1):
        j = ws[ring + (v & (DONE_RING - 1))]
        while j != 0:
            if ws[row + j - 1] == v:
                return v
            j = ws[chain + j - 1]
    nxt = NEVER
    for i in range(running_end_nb(ws)):
        v = ws[row + i]
        if v > d and v < nxt:
            nxt = v
    return nxt


@jit_inline
def compact_running_nb(lay, ws):
    """The running list without its holes, in order; members' buckets relinked for their new
    entries."""
    if ws[RUNNING_HOLES] == 0:
        return
    run, done, _, ring = running_rows_nb(lay, ws)
    members = ws[COHORT_SIZE] > 0
    n = running_end_nb(ws)
    if members:
        for i in range(n):
            if done[i] >= 0:
                ring[done[i] & (DONE_RING - 1)] = 0
    k = 0
    for i in range(n):
        if run[i] >= 0:
            run[k] = run[i]
            done[k] = done[i]
            k += 1
    ws[RUNNING_HOLES] = 0
    if members:
        for i in range(k):
            if done[i] >= 0:
                link_done_nb(lay, ws, i, done[i])


@jit_inline
def ring_nb(i, cap):
    """``i % cap`` for ``0 <= i < 2 * cap``, without a division (an int64 division takes tens of
    cycles): a position in the waiting queue's ring from the head plus an offset."""
    return i - cap if i >= cap else i


@jit_inline
def queue_entry_nb(lay, ws, pos):
    """Position ``pos`` (0 .. wq_cap - 1) of the waiting queue's ring."""
    return ws[lay.off_queue + pos]


@jit_inline
def set_queue_entry_nb(lay, ws, pos, r):
    ws[lay.off_queue + pos] = r


@jit_inline
def phase_slot_nb(lay, phase):
    """Index in ``ws`` of the count of cohort members in block phase ``phase``."""
    return lay.off_phase + phase


@jit_inline
def memo_slot_nb(lay, batch_size):
    """Index in ``acc`` of the decode-run coefficients (``MEMO_*``) of ``batch_size``."""
    return lay.off_memo + batch_size * N_MEMO
