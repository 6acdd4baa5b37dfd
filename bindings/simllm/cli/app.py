"""The ``simllm`` command line: one parser with one subcommand per module of this package (each
module has ``add_parser(sub)`` and ``cmd(args, out)``). Bad input exits with status 2 and one line
on stderr, never a traceback."""
import gc
import os
import signal
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
    if not simcore.CACHING:
        print(f"simllm: warning: numba has no writable cache folder ({simcore.CACHE_DIR}): every run compiles the "
              "kernels anew (a minute or more); set NUMBA_CACHE_DIR to a writable folder", file=sys.stderr)
    previous = signal.getsignal(signal.SIGINT)
    if argv is None:  # the console script: Ctrl-C is ours to report, and the collector ours to tune
        signal.signal(signal.SIGINT, _interrupted)
        _tune_collector()
    try:
        return COMMANDS[args.command].cmd(args, sys.stdout)
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
        if argv is None:
            signal.signal(signal.SIGINT, previous)
            gc.freeze()  # the process ends: spare the interpreter's exit a collection of everything left
        if args.allow_outside_paths:
            if allowed is None:
                os.environ.pop(ALLOW_OUTSIDE_ENV, None)
            else:
                os.environ[ALLOW_OUTSIDE_ENV] = allowed
