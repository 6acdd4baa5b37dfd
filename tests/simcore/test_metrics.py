"""The metric accumulators' small rules (simcore/metrics.py) against their definitions."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.layout import make_layout
from simcore.metrics import itl_bin_nb, window_of_nb, window_sure_until_nb
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


def frexp_bin(e, n_bins, itl):
    """The ITL bin by its definition (module docstring): ``2**itl_sub_bits`` bins per octave from
    ``2**(itl_min_exp - 1)`` seconds, through frexp, clamped to the first and last bins."""
    if itl <= 0.0:
        return 0
    mant, ex = math.frexp(itl)
    sub = 1 << e.itl_sub_bits
    b = (ex - e.itl_min_exp) * sub + int((2.0 * mant - 1.0) * sub)
    return min(max(b, 0), n_bins - 1)


@pytest.mark.parametrize("sub_bits, min_exp", [(9, -20), (3, -20), (0, -5), (12, -30)])
def test_itl_bin_from_the_floats_bits_is_frexps(sub_bits, min_exp):
    """itl_bin_nb reads the exponent and top mantissa bits; on log-uniform latencies, powers of two
    and their float neighbours, a subnormal, zero, a negative and a huge one it is frexp's bin."""
    e = engine(itl_sub_bits=sub_bits, itl_min_exp=min_exp)
    lay = make_layout(e.max_num_seqs, e.block_size, 1, 4, 34 << sub_bits)
    rng = np.random.default_rng(sub_bits)
    powers = [2.0 ** k for k in range(-40, 12)]
    values = (list(np.exp(rng.uniform(-40.0, 10.0, 5000))) + powers + [np.nextafter(p, 0.0) for p in powers]
              + [np.nextafter(p, np.inf) for p in powers] + [5e-324, 1e-310, 0.0, -1.0, 1e300])
    got = [itl_bin_nb(e, lay, float(v)) for v in values]
    assert got == [frexp_bin(e, lay.n_bins, float(v)) for v in values]
