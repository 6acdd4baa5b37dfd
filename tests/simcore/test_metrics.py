"""The metric accumulators' small rules (simcore/metrics.py) against their definitions."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.layout import make_layout
from simcore.metrics import window_of_nb, window_sure_until_nb
from test_engine import engine

N_WINDOWS = 50


@settings(max_examples=300, deadline=None)
@given(window_s=st.floats(1e-6, 1e6), start=st.floats(0.0, 1.0), steps=st.lists(st.floats(0.0, 2.0), max_size=20),
       near=st.integers(-4, 4))
def test_a_time_before_the_sure_bound_is_in_the_window_by_the_division_too(window_s, start, steps, near):
    """What the decode run relies on to skip the division: from any time in window ``w`` on, every
    time before ``window_sure_until_nb(w)`` is in ``w`` by ``window_of_nb``; the bound is
    within 1e-11 relative of the window's end (it is not much earlier) and inf for the last row."""
    e = engine(window_s=window_s)
    lay = make_layout(e.max_num_seqs, e.block_size, 1, N_WINDOWS, 64)
    t0 = start * N_WINDOWS * window_s
    w = window_of_nb(e, lay, t0)
    sure = window_sure_until_nb(e, lay, w)
    if w == N_WINDOWS - 1:
        assert sure == math.inf
        return
    end = (w + 1) * window_s
    assert end * (1 - 1e-11) < sure < end
    # Times from t0 on, up to the bound and around it, the float neighbours included.
    times = [t0 + s * (sure - t0) / 2.0 for s in steps] + [sure]
    edge = sure
    for _ in range(abs(near)):
        edge = np.nextafter(edge, -np.inf if near < 0 else np.inf)
    times.append(edge)
    for t in times:
        if t0 <= t < sure:
            assert window_of_nb(e, lay, t) == w
