"""Streamed runs: the engine kernel over request rows loaded a chunk at a time and dropped once
their requests have ended (``simcore.stream``), so that a summary-only run of any length holds
only the requests in flight and the chunk being loaded.

Imports simcore and nothing of simllm's but the config layer's codes: the caller
(``simllm.sim.simulate``) builds the rows and reads the ended ones.
"""
import numpy as np

from simcore import codes
from simcore.engine import (
    close_replicas_nb,
    cohort_args,
    last_finish_nb,
    lockstep_plan,
    pipeline_flag,
    run_events_nb,
    start_run_nb,
)
from simcore.stream import drop_point_nb, grow_queue, rebase_nb


def compile_run(compile_for, p, sp, e, lay, glob, acc, streamed=False):
    """Compile (or load) the kernels of a run, in memory (``simcore.engine.simulate``) or, with
    ``streamed``, :func:`run_streamed`'s, for these argument types with ``compile_for``
    (``simllm.sim.simulate.compile_for``); returns the seconds it took. Both call the event loop
    with the same types, so they share its compiled code."""
    reqi = np.zeros((1, codes.N_RI), dtype=np.int32)
    reqf = np.zeros((1, codes.N_RF))
    ws = np.zeros((e.n_replicas, lay.ws_len), dtype=np.int64)
    seconds = (compile_for(run_events_nb, p, sp, e, lay, reqi, reqf, ws, glob, acc, lockstep_plan(e),
                           pipeline_flag(e), True, *cohort_args(e))
               + compile_for(start_run_nb, e, lay, 1, ws, glob, acc)
               + compile_for(close_replicas_nb, lay, ws, acc, 0.0))
    if streamed:
        return seconds + compile_for(drop_point_nb, lay, reqi, ws, glob) + compile_for(rebase_nb, lay, ws, glob, 1)
    return seconds + compile_for(last_finish_nb, reqf)


class StreamStats:
    """What a streamed run held: ``peak_rows`` (request rows at most at once), ``capacity`` (rows
    its arrays had room for at the end) and ``pauses`` (times the kernel stopped for more rows)."""

    def __init__(self):
        self.peak_rows = self.capacity = self.pauses = 0


def run_streamed(p, sp, e, lay, chunks, n, on_rows, glob, acc, stats=None):
    """Simulate ``n`` requests whose rows come in ``chunks`` (an iterable of ``(reqi, reqf)`` in send
    order, as ``simcore.engine.simulate`` takes them, ``RI_DONE`` -1), calling
    ``on_rows(reqi, reqf, first)`` with the rows of requests ``first, first + 1, ...`` once they have
    ended (in send order; the arrays are reused after the call returns). The same run as
    ``simcore.engine.simulate`` over all the rows at once, in memory for the requests in flight and the
    chunk being loaded.

    Parameters
    ----------
    p, sp, e, lay
        As ``simcore.engine.simulate``'s; ``lay.wq_cap`` is the first capacity in rows (it
        grows as needed).
    glob : ndarray of int64, shape (N_GLOBALS,), zeroed
        The shared counters: ``glob[GLOBAL_ENDED]`` counts ended requests as the run goes.
    acc : ndarray of float64, shape (n_replicas, lay.acc_len), zeroed
        The replicas' accumulators, filled as ``simcore.engine.simulate`` fills them.
    stats : StreamStats, optional
        Filled with what the run held.

    Returns
    -------
    float
        Time the last request ended.
    """
    stats = stats if stats is not None else StreamStats()
    ws = np.zeros((e.n_replicas, lay.ws_len), dtype=np.int64)
    plan = lockstep_plan(e)
    start_run_nb(e, lay, n, ws, glob, acc)
    cap = max(lay.wq_cap, 1)
    reqi = np.zeros((cap, codes.N_RI), dtype=np.int32)
    reqf = np.zeros((cap, codes.N_RF))
    rows = 0
    end = 0.0
    it = iter(chunks)
    pending = next(it, None)
    while True:
        while pending is not None:  # load until the kernel can go on
            ci, cf = pending
            need = rows + len(ci)
            if need > cap:
                cap = max(2 * cap, need)
                reqi = _grown(reqi, rows, cap)
                reqf = _grown(reqf, rows, cap)
                lay, ws = grow_queue(lay, ws, cap)
            reqi[rows:need] = ci
            reqf[rows:need] = cf
            rows = need
            del ci, cf
            pending = None  # its arrays are free before the next are built
            pending = next(it, None)
            arrived, sent = glob[codes.GLOBAL_NEXT_ARRIVAL], glob[codes.GLOBAL_NEXT_SEND]
            if arrived < rows and (e.n_clients == 0 or sent + e.n_clients < rows):
                break
        stats.peak_rows = max(stats.peak_rows, rows)
        more = pending is not None
        base = int(glob[codes.GLOBAL_BASE])
        ew = e._replace(warmup=max(e.warmup - base, 0)) if e.warmup else e
        run_events_nb(p, sp, ew, lay, reqi[:rows], reqf[:rows], ws, glob, acc, plan, pipeline_flag(e), more,
                      *cohort_args(e))
        if not more:
            break
        stats.pauses += 1
        s = drop_point_nb(lay, reqi[:rows], ws, glob)
        if s:
            on_rows(reqi[:s], reqf[:s], base)
            end = max(end, float(reqf[:s, codes.RF_FINISH].max()))
            reqi[:rows - s] = reqi[s:rows]
            reqf[:rows - s] = reqf[s:rows]
            rows -= s
            rebase_nb(lay, ws, glob, s)
    if rows:
        on_rows(reqi[:rows], reqf[:rows], int(glob[codes.GLOBAL_BASE]))
        end = max(end, float(reqf[:rows, codes.RF_FINISH].max()))
    close_replicas_nb(lay, ws, acc, end)
    stats.capacity = cap
    return end


def _grown(a, rows, cap):
    out = np.zeros((cap,) + a.shape[1:], dtype=a.dtype)
    out[:rows] = a[:rows]
    return out
