"""pytest's hooks for the suite; what tests share lives in helpers.py."""
import os
import shutil
import tempfile

import pytest

from helpers import JIT_DISABLED, REPORT
from simllm.sim.runner import warm_up

# The suite never sees the user's own simllm profiles (``simllm calibrate`` writes them to
# ~/.config/simllm, and ``--framework vllm`` then reads them before the shipped one): its own,
# empty, per-user config folder, for its subprocesses too.
_USER_CONFIG = tempfile.mkdtemp(prefix="simllm-test-config-")
os.environ["XDG_CONFIG_HOME"] = _USER_CONFIG
# The command's subprocesses run compiled kernels, as the suite's own process does (the tests of
# auto mode, tests/sim/test_kernelmode.py, set their own), and never leave a background compile
# behind.
os.environ.setdefault("SIMLLM_KERNELS", "compiled")
os.environ.setdefault("SIMLLM_WARMUP", "0")


def pytest_unconfigure(config):
    shutil.rmtree(_USER_CONFIG, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """Under pytest-xdist (``-n N``), compile the default kernels once, here in the controller,
    before its workers start (xdist starts them in its own, later, sessionstart): each worker would
    otherwise compile the event loop itself, minutes each, at the same time."""
    config = session.config
    if JIT_DISABLED or hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    warm_up()
    if config.option.markexpr == "heavy":
        _compile_variants()


def _compile_variants():
    """The heavy tier's kernel variants (tests/variants.py), each compiled once into numba's cache
    before the workers start, two processes at a time, the longest first on whichever is free. A
    variant that fails to compile here is left to its tests, which then report it."""
    import subprocess
    import sys
    import time

    from variants import VARIANTS

    script = os.path.join(os.path.dirname(__file__), "variants.py")
    names = list(VARIANTS)
    running = []
    while names or running:
        while names and len(running) < 2:
            running.append(subprocess.Popen([sys.executable, script, names.pop(0)], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        running = [p for p in running if p.poll() is None]


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
