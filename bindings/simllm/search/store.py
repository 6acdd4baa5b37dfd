"""A sweep's files: its table as ``.csv`` or ``.parquet``, the journal of finished rows and the
record next to the output, and what an earlier run of the same spec already did.

**Tables.** ``.csv`` (floats written exactly, NaN as ``nan``) or ``.parquet`` (needs pyarrow;
the paths, grid paths, metrics and spec hash in the schema's ``simllm.sweep`` metadata), written
atomically.

**Resumable output.** With ``resume_from=PATH`` (``.csv`` or ``.parquet``) each completed chunk
is appended to the journal ``PATH.partial.csv`` (first line: the spec's hash); at the end the
table is written to PATH, the record ``PATH.sweep.json`` next to it, and the journal is removed. A
rerun with the same spec and path skips every (config_id, seed) already in the journal or in
PATH, so an interrupted sweep continues where it stopped; a different spec (base, grid, samples,
SLOs) is refused. The seeds are not part of the hash: rerunning with more seeds runs only the new
ones.
"""
import csv
import io
import json
from pathlib import Path

import numpy as np

from simllm.errors import ConfigError, optional_import
from simllm.fileio import csv_text, write_output, write_table

JOURNAL_SUFFIX = ".partial.csv"
RECORD_SUFFIX = ".sweep.json"
_JOURNAL_TAG = "# simllm sweep journal spec_hash="
KEY_COLUMNS = ("config_id", "grid_id", "sample", "seed")


# ----------------------------------------------------------------------------- CSV / Parquet

def _fmt(v):
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, np.generic):
        return str(v.item())
    return str(v)


def table_csv(table, out):
    """Write the table's CSV text (as :func:`save_table` writes it) to the stream ``out``."""
    names = table.dtype.names
    cols = [table[n].tolist() for n in names]
    out.write(csv_text(names, ([_fmt(c[i]) for c in cols] for i in range(len(table)))))


def _parse_column(name, texts):
    if name in KEY_COLUMNS:
        return np.array([int(x) for x in texts], dtype=np.int64)
    if name == "error":
        return np.array(texts, dtype=f"U{max([len(x) for x in texts] + [1])}")
    for conv, dt in ((int, np.int64), (float, np.float64)):
        try:
            return np.array([conv(x) for x in texts], dtype=dt)
        except ValueError:
            pass
    if texts and all(x in ("True", "False") for x in texts):
        return np.array([x == "True" for x in texts], dtype=np.bool_)
    return np.array(texts, dtype=f"U{max([len(x) for x in texts] + [1])}")


def _columns_to_table(names, columns, metrics=()):
    metric_set = set(metrics)
    arrays = []
    for n, c in zip(names, columns):
        if n in metric_set:
            c = np.asarray(c, dtype=np.float64)
        arrays.append(c)
    dtype = [(n, a.dtype) for n, a in zip(names, arrays)]
    t = np.zeros(len(arrays[0]) if arrays else 0, dtype=dtype)
    for n, a in zip(names, arrays):
        t[n] = a
    return t


def _pyarrow():
    """pyarrow with pyarrow.parquet loaded, or the one-line error naming ``--output``."""
    optional_import("pyarrow.parquet", "writing or reading Parquet", package="pyarrow", source="command line",
                    key="--output")
    return optional_import("pyarrow", "writing or reading Parquet", source="command line", key="--output")


def check_output_path(path):
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ConfigError("a .csv or .parquet file name", source="command line", key="--output", value=str(path))
    if suffix == ".parquet":
        _pyarrow()


def save_table(table, path, meta):
    check_output_path(path)
    write_table(path, {n: table[n] for n in table.dtype.names}, cell=_fmt,
                metadata={"simllm.sweep": json.dumps(meta)})


def load_table(path):
    path = Path(path)
    if not path.is_file():
        raise ConfigError("no such file", source=str(path))
    if path.suffix.lower() == ".parquet":
        pa = _pyarrow()
        tab = pa.parquet.read_table(str(path))
        meta = json.loads((tab.schema.metadata or {}).get(b"simllm.sweep", b"{}"))
        names = tab.column_names
        columns = []
        for n in names:
            col = tab.column(n).to_numpy(zero_copy_only=False)
            if col.dtype == object:
                col = np.array([str(x) for x in col], dtype=f"U{max([len(str(x)) for x in col] + [1])}")
            columns.append(col)
        return _columns_to_table(names, columns, meta.get("metrics", ())), meta
    if path.suffix.lower() != ".csv":
        raise ConfigError("a .csv or .parquet file", source=str(path))
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ConfigError("a sweep table with a header, got an empty file", source=str(path))
    names = rows[0]
    body = rows[1:]
    columns = [_parse_column(n, [r[j] for r in body]) for j, n in enumerate(names)]
    return _columns_to_table(names, columns), {}


# ----------------------------------------------------------------------------- journal and resume

def _record_path(output):
    return output.with_name(output.name + RECORD_SUFFIX)


def journal_path(output):
    return output.with_name(output.name + JOURNAL_SUFFIX)


def write_record(output, record):
    """Write ``record`` (the spec hash, rows, paths, metrics, ...) to ``<output>.sweep.json``,
    atomically."""

    write_output(_record_path(output), json.dumps(record, indent=2) + "\n")


def read_record(output):
    rec = _record_path(output)
    if not rec.is_file():
        return None
    try:
        return json.loads(rec.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _refuse(path, found, wanted):
    return ConfigError(f"{path} holds a sweep of a different spec (spec hash {found}, this spec's is {wanted}): "
                       f"remove it or choose another output to run this spec")


def existing_rows(plan_, output):
    """Rows of an earlier run of this spec: from the finished output (its record must match)
    and from the journal. Truncates a journal's torn last line."""
    rows = {}
    metrics = plan_.context.metrics
    wanted = set(plan_.items)
    if output.exists():
        record = read_record(output)
        if record is None:
            raise ConfigError(f"{output} exists and is not the output of a simllm sweep (no {_record_path(output).name} "
                              f"next to it): remove it or choose another output")
        if record.get("spec_hash") != plan_.spec_hash:
            raise _refuse(output, record.get("spec_hash"), plan_.spec_hash)
        table, _ = load_table(output)
        for i in range(len(table)):
            key = (int(table["config_id"][i]), int(table["seed"][i]))
            if key in wanted:
                rows[key] = (tuple(float(table[m][i]) for m in metrics), str(table["error"][i]))
    journal = journal_path(output)
    if journal.exists():
        data = journal.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a torn last line from an interrupted write
            with open(journal, "r+b") as f:
                f.truncate(end)
            data = data[:end]
        text = data.decode("utf-8")
        first, _, rest = text.partition("\n")
        if not first.startswith(_JOURNAL_TAG):
            raise ConfigError(f"{journal} is not a simllm sweep journal: remove it or choose another output")
        found = first[len(_JOURNAL_TAG):].strip()
        if found != plan_.spec_hash:
            raise _refuse(journal, found, plan_.spec_hash)
        reader = csv.reader(io.StringIO(rest))
        header = next(reader, None)
        expected = ["config_id", "seed", *metrics, "error"]
        if header is not None and header != expected:
            raise _refuse(journal, "with other columns", plan_.spec_hash)
        for r in reader:
            if len(r) != len(expected):
                continue
            try:
                key = (int(r[0]), int(r[1]))
                vals = tuple(float(x) for x in r[2:-1])
            except ValueError:
                continue
            if key in wanted:
                rows[key] = (vals, r[-1])
    return rows


class Journal:
    """Appends finished rows to ``<output>.partial.csv``, flushed per chunk."""

    def __init__(self, plan_, output):
        self.path = journal_path(output)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self.f = open(self.path, "a", newline="", encoding="utf-8")
        self.w = csv.writer(self.f, lineterminator="\n")
        if new:
            self.f.write(f"{_JOURNAL_TAG}{plan_.spec_hash}\n")
            self.w.writerow(["config_id", "seed", *plan_.context.metrics, "error"])
            self.f.flush()

    def write(self, rows):
        for config_id, seed, metrics, error in rows:
            self.w.writerow([config_id, seed, *(repr(float(x)) for x in metrics), error])
        self.f.flush()

    def close(self):
        self.f.close()
