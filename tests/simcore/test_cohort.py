"""The decode cohort's bookkeeping (simcore/fast/cohort.py) on a hand-built replica: rebuilding it
writes each running request's ``RI_DONE`` beside the running list, and a completion finds the
members that finish from that row, retires them in admission order and keeps the others in
order. The engine-level agreement with the explicit path is in test_engine.py."""
import numpy as np

from simcore import codes
from simcore.fast.cohort import complete_members_nb, rebuild_nb
from simcore.layout import make_layout, running_nb, sched_nb, set_running_nb
from test_engine import engine

# Admission order of the running requests, and each one's prompt and output tokens. Requests 5 and 6
# are still prefilling; the others have emitted their first token and decode.
RUNNING = [3, 0, 5, 1, 6, 2, 4]
PROMPT = [100, 120, 90, 300, 50, 700, 80]
OUTPUT = [5, 9, 5, 4, 7, 20, 20]
BLOCKS = [7, 8, 6, 19, 4, 44, 6]


def replica():
    e = engine(max_num_seqs=8)
    n = len(PROMPT)
    lay = make_layout(e.max_num_seqs, e.block_size, n, 4, 34 << 9)
    reqi = np.zeros((n, codes.N_RI), dtype=np.int32)
    reqi[:, codes.RI_INPUT] = PROMPT
    reqi[:, codes.RI_OUTPUT] = OUTPUT
    reqi[:, codes.RI_BLOCKS] = BLOCKS
    reqi[:, codes.RI_DONE] = -1
    reqi[:, codes.RI_STATUS] = codes.STATUS_RUNNING
    for r in range(n):
        if r in (5, 6):
            reqi[r, codes.RI_COMPUTED] = PROMPT[r] // 2
        else:
            reqi[r, codes.RI_COMPUTED] = PROMPT[r]
            reqi[r, codes.RI_GENERATED] = 1
    reqf = np.full((n, codes.N_RF), -1.0)
    reqf[:, codes.RF_ARRIVAL] = 0.0
    ws = np.zeros(lay.ws_len, dtype=np.int64)
    ws[codes.COHORT_NEXT_DONE] = codes.NEVER
    ws[codes.FREE_BLOCKS] = 10
    for i, r in enumerate(RUNNING):
        set_running_nb(lay, ws, i, r)
    ws[codes.RUNNING_COUNT] = len(RUNNING)
    return e, lay, reqi, reqf, ws


def done_row(lay, ws):
    # Read by the layout's offsets: the kernels' view accessor (layout.running_rows_nb) returns views,
    # which numba cannot hand back to Python without reference counting.
    return list(ws[lay.off_run_done:lay.off_run_done + ws[codes.RUNNING_COUNT]])


def running(lay, ws):
    return [running_nb(lay, ws, i) for i in range(ws[codes.RUNNING_COUNT])]


def test_rebuild_writes_each_running_requests_done_beside_the_running_list():
    e, lay, reqi, reqf, ws = replica()
    ws[codes.COHORT_ADVANCES] = 10
    rebuild_nb(e, lay, reqi, ws)
    # A member finishes at the advance (counted from 10) that emits its last token.
    assert done_row(lay, ws) == [10 + OUTPUT[r] - 1 if r not in (5, 6) else -1 for r in RUNNING]
    assert done_row(lay, ws) == [reqi[r, codes.RI_DONE] for r in RUNNING]
    assert ws[codes.COHORT_SIZE] == 5 and ws[codes.PREFILLING_COUNT] == 2
    assert ws[codes.COHORT_NEXT_DONE] == 10 + 3


def test_completion_retires_the_finishing_members_in_admission_order_and_keeps_the_rest_in_order():
    e, lay, reqi, reqf, ws = replica()
    rebuild_nb(e, lay, reqi, ws)
    # Requests 0 and 2 (5 output tokens, 4 after the first) finish at advance 4, 3 (4 tokens) at 3.
    ws[codes.COHORT_ADVANCES] = 3
    glob = np.zeros(codes.N_GLOBALS, dtype=np.int64)
    acc = np.zeros(lay.acc_len)
    assert complete_members_nb(e, lay, 2.5, reqi, reqf, ws, glob, acc) == 1
    assert running(lay, ws) == [0, 5, 1, 6, 2, 4]
    ws[codes.COHORT_ADVANCES] = 4
    free = ws[codes.FREE_BLOCKS]
    assert complete_members_nb(e, lay, 3.0, reqi, reqf, ws, glob, acc) == 2
    assert [sched_nb(lay, ws, codes.SCHED_FINISHING, j) for j in range(2)] == [0, 2]
    assert running(lay, ws) == [5, 1, 6, 4]
    assert done_row(lay, ws) == [reqi[r, codes.RI_DONE] for r in running(lay, ws)] == [-1, 8, -1, 6]
    assert ws[codes.COHORT_NEXT_DONE] == 6
    assert ws[codes.COHORT_SIZE] == 2
    assert ws[codes.FREE_BLOCKS] == free + BLOCKS[0] + BLOCKS[2]
    for r in (0, 2):
        assert reqi[r, codes.RI_STATUS] == codes.STATUS_DONE
        assert reqi[r, codes.RI_GENERATED] == OUTPUT[r]
        assert reqi[r, codes.RI_DONE] == -1
        assert reqf[r, codes.RF_FINISH] == reqf[r, codes.RF_LAST_EMIT] == 3.0
    assert reqf[3, codes.RF_FINISH] == 2.5
    assert glob[codes.GLOBAL_ENDED] == 3
