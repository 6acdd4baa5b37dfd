"""simllm.sim.stats, the one statistics module, against numpy and closed forms."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from simllm.sim import stats

FINITE = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(1, 300), elements=FINITE),
       st.lists(st.floats(0, 100), min_size=1, max_size=6))
def test_percentiles_inplace_is_numpy_to_the_bit(values, qs):
    assert np.array_equal(stats.percentiles_inplace(values.copy(), qs), np.percentile(values, qs))


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, (3, 7, 2), elements=st.one_of(FINITE, st.just(np.nan))))
def test_band_is_nanmean_and_nanpercentile(cube):
    out = stats.band(cube, (("mean", None), ("p5", 5.0), ("p50", 50.0), ("p95", 95.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: numpy warns, NaN expected
        mean = np.nanmean(cube, axis=1)
        want = {name: np.nanpercentile(cube, q, axis=1) for name, q in (("p5", 5), ("p50", 50), ("p95", 95))}
    np.testing.assert_allclose(out["mean"], mean, rtol=1e-12, atol=1e-9, equal_nan=True)
    for name, w in want.items():
        np.testing.assert_allclose(out[name], w, rtol=1e-12, atol=1e-9, equal_nan=True)


def test_histogram_percentiles_interpolate_inside_the_bin():
    edges = np.array([0.0, 1.0, 2.0, 4.0])
    hist = np.array([2, 0, 2])  # two values in [0, 1), two in [2, 4)
    assert stats.hist_percentiles(hist, edges, [25, 50, 75, 100]) == [0.5, 1.0, 3.0, 4.0]
    assert stats.hist_percentiles(np.zeros(3), edges, [50]) == [0.0]
    assert stats.hist_quantile(np.array([0, 3, 1]), 50) == 1 and stats.hist_quantile(np.array([0, 3, 1]), 100) == 2


def test_weighted_lower_quantile_takes_the_first_value_reaching_the_level():
    v = np.array([1.0, 2.0, 3.0, 4.0])
    cdf = np.cumsum([0.1, 0.4, 0.4, 0.1])
    assert [stats.weighted_lower_quantile(v, cdf, q) for q in (0.05, 0.1, 0.5, 0.51, 0.95)] == [1.0, 1.0, 2.0, 3.0, 4.0]


def test_abs_error_stats():
    s = stats.abs_error_stats([0.05, 0.15, 0.30, 0.10])
    assert s == {"points": 4, "median_abs_pct_error": pytest.approx(12.5), "mean_abs_pct_error": pytest.approx(15.0),
                 "within_10pct": 0.5, "within_20pct": 0.75}


def test_paired_difference_is_the_mean_and_standard_error_of_the_differences():
    a, b = [10.0, 12.0, 11.0, 13.0], [9.0, 10.0, 10.5, 11.5]  # differences 1, 2, 0.5, 1.5
    mean, se = stats.paired_difference(a, b)
    assert mean == pytest.approx(1.25)
    assert se == pytest.approx(np.sqrt(((0.25**2 + 0.75**2 + 0.75**2 + 0.25**2) / 3) / 4))
    assert stats.paired_difference([3.0, 5.0], [3.0, 5.0]) == (0.0, 0.0)  # the same draws: no noise
    assert stats.paired_difference([2.0], [1.0]) == (1.0, 0.0)
