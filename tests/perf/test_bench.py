"""pytest-benchmark versions for quick A/B: ``python -m pytest tests/perf --benchmark-only``.
The CI test run executes them once with benchmarking disabled so they cannot rot."""
import pytest
import simllm
from benchmarks.common import configs, decode_batches, time_many_nb

# heavy: benchmarks run once as tests (CI's second step)
pytestmark = pytest.mark.heavy


def test_iteration_time_kernel(benchmark):
    p = configs()[3]
    sizes, ctx = decode_batches()
    time_many_nb(p, sizes[:10], ctx[:10])
    total = benchmark(time_many_nb, p, sizes, ctx)
    assert total > 0


def test_estimate(benchmark):
    m, h, s, _ = configs()
    est = benchmark(simllm.estimate, m, h, s, batch_size=32)
    assert est.batch_tpot_s > est.decode_lower_bound_s


def test_engine_bench_10k(benchmark):
    from benchmarks.common import bench_requests

    m, h, s, _ = configs()
    w, req = bench_requests(10_000)
    simllm.simulate(m, h, s, w, requests=bench_requests(100)[1])
    res = benchmark(simllm.simulate, m, h, s, w, requests=req)
    assert res.summary["completed"] == 10_000


def test_plain_loop_closed_form():
    """The yardstick loop (benchmarks.plain_loop) on one request: a 100-token prefill in one
    iteration gives the first token, then two decode iterations, each the larger of the FLOP and
    the byte term; a second request arriving later waits for nothing."""
    import numpy as np
    from benchmarks.plain_loop import plain_loop_nb

    fpt, w_bytes, kvb, peak, bw = 16e9, 16e9, 131072.0, 400e12, 3e12
    first, finish, iters = plain_loop_nb(np.array([0.0, 10.0]), np.array([100, 5]), np.array([3, 1]), 8, 64, 10**6,
                                         fpt, w_bytes, kvb, peak, bw)
    t1 = max(64 * fpt / peak, (w_bytes + 64 * kvb) / bw)  # the budget takes 64 of the 100 prompt tokens
    t2 = t1 + max(36 * fpt / peak, (w_bytes + 100 * kvb) / bw)
    t3 = t2 + max(fpt / peak, (w_bytes + 101 * kvb) / bw)
    t4 = t3 + max(fpt / peak, (w_bytes + 102 * kvb) / bw)
    assert first[0] == t2 and finish[0] == t4
    assert first[1] == finish[1] == 10.0 + max(5 * fpt / peak, (w_bytes + 5 * kvb) / bw)
    assert iters == 5


def test_plain_loop_runs_bench_requests():
    import numpy as np
    from benchmarks.common import bench_requests
    from benchmarks.plain_loop import plain_loop

    m, h, s, _ = configs()
    req = bench_requests(2000)[1]
    first, finish, _ = plain_loop(m, h, s, req)
    assert np.all(first > req.arrival_s) and np.all(finish >= first)
