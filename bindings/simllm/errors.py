"""Errors simllm raises for bad input. Each renders as one line naming where the bad value came
from (file and line, or the command line), the key, the value and what was expected.

Also the one way simllm imports an optional dependency (pyarrow, matplotlib, dask, torch):
:func:`optional_import`, whose failure is such a one-line error ending in the ``pip install``
that fixes it."""
import importlib
import reprlib

_NO_VALUE = object()
CLI = "command line"  # the source a ConfigError names for a flag's value
VALUE_CHARS = 100  # an error quotes at most this much of the offending value

_REPR = reprlib.Repr()
_REPR.maxstring = VALUE_CHARS
_REPR.maxother = VALUE_CHARS
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8
_REPR.maxlevel = 3


def quote(value):
    """``repr(value)`` cut to about :data:`VALUE_CHARS` characters (nested containers are not
    walked past a few levels, so an alias bomb costs nothing to quote)."""
    text = _REPR.repr(value)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 3] + "..."


class ConfigError(ValueError):
    """Invalid configuration or input.

    Parameters
    ----------
    expected : str
        What a valid value looks like, or (with no key) the whole message.
    source : str, optional
        The file the value came from, or ``"command line"``.
    key : str, optional
        Dotted key path (``model.hidden_size``) or flag (``--tensor-parallel-size``).
    value : object, optional
        The offending value.
    line : int, optional
        1-based line in ``source``.
    """

    def __init__(self, expected, *, source=None, key=None, value=_NO_VALUE, line=None):
        self.source = source
        self.key = key
        self.value = None if value is _NO_VALUE else value
        self.expected = expected
        self.line = line
        where = ""
        if source:
            where = f"{source}:{line}: " if line else f"{source}: "
        if key is None:
            text = f"{where}{expected}"
        elif value is _NO_VALUE:
            text = f"{where}{key}: {expected}"
        else:
            text = f"{where}{key} = {quote(value)}: expected {expected}"
        super().__init__(" ".join(text.split("\n")))


class SimulatedOOM(ConfigError):
    """The configuration does not fit in GPU memory, as the real engine would refuse to start.

    ``plan`` holds the :class:`simllm.sim.memory.MemoryPlan` with the breakdown in bytes.
    """

    def __init__(self, message, plan=None):
        super().__init__(message)
        self.plan = plan


def optional_import(module, needed_for, *, package=None, install=None, **where):
    """Import the optional dependency ``module`` (dotted, e.g. ``"pyarrow.parquet"``) and return it.

    Parameters
    ----------
    module : str
        What to import.
    needed_for : str
        What needs it, the start of the message (``"writing Parquet"``).
    package : str, optional
        Its name for people (default: ``module``'s top-level package, e.g. ``"PyTorch"`` for torch).
    install : str, optional
        What to ``pip install`` (default: ``package``; e.g. ``'"simllm[plot]"'``).
    **where
        ``source``, ``key``, ``value``, ``line`` of the :class:`ConfigError` (the flag that asked).

    Raises
    ------
    ConfigError
        One line: ``<needed_for> needs <package>, which is not installed: pip install <install>``.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        package = package or module.split(".")[0]
        raise ConfigError(f"{needed_for} needs {package}, which is not installed: pip install {install or package}",
                          **where) from None
