"""Metric accumulators shared by the engine loop and its fast decode path.

Everything a replica accumulates lives in one float64 array ``acc`` (its layout is
:class:`simcore.layout.Layout`: STAT_* slots, then the batch-size histogram, the time series, the ITL histogram,
the clock), so kernels pass one array instead of five.

Inter-token latencies go into a log-linear histogram indexed straight from the float's binary
exponent and top mantissa bits (no logarithm per token): ``2**itl_sub_bits`` bins per octave
from ``2**(itl_min_exp - 1)`` seconds up. Mean and standard deviation come from exact sums.
"""
import math

import numpy as np

from simcore._jit import jit_inline
from simcore.codes import (
    STAT_BUSY_S,
    STAT_FLOPS,
    STAT_ITERATIONS,
    STAT_ITL_COUNT,
    STAT_ITL_SQSUM,
    STAT_ITL_SUM,
    STAT_KV_BLOCK_SECONDS,
    STAT_MEM_BYTES,
    STAT_PEAK_BLOCKS,
    STAT_SEQ_SECONDS,
    WIN_BUSY_S,
    WIN_ITERATIONS,
    WIN_KV_BLOCK_SECONDS,
    WIN_SEQ_SECONDS,
    N_WIN,
)


@jit_inline
def itl_bin_nb(e, lay, itl):
    """Histogram bin of an inter-token latency (clamped to the first and last bins)."""
    if itl <= 0.0:
        return 0
    # frexp's itl = mant * 2**ex (mant in [0.5, 1)) from the float's bits: ex is the biased
    # exponent less 1022 and the sub-bin, int((2 * mant - 1) * sub), the mantissa's top bits (exact
    # for normal floats; a subnormal one lands below the first bin either way).
    bits = np.float64(itl).view(np.int64)
    s = e.itl_sub_bits
    ex = (bits >> 52) - 1022
    b = (ex - e.itl_min_exp) * (1 << s) + ((bits >> (52 - s)) & ((1 << s) - 1))
    if b < 0:
        return 0
    if b >= lay.n_bins:
        return lay.n_bins - 1
    return b


@jit_inline
def record_itl_nb(e, lay, acc, itl, weight):
    """Add ``weight`` inter-token latencies of ``itl`` seconds."""
    acc[STAT_ITL_SUM] += weight * itl
    acc[STAT_ITL_SQSUM] += weight * itl * itl
    acc[STAT_ITL_COUNT] += weight
    acc[lay.off_itl + itl_bin_nb(e, lay, itl)] += weight


@jit_inline
def itl_group_nb(e, lay, acc, t_end, last, itl_from, itl_n):
    """A row emits at ``t_end`` a token whose predecessor it emitted at ``last``: consecutive rows
    with the same ``last`` make one group, whose ``itl_n`` inter-token latencies of
    ``t_end - itl_from`` are recorded with one histogram lookup when a row with another ``last``
    comes (start with ``itl_from`` -1, ``itl_n`` 0; the caller records the last group). Returns the
    group's new (``itl_from``, ``itl_n``)."""
    if last != itl_from:
        if itl_n > 0.0:
            record_itl_nb(e, lay, acc, t_end - itl_from, itl_n)
        itl_from = last
        itl_n = 0.0
    return itl_from, itl_n + 1.0


@jit_inline
def measured_nb(e, r):
    """The warm-up rule: request ``r``'s tokens count in the statistics unless it is one of the
    first ``e.warmup`` requests sent."""
    return r >= e.warmup


@jit_inline
def record_request_itl_nb(e, lay, acc, r, itl):
    """Request ``r`` emitted a token ``itl`` seconds after its last one (counted unless ``r`` is
    a warm-up request)."""
    if measured_nb(e, r):
        record_itl_nb(e, lay, acc, itl, 1.0)


@jit_inline
def window_of_nb(e, lay, t):
    """Row of the time series that time ``t`` falls in (the last row takes all later times)."""
    last = lay.n_windows - 1
    w = t / e.window_s
    return int(w) if w < last else last


@jit_inline
def window_sure_until_nb(e, lay, w):
    """A time before which every time ``t`` from one in row ``w`` of the time series on is in row
    ``w`` by :func:`window_of_nb` too, without its division: a margin of 1e-12 relative keeps
    the rounding of ``t / window_s`` out (rows are far fewer than 2**40). inf for the last row."""
    if w >= lay.n_windows - 1:
        return math.inf
    return (w + 1) * e.window_s * (1.0 - 1e-12)


@jit_inline
def win_add_nb(lay, acc, w, col, value):
    """Add ``value`` to column ``col`` (``WIN_*``) of time-series row ``w``."""
    acc[lay.off_win + w * N_WIN + col] += value


@jit_inline
def batch_add_nb(e, lay, acc, n_sched, count):
    """Count ``count`` iterations of ``n_sched`` sequences in the batch-size histogram."""
    acc[lay.off_batch + (n_sched if n_sched <= e.max_num_seqs else e.max_num_seqs)] += count


@jit_inline
def account_iteration_nb(e, lay, t_end, acc, dt, flops, nbytes, n_sched, used_blocks):
    """Add one iteration of ``dt`` seconds to the totals, histograms and its window."""
    acc[STAT_BUSY_S] += dt
    acc[STAT_FLOPS] += flops
    acc[STAT_MEM_BYTES] += nbytes
    acc[STAT_ITERATIONS] += 1.0
    acc[STAT_KV_BLOCK_SECONDS] += used_blocks * dt
    acc[STAT_SEQ_SECONDS] += n_sched * dt
    if used_blocks > acc[STAT_PEAK_BLOCKS]:
        acc[STAT_PEAK_BLOCKS] = used_blocks
    batch_add_nb(e, lay, acc, n_sched, 1.0)
    w = window_of_nb(e, lay, t_end)
    win_add_nb(lay, acc, w, WIN_BUSY_S, dt)
    win_add_nb(lay, acc, w, WIN_ITERATIONS, 1.0)
    win_add_nb(lay, acc, w, WIN_SEQ_SECONDS, n_sched * dt)
    win_add_nb(lay, acc, w, WIN_KV_BLOCK_SECONDS, used_blocks * dt)
