"""Metric accumulators shared by the engine loop and its fast decode path.

Inter-token latencies go into a log-linear histogram indexed straight from the float's binary
exponent and top mantissa bits (no logarithm per token): ``2**itl_sub_bits`` bins per octave
from ``2**(itl_min_exp - 1)`` seconds up. Mean and standard deviation come from exact sums.
"""
import math

from simcore._jit import jit, jit_inline
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
)


@jit_inline
def itl_bin_nb(e, itl, n_bins):
    """Histogram bin of an inter-token latency (clamped to the first and last bins)."""
    if itl <= 0.0:
        return 0
    mant, ex = math.frexp(itl)  # itl = mant * 2**ex, mant in [0.5, 1)
    sub = 1 << e.itl_sub_bits
    b = (ex - e.itl_min_exp) * sub + int((2.0 * mant - 1.0) * sub)
    if b < 0:
        return 0
    if b >= n_bins:
        return n_bins - 1
    return b


@jit_inline
def record_itl_nb(e, itl, weight, stats, itl_hist):
    """Add ``weight`` inter-token latencies of ``itl`` seconds."""
    stats[STAT_ITL_SUM] += weight * itl
    stats[STAT_ITL_SQSUM] += weight * itl * itl
    stats[STAT_ITL_COUNT] += weight
    itl_hist[itl_bin_nb(e, itl, itl_hist.shape[0])] += weight


@jit_inline
def window_of_nb(e, t, windows):
    """Row of the time series that time ``t`` falls in (the last row takes all later times)."""
    last = windows.shape[0] - 1
    w = t / e.window_s
    return int(w) if w < last else last


@jit_inline
def account_iteration_nb(e, dt, flops, nbytes, t_end, n_sched, used_blocks, stats, batch_hist, windows):
    """Add one iteration of ``dt`` seconds to the totals, histograms and its window."""
    stats[STAT_BUSY_S] += dt
    stats[STAT_FLOPS] += flops
    stats[STAT_MEM_BYTES] += nbytes
    stats[STAT_ITERATIONS] += 1.0
    stats[STAT_KV_BLOCK_SECONDS] += used_blocks * dt
    stats[STAT_SEQ_SECONDS] += n_sched * dt
    if used_blocks > stats[STAT_PEAK_BLOCKS]:
        stats[STAT_PEAK_BLOCKS] = used_blocks
    hb = n_sched if n_sched < batch_hist.shape[0] else batch_hist.shape[0] - 1
    batch_hist[hb] += 1.0
    w = window_of_nb(e, t_end, windows)
    windows[w, WIN_BUSY_S] += dt
    windows[w, WIN_ITERATIONS] += 1.0
    windows[w, WIN_SEQ_SECONDS] += n_sched * dt
    windows[w, WIN_KV_BLOCK_SECONDS] += used_blocks * dt
