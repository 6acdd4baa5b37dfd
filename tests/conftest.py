import os
from pathlib import Path

import pytest

import simllm
from simllm.config import serving as serving_mod
from simllm.sim.pack import pack_cost_params

ROOT = Path(__file__).resolve().parents[1]
JIT_DISABLED = os.environ.get("NUMBA_DISABLE_JIT") == "1"


def build(model, hardware, **serving_kwargs):
    """Validated configs and packed params: (model, hardware, serving, resolved, params)."""
    m = simllm.load_model(model) if isinstance(model, (str, Path)) else model
    h = simllm.load_hardware(hardware) if isinstance(hardware, (str, Path)) else hardware
    s = simllm.ServingConfig(**serving_kwargs)
    r = serving_mod.resolve(m, h, s)
    return m, h, s, r, pack_cost_params(m, h, s, r)


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


# Lines tests want shown at the end of the run whatever the capture mode (accuracy figures).
REPORT = []


def pytest_terminal_summary(terminalreporter):
    if REPORT:
        terminalreporter.section("simllm accuracy (silicon_sample.csv)")
        for line in REPORT:
            terminalreporter.write_line(line)
