"""Offsets of a replica's float accumulator and int workspace (see ``EngineParams``): the one
place they are computed, for simllm and the tests."""
from simcore.codes import N_CLOCK, N_STATS, N_WIN
from simcore.scheduler import N_STATE


N_MEMO = 7  # per batch size: the decode-run time, FLOP and byte coefficients (decode_run.py)


def accumulator_layout(max_num_seqs, n_windows, n_bins):
    """EngineParams fields (``n_windows``, ``n_bins``, ``off_batch``, ``off_win``, ``off_itl``,
    ``off_clock``, ``off_memo``, ``acc_len``) for an accumulator holding the STAT_* totals, a
    batch-size histogram of ``max_num_seqs + 1`` bins, ``n_windows`` time-series rows,
    ``n_bins`` ITL bins, the clock and the decode-run coefficients by batch size (NaN until
    computed)."""
    off_batch = N_STATS
    off_win = off_batch + max_num_seqs + 1
    off_itl = off_win + n_windows * N_WIN
    off_clock = off_itl + n_bins
    off_memo = off_clock + N_CLOCK
    return dict(n_windows=n_windows, n_bins=n_bins, off_batch=off_batch, off_win=off_win, off_itl=off_itl,
                off_clock=off_clock, off_memo=off_memo, acc_len=off_memo + (max_num_seqs + 1) * N_MEMO)


def split_accumulator(e, acc):
    """Views of ``acc`` (shape (n_replicas, acc_len)): stats (n_replicas, N_STATS), batch-size
    histogram, time series (n_windows, N_WIN) and ITL histogram, each summed over replicas."""
    stats = acc[:, :N_STATS]
    batch = acc[:, e.off_batch:e.off_win].sum(axis=0)
    windows = acc[:, e.off_win:e.off_itl].sum(axis=0).reshape(e.n_windows, N_WIN)
    itl = acc[:, e.off_itl:e.off_clock].sum(axis=0)
    return stats, batch, windows, itl


def workspace_layout(max_num_seqs, block_size, n_requests):
    """EngineParams fields for a replica's int64 workspace: ``N_STATE`` state slots, the decode
    cohort's ``block_size`` phase counts, the running list and four schedule rows of
    ``max_num_seqs`` entries, and a waiting queue of ``n_requests``."""
    cap = max(max_num_seqs, 1)
    off_cnt = N_STATE
    off_run = off_cnt + block_size
    off_sched = off_run + cap
    off_wq = off_sched + 4 * cap
    wq_cap = max(n_requests, 1)
    return dict(sched_cap=cap, wq_cap=wq_cap, off_cnt=off_cnt, off_run=off_run, off_sched=off_sched, off_wq=off_wq,
                ws_len=off_wq + wq_cap)
