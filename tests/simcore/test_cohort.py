"""The decode cohort's bookkeeping (simcore/fast/cohort.py) on a hand-built replica: rebuilding it
writes each running request's ``RI_DONE`` beside the running list and files the members in the
buckets by ``RI_DONE``; a completion takes the members that finish from their bucket, retires them
in admission order, leaves holes where they were and finds the next completion, as a scan of every
member would; the holes go when the cohort dissolves or the list is full. The engine-level
agreement with the explicit path is in test_engine.py."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore import codes
from simcore.fast.cohort import complete_members_nb, materialize_nb, rebuild_nb
from simcore.layout import compact_running_nb, make_layout, running_nb, sched_nb, set_running_nb
from test_engine import engine

R = codes.DONE_RING

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


def entries(lay, ws):
    """The running list's entries, holes (-1) included."""
    return [running_nb(lay, ws, i) for i in range(ws[codes.RUNNING_COUNT] + ws[codes.RUNNING_HOLES])]


def done_row(lay, ws):
    # Read by the layout's offsets: the kernels' view accessor (layout.running_rows_nb) returns views,
    # which numba cannot hand back to Python without reference counting. Holes left out.
    n = ws[codes.RUNNING_COUNT] + ws[codes.RUNNING_HOLES]
    return [v for v, r in zip(ws[lay.off_run_done:lay.off_run_done + n], entries(lay, ws)) if r >= 0]


def running(lay, ws):
    return [r for r in entries(lay, ws) if r >= 0]


def buckets(lay, ws):
    """{entry: RI_DONE} of every member filed in the buckets, each in the bucket of its RI_DONE."""
    filed = {}
    for b in range(codes.DONE_RING):
        j = ws[lay.off_done_ring + b]
        while j != 0:
            i = j - 1
            done = ws[lay.off_run_done + i]
            assert done % codes.DONE_RING == b and i not in filed
            filed[i] = done
            j = ws[lay.off_run_chain + i]
    return filed


def members(lay, ws, reqi):
    """{entry: RI_DONE} of the cohort's members, read from the running list and the requests."""
    return {i: int(reqi[r, codes.RI_DONE]) for i, r in enumerate(entries(lay, ws))
            if r >= 0 and reqi[r, codes.RI_DONE] >= 0}


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
    assert entries(lay, ws) == [-1, 0, 5, 1, 6, 2, 4] and ws[codes.RUNNING_HOLES] == 1
    assert ws[codes.RUNNING_COUNT] == 6
    ws[codes.COHORT_ADVANCES] = 4
    free = ws[codes.FREE_BLOCKS]
    assert complete_members_nb(e, lay, 3.0, reqi, reqf, ws, glob, acc) == 2
    assert [sched_nb(lay, ws, codes.SCHED_FINISHING, j) for j in range(2)] == [0, 2]
    assert running(lay, ws) == [5, 1, 6, 4]
    assert entries(lay, ws) == [-1, -1, 5, 1, 6, -1, 4]
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
    assert buckets(lay, ws) == members(lay, ws, reqi)
    # The cohort dissolving (before an explicit iteration) takes the holes away, in order.
    materialize_nb(e, lay, 3.0, reqi, reqf, ws)
    assert entries(lay, ws) == [5, 1, 6, 4] and ws[codes.RUNNING_HOLES] == 0
    assert buckets(lay, ws) == {} and ws[codes.COHORT_SIZE] == 0
    assert done_row(lay, ws) == [-1, -1, -1, -1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(-1, 3 * codes.DONE_RING),  # and members sharing a bucket:
                          st.sampled_from([0, 1, 5, R - 1, R, R + 1, R + 5, 2 * R, 2 * R + 1])),
                min_size=1, max_size=16), st.data())
def test_completions_find_what_a_scan_of_every_member_finds(remaining, data):
    """Members completing 0 .. 3 laps of the ring ahead (-1: a prefilling request, no member);
    advancing from one completion to the next, each takes the members a scan finds, in order,
    and the next completion is the smallest RI_DONE left, holes or not, compacted or not."""
    e = engine(max_num_seqs=16)
    n = len(remaining)
    lay = make_layout(e.max_num_seqs, e.block_size, n, 4, 34 << 9)
    reqi = np.zeros((n, codes.N_RI), dtype=np.int32)
    reqi[:, codes.RI_INPUT] = 10
    reqi[:, codes.RI_DONE] = -1
    reqi[:, codes.RI_STATUS] = codes.STATUS_RUNNING
    for r, left in enumerate(remaining):
        if left < 0:
            reqi[r, codes.RI_COMPUTED] = 5  # still prefilling
            reqi[r, codes.RI_OUTPUT] = 2
        else:
            reqi[r, codes.RI_COMPUTED] = 10
            reqi[r, codes.RI_GENERATED] = 1
            reqi[r, codes.RI_OUTPUT] = left + 2  # completes left + 1 advances on
    reqf = np.full((n, codes.N_RF), -1.0)
    reqf[:, codes.RF_ARRIVAL] = 0.0
    ws = np.zeros(lay.ws_len, dtype=np.int64)
    ws[codes.COHORT_NEXT_DONE] = codes.NEVER
    ws[codes.FREE_BLOCKS] = 10
    order = data.draw(st.permutations(range(n)))
    for i, r in enumerate(order):
        set_running_nb(lay, ws, i, r)
    ws[codes.RUNNING_COUNT] = n
    glob = np.zeros(codes.N_GLOBALS, dtype=np.int64)
    acc = np.zeros(lay.acc_len)
    rebuild_nb(e, lay, reqi, ws)
    assert buckets(lay, ws) == members(lay, ws, reqi)
    while ws[codes.COHORT_SIZE] > 0:
        dones = [v for v in members(lay, ws, reqi).values()]
        d = min(dones)
        assert ws[codes.COHORT_NEXT_DONE] == d
        expect = [r for r in running(lay, ws) if reqi[r, codes.RI_DONE] == d]
        ws[codes.COHORT_ADVANCES] = d
        assert complete_members_nb(e, lay, float(d), reqi, reqf, ws, glob, acc) == len(expect)
        assert [sched_nb(lay, ws, codes.SCHED_FINISHING, j) for j in range(len(expect))] == expect
        assert all(reqi[r, codes.RI_STATUS] == codes.STATUS_DONE for r in expect)
        left = [v for v in dones if v > d]
        assert ws[codes.COHORT_NEXT_DONE] == (min(left) if left else codes.NEVER)
        if data.draw(st.booleans()):  # the list full at an admission: the holes go, members refiled
            compact_running_nb(lay, ws)
            assert ws[codes.RUNNING_HOLES] == 0 and -1 not in entries(lay, ws)
        assert buckets(lay, ws) == members(lay, ws, reqi)
        assert running(lay, ws) == [r for r in order if reqi[r, codes.RI_STATUS] == codes.STATUS_RUNNING]
