"""The ``simllm`` command line: one parser with one subcommand per module of this package (each
module has ``add_parser(sub)`` and ``cmd(args, out)``). Bad input exits with status 2 and one line
on stderr, never a traceback."""
import gc
import os
import signal
import subprocess
import sys
from importlib import metadata

import simcore
from simllm.cli import (
    calibrate,
    common,
    compare,
    diagnose,
    estimate,
    frontier,
    kernels,
    loadtest,
    optimize,
    presets,
    profile,
    run,
    sweep,
    validate,
)
from simllm.config.sections import ALLOW_OUTSIDE_ENV
from simllm.errors import ConfigError
from simllm.sim import kernelmode

#: The subcommands in the order ``simllm --help`` lists them.
COMMANDS = {"estimate": estimate, "run": run, "validate": validate, "calibrate": calibrate, "profile": profile,
            "kernels": kernels,
            "loadtest": loadtest, "diagnose": diagnose, "compare": compare, "frontier": frontier,
            "optimize": optimize, "sweep": sweep, "presets": presets}


def build_parser():
    parser = common.Parser(prog="simllm", description="Predict LLM serving performance on given hardware without running it.")
    parser.add_argument("--version", action="version", version=f"simllm {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=common.Parser)
    sub.required = True
    for module in COMMANDS.values():
        module.add_parser(sub)
    for name, command in sub.choices.items():
        command.add_argument("--allow-outside-paths", action="store_true",
                             help="let spec files name files outside their own folder (traces, length files, "
                                  f"outputs; also: {ALLOW_OUTSIDE_ENV}=1)")
    return parser


def version():
    """The installed distribution's version (package metadata), or ``"unknown"`` when simllm
    runs from a source tree that was never installed."""
    try:
        return metadata.version("simllm")
    except metadata.PackageNotFoundError:
        return "unknown"


#: The console script's generation-0 threshold (Python's default: 700 allocations).
GC_THRESHOLD_ALLOCATIONS = 100_000


def _tune_collector():
    """The console script's garbage collector: what the imports built (numba's type registries
    among it, ~100,000 objects) lives until the process ends, so it is frozen out of every
    collection, and a collection waits for ``GC_THRESHOLD_ALLOCATIONS`` allocations. A run's data
    are numpy arrays, not cycles. ``simllm run --workload bench-1m`` took 1.10-1.13 s with this
    and the freeze at exit against 1.32-1.41 s without (2-core AMD EPYC VM)."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD_ALLOCATIONS, gen1, gen2)


#: Set in the environment of a command started over (:func:`start_over`) when this process already
#: warned that numba has no writable cache folder: the new process does not warn again.
CACHE_WARNED_ENV = "SIMLLM_CACHE_WARNED"


def start_over(switch, quiet=False):
    """Run the command again in a new process with the kernels ``switch`` asks for
    (:class:`simllm.sim.kernelmode.KernelModeSwitch`; nothing was written yet): this process
    becomes it (``exec``) where the platform allows, else waits for it. Returns its exit status
    where it returns at all."""
    if not quiet and switch.mode == kernelmode.COMPILED:
        print(f"simllm: {switch.reason}: compiling the simulation kernels (first run only)", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    env = kernelmode.switched_environ(switch.mode)
    if not simcore.CACHING:  # main() said so already: once a command
        env[CACHE_WARNED_ENV] = "1"
    command = [sys.executable, "-m", "simllm", *sys.argv[1:]]
    if os.name == "posix":
        os.execve(sys.executable, command, env)
    return subprocess.call(command, env=env)  # pragma: no cover - Windows


def warm_up_later(quiet=False):
    """After an interpreted command (auto mode): compile what it ran in the background
    (:func:`simllm.sim.kernelmode.start_warmup`), and say so unless ``quiet``."""
    try:
        started = kernelmode.start_warmup()
    except OSError:  # no cache folder to write in: the next command runs interpreted again
        return
    if started is not None and not quiet:
        print("simllm: the simulation kernels were not compiled yet, so this command ran them as Python (same "
              "numbers); they are compiling in the background for the next commands (a few minutes, once)",
              file=sys.stderr)


def _interrupted(signum, frame):
    """The first Ctrl-C unwinds (one line, exit 130); a second one exits at once."""
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    raise KeyboardInterrupt


def main(argv=None):
    """Entry point of the ``simllm`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    allowed = os.environ.get(ALLOW_OUTSIDE_ENV)
    if args.allow_outside_paths:  # for this command only (main() may run in a caller's process)
        os.environ[ALLOW_OUTSIDE_ENV] = "1"
    if not simcore.CACHING and not os.environ.get(CACHE_WARNED_ENV):
        print(f"simllm: warning: numba has no writable cache folder ({simcore.CACHE_DIR}): every run compiles the "
              "kernels anew (a minute or more); set NUMBA_CACHE_DIR to a writable folder", file=sys.stderr)
    previous = signal.getsignal(signal.SIGINT)
    if argv is None:  # the console script: Ctrl-C is ours to report, and the collector ours to tune
        signal.signal(signal.SIGINT, _interrupted)
        _tune_collector()
    status = None
    try:
        with kernelmode.cold_compile_guard():
            status = COMMANDS[args.command].cmd(args, sys.stdout)
        return status
    except kernelmode.KernelModeSwitch as switch:
        if argv is not None or not kernelmode.switching():  # pragma: no cover - only auto mode raises it
            raise
        return start_over(switch, quiet=getattr(args, "quiet", False))
    except ConfigError as exc:
        print(f"simllm: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a file the command was given could not be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"simllm: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        detail = str(exc)
        print(f"simllm: interrupted{'; ' + detail if detail else ''}", file=sys.stderr)
        return 130
    finally:
        if status == 0 and argv is None and kernelmode.switching() and kernelmode.mode() == kernelmode.INTERPRETED:
            warm_up_later(quiet=getattr(args, "quiet", False))
        if argv is None:
            signal.signal(signal.SIGINT, previous)
            gc.freeze()  # the process ends: spare the interpreter's exit a collection of everything left
        if args.allow_outside_paths:
            if allowed is None:
                os.environ.pop(ALLOW_OUTSIDE_ENV, None)
            else:
                os.environ[ALLOW_OUTSIDE_ENV] = allowed
