"""What several test modules share: paths, the shared measured data, building packed kernel
inputs, and the lines shown at the end of a run (conftest.py keeps only pytest's hooks)."""
import dataclasses
import os
from pathlib import Path

import simllm
from simllm.config import serving as serving_mod
from simllm.report.progress import COMPILE_TEXT
from simllm.sim.pack import pack_cost_params

#: The repository's root, tests' own data, and the recorded golden outputs.
ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
GOLDEN = DATA / "golden"
#: Measured serving data kept beside the checkout (tests that need it skip when it is absent).
SHARED_DATA = ROOT.parent / "shared" / "data"
JIT_DISABLED = os.environ.get("NUMBA_DISABLE_JIT") == "1"
#: Lines tests want shown at the end of the run whatever the capture mode (accuracy figures).
REPORT = []


def without_compile_notice(err):
    """A command's stderr less the compile notice's lines (a cold numba cache adds a start and an
    end line to whatever command compiles first; report/progress.py's CompileNotice)."""
    notice = (COMPILE_TEXT, "simllm: compiled simulation kernels in ")
    return "".join(line for line in err.splitlines(keepends=True) if not line.lstrip("\r").startswith(notice))


def stderr_lines(err):
    """The non-empty lines of a command's stderr, less the compile notice's."""
    return [line for line in without_compile_notice(err).splitlines() if line.strip()]


def build(model, hardware, *, tables=True, **serving_kwargs):
    """Validated configs and packed params: (model, hardware, serving, resolved, params).

    ``tables=True`` (the default) keeps the hardware as ``simllm.load_hardware`` gives it: a preset
    with measured kernel tables (configs/kernels/<gpu>/) prices its operators by shape, exactly as a
    simulation with that preset does, so tests comparing ``build``'s params with
    ``simllm.simulate`` or the engine agree. ``tables=False`` drops the tables
    (``kernel_tables=()``): every operator then runs at the scalar roofline (compute_utilization,
    bandwidth_utilization, launch overhead, interconnect latency) that the closed-form cost tests
    and :func:`naive.iteration_time` are written against; such tests must ask for it explicitly.
    """
    m = simllm.load_model(model) if isinstance(model, (str, Path)) else model
    if isinstance(hardware, (str, Path)):
        h = simllm.load_hardware(hardware, with_tables=tables)
    else:
        h = hardware if tables else dataclasses.replace(hardware, kernel_tables=())
    s = simllm.ServingConfig(**serving_kwargs)
    r = serving_mod.resolve(m, h, s)
    return m, h, s, r, pack_cost_params(m, h, s, r)


def run_main(argv, capsys):
    """``simllm.cli.main`` in-process: (status, stdout, stderr); argparse errors exit via SystemExit."""
    try:
        rc = simllm.cli.main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, out, err, *needles):
    """Exit 2, no traceback, exactly one non-empty line on stderr (the compile notice aside)
    containing every needle; returns the line."""
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    lines = stderr_lines(err)
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    line = lines[0]
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line
