"""pytest's hooks for the suite; what tests share lives in helpers.py."""
import pytest

from helpers import JIT_DISABLED, REPORT


def pytest_collection_modifyitems(config, items):
    if JIT_DISABLED:
        skip = pytest.mark.skip(reason="slow under NUMBA_DISABLE_JIT=1; runs in the compiled pass")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The test run passes ``--benchmark-disable`` (pyproject addopts), so each pytest-benchmark
    test in tests/perf runs once as a test; ``python -m pytest tests/perf --benchmark-only``
    times them. (They live there, not in benchmarks/, because asv imports every module there.)"""
    if config.getoption("benchmark_only", default=False):
        config.option.benchmark_disable = False


def pytest_terminal_summary(terminalreporter):
    if REPORT:
        terminalreporter.section("simllm accuracy (silicon_sample.csv)")
        for line in REPORT:
            terminalreporter.write_line(line)
