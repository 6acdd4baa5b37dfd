"""Result invariants over random configurations (issue 16): every run either is refused with a
one-line ConfigError or gives figures that are finite, counts that add up, fractions in [0, 1],
queue times >= 0 and every request's TTFT <= its E2E latency (tests/fuzz.py draws the cases and
checks them; ``python tests/fuzz.py --n 20000`` is the large run)."""
import signal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz import random_case, run_case

# heavy: long hypothesis runs over random configurations, speculative and pipelined ones among
# them (kernel variants of their own: minutes each from an empty cache); CI's second step
pytestmark = pytest.mark.heavy


def _check(seed, extreme=False):
    kind, detail = run_case(random_case(np.random.default_rng(seed), extreme))
    assert kind in ("ok", "refused"), detail
    if kind == "refused":
        assert len(detail) == 1 and not detail[0].startswith("multi-line"), detail


@pytest.mark.slow  # uncompiled (NUMBA_DISABLE_JIT) the 120 runs take minutes
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.integers(0, 2**32 - 1))
def test_random_configurations_keep_the_invariants(seed):
    _check(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_extreme_configurations_end_in_bounded_time(seed):
    """Counts, rates and lengths at the edges of their ranges: refused or run, within 60 s."""
    def alarm(*_):
        raise TimeoutError(f"extreme case {seed} ran over 60 s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 60.0)
    try:
        _check(10_000 + seed, extreme=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
