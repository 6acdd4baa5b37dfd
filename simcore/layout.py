"""Offsets of a replica's float accumulator (see ``EngineParams``): the one place they are
computed, for simllm and the tests."""
from simcore.codes import N_CLOCK, N_STATS, N_WIN


def accumulator_layout(max_num_seqs, n_windows, n_bins):
    """EngineParams fields (``n_windows``, ``n_bins``, ``off_batch``, ``off_win``, ``off_itl``,
    ``off_clock``, ``acc_len``) for an accumulator holding the STAT_* totals, a batch-size
    histogram of ``max_num_seqs + 1`` bins, ``n_windows`` time-series rows and ``n_bins`` ITL bins."""
    off_batch = N_STATS
    off_win = off_batch + max_num_seqs + 1
    off_itl = off_win + n_windows * N_WIN
    off_clock = off_itl + n_bins
    return dict(n_windows=n_windows, n_bins=n_bins, off_batch=off_batch, off_win=off_win, off_itl=off_itl,
                off_clock=off_clock, acc_len=off_clock + N_CLOCK)


def split_accumulator(e, acc):
    """Views of ``acc`` (shape (n_replicas, acc_len)): stats (n_replicas, N_STATS), batch-size
    histogram, time series (n_windows, N_WIN) and ITL histogram, each summed over replicas."""
    stats = acc[:, :N_STATS]
    batch = acc[:, e.off_batch:e.off_win].sum(axis=0)
    windows = acc[:, e.off_win:e.off_itl].sum(axis=0).reshape(e.n_windows, N_WIN)
    itl = acc[:, e.off_itl:e.off_clock].sum(axis=0)
    return stats, batch, windows, itl
