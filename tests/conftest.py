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
    report it. Skipped where ``SIMLLM_VARIANTS_COMPILED`` is set (CI compiled them already, in
    the background of its earlier steps)."""
    if os.environ.get("SIMLLM_VARIANTS_COMPILED"):
        return
    from variants import compile_all

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in compile_all():
        if reporter is not None:
            reporter.write_line(f"tests/variants.py could not compile {line}")


# CI runs the fast tier as the README says (the test extra alone), then, with every extra
# installed, only the tests that skipped there for want of one: SIMLLM_IMPORT_SKIPS names the file
# the first run writes their ids to, and SIMLLM_ONLY_IDS the file the second run selects from.
_IMPORT_SKIPS = os.environ.get("SIMLLM_IMPORT_SKIPS")
_ONLY_IDS = os.environ.get("SIMLLM_ONLY_IDS")


#: What the reason of a skip for want of an optional package says: pytest.importorskip's own
#: words, or the "... is not installed" of a test's own skipif or importorskip reason.
_MISSING_PACKAGE = ("could not import", "not installed")


def pytest_runtest_logreport(report):
    """With SIMLLM_IMPORT_SKIPS, append the id of each test skipped for want of an optional package
    (in the controller under xdist, which receives every worker's reports)."""
    if not _IMPORT_SKIPS or not report.skipped or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(words in reason for words in _MISSING_PACKAGE):
        with open(_IMPORT_SKIPS, "a", encoding="utf-8") as f:
            f.write(report.nodeid + "\n")


def pytest_collection_modifyitems(config, items):
    if JIT_DISABLED:
        skip = pytest.mark.skip(reason="slow under NUMBA_DISABLE_JIT=1; runs in the compiled pass")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)
    if _ONLY_IDS:
        with open(_ONLY_IDS, encoding="utf-8") as f:
            wanted = {line.strip() for line in f if line.strip()}
        keep = [item for item in items if item.nodeid in wanted]
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in wanted])
        items[:] = keep


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
