"""Writing files so that nothing half-written is ever left behind: the content goes to a
temporary file in the target's folder and replaces the target with ``os.replace`` once complete
(with the old file's permissions, else 0644); on any failure the temporary file is removed and
the target is as it was. Every file simllm writes (results, exports, profiles, sweep tables)
goes through here."""
import contextlib
import os
import stat
import tempfile
from pathlib import Path

from simllm.errors import ConfigError

NEW_FILE_MODE = 0o644


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path next to ``path`` (same suffix) to write; moved onto ``path`` when the
    block ends without an exception, removed otherwise. The folder is created when missing.
    An ``OSError`` propagates as it is (see :func:`output_path` for user-facing files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.chmod(tmp, mode)  # mkstemp creates it private
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text_atomic(path, text):
    """Write ``text`` (UTF-8, flushed to disk) to ``path`` atomically; returns ``Path(path)``."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    return Path(path)


@contextlib.contextmanager
def output_path(path):
    """:func:`atomic_path` for a file the user asked for: an ``OSError`` becomes a one-line
    :class:`ConfigError` naming the file."""
    try:
        with atomic_path(path) as tmp:
            yield tmp
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from None


def write_output(path, text):
    """:func:`write_text_atomic` for a file the user asked for (one-line error on failure)."""
    try:
        return write_text_atomic(path, text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from None
