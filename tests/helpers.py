"""What several test modules share: paths, the shared measured data, building packed kernel
inputs, and the lines shown at the end of a run (conftest.py keeps only pytest's hooks)."""
import dataclasses
import os
import pickle
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

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
_SILICON = []


def silicon_points(tmp_path_factory):
    """Every point of ../shared/data/silicon_sample.csv as ``simllm validate`` predicts it with its
    own defaults (the command line parsed, its points bounded and predicted): ``(args, points)``,
    once per test run. The accuracy tests read their rows from it and the accuracy record's test
    the record it gives; each had simulated its rows itself (the whole file twice a run, two and a
    half CPU-minutes each). Under pytest-xdist the first worker to ask computes it (on every core)
    while another waits for its pickle in the workers' shared base folder, as pytest-xdist's docs
    share session data (POSIX lock; elsewhere each worker computes its own)."""
    if _SILICON:
        return _SILICON[0]
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else None
    if shared is None or fcntl is None:
        value = _predict_silicon()
    else:
        path = shared / "silicon_points.pickle"
        with open(shared / "silicon_points.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if path.is_file():
                value = pickle.loads(path.read_bytes())
            else:
                value = _predict_silicon()
                part = path.with_suffix(".part")
                part.write_bytes(pickle.dumps(value))
                os.replace(part, path)
    _SILICON.append(value)
    return value


def _predict_silicon():
    from simllm.calibration import validate as accuracy
    from simllm.cli import common
    from simllm.cli.app import build_parser

    args = build_parser().parse_args(["validate", str(SHARED_DATA / "silicon_sample.csv")])
    points, shape = common.measured_points(args, args.hardware)
    bounded = accuracy.with_bounds(points, args.num_prompts, shape, args.workers or 0)
    return args, accuracy.predict_points(bounded, None, args.num_prompts, shape, args.workers or 0)


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
