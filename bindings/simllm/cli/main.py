"""The ``simllm`` command line: one parser with one subcommand per module of this package (each
module has ``add_parser(sub)`` and ``cmd(args, out)``). Bad input exits with status 2 and one line
on stderr, never a traceback."""
import sys

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
from simllm.errors import ConfigError

#: The subcommands in the order ``simllm --help`` lists them.
COMMANDS = {"estimate": estimate, "run": run, "validate": validate, "calibrate": calibrate, "profile": profile,
            "kernels": kernels,
            "loadtest": loadtest, "diagnose": diagnose, "compare": compare, "frontier": frontier,
            "optimize": optimize, "sweep": sweep, "presets": presets}


def build_parser():
    parser = common.Parser(prog="simllm", description="Predict LLM serving performance on given hardware without running it.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=common.Parser)
    sub.required = True
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv=None):
    """Entry point of the ``simllm`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command].cmd(args, sys.stdout)
    except ConfigError as exc:
        print(f"simllm: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
