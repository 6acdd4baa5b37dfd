"""pytest-benchmark: the test run passes ``--benchmark-disable`` (pyproject addopts) so each
benchmark runs once as a test; ``pytest benchmarks --benchmark-only`` times them."""
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if config.getoption("benchmark_only", default=False):
        config.option.benchmark_disable = False
