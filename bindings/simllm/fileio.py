"""Writing files so that nothing half-written is ever left behind: the content goes to a
temporary file in the target's folder and replaces the target with ``os.replace`` once complete
(with the old file's permissions, else 0644); on any failure the temporary file is removed and
the target is as it was. Every file simllm writes (results, exports, profiles, sweep tables)
goes through here.

Tables (rows of named columns) have one writer, :func:`write_table`: ``.csv`` or ``.parquet`` by
the file's suffix, the CSV text made by :func:`csv_text` (which also makes the CSV simllm prints)."""
import contextlib
import csv
import io
import os
import stat
import tempfile
from pathlib import Path

import numpy as np

from simllm.errors import CLI, ConfigError, optional_import

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


def check_output(path, key):
    """Raise a one-line :class:`ConfigError` naming ``key`` (a flag) unless ``path`` can be
    written: not a folder, and its nearest existing parent a writable folder. Called before a
    long run so that it does not fail at its end."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError("a file name, not a folder", source=CLI, key=key, value=str(path))
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"a path under a folder ({parent} is a file)", source=CLI, key=key, value=str(path))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"a path in a folder you can write ({parent} is not)", source=CLI, key=key, value=str(path))


def write_output(path, text):
    """:func:`write_text_atomic` for a file the user asked for (one-line error on failure)."""
    try:
        return write_text_atomic(path, text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from None


# ----------------------------------------------------------------------------- tables

#: The suffixes :func:`write_table` writes.
TABLE_SUFFIXES = (".csv", ".parquet")


def csv_text(header, rows, *, lineterminator="\n"):
    """CSV text: the ``header`` line, then one line per row of ``rows``. Cells are written as the
    csv module writes them: ``str()`` of each, floats by ``repr``, ``None`` as an empty cell."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=lineterminator)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def _parquet_values(column):
    """A column as pyarrow takes it: numpy string and object arrays as Python lists."""
    if isinstance(column, np.ndarray) and column.dtype.kind in "OU":
        return column.tolist()
    return column


def write_table(path, columns, *, cell=None, metadata=None, lineterminator="\n"):
    """Write a table to ``path``, atomically, as ``.csv`` or ``.parquet`` by its suffix.

    Parameters
    ----------
    path : str or Path
    columns : dict
        Column name -> values (a numpy array or a sequence), all of one length, in order.
    cell : callable, optional
        CSV only: each value (a Python scalar, numpy arrays having been made lists) to the cell
        written (default: the value itself, see :func:`csv_text`).
    metadata : dict, optional
        Parquet only: ``str -> str`` pairs for the schema's metadata.
    lineterminator : str
        CSV only: the end of each line.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ConfigError
        A suffix other than ``.csv``/``.parquet``, pyarrow missing for Parquet, or the file
        cannot be written. Nothing is left behind.
    """
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        with TableWriter(path, list(columns), cell=cell, lineterminator=lineterminator) as writer:
            writer.add(columns)
        return Path(path)
    if suffix == ".parquet":
        pa = optional_import("pyarrow", "writing Parquet")
        parquet = optional_import("pyarrow.parquet", "writing Parquet", package="pyarrow")
        table = pa.table({name: pa.array(_parquet_values(col)) for name, col in columns.items()})
        if metadata:
            table = table.replace_schema_metadata(metadata)
        with output_path(path) as tmp:
            parquet.write_table(table, str(tmp))
        return Path(path)
    raise ConfigError("a .csv or .parquet file name", key="table file", value=str(path))


class TableWriter:
    """A table written a batch of rows at a time, atomically (the file appears complete when the
    ``with`` block ends, and not at all if it raises): ``.csv`` by :func:`csv_text`'s rules (the
    same text as :func:`write_table`'s for the same rows) or ``.parquet`` (one row group per batch;
    needs pyarrow).

    Parameters
    ----------
    path : str or Path
    header : list of str
        The column names, in order; every batch gives them all.
    cell : callable, optional
        CSV only: as :func:`write_table`'s.
    lineterminator : str
        CSV only: the end of each line.
    """

    def __init__(self, path, header, *, cell=None, lineterminator="\n"):
        self.path, self.header, self.cell, self.lineterminator = path, list(header), cell, lineterminator
        self.suffix = Path(path).suffix.lower()
        if self.suffix not in TABLE_SUFFIXES:
            raise ConfigError("a .csv or .parquet file name", key="table file", value=str(path))
        if self.suffix == ".parquet":
            self._pa = optional_import("pyarrow", "writing Parquet")
            self._pq = optional_import("pyarrow.parquet", "writing Parquet", package="pyarrow")
        self._stack = contextlib.ExitStack()
        self._file = self._writer = None

    def __enter__(self):
        tmp = self._stack.enter_context(output_path(self.path))
        if self.suffix == ".csv":
            self._file = self._stack.enter_context(open(tmp, "w", encoding="utf-8", newline=""))
            self._writer = csv.writer(self._file, lineterminator=self.lineterminator)
            self._writer.writerow(self.header)
        else:
            self._tmp = tmp
        return self

    def add(self, columns):
        """Append rows: ``columns`` maps each header name to its values (numpy arrays or
        sequences, all of one length)."""
        cols = [columns[name] for name in self.header]
        try:
            if self.suffix == ".csv":
                values = [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in cols]
                if self.cell is not None:
                    values = [[self.cell(v) for v in col] for col in values]
                self._writer.writerows(zip(*values))
                return
            table = self._pa.table({name: self._pa.array(_parquet_values(col)) for name, col in zip(self.header, cols)})
            if self._writer is None:
                self._writer = self._stack.enter_context(self._pq.ParquetWriter(str(self._tmp), table.schema))
            self._writer.write_table(table)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot write ({exc.strerror or exc})") from None

    def __exit__(self, *exc):
        if exc[0] is None and self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
        return self._stack.__exit__(*exc)
