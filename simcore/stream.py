"""Streamed runs: the engine over a window of request rows that slides along the workload, so
that a run's per-request state lives only while its requests are in flight.

A streamed run calls ``engine.start_run_nb`` once, then ``engine.run_events_nb`` with ``more``
set over the rows loaded so far. When it stops for more rows, :func:`drop_point_nb` says how many
leading rows have ended and are no longer referred to; the caller reads them, moves the others to
the front of its arrays, shifts every request index the engine holds with :func:`rebase_nb`,
appends the next rows and calls ``run_events_nb`` again. Row ``r`` is then request
``glob[GLOBAL_BASE] + r``. The last call, with ``more`` off, ends the run as one call over all the
rows would have: the same iterations, the same numbers.

What refers to a row: the running list (static batches keep finished rows there as padding), the
waiting queue's ring (a timed-out request stays in it until the queue reaches it), the cohort's
lists of joiners and of prefilling requests, and the counters of the next arrival and the next
send. The warm-up rule (``metrics.measured_nb``) compares a row with ``EngineSettings.warmup``: the
caller lowers it by the rows dropped. Speculative acceptance draws key on the request, not the row.

Imports codes and layout only.
"""
import numpy as np

from simcore._jit import jit, jit_inline
from simcore.codes import (
    COHORT_JOINERS,
    GLOBAL_BASE,
    GLOBAL_NEXT_ARRIVAL,
    GLOBAL_NEXT_SEND,
    PREFILLING_COUNT,
    QUEUE_ENTRIES,
    QUEUE_HEAD,
    RI_STATUS,
    SCHED_JOINER,
    SCHED_PREFILLING,
    STATUS_DONE,
    STATUS_REJECTED,
    STATUS_TIMED_OUT,
)
from simcore.layout import (
    queue_entry_nb,
    ring_nb,
    running_end_nb,
    running_nb,
    sched_nb,
    set_queue_entry_nb,
    set_running_nb,
    set_sched_nb,
)


@jit_inline
def ended_nb(status):
    """Whether a request with ``RI_STATUS`` code ``status`` has ended (done, rejected, timed out)."""
    return status == STATUS_DONE or status == STATUS_REJECTED or status == STATUS_TIMED_OUT


@jit
def drop_point_nb(lay, reqi, ws, glob):
    """How many leading rows of a paused streamed run can go: rows ``0 .. s-1`` have arrived and
    ended, and nothing in the replicas' workspaces ``ws`` (shape (n_replicas, lay.ws_len)) refers
    to them."""
    s = glob[GLOBAL_NEXT_ARRIVAL]
    for r in range(s):
        if not ended_nb(reqi[r, RI_STATUS]):
            s = r
            break
    cap = lay.wq_cap
    for k in range(ws.shape[0]):
        w = ws[k]
        for i in range(running_end_nb(w)):
            r = running_nb(lay, w, i)
            if r >= 0:  # not a hole
                s = min(s, r)
        for i in range(w[QUEUE_ENTRIES]):
            s = min(s, queue_entry_nb(lay, w, ring_nb(w[QUEUE_HEAD] + i, cap)))
        for j in range(w[COHORT_JOINERS]):
            s = min(s, sched_nb(lay, w, SCHED_JOINER, j))
        for j in range(w[PREFILLING_COUNT]):
            s = min(s, sched_nb(lay, w, SCHED_PREFILLING, j))
    return s


@jit
def rebase_nb(lay, ws, glob, s):
    """Rows ``0 .. s-1`` (:func:`drop_point_nb`) are gone and the others moved ``s`` rows up: shift
    every request index the workspaces and counters hold, and count the rows in ``GLOBAL_BASE``."""
    cap = lay.wq_cap
    for k in range(ws.shape[0]):
        w = ws[k]
        for i in range(running_end_nb(w)):
            r = running_nb(lay, w, i)
            if r >= 0:  # not a hole
                set_running_nb(lay, w, i, r - s)
        for i in range(w[QUEUE_ENTRIES]):
            pos = ring_nb(w[QUEUE_HEAD] + i, cap)
            set_queue_entry_nb(lay, w, pos, queue_entry_nb(lay, w, pos) - s)
        for j in range(w[COHORT_JOINERS]):
            set_sched_nb(lay, w, SCHED_JOINER, j, sched_nb(lay, w, SCHED_JOINER, j) - s)
        for j in range(w[PREFILLING_COUNT]):
            set_sched_nb(lay, w, SCHED_PREFILLING, j, sched_nb(lay, w, SCHED_PREFILLING, j) - s)
    glob[GLOBAL_NEXT_ARRIVAL] -= s
    glob[GLOBAL_NEXT_SEND] = max(glob[GLOBAL_NEXT_SEND] - s, 0)  # an open loop keeps 0
    glob[GLOBAL_BASE] += s


def grow_queue(lay, ws, wq_cap):
    """The layout and workspaces of ``ws``'s replicas with room for ``wq_cap`` waiting requests
    (at least ``lay.wq_cap``): the same contents, each waiting queue's ring unrolled from 0.
    Returns ``(layout, ws)``."""
    if wq_cap <= lay.wq_cap:
        return lay, ws
    new_lay = lay._replace(wq_cap=wq_cap, ws_len=lay.off_queue + wq_cap)
    new_ws = np.zeros((ws.shape[0], new_lay.ws_len), dtype=ws.dtype)
    new_ws[:, :lay.off_queue] = ws[:, :lay.off_queue]
    for k in range(ws.shape[0]):
        entries = int(ws[k, QUEUE_ENTRIES])
        ring = ws[k, lay.off_queue:lay.off_queue + lay.wq_cap]
        idx = (int(ws[k, QUEUE_HEAD]) + np.arange(entries)) % lay.wq_cap
        new_ws[k, new_lay.off_queue:new_lay.off_queue + entries] = ring[idx]
        new_ws[k, QUEUE_HEAD] = 0
    return new_lay, new_ws
