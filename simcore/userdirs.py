"""Per-user folders, platformdirs-style without the dependency, and the folder numba caches
simcore's compiled kernels in.

:func:`user_folder` is where simllm keeps what belongs to the user and not to the installed
package: ``cache`` (numba's compiled kernels) and ``config`` (framework profiles written by
``simllm calibrate``). :func:`kernel_cache_dir` is the cache folder of this simcore: numba's own
index checks each function's own source file only, so an edit of a callee in another file, a
reinstall over an older copy or an editable install beside a regular one could load stale or
shadowing machine code. The folder's name holds the Python implementation and version, numba's
version and a digest of the contents of every ``*.py`` file of simcore, so any of those changes
gives a fresh folder. Nothing is ever written next to simcore's sources (files pip does not own
there outlive an uninstall and shadow the next install).

Plain Python: imports nothing compiled (``import simllm`` stays free of numba).

May import: the standard library only.
"""
import hashlib
import os
import sys
from pathlib import Path

#: The application folder's name under each per-user base folder.
APP_NAME = "simllm"

#: What :func:`user_folder` knows.
KINDS = ("cache", "config")

#: Hex digits of the sources' digest in :func:`cache_key`.
DIGEST_CHARS = 16

#: simcore's own folder (this file's).
SOURCE_DIR = Path(__file__).resolve().parent


def _xdg(environ, variable, default):
    # The XDG base-directory spec: a relative value is invalid and is ignored.
    value = environ.get(variable, "")
    return Path(value) if value and os.path.isabs(value) else default


def user_folder(kind, *, environ=None, platform=None, home=None):
    """The per-user folder of ``kind`` for simllm.

    Parameters
    ----------
    kind : {"cache", "config"}
    environ : mapping, optional
        Environment variables (default ``os.environ``).
    platform : str, optional
        ``sys.platform``'s value to assume (default this interpreter's).
    home : path, optional
        The home folder (default ``Path.home()``).

    Returns
    -------
    Path
        Linux and other POSIX: ``$XDG_CACHE_HOME`` or ``~/.cache`` (cache), ``$XDG_CONFIG_HOME``
        or ``~/.config`` (config); macOS: ``~/Library/Caches``, ``~/Library/Application Support``;
        Windows: ``%LOCALAPPDATA%`` (else ``~/AppData/Local``) for both. Then ``simllm``. The
        folder is not created.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    home = Path.home() if home is None else Path(home)
    if platform.startswith("win"):
        base = _xdg(environ, "LOCALAPPDATA", home / "AppData" / "Local")
    elif platform == "darwin":
        base = home / "Library" / ("Caches" if kind == "cache" else "Application Support")
    elif kind == "cache":
        base = _xdg(environ, "XDG_CACHE_HOME", home / ".cache")
    else:
        base = _xdg(environ, "XDG_CONFIG_HOME", home / ".config")
    return base / APP_NAME


def source_digest(folder=SOURCE_DIR):
    """Hex SHA-256 of the ``*.py`` files under ``folder`` (recursively): each one's path relative
    to ``folder`` and its bytes, in sorted order. Where the folder is does not count, only what
    it holds."""
    h = hashlib.sha256()
    folder = Path(folder)
    for path in sorted(folder.rglob("*.py"), key=lambda p: p.relative_to(folder).as_posix()):
        rel = path.relative_to(folder).as_posix().encode()
        data = path.read_bytes()
        h.update(b"%d:%s%d:" % (len(rel), rel, len(data)))
        h.update(data)
    return h.hexdigest()


def cache_key(numba_version, folder=SOURCE_DIR):
    """The kernel cache folder's name: ``cpython-311-numba0.68.1-<digest>``, the interpreter
    (``sys.implementation.cache_tag``), numba's version and the first :data:`DIGEST_CHARS` hex
    digits of :func:`source_digest`."""
    tag = sys.implementation.cache_tag or f"py{sys.version_info[0]}{sys.version_info[1]}"
    return f"{tag}-numba{numba_version}-{source_digest(folder)[:DIGEST_CHARS]}"


def kernel_cache_dir(numba_version, *, environ=None, platform=None, home=None, folder=SOURCE_DIR):
    """Where numba caches simcore's kernels: ``$NUMBA_CACHE_DIR`` as the user set it, else
    ``user_folder("cache") / "numba" / cache_key(...)``. Nothing is created here.

    Parameters
    ----------
    numba_version : str
        ``numba.__version__`` (passed in so that this module imports nothing compiled).
    environ, platform, home
        As :func:`user_folder`'s.
    folder : path
        The sources whose digest keys the folder (default simcore's own).

    Returns
    -------
    Path
    """
    environ = os.environ if environ is None else environ
    chosen = environ.get("NUMBA_CACHE_DIR", "")
    if chosen:
        return Path(chosen)
    base = user_folder("cache", environ=environ, platform=platform, home=home)
    return base / "numba" / cache_key(numba_version, folder)
