"""simllm.cli: the ``simllm`` command line, a thin layer over the public functions. Bad input
exits with status 2 and one line on stderr, never a traceback.

May import everything.
"""
from simllm.cli.main import main

__all__ = ["main"]
