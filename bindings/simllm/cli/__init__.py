"""simllm.cli: the ``simllm`` command line, a thin layer over the public functions. Bad input
exits with status 2 and one line on stderr, never a traceback.

:func:`main` is the console script's entry. It settles the kernel mode
(:func:`simllm.sim.kernelmode.choose`: interpreted while the kernel cache is cold, compiled once it
holds code) before anything imports simcore's kernels, whose decorators read it; so the command
modules are imported inside it, after that (the one function-level import here that is not for an
optional dependency).

May import everything.
"""
import sys

from simllm.sim import kernelmode

__all__ = ["main"]


def main(argv=None):
    """Run the ``simllm`` command ``argv`` (default ``sys.argv[1:]``); returns the exit status.
    As the console script (``argv`` None, ``SIMLLM_KERNELS`` unset or ``auto``) the kernel mode
    follows the cache (:mod:`simllm.sim.kernelmode`); ``main(argv)`` in a caller's process leaves
    the caller's mode alone."""
    if argv is None:
        try:
            kernelmode.choose()
        except Exception as exc:  # noqa: BLE001 - a bad SIMLLM_KERNELS: one line, exit 2
            print(f"simllm: error: {exc}", file=sys.stderr)
            return 2
    from simllm.cli import app  # noqa: PLC0415 - after the mode is settled (docstring)

    return app.main(argv)
