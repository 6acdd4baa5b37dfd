"""pytest-benchmark versions for quick A/B: ``python -m pytest tests/perf --benchmark-only``.
The CI test run executes them once with benchmarking disabled so they cannot rot."""
import simllm
from benchmarks.common import configs, decode_batches, time_many_nb


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
