"""pytest-benchmark versions of benchmarks/bench_sweep.py for quick A/B:
``python -m pytest tests/perf/test_bench_sweep.py --benchmark-only``. The CI test run executes
each once with benchmarking disabled (slow: skipped in the NUMBA_DISABLE_JIT pass)."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks.bench_sweep import SWEEP_CONFIGS, mixed_spec
from simllm.search import sweep as sw

# heavy: benchmarks run once as tests (CI's second step)
pytestmark = pytest.mark.heavy


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_sweep_200x10k(benchmark, threads):
    sw.warm_up()
    spec = mixed_spec()
    sw.plan(spec)
    with ThreadPoolExecutor(threads) as ex:
        res = benchmark.pedantic(sw.run_spec, args=(spec,), kwargs={"executor": ex}, rounds=3, iterations=1)
    assert len(res.table) == SWEEP_CONFIGS and not res.table["error"].any()
    assert res.table["completed"].min() > 0


@pytest.mark.slow
def test_sweep_1000x1k_threads(benchmark):
    sw.warm_up()
    spec = mixed_spec(configs=1000, requests=1000)
    sw.plan(spec)
    with ThreadPoolExecutor(2) as ex:
        res = benchmark.pedantic(sw.run_spec, args=(spec,), kwargs={"executor": ex}, rounds=3, iterations=1)
    assert len(res.table) == 1000
