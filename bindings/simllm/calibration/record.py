"""The accuracy record: every point ``simllm validate`` predicted, with its features and its
measured and predicted TTFT, TPOT and throughput, so that a later prediction can say how far to
trust it (:mod:`simllm.calibration.bands`).

The shipped record is ``configs/accuracy.json`` (package data ``simllm/configs/accuracy.json``),
made from the shared ``silicon_sample.csv`` with the presets as they are calibrated::

    simllm validate ../shared/data/silicon_sample.csv --write-accuracy configs/accuracy.json

It is JSON: a ``provenance`` object (date, sources with their SHA-256 and rows, simllm version,
the validation's settings, point counts) and ``points``, one object per line (readable diffs when
it is regenerated after a re-calibration). Each point holds ``model`` (the preset), ``family``
(:func:`model_family`), ``gpu`` (the hardware preset), ``framework``, ``precision``, ``tp``,
``dp``, ``isl``, ``osl``, ``concurrency`` (a closed loop's clients; an open loop's mean requests in
flight by Little's law on the measured latency), ``closed_loop``, ``below_bound`` (a metric was
measured faster than the datasheet peaks allow: left out of the bands as of the validation
statistics) and ``measured_*``/``predicted_*`` for ``ttft_ms``, ``tpot_ms`` and
``output_throughput``. Throughput is the closed-loop figure ``concurrency x osl / (TTFT + (osl -
1) x TPOT)`` computed alike from the measured and from the predicted TTFT and TPOT (the measured
files record no throughput); null for an open loop.
"""
import datetime
import hashlib
import importlib.metadata
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from simllm.config.presets import configs_dir
from simllm.errors import ConfigError
from simllm.fileio import write_output

#: The shipped record's file name in the presets folder.
RECORD_FILE = "accuracy.json"
#: Bumped when the record's layout changes.
RECORD_FORMAT = 1
#: The metrics a record holds, by their name in a point (``measured_<name>``, ``predicted_<name>``).
RECORD_METRICS = ("ttft_ms", "tpot_ms", "output_throughput")
#: A point's features, in the order they are written.
FEATURES = ("model", "family", "gpu", "framework", "precision", "tp", "dp", "isl", "osl", "concurrency",
            "closed_loop", "below_bound")

_SIZE = re.compile(r"[-_](\d+(\.\d+)?[bmk]|\d+x\d+(\.\d+)?b)(-a\d+(\.\d+)?b)?$")


def model_family(name):
    """A model's family: its name, lower case, without the parameter count at the end
    (``llama-3.1-70b`` and ``Llama-3.1-8B`` -> ``llama-3.1``, ``qwen3-32b`` -> ``qwen3``,
    ``mixtral-8x7b`` -> ``mixtral``)."""
    key = str(name).strip().lower().split("/")[-1].replace("_", "-")
    key = re.sub(r"-(instruct|chat|base|it)$", "", key)  # Kimi-K2-Instruct: the model, not its tuning
    key = re.sub(r"-v\d+(\.\d+)*$", "", key)  # mistral-7b-v0.1
    return _SIZE.sub("", key) or key


def closed_loop_throughput(concurrency, osl, ttft_ms, tpot_ms):
    """Output tokens/s of ``concurrency`` clients each waiting for a response of ``osl`` tokens
    that takes ``ttft_ms + (osl - 1) x tpot_ms``; None when it cannot be computed."""
    if not concurrency or osl < 1 or not all(_finite(v) for v in (ttft_ms, tpot_ms)):
        return None
    e2el_ms = ttft_ms + (osl - 1) * tpot_ms
    return concurrency * osl / (e2el_ms / 1e3) if e2el_ms > 0 else None


def _finite(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def _num(v):
    """A finite number to 6 significant digits (what the record keeps), else None."""
    return float(f"{float(v):.6g}") if _finite(v) else None


def point_row(p):
    """The record's row of a predicted :class:`simllm.calibration.validate.Point`."""
    m = p.measurement
    closed = bool(m.concurrency)
    if closed:
        load = float(m.concurrency)
    else:  # Little's law on the measured latency: mean requests in flight
        e2el = m.e2el_ms if _finite(m.e2el_ms) else m.ttft_ms + (m.output_len - 1) * m.tpot_ms
        load = m.request_rate * e2el / 1e3 if _finite(e2el) and _finite(m.request_rate) else None
    row = {"model": p.model, "family": model_family(p.model), "gpu": p.hardware, "framework": m.backend or "vllm",
           "precision": m.precision or "native", "tp": m.tp, "dp": m.dp, "isl": m.input_len, "osl": m.output_len,
           "concurrency": _num(load), "closed_loop": closed, "below_bound": bool(p.inconsistent)}
    for metric in ("ttft", "tpot"):
        row[f"measured_{metric}_ms"] = _num(getattr(m, f"{metric}_ms"))
        row[f"predicted_{metric}_ms"] = _num(p.predicted[metric])
    for side in ("measured", "predicted"):
        row[f"{side}_output_throughput"] = _num(
            closed_loop_throughput(m.concurrency, m.output_len, row[f"{side}_ttft_ms"], row[f"{side}_tpot_ms"])
            if closed else None)
    row["source"] = m.where.split("/")[-1]
    return row


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def simllm_version():
    """The installed simllm's version ("unknown" when it is not installed, only on the path)."""
    try:
        return importlib.metadata.version("simllm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_record(points, sources, settings=None, date=None):
    """The record of validated ``points`` (those with a prediction), with provenance.

    Parameters
    ----------
    points : sequence of Point
        :func:`simllm.calibration.validate.validate`'s (or the CLI's) points; those of
        disaggregated measurements are left out (bands are for one engine's runs).
    sources : sequence of str or Path
        The measured files read (named by file name, with their SHA-256 and size).
    settings : dict, optional
        How they were validated (filters, length ratio, ...), recorded as given.
    date : str, optional
        ISO date of the record (default: today, UTC).
    """
    # One engine's points: a band is given to an aggregated run, from aggregated cases.
    rows = [point_row(p) for p in points if p.predicted is not None and p.measurement.mode == "agg"]
    files = [{"file": Path(s).name, "sha256": _sha256(s), "bytes": Path(s).stat().st_size} for s in sources
             if Path(s).is_file()]
    provenance = {
        "format": RECORD_FORMAT,
        "date": date or datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "simllm_version": simllm_version(),
        "sources": files,
        "settings": settings or {},
        "rows_read": len(points),
        "points": len(rows),
        "skipped": sum(1 for p in points if p.predicted is None),
        "disaggregated_left_out": sum(1 for p in points if p.predicted is not None and p.measurement.mode != "agg"),
        "below_bound": sum(1 for r in rows if r["below_bound"]),
        "regenerate": "simllm validate ../shared/data/silicon_sample.csv --write-accuracy configs/accuracy.json",
    }
    return {"provenance": provenance, "points": rows}


def record_text(record):
    """The record as JSON text: the provenance indented, then one point per line."""
    head = json.dumps(record["provenance"], indent=2, ensure_ascii=False, allow_nan=False)
    lines = [json.dumps(r, ensure_ascii=False, allow_nan=False) for r in record["points"]]
    body = ",\n".join(f"    {line}" for line in lines)
    head = "\n".join("  " + line for line in head.splitlines()).lstrip()
    return f'{{\n  "provenance": {head},\n  "points": [\n{body}\n  ]\n}}\n'


def write_record(path, record):
    """Write ``record`` to ``path`` atomically (:func:`record_text`); returns the path."""
    return write_output(path, record_text(record))


def default_record_path():
    """The shipped record (``configs/accuracy.json``, or ``simllm/configs/`` when installed)."""
    return configs_dir() / RECORD_FILE


@dataclass(frozen=True, eq=False)
class Record:
    """A loaded accuracy record: ``provenance`` as written and one numpy array per column of
    its points (``model``, ``family``, ``gpu``, ``framework``: str arrays; the numbers: float
    arrays with NaN for null; ``closed_loop``, ``below_bound``: bool)."""

    provenance: dict
    columns: dict
    path: str = ""

    def __len__(self):
        return len(self.columns["gpu"])

    def __getitem__(self, name):
        return self.columns[name]


_TEXT = ("model", "family", "gpu", "framework", "precision")
_BOOL = ("closed_loop", "below_bound")


def record_from_dict(data, source="accuracy record"):
    """A :class:`Record` from the parsed JSON of a record; a one-line ConfigError when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise ConfigError("an accuracy record: an object with 'provenance' and a 'points' list", source=source)
    points = data["points"]
    names = FEATURES + tuple(f"{side}_{m}" for m in RECORD_METRICS for side in ("measured", "predicted"))
    cols = {}
    for name in names:
        values = []
        for i, p in enumerate(points):
            if not isinstance(p, dict) or name not in p:
                raise ConfigError(f"key {name!r} in every point", source=source, key=f"points[{i}]")
            values.append(p[name])
        if name in _TEXT:
            cols[name] = np.array([str(v) for v in values], dtype=object)
        elif name in _BOOL:
            cols[name] = np.array([bool(v) for v in values], dtype=bool)
        else:
            try:
                cols[name] = np.array([math.nan if v is None else float(v) for v in values], dtype=float)
            except (TypeError, ValueError):
                raise ConfigError("numbers or null", source=source, key=f"points[].{name}") from None
    return Record(dict(data.get("provenance") or {}), cols, source)


@lru_cache(maxsize=8)
def _load_cached(path, mtime_ns):
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the accuracy record ({exc})", source=path) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON: {exc.msg}", source=path, line=exc.lineno) from None
    return record_from_dict(data, path)


def load_record(path=None):
    """The accuracy record at ``path`` (default: the shipped one), cached while the file is
    unchanged."""
    path = Path(path) if path else default_record_path()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        raise ConfigError("an accuracy record file (simllm validate ... --write-accuracy FILE makes one)",
                          source="command line", key="accuracy record", value=str(path)) from None
    return _load_cached(str(path), mtime)
