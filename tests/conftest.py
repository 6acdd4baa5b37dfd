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
        _compile_variants(config)


def _compile_variants(config):
    """The heavy tier's kernel variants (tests/variants.py), each compiled once into numba's cache
    before the workers start, two processes at a time, the longest first on whichever is free. A
    variant that fails to compile here says so in one line and is left to its tests, which then
    report it."""
    from variants import VARIANTS

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "tests", "variants.py")
    # Run from the repository's root, not tests/: there tests/simcore (the tests of simcore) would
    # shadow the simcore package.
    code = f"import runpy, sys; sys.argv[0] = {script!r}; runpy.run_path({script!r}, run_name='__main__')"
    names = list(VARIANTS)
    running = {}
    failed = []
    try:
        _run_two_at_a_time(names, running, failed, code, root)
    finally:  # interrupted: no compile left behind
        for proc, err in running.values():
            proc.kill()
            err.close()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in failed:
        if reporter is not None:
            reporter.write_line(f"tests/variants.py could not compile {line}")


def _run_two_at_a_time(names, running, failed, code, root):
    import subprocess
    import sys
    import time

    while names or running:
        while names and len(running) < 2:
            name = names.pop(0)
            err = tempfile.TemporaryFile("w+")  # not a pipe: nothing blocks on a full one
            running[name] = (subprocess.Popen([sys.executable, "-c", code, name], cwd=root, stdout=subprocess.DEVNULL,
                                              stderr=err), err)
        time.sleep(0.5)
        for name, (proc, err) in list(running.items()):
            if proc.poll() is not None:
                if proc.returncode:
                    err.seek(0)
                    last = (err.read().strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
                    failed.append(f"{name}: {last[:200]}")
                err.close()
                del running[name]


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
