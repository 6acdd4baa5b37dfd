"""``simllm.sweep``: simulate many configurations — a grid, Monte Carlo samples, several seeds —
in parallel, into one table with an uncertainty band per configuration.

::

    from simllm.sweep import sweep
    res = sweep({"model": "llama-3.1-8b", "hardware": "h100-sxm", "workload": "random-1k"},
                grid={"workload.max_concurrency": [1, 4, 32, 256], "hardware": ["h100-sxm", "h200-sxm"]},
                samples={"hardware.bandwidth_utilization": {"uniform": [0.7, 0.95]}}, num_samples=10,
                seeds=5)
    res.table["p99_ttft_ms"]            # one row per configuration x seed
    res.aggregate(by="grid")            # per grid point: <metric>_mean, _p5, _p50, _p95
    res.save("results.parquet")

**The spec.** A base configuration (``model``, ``hardware``, ``serving``, ``workload``: preset
names, file paths, mappings in the files' own form, or the config objects) and the fields to vary,
by dotted path: ``model.<field>`` and ``hardware.<field>`` (the :class:`ModelConfig` and
:class:`HardwareConfig` fields; ``hardware.memory_size_gb``/``memory_size_gib`` too),
``serving.<field>`` (:class:`ServingConfig`), ``workload.<field>`` (:class:`Workload`;
``input_len``/``output_len`` take a number, a fixed length, or a length mapping as in a workload
file; ``request_rate`` takes ``inf``), and ``model``, ``hardware`` or ``workload`` alone: a preset
name or path that swaps the whole thing (field paths of the same section then apply on top).

- ``grid``: ``{path: [values]}``, the cartesian product, the first path varying slowest.
- ``samples``: ``{path: distribution}`` drawn ``num_samples`` times: ``{uniform: [lo, hi]}``,
  ``{loguniform: [lo, hi]}`` (0 < lo < hi), ``{normal: [mean, std]}`` (std > 0),
  ``{choice: [values]}``. Each path draws from its own stream of ``sample_seed`` (adding a path
  does not change the others' draws), and every grid point gets the same draws (common random
  numbers: grid points differ by their grid values alone). Integer fields (``max_num_seqs``,
  ``max_concurrency``, ``num_prompts``, ``input_len``, ...) sampled from a continuous
  distribution are rounded to the nearest integer.
- ``seeds``: an int n (seeds 0..n-1) or a list, applied to ``workload.seed``; by default the base
  workload's seed. ``workload.seed`` itself cannot be swept.

A configuration is a grid point x a Monte Carlo draw (``config_id = grid_id * num_samples +
sample``); the table has one row per configuration x seed. Everything is validated before any
simulation runs: unknown paths (with the nearest name), empty grids, bad distributions, values of
the wrong type or out of range (each distinct value is built into its dataclass once, so
:class:`ServingConfig`'s own checks apply). Problems that only a model-hardware-serving combination
shows (tensor parallelism not dividing the heads, a simulated OOM) do not stop the sweep: that row
gets NaN metrics and the message in its ``error`` column.

Swept ``workload.burstiness`` without ``workload.arrival`` switches the arrival process as the
``--burstiness`` flag does (gamma unless 1); a swept ``hardware`` efficiency factor applies under
every ``serving.framework`` (the profile's per-framework value for it is dropped).

**Execution.** Configurations run in chunks (tasks of several configurations): the chunk size
aims at about 50 ms of simulation per task (a rough cost of 1.2 ms + 1.5 us per request, measured
on Llama-3.1-8B / H100; task overhead is ~0.05 ms for threads, ~1 ms for processes and dask), at
most 256, and small enough that every worker gets at least 4 tasks. The base configuration goes
to each worker once (a process pool made here gets it in its initializer; dask gets it
scattered); a task carries only its ``(config_id, overrides, seed)`` items. The default executor
is a thread pool of ``os.cpu_count()`` threads: the numba kernels release the GIL. A process pool
or a dask worker pays a one-time start per worker (importing simllm and loading the compiled
kernels from numba's on-disk cache: ~0.5-1 s; compilation itself only if the cache is cold), done
up front for executors made here. Each simulation depends only on its configuration and seed, so
every executor gives the same table.

**Resumable output.** With ``resume_from=PATH`` (``.csv`` or ``.parquet``) each completed chunk
is appended to the journal ``PATH.partial.csv`` (first line: the spec's hash); at the end the
table is written to PATH, the record ``PATH.sweep.json`` next to it, and the journal is removed. A
rerun with the same spec and path skips every (config_id, seed) already in the journal or in
PATH, so an interrupted sweep continues where it stopped; a different spec (base, grid, samples,
SLOs) is refused. The seeds are not part of the hash: rerunning with more seeds runs only the new
ones.
"""
import csv
import dataclasses
import difflib
import functools
import hashlib
import io
import itertools
import json
import logging
import math
import os
import time
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from pathlib import Path

import numpy as np

from simllm.errors import ConfigError
from simllm.hardware import (
    FACTOR_KEYS,
    HardwareConfig,
    hardware_from_dict,
    load_hardware,
)
from simllm.model import ModelConfig, load_model, model_from_dict
from simllm.serving import ServingConfig
from simllm.simulate import simulate
from simllm.validate import Section
from simllm.workload import LengthDist, Workload, load_workload, workload_from_dict
from simllm.yamlio import line_of, load_file

log = logging.getLogger("simllm")

#: Percentiles of TTFT, TPOT, ITL and E2E latency in the table.
PERCENTILES = (50, 90, 99)
#: Summary keys left out of the table: wall-clock measurements, which differ run to run.
NONDETERMINISTIC = ("simulation_wall_s", "simulated_requests_per_s")
#: Executors :func:`make_executor` makes.
EXECUTORS = ("threads", "processes", "dask")
DISTRIBUTIONS = ("uniform", "loguniform", "normal", "choice")
SECTIONS = ("model", "hardware", "serving", "workload")
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"
#: Chunking: seconds of simulation aimed at per task, and the rough cost model behind it.
TARGET_TASK_S = 0.05
COST_FIXED_S = 1.2e-3
COST_PER_REQUEST_S = 1.5e-6
MAX_CHUNK = 256
MIN_TASKS_PER_WORKER = 4
JOURNAL_SUFFIX = ".partial.csv"
RECORD_SUFFIX = ".sweep.json"
_JOURNAL_TAG = "# simllm sweep journal spec_hash="
_KEY_COLUMNS = ("config_id", "grid_id", "sample", "seed")
_STATS = (("mean", None), ("p5", 5.0), ("p50", 50.0), ("p95", 95.0))

# Fields that are not settings (or not sweepable) per section.
_NOT_FIELDS = {
    "model": ("source", "warnings"),
    "hardware": ("source", "frameworks", "interconnect_given"),
    "serving": (),
    "workload": ("source",),
}
_CLASSES = {"model": ModelConfig, "hardware": HardwareConfig, "serving": ServingConfig, "workload": Workload}
_HARDWARE_ALIASES = {"memory_size_gb": ("memory_size_bytes", 1e9), "memory_size_gib": ("memory_size_bytes", 2.0**30)}
_MODEL_POSITIVE = ("layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                   "intermediate_size", "vocab_size", "max_sequence_length")
_HARDWARE_POSITIVE = ("fp16_tflops", "bf16_tflops", "memory_bandwidth_gbps", "memory_size_bytes",
                      "interconnect_bandwidth_gbps", "gpus_per_node")


# ----------------------------------------------------------------------------- field paths

def _fields(section):
    names = [f.name for f in dataclasses.fields(_CLASSES[section]) if f.name not in _NOT_FIELDS[section]]
    if section == "hardware":
        names += list(_HARDWARE_ALIASES)
    return names


@functools.lru_cache(maxsize=None)
def known_paths():
    """Every path a sweep may vary: the sections themselves (``model``, ``hardware``,
    ``workload``: a whole preset) and ``<section>.<field>``."""
    out = ["model", "hardware", "workload"]
    for section in SECTIONS:
        out += [f"{section}.{name}" for name in _fields(section)]
    return tuple(out)


def _unknown_path(path, where, line, source):
    near = difflib.get_close_matches(str(path), known_paths(), n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    return ConfigError(
        f"unknown field path ({hint}paths are model, hardware or workload (a preset), or "
        f"<model|hardware|serving|workload>.<field>)",
        source=source, key=f"{where}.{path}", line=line,
    )


@dataclasses.dataclass(frozen=True)
class _Target:
    """What a path sets: ``field`` None swaps the section's whole object."""

    path: str
    section: str
    field: str = None
    scale: float = 1.0  # hardware.memory_size_gb -> memory_size_bytes

    @property
    def integer(self):
        return self.field in _INT_FIELDS[self.section]


def _int_fields(section):
    """Fields holding integers (sampled values are rounded for them)."""
    out = {f.name for f in dataclasses.fields(_CLASSES[section]) if f.type in (int, "int")}
    if section == "workload":
        out |= {"input_len", "output_len"}
    return frozenset(out)


_INT_FIELDS = {s: _int_fields(s) for s in SECTIONS}


def _target(path, where, line, source):
    if not isinstance(path, str):
        raise _unknown_path(path, where, line, source)
    section, _, field = path.partition(".")
    if path == "workload.seed":
        raise ConfigError("not a swept field: give the seeds with seeds: (an int n for 0..n-1, or a list)",
                          source=source, key=f"{where}.{path}", line=line)
    if path == "serving":
        raise ConfigError("a serving field path (serving.max_num_seqs, ...): serving has no presets to swap",
                          source=source, key=f"{where}.{path}", line=line)
    if path not in known_paths():
        raise _unknown_path(path, where, line, source)
    if not field:
        return _Target(path, section)
    if section == "hardware" and field in _HARDWARE_ALIASES:
        name, scale = _HARDWARE_ALIASES[field]
        return _Target(path, section, name, scale)
    return _Target(path, section, field)


# ----------------------------------------------------------------------------- loading configs

def _local(value, base_dir):
    """A path relative to the spec file's folder when it names a file there, else as given."""
    if isinstance(value, (str, Path)) and base_dir is not None:
        candidate = Path(base_dir) / str(value)
        if not Path(str(value)).is_absolute() and candidate.exists():
            return str(candidate)
    return value


def _load_object(section, value, source, key, line, base_dir):
    """A ModelConfig / HardwareConfig / Workload from an object, a preset name or path, or a
    mapping; errors are re-raised naming ``key`` (and the spec's file and line)."""
    cls = _CLASSES[section]
    if isinstance(value, cls):
        return value
    try:
        if isinstance(value, (str, Path)):
            loader = {"model": load_model, "hardware": load_hardware, "workload": load_workload}[section]
            return loader(_local(value, base_dir))
        if isinstance(value, dict):
            builder = {"model": model_from_dict, "hardware": hardware_from_dict, "workload": workload_from_dict}[section]
            return builder(value, source)
    except ConfigError as exc:
        if isinstance(value, dict):
            raise  # names the spec file, line and key inside the mapping already
        raise _reraise(exc, source, key, value, line) from None
    raise ConfigError(f"a {section} preset name, a file path or a mapping", source=source, key=key, value=value,
                      line=line)


def _reraise(exc, source, key, value, line):
    """``exc`` (a ConfigError about a flag or a field) restated for the spec's key."""
    text = exc.expected if exc.key is not None else str(exc)
    return ConfigError(text, source=source, key=key, value=value, line=line)


def _serving_from(value, source, key, line):
    if value is None:
        return ServingConfig()
    if isinstance(value, ServingConfig):
        return value
    sec = Section(value, source, key)
    names = {f.name for f in dataclasses.fields(ServingConfig)}
    sec.reject_unknown(names)
    out = ServingConfig()
    for name in value:
        out = _replace_checked(_Target(f"serving.{name}", "serving", name), out, value[name], source,
                               f"{key}.{name}", line_of(value, name) or line)[0]
    return out


# ----------------------------------------------------------------------------- values

def _is_number(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _check_type(target, base_value, value):
    """``value`` converted to the field's type (``base_value``'s), or a ConfigError text."""
    if isinstance(base_value, bool):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError("true or false")
        return bool(value)
    if isinstance(base_value, int):
        if not _is_number(value) or not math.isfinite(value) or value != int(value):
            raise ValueError("an integer")
        return int(value)
    if isinstance(base_value, float):
        if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", ".inf"):
            return math.inf
        if not _is_number(value) or math.isnan(value):
            raise ValueError("a number")
        return float(value)
    if isinstance(base_value, str):
        if not isinstance(value, str):
            raise ValueError("a string")
        return value
    raise ValueError(f"not a sweepable field ({type(base_value).__name__})")


def _check_model_or_hardware(target, base, value):
    value = value * target.scale if target.scale != 1.0 and _is_number(value) else value
    v = _check_type(target, getattr(base, target.field), value)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if not math.isfinite(v):
            raise ValueError("a finite number")
        if target.section == "hardware":
            if target.field.endswith("_utilization") and not 0.0 < v <= 1.0:
                raise ValueError("a fraction in (0, 1]")
            if target.field in _HARDWARE_POSITIVE and not v > 0:
                raise ValueError("a number > 0")
        elif target.field in _MODEL_POSITIVE and v < 1:
            raise ValueError("an integer >= 1")
        elif target.field == "kv_compression_ratio" and v < 1:
            raise ValueError("a ratio >= 1")
        if v < 0:
            raise ValueError("a number >= 0")
    return v


# Numeric workload fields checked directly (fast; the others go through workload_from_dict):
# field -> (integer, minimum, exclusive minimum, maximum), as workload files are checked.
_WORKLOAD_NUMBERS = {
    "num_prompts": (True, 1, None, None),
    "max_concurrency": (True, 0, None, None),  # 0: open loop
    "request_rate": (False, None, 0, None),
    "burstiness": (False, None, 0, None),
    "timeout_s": (False, 0, None, None),
    "prefix_len": (True, 0, None, None),
    "prefix_hit_ratio": (False, 0, None, 1),
    "time_scale": (False, None, 0, None),
}


def _check_workload_number(field, value):
    integer, minimum, exclusive, maximum = _WORKLOAD_NUMBERS[field]
    if field == "request_rate" and isinstance(value, str) and value.strip().lower() in ("inf", "infinity", ".inf"):
        return math.inf
    kind = "an integer" if integer else "a number"
    if not _is_number(value) or math.isnan(value):
        raise ValueError(kind)
    if math.isinf(value) and not (field == "request_rate" and value > 0):
        raise ValueError(f"{kind}, finite")
    if integer and value != int(value):
        raise ValueError(kind)
    limits = [(exclusive, "> ", value > exclusive if exclusive is not None else True),
              (minimum, ">= ", value >= minimum if minimum is not None else True),
              (maximum, "<= ", value <= maximum if maximum is not None else True)]
    if not all(ok for _, _, ok in limits):
        raise ValueError(f"{kind} " + " and ".join(f"{op}{b}" for b, op, _ in limits if b is not None))
    return int(value) if integer else float(value)


def _check_workload(target, base, value):
    field = target.field
    if field in _WORKLOAD_NUMBERS:
        return _check_workload_number(field, value)
    if field == "max_concurrency" and _is_number(value) and value == 0:
        return 0  # open loop
    if field in ("input_len", "output_len") and isinstance(value, LengthDist):
        return value
    if field in ("input_len", "output_len") and not isinstance(value, dict) and not _is_number(value):
        raise ValueError("a length (a positive integer) or a length mapping ({distribution: uniform, low:, high:})")
    if field == "request_rate" and isinstance(value, str) and value.strip().lower() in ("inf", "infinity", ".inf"):
        return math.inf
    if field == "request_rate" and _is_number(value) and value == math.inf:
        return math.inf
    try:
        built = workload_from_dict({field: value}, "<sweep>")
    except ConfigError as exc:
        raise ValueError(exc.expected if exc.key is not None else str(exc)) from None
    return getattr(built, field)


def _replace_checked(target, base, value, source, key, line):
    """(``base`` with the field set to ``value``, the value as stored) — raising a ConfigError
    that names ``key`` when the value is of the wrong type or refused by the config's checks."""
    try:
        if target.section == "serving":
            v = _check_type(target, getattr(base, target.field), value)
        elif target.section == "workload":
            v = _check_workload(target, base, value)
        else:
            v = _check_model_or_hardware(target, base, value)
    except ValueError as exc:
        raise ConfigError(str(exc), source=source, key=key, value=value, line=line) from None
    try:
        built = dataclasses.replace(base, **{target.field: v})
    except ConfigError as exc:  # ServingConfig.__post_init__
        raise _reraise(exc, source, key, value, line) from None
    return built, getattr(built, target.field)


def _display(value):
    """How a swept value shows in the table: numbers and strings as given; objects by name."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if _is_number(value):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, str):
        return value
    if isinstance(value, ModelConfig):
        return value.name
    if isinstance(value, HardwareConfig):
        return value.gpu
    if isinstance(value, Workload):
        return value.name
    if isinstance(value, LengthDist):
        return value.describe()
    return json.dumps(_jsonable(value), sort_keys=True)


def _jsonable(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        skip = ("source", "warnings")
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in skip}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


# ----------------------------------------------------------------------------- the spec

@dataclasses.dataclass(frozen=True)
class Distribution:
    """A Monte Carlo distribution: ``kind`` in :data:`DISTRIBUTIONS` and its ``args``
    (``[lo, hi]``, ``[mean, std]`` or the choices)."""

    kind: str
    args: tuple

    def draw(self, rng, n):
        if self.kind == "uniform":
            return list(rng.uniform(self.args[0], self.args[1], n))
        if self.kind == "loguniform":
            return list(np.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1]), n)))
        if self.kind == "normal":
            return list(rng.normal(self.args[0], self.args[1], n))
        return [self.args[i] for i in rng.integers(0, len(self.args), n)]


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: the base configuration objects, the grid, the sampled paths, the seeds.

    Make one with :func:`load_sweep_spec` (a YAML file) or :func:`make_spec`.
    """

    model: ModelConfig
    hardware: HardwareConfig
    serving: ServingConfig
    workload: Workload
    grid: tuple = ()  # ((path, (values...)), ...)
    samples: tuple = ()  # ((path, Distribution), ...)
    num_samples: int = 0
    sample_seed: int = 0
    seeds: tuple = (0,)
    slo: tuple = ()  # ((key, ms), ...): request_goodput's SLOs
    output: str = None
    source: str = "<sweep>"
    lines: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def paths(self):
        return tuple(p for p, _ in self.grid) + tuple(p for p, _ in self.samples)

    @property
    def goodput(self):
        return dict(self.slo) or None

    @property
    def num_grid_points(self):
        return math.prod(len(v) for _, v in self.grid) if self.grid else 1

    @property
    def num_configs(self):
        return self.num_grid_points * (self.num_samples if self.samples else 1)

    def __len__(self):
        """Simulations the sweep runs: configurations x seeds."""
        return self.num_configs * len(self.seeds)


_SPEC_KEYS = {"base", "grid", "samples", "num_samples", "sample_seed", "seeds", "slo", "output"}
_BASE_KEYS = set(SECTIONS)
_SLO_KEYS = ("ttft", "tpot", "e2el")


def _seeds(value, source, line, base_seed):
    if value is None:
        return (base_seed,)
    if _is_number(value) and not isinstance(value, float):
        if value < 1:
            raise ConfigError("a positive number of seeds, or a list of seeds", source=source, key="seeds",
                              value=value, line=line)
        return tuple(range(int(value)))
    if isinstance(value, (list, tuple)) and value:
        out = []
        for s in value:
            if not _is_number(s) or s != int(s) or s < 0:
                raise ConfigError("seeds: integers >= 0", source=source, key="seeds", value=s, line=line)
            out.append(int(s))
        if len(set(out)) != len(out):
            raise ConfigError("distinct seeds", source=source, key="seeds", value=list(value), line=line)
        return tuple(out)
    raise ConfigError("a positive number of seeds n (0..n-1), or a non-empty list of seeds", source=source,
                      key="seeds", value=value, line=line)


def _distribution(path, raw, source, line):
    key = f"samples.{path}"
    if isinstance(raw, Distribution):
        raw = {raw.kind: list(raw.args)}
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ConfigError("one distribution: {uniform: [lo, hi]}, {loguniform: [lo, hi]}, {normal: [mean, std]} "
                          "or {choice: [values]}", source=source, key=key, value=raw, line=line)
    (kind, args), = raw.items()
    line = line_of(raw, kind) or line
    if kind not in DISTRIBUTIONS:
        near = difflib.get_close_matches(str(kind), DISTRIBUTIONS, n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(f"a known distribution ({hint}one of {', '.join(DISTRIBUTIONS)})", source=source,
                          key=key, value=kind, line=line)
    if not isinstance(args, (list, tuple)) or not args:
        raise ConfigError(f"{kind}: a non-empty list", source=source, key=key, value=args, line=line)
    if kind == "choice":
        return Distribution(kind, tuple(args))
    if len(args) != 2 or not all(_is_number(a) and math.isfinite(a) for a in args):
        what = "[mean, std]" if kind == "normal" else "[lo, hi]"
        raise ConfigError(f"{kind}: two finite numbers {what}", source=source, key=key, value=list(args), line=line)
    a, b = float(args[0]), float(args[1])
    if kind == "normal" and not b > 0:
        raise ConfigError("normal: [mean, std] with std > 0", source=source, key=key, value=list(args), line=line)
    if kind == "uniform" and not a < b:
        raise ConfigError("uniform: [lo, hi] with lo < hi", source=source, key=key, value=list(args), line=line)
    if kind == "loguniform" and not 0 < a < b:
        raise ConfigError("loguniform: [lo, hi] with 0 < lo < hi", source=source, key=key, value=list(args),
                          line=line)
    return Distribution(kind, (a, b))


def spec_from_dict(data, source="<sweep>", base_dir=None):
    """Validate a sweep mapping (the YAML file's form) into a :class:`SweepSpec`.

    Raises
    ------
    ConfigError
        Naming the source (file and line when from a file), the key, the value and what was
        expected, for anything :func:`plan` would refuse too.
    """
    top = Section(data, source)
    top.reject_unknown(_SPEC_KEYS)
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError("a mapping with model, hardware, serving and workload", source=source, key="base",
                          value=base, line=line_of(data, "base"))
    Section(base, source, "base").reject_unknown(_BASE_KEYS)

    def bl(k):
        return line_of(base, k) or line_of(data, "base")

    model = _load_object("model", base.get("model") or DEFAULT_MODEL, source, "base.model", bl("model"), base_dir)
    hardware = _load_object("hardware", base.get("hardware") or DEFAULT_HARDWARE, source, "base.hardware",
                            bl("hardware"), base_dir)
    serving = _serving_from(base.get("serving"), source, "base.serving", bl("serving"))
    wl = base.get("workload")
    workload = Workload() if wl is None else _load_object("workload", wl, source, "base.workload", bl("workload"),
                                                          base_dir)
    lines = {}
    grid = []
    raw_grid = data.get("grid") or {}
    if not isinstance(raw_grid, dict):
        raise ConfigError("a mapping {path: [values]}", source=source, key="grid", value=raw_grid,
                          line=line_of(data, "grid"))
    for path, values in raw_grid.items():
        line = line_of(raw_grid, path) or line_of(data, "grid")
        _target(path, "grid", line, source)
        if isinstance(values, (str, bytes, dict)) or not isinstance(values, (list, tuple, np.ndarray, range)):
            raise ConfigError("a non-empty list of values", source=source, key=f"grid.{path}", value=values, line=line)
        if len(values) == 0:
            raise ConfigError("a non-empty list of values", source=source, key=f"grid.{path}", value=list(values),
                              line=line)
        grid.append((path, tuple(values)))
        lines[f"grid.{path}"] = line
    samples = []
    raw_samples = data.get("samples") or {}
    if not isinstance(raw_samples, dict):
        raise ConfigError("a mapping {path: {distribution: [...]}}", source=source, key="samples",
                          value=raw_samples, line=line_of(data, "samples"))
    for path, raw in raw_samples.items():
        line = line_of(raw_samples, path) or line_of(data, "samples")
        _target(path, "samples", line, source)
        if path in raw_grid:
            raise ConfigError("a path either in grid or in samples, not both", source=source,
                              key=f"samples.{path}", line=line)
        samples.append((path, _distribution(path, raw, source, line)))
        lines[f"samples.{path}"] = line
    num_samples = top.number("num_samples", 0, integer=True, minimum=0)
    if samples and not num_samples:
        raise ConfigError("num_samples: how many Monte Carlo draws of samples (an integer >= 1)", source=source,
                          key="num_samples", value=data.get("num_samples", 0), line=line_of(data, "num_samples")
                          or line_of(data, "samples"))
    if num_samples and not samples:
        raise ConfigError("samples: the distributions to draw num_samples times", source=source, key="num_samples",
                          value=num_samples, line=line_of(data, "num_samples"))
    sample_seed = top.number("sample_seed", 0, integer=True, minimum=0)
    seeds = _seeds(data.get("seeds"), source, line_of(data, "seeds"), workload.seed)
    slo = ()
    if data.get("slo"):
        s = Section(data["slo"], source, "slo")
        s.reject_unknown(set(_SLO_KEYS))
        slo = tuple((k, float(s.number(k, exclusive_minimum=0))) for k in _SLO_KEYS if s.has(k))
    output = data.get("output")
    if output is not None:
        output = top.string("output")
        output = str(Path(base_dir) / output) if base_dir is not None else output
    spec = SweepSpec(model=model, hardware=hardware, serving=serving, workload=workload, grid=tuple(grid),
                     samples=tuple(samples), num_samples=num_samples if samples else 0, sample_seed=sample_seed,
                     seeds=seeds, slo=slo, output=output, source=source, lines=lines)
    plan(spec)  # every value checked now, before any work
    return spec


def load_sweep_spec(path):
    """Read and validate a sweep spec YAML file.

    ::

        base:
          model: llama-3.1-8b            # preset, file (relative to this file) or mapping
          hardware: h100-sxm
          serving: {max_num_seqs: 256}   # ServingConfig fields
          workload: random-1k            # preset, file or a workload mapping
        grid:
          workload.max_concurrency: [1, 4, 32, 256]
          hardware: [h100-sxm, h200-sxm]
        samples:
          hardware.bandwidth_utilization: {uniform: [0.75, 0.95]}
        num_samples: 8
        sample_seed: 0
        seeds: 3                         # workload seeds 0, 1, 2
        slo: {ttft: 500, tpot: 50}       # request_goodput
        output: results.parquet          # relative to this file

    Raises
    ------
    ConfigError
        Naming the file, line, key, value and what was expected.
    """
    path = Path(path)
    data = load_file(path)
    if data is None:
        raise ConfigError("a sweep spec (base, grid, samples, seeds), got an empty file", source=str(path))
    return spec_from_dict(data, str(path), base_dir=path.parent)


def make_spec(base=None, grid=None, samples=None, seeds=None, *, num_samples=0, sample_seed=0, slo=None,
              output=None):
    """A :class:`SweepSpec` from Python values (see :func:`sweep`)."""
    if isinstance(base, SweepSpec):
        base = {"model": base.model, "hardware": base.hardware, "serving": base.serving, "workload": base.workload}
    if isinstance(base, (tuple, list)):
        base = dict(zip(SECTIONS, base))
    data = {"base": dict(base or {}), "grid": dict(grid or {}), "samples": dict(samples or {}),
            "num_samples": num_samples, "sample_seed": sample_seed, "seeds": seeds}
    if slo:
        data["slo"] = dict(slo)
    if output is not None:
        data["output"] = str(output)
    return spec_from_dict(data, "<sweep>")


# ----------------------------------------------------------------------------- the plan

@dataclasses.dataclass(frozen=True)
class _Context:
    """What every task needs, shipped once per worker: the base objects, the whole-object swaps
    (``swaps[section][i]``), what to simulate with, and the metric columns."""

    model: ModelConfig
    hardware: HardwareConfig
    serving: ServingConfig
    workload: Workload
    swaps: dict
    percentiles: tuple
    goodput: dict
    metrics: tuple
    key: str


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated sweep ready to run: per configuration its overrides (``(section, field,
    value)``, swaps first) and table values, the column names, the spec hash."""

    spec: SweepSpec
    overrides: tuple  # per config_id
    displays: tuple  # per config_id: the swept columns' values
    grid_ids: np.ndarray
    sample_ids: np.ndarray
    context: _Context
    spec_hash: str

    @property
    def items(self):
        """(config_id, seed) of every simulation, in table order."""
        return [(c, s) for c in range(len(self.overrides)) for s in self.spec.seeds]


def _parse_values(spec, path, values, where, rounding):
    """Each distinct value of ``path`` checked once: {index: (override value, display)}; swaps
    are loaded and kept in ``swaps``."""
    source = spec.source
    line = spec.lines.get(f"{where}.{path}")
    target = _target(path, where, line, source)
    key = f"{where}.{path}"
    base = getattr(spec, target.section)
    out = []
    cache = {}
    objects = []
    for value in values:
        if rounding and target.integer and _is_number(value):
            value = int(round(float(value)))
        try:
            ck = ("v", type(value).__name__, value)
            hash(ck)
        except TypeError:
            ck = ("j", json.dumps(_jsonable(value), sort_keys=True))
        if ck in cache:
            out.append(cache[ck])
            continue
        if target.field is None:
            obj = _load_object(target.section, value, source, key, line, Path(source).parent
                               if source not in ("<sweep>", "<dict>") else None)
            objects.append(obj)
            parsed = (target.section, None, len(objects) - 1)
            disp = value if isinstance(value, str) else _display(obj)
        else:
            _, v = _replace_checked(target, base, value, source, key, line)
            parsed = (target.section, target.field, v)
            disp = _display(value if not isinstance(value, dict) else v)
        cache[ck] = (parsed, disp)
        out.append(cache[ck])
    return target, out, objects


def plan(spec):
    """Validate every value of ``spec`` and lay out its configurations (no simulation).

    Returns
    -------
    Plan
        Kept on the spec: a second call returns the same plan.

    Raises
    ------
    ConfigError
        The first bad value, naming its key (and file and line for a spec file).
    """
    cached = spec.__dict__.get("_plan")
    if cached is not None:
        return cached
    swaps = {}
    grid_axes = []
    for path, values in spec.grid:
        target, parsed, objects = _parse_values(spec, path, values, "grid", rounding=False)
        if objects:
            swaps[target.section] = tuple(swaps.get(target.section, ())) + tuple(objects)
            offset = len(swaps[target.section]) - len(objects)
            parsed = [((s, f, i + offset), d) if f is None else ((s, f, i), d) for (s, f, i), d in parsed]
        grid_axes.append(parsed)
    sample_cols = []
    if spec.samples:
        ss = np.random.SeedSequence(spec.sample_seed)
        for (path, dist), child in zip(spec.samples, ss.spawn(len(spec.samples))):
            draws = dist.draw(np.random.default_rng(child), spec.num_samples)
            target, parsed, objects = _parse_values(spec, path, draws, "samples", rounding=True)
            if objects:
                swaps[target.section] = tuple(swaps.get(target.section, ())) + tuple(objects)
                offset = len(swaps[target.section]) - len(objects)
                parsed = [((s, f, i + offset), d) if f is None else ((s, f, i), d) for (s, f, i), d in parsed]
            sample_cols.append(parsed)
    n_samples = spec.num_samples if spec.samples else 1
    overrides, displays, grid_ids, sample_ids = [], [], [], []
    for g, combo in enumerate(itertools.product(*grid_axes) if grid_axes else [()]):
        for j in range(n_samples):
            chosen = list(combo) + [col[j] for col in sample_cols]
            ov = tuple(sorted((p for p, _ in chosen), key=lambda o: o[1] is not None))  # swaps first
            overrides.append(ov)
            displays.append(tuple(d for _, d in chosen))
            grid_ids.append(g)
            sample_ids.append(j)
    metrics = metric_names(PERCENTILES, tuple(k for k, _ in spec.slo))
    spec_hash = _spec_hash(spec, metrics)
    ctx = _Context(spec.model, spec.hardware, spec.serving, spec.workload, swaps, PERCENTILES, spec.goodput,
                   metrics, spec_hash)
    out = Plan(spec, tuple(overrides), tuple(displays), np.asarray(grid_ids, dtype=np.int64),
               np.asarray(sample_ids, dtype=np.int64), ctx, spec_hash)
    object.__setattr__(spec, "_plan", out)  # a frozen dataclass: cached outside its fields
    return out


def _spec_hash(spec, metrics):
    """Hash of everything that decides a row's numbers given its (config_id, seed): the base
    objects, the grid, the samples, the SLOs and the table's metric columns (not the seeds)."""
    payload = {
        "base": {s: _jsonable(getattr(spec, s)) for s in SECTIONS},
        "grid": [[p, [_jsonable(v) for v in vals]] for p, vals in spec.grid],
        "samples": [[p, d.kind, [_jsonable(a) for a in d.args]] for p, d in spec.samples],
        "num_samples": spec.num_samples, "sample_seed": spec.sample_seed, "slo": [list(x) for x in spec.slo],
        "metrics": list(metrics), "percentiles": list(PERCENTILES),
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- running one chunk

def _build(ctx, overrides, seed):
    """The four config objects of one configuration."""
    objs = {"model": ctx.model, "hardware": ctx.hardware, "serving": ctx.serving, "workload": ctx.workload}
    changes = {"model": {}, "hardware": {}, "serving": {}, "workload": {"seed": seed}}
    for section, field, value in overrides:
        if field is None:
            objs[section] = ctx.swaps[section][value]
        else:
            changes[section][field] = value
    wc = changes["workload"]
    if "burstiness" in wc and "arrival" not in wc and objs["workload"].arrival != "constant":
        wc["arrival"] = "gamma" if wc["burstiness"] != 1.0 else "poisson"
    hc = changes["hardware"]
    if hc and objs["hardware"].frameworks:
        swept = set(hc) & set(FACTOR_KEYS)
        if swept:  # a swept factor wins over the profile's per-framework value
            hc["frameworks"] = tuple((name, tuple((k, v) for k, v in fs if k not in swept))
                                     for name, fs in objs["hardware"].frameworks)
    for section, ch in changes.items():
        if ch:
            objs[section] = dataclasses.replace(objs[section], **ch)
    return objs["model"], objs["hardware"], objs["serving"], objs["workload"]


def _number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def summary_metrics(summary, names):
    """The table's metric values of one summary (NaN where a key is missing or not a number):
    ``gpus`` (tensor x data parallel) and ``output_throughput_per_gpu`` are derived."""
    gpus = summary.get("tensor_parallel_size", 1) * summary.get("data_parallel_size", 1)
    out = []
    for k in names:
        if k == "gpus":
            out.append(float(gpus))
        elif k == "output_throughput_per_gpu":
            out.append(_number(summary.get("output_throughput")) / gpus)
        else:
            out.append(_number(summary.get(k)))
    return tuple(out)


_WORKER_CONTEXTS = {}


def _run_chunk(ctx, items):
    """Simulate ``items`` — ``(config_id, overrides, seed)`` — and return ``(config_id, seed,
    metrics, error)`` per item. ``ctx`` is the :class:`_Context` or, in a pool made by this
    module, its key (the context came with the worker's initializer)."""
    if isinstance(ctx, str):
        ctx = _WORKER_CONTEXTS[ctx]
    out = []
    nan = (math.nan,) * len(ctx.metrics)
    for config_id, overrides, seed in items:
        try:
            m, h, s, w = _build(ctx, overrides, seed)
            res = simulate(m, h, s, w, keep_requests=False, percentiles=ctx.percentiles, goodput=ctx.goodput)
            out.append((config_id, seed, summary_metrics(res.summary, ctx.metrics), ""))
        except ConfigError as exc:  # SimulatedOOM, TP not dividing the heads, lengths over max_model_len
            out.append((config_id, seed, nan, row_error(exc)))
    return out


def row_error(exc):
    """The one-line reason of a failed configuration, naming serving fields by their sweep path
    (``serving.tensor_parallel_size``) where simulate names the command-line flag."""
    key = exc.key
    if exc.source == "command line" and isinstance(key, str) and key.startswith("--"):
        field = key[2:].replace("-", "_")
        if field in {f.name for f in dataclasses.fields(ServingConfig)}:
            return str(ConfigError(exc.expected, key=f"serving.{field}", value=exc.value))
    return str(exc)


_WARM = []


def _probe_configs():
    return load_model(DEFAULT_MODEL), load_hardware(DEFAULT_HARDWARE)


def warm_up():
    """Compile (or load from numba's cache) the kernels in this process: one tiny simulation."""
    if not _WARM:
        m, h = _probe_configs()
        simulate(m, h, ServingConfig(), Workload(num_prompts=4, request_rate=10.0, max_concurrency=2),
                 keep_requests=False, percentiles=PERCENTILES)
        _WARM.append(True)
    return True


def _init_worker(ctx=None):
    if ctx is not None:
        _WORKER_CONTEXTS[ctx.key] = ctx
    warm_up()


@functools.lru_cache(maxsize=None)
def metric_names(percentiles=PERCENTILES, slo_keys=()):
    """The table's metric columns: every numeric key of a summary simulated with these
    percentiles (and goodput SLOs), without wall-clock keys, plus ``gpus`` and
    ``output_throughput_per_gpu``."""
    m, h = _probe_configs()
    res = simulate(m, h, ServingConfig(), Workload(num_prompts=4, request_rate=10.0, max_concurrency=2),
                   keep_requests=False, percentiles=percentiles,
                   goodput={k: 1e9 for k in slo_keys} or None)
    _WARM.append(True)
    names = [k for k, v in res.summary.items()
             if k not in NONDETERMINISTIC and _is_number(v) and not isinstance(v, bool)]
    return tuple(names) + ("gpus", "output_throughput_per_gpu")


# ----------------------------------------------------------------------------- executors

class DaskExecutor(Executor):
    """A ``dask.distributed`` client's executor that also closes the client (and the local
    cluster it started) on shutdown; ``client`` is the :class:`distributed.Client`."""

    def __init__(self, client, cluster=None):
        self.client = client
        self.cluster = cluster
        self._inner = client.get_executor()

    def submit(self, fn, /, *args, **kwargs):
        return self._inner.submit(fn, *args, **kwargs)

    def shutdown(self, wait=True, *, cancel_futures=False):
        try:
            self._inner.shutdown(wait=wait)
        finally:
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()


def make_executor(kind="threads", scheduler=None, workers=None, *, _context=None):
    """An executor for :func:`sweep`.

    Parameters
    ----------
    kind : {"threads", "processes", "dask"}
        ``threads``: a thread pool (the kernels release the GIL); ``processes``: a process pool
        (the platform's start method: fork on Linux up to Python 3.13; with spawn or forkserver a
        script needs the ``if __name__ == "__main__":`` guard), each worker warmed up once; ``dask``: a ``dask.distributed`` client of the
        scheduler at ``scheduler``, or of a new local cluster of ``workers`` single-threaded
        worker processes (``pip install "simllm[dask]"``).
    scheduler : str, optional
        The dask scheduler's address (``tcp://host:8786``).
    workers : int, optional
        Threads or processes (default ``os.cpu_count()``).

    Raises
    ------
    ConfigError
        An unknown kind, or dask requested but not installed.
    """
    n = int(workers or os.cpu_count() or 1)
    if kind in (None, "threads"):
        return ThreadPoolExecutor(max_workers=n, thread_name_prefix="simllm-sweep")
    if kind == "processes":
        return ProcessPoolExecutor(max_workers=n, initializer=_init_worker, initargs=(_context,))
    if kind == "dask":
        try:
            from dask.distributed import Client, LocalCluster  # noqa: PLC0415 - optional dependency
        except ImportError:
            raise ConfigError('the dask executor needs dask.distributed: pip install "simllm[dask]"',
                              source="command line", key="--executor", value="dask") from None
        if scheduler:
            return DaskExecutor(Client(scheduler))
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        return DaskExecutor(Client(cluster), cluster)
    raise ConfigError(f"one of {', '.join(EXECUTORS)} or a concurrent.futures.Executor", source="command line",
                      key="--executor", value=kind)


def _dask_client(executor):
    client = getattr(executor, "client", None) or getattr(executor, "_client", None)
    return client if client is not None and hasattr(client, "scatter") else None


def _num_workers(executor):
    client = _dask_client(executor)
    if client is not None:
        try:
            return max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()))
        except Exception:  # noqa: BLE001 - only a sizing hint
            return os.cpu_count() or 1
    return int(getattr(executor, "_max_workers", 0) or os.cpu_count() or 1)


def estimated_cost_s(workload):
    """Rough seconds one simulation of ``workload`` takes (for chunking only)."""
    n = workload.num_prompts or 1000
    return COST_FIXED_S + COST_PER_REQUEST_S * n


def choose_chunk_size(plan_, n_items, n_workers):
    """Configurations per task: about :data:`TARGET_TASK_S` of simulation by the rough cost
    model, at most :data:`MAX_CHUNK`, and at least :data:`MIN_TASKS_PER_WORKER` tasks per worker."""
    if not n_items:
        return 1
    costs = []
    for ov in plan_.overrides[:: max(1, len(plan_.overrides) // 64)]:
        n = plan_.context.workload.num_prompts
        for section, field, value in ov:
            if section == "workload" and field is None:
                n = plan_.context.swaps["workload"][value].num_prompts
            elif section == "workload" and field == "num_prompts":
                n = value
        costs.append(COST_FIXED_S + COST_PER_REQUEST_S * (n or 1000))
    per = float(np.mean(costs))
    size = max(1, int(round(TARGET_TASK_S / per)))
    balance = max(1, math.ceil(n_items / (MIN_TASKS_PER_WORKER * n_workers)))
    return int(max(1, min(size, balance, MAX_CHUNK)))


# ----------------------------------------------------------------------------- the result

class SweepResult:
    """A sweep's rows: ``table`` is a numpy structured array with one row per configuration x
    seed: ``config_id``, ``grid_id``, ``sample`` (the Monte Carlo draw), ``seed``, one column per
    swept path (named by it: ``serving.max_num_seqs``; strings for names, numbers otherwise),
    every numeric summary metric (NaN for a configuration that failed) and ``error`` (empty, or
    the one-line reason: a simulated OOM, a tensor-parallel size not dividing the heads, ...).

    Attributes
    ----------
    table : numpy.ndarray
    paths : tuple of str
        The swept columns.
    metrics : tuple of str
        The metric columns.
    spec_hash : str
    ran, resumed : int
        Simulations run by this call, and rows taken from an earlier run's output.
    wall_s : float
    chunk_size : int
    """

    def __init__(self, table, paths, metrics, spec_hash="", ran=0, resumed=0, wall_s=0.0, chunk_size=0,
                 grid_paths=None):
        self.table = table
        self.paths = tuple(paths)
        self.metrics = tuple(metrics)
        self.spec_hash = spec_hash
        self.ran = ran
        self.resumed = resumed
        self.wall_s = wall_s
        self.chunk_size = chunk_size
        self.grid_paths = tuple(self.paths if grid_paths is None else grid_paths)

    def __len__(self):
        return len(self.table)

    def __repr__(self):
        return (f"SweepResult({len(self)} rows, {len(np.unique(self.table['config_id']))} configurations, "
                f"paths={list(self.paths)})")

    @property
    def configs_per_s(self):
        return self.ran / self.wall_s if self.wall_s else math.nan

    def to_pandas(self):
        """The table as a pandas DataFrame (requires pandas)."""
        try:
            import pandas as pd  # noqa: PLC0415 - optional dependency
        except ImportError:
            raise ImportError("SweepResult.to_pandas() needs pandas: pip install pandas") from None
        return pd.DataFrame({name: self.table[name] for name in self.table.dtype.names})

    def aggregate(self, by="config"):
        """The uncertainty band per group: ``n`` rows, ``n_failed``, and per metric
        ``<metric>_mean``, ``_p5``, ``_p50`` and ``_p95`` over the group's successful rows (NaN
        when none succeeded).

        Parameters
        ----------
        by : "config", "grid" or list of str
            ``config`` (default): per configuration, over seeds. ``grid``: per grid point, over
            seeds and Monte Carlo draws (the sampled paths' columns are left out). Or column
            names to group by.

        Returns
        -------
        numpy.ndarray
            A structured array, one row per group in order of first appearance.
        """
        t = self.table
        if by == "config":
            keys, keep = ["config_id"], ["config_id", "grid_id", "sample"] + list(self.paths)
        elif by == "grid":
            keys, keep = ["grid_id"], ["grid_id"] + list(self.grid_paths)
        else:
            keys = list(by)
            for k in keys:
                if k not in t.dtype.names:
                    raise ConfigError(f"a column of the table ({', '.join(t.dtype.names[:8])}, ...)", key="by",
                                      value=k)
            keep = list(keys)
        codes, n_groups = _group_codes([t[k] for k in keys], len(t))
        order = np.argsort(codes, kind="stable")
        counts = np.bincount(codes, minlength=n_groups)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        first = order[starts] if n_groups else np.zeros(0, dtype=np.int64)
        dtype = [(k, t.dtype[k]) for k in keep] + [("n", np.int64), ("n_failed", np.int64)]
        dtype += [(f"{m}_{s}", np.float64) for m in self.metrics for s, _ in _STATS]
        out = np.zeros(n_groups, dtype=dtype)
        for k in keep:
            out[k] = t[k][first]
        out["n"] = counts
        out["n_failed"] = np.bincount(codes, weights=(t["error"] != "").astype(np.float64),
                                      minlength=n_groups).astype(np.int64)
        if n_groups and self.metrics:
            # (groups, rows of the largest group, metrics), NaN-padded; sorted so NaN go last
            width = int(counts.max())
            cube = np.full((n_groups, width, len(self.metrics)), np.nan)
            pos = np.arange(len(t)) - starts[codes[order]]
            values = np.stack([t[m] for m in self.metrics], axis=1)
            cube[codes[order], pos] = values[order]
            stats = _band(cube)
            for j, m in enumerate(self.metrics):
                for s, _ in _STATS:
                    out[f"{m}_{s}"] = stats[s][:, j]
        return out

    # -- files
    def save(self, path):
        """Write the table to ``path``: ``.csv`` (floats written exactly) or ``.parquet`` (needs
        pyarrow), atomically."""
        _save_table(self.table, path, {"spec_hash": self.spec_hash, "paths": list(self.paths),
                                       "grid_paths": list(self.grid_paths), "metrics": list(self.metrics)})
        return Path(path)

    @classmethod
    def load(cls, path):
        """Read a table written by :meth:`save` (or a sweep's output)."""
        table, meta = _load_table(path)
        if "metrics" not in meta:
            meta = {**(_read_record(Path(path)) or {}), **meta}
        names = table.dtype.names
        paths = meta.get("paths")
        if paths is None:  # swept columns are dotted paths or a section name; metrics never are
            paths = [n for n in names if n not in _KEY_COLUMNS and ("." in n or n in SECTIONS)]
        metrics = meta.get("metrics")
        if metrics is None:
            metrics = [n for n in names if n not in _KEY_COLUMNS and n not in paths and n != "error"]
        return cls(table, paths, metrics, meta.get("spec_hash", ""), grid_paths=meta.get("grid_paths"))


def _group_codes(columns, n):
    """Group number of each row (groups numbered by first appearance) and the group count."""
    group_of = {}
    codes = np.empty(n, dtype=np.int64)
    lists = [c.tolist() for c in columns]
    for i, key in enumerate(zip(*lists)):
        codes[i] = group_of.setdefault(key, len(group_of))
    return codes, len(group_of)


def _band(cube):
    """Mean and the 5th, 50th and 95th percentiles along axis 1 of ``cube``, ignoring NaN
    (numpy's default linear interpolation), vectorized over the other axes."""
    valid = ~np.isnan(cube)
    n = valid.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"mean": np.where(n > 0, np.nansum(cube, axis=1) / np.maximum(n, 1), np.nan)}
        ordered = np.sort(cube, axis=1)  # NaN sort last
        for name, q in _STATS[1:]:
            h = (np.maximum(n, 1) - 1) * (q / 100.0)
            lo = np.floor(h).astype(np.int64)
            hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
            a = np.take_along_axis(ordered, lo[:, None, :], axis=1)[:, 0, :]
            b = np.take_along_axis(ordered, hi[:, None, :], axis=1)[:, 0, :]
            frac = h - lo
            diff = b - a
            v = np.where(frac >= 0.5, b - diff * (1.0 - frac), a + diff * frac)
            out[name] = np.where(n > 0, v, np.nan)
    return out


def load(path):
    """:meth:`SweepResult.load`."""
    return SweepResult.load(path)


def _column_dtype(values):
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return np.bool_
    if all(_is_number(v) and float(v) == int(v) and not isinstance(v, (float, np.floating)) for v in values):
        return np.int64
    if all(_is_number(v) for v in values):
        return np.float64
    width = max((len(str(v)) for v in values), default=1)
    return f"U{max(width, 1)}"


def _assemble(plan_, rows):
    """The table of ``plan_`` from ``rows`` {(config_id, seed): (metrics, error)}."""
    spec = plan_.spec
    items = [(c, s) for c in range(len(plan_.overrides)) for s in spec.seeds if (c, s) in rows]
    n = len(items)
    paths = spec.paths
    errors = [rows[i][1] for i in items]
    dtype = [("config_id", np.int64), ("grid_id", np.int64), ("sample", np.int64), ("seed", np.int64)]
    for j, p in enumerate(paths):
        dtype.append((p, _column_dtype([d[j] for d in plan_.displays])))
    dtype += [(m, np.float64) for m in plan_.context.metrics]
    dtype.append(("error", f"U{max([len(e) for e in errors] + [1])}"))
    t = np.zeros(n, dtype=dtype)
    if not n:
        return t
    cid = np.fromiter((c for c, _ in items), dtype=np.int64, count=n)
    t["config_id"] = cid
    t["seed"] = np.fromiter((s for _, s in items), dtype=np.int64, count=n)
    t["grid_id"] = plan_.grid_ids[cid]
    t["sample"] = plan_.sample_ids[cid]
    for j, p in enumerate(paths):
        t[p] = [plan_.displays[c][j] for c in cid]
    metrics = np.array([rows[i][0] for i in items], dtype=np.float64).reshape(n, len(plan_.context.metrics))
    for k, m in enumerate(plan_.context.metrics):
        t[m] = metrics[:, k]
    t["error"] = errors
    return t


# ----------------------------------------------------------------------------- CSV / Parquet

def _fmt(v):
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, np.generic):
        return str(v.item())
    return str(v)


def _table_csv(table, out):
    w = csv.writer(out, lineterminator="\n")
    names = table.dtype.names
    w.writerow(names)
    cols = [table[n].tolist() for n in names]
    for i in range(len(table)):
        w.writerow([_fmt(c[i]) for c in cols])


def table_to_csv(table):
    """The table as CSV text (floats exactly, NaN as ``nan``)."""
    buf = io.StringIO()
    _table_csv(table, buf)
    return buf.getvalue()


def _parse_column(name, texts):
    if name in _KEY_COLUMNS:
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
    try:
        import pyarrow  # noqa: PLC0415 - optional dependency
        import pyarrow.parquet  # noqa: PLC0415
    except ImportError:
        raise ConfigError("writing or reading Parquet needs pyarrow, which is not installed: pip install pyarrow",
                          source="command line", key="--output") from None
    return pyarrow


def _check_output_path(path):
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ConfigError("a .csv or .parquet file name", source="command line", key="--output", value=str(path))
    if suffix == ".parquet":
        _pyarrow()


def _save_table(table, path, meta):
    from simllm.exports import atomic_path  # noqa: PLC0415

    _check_output_path(path)
    if Path(path).suffix.lower() == ".csv":
        with atomic_path(path) as tmp:
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                _table_csv(table, f)
        return
    pa = _pyarrow()
    cols = {n: pa.array(table[n].tolist() if table[n].dtype.kind == "U" else table[n]) for n in table.dtype.names}
    tab = pa.table(cols).replace_schema_metadata({"simllm.sweep": json.dumps(meta)})
    with atomic_path(path) as tmp:
        pa.parquet.write_table(tab, str(tmp))


def _load_table(path):
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


def _journal_path(output):
    return output.with_name(output.name + JOURNAL_SUFFIX)


def _read_record(output):
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


def _existing_rows(plan_, output):
    """Rows of an earlier run of this spec: from the finished output (its record must match)
    and from the journal. Truncates a journal's torn last line."""
    rows = {}
    metrics = plan_.context.metrics
    wanted = set(plan_.items)
    if output.exists():
        record = _read_record(output)
        if record is None:
            raise ConfigError(f"{output} exists and is not the output of a simllm sweep (no {_record_path(output).name} "
                              f"next to it): remove it or choose another output")
        if record.get("spec_hash") != plan_.spec_hash:
            raise _refuse(output, record.get("spec_hash"), plan_.spec_hash)
        table, _ = _load_table(output)
        for i in range(len(table)):
            key = (int(table["config_id"][i]), int(table["seed"][i]))
            if key in wanted:
                rows[key] = (tuple(float(table[m][i]) for m in metrics), str(table["error"][i]))
    journal = _journal_path(output)
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


class _Journal:
    """Appends finished rows to ``<output>.partial.csv``, flushed per chunk."""

    def __init__(self, plan_, output):
        self.path = _journal_path(output)
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


# ----------------------------------------------------------------------------- running

def run_spec(spec, executor=None, *, workers=None, scheduler=None, chunk_size=None, progress=None, output=None):
    """Run a :class:`SweepSpec` (see :func:`sweep`); ``output`` defaults to the spec's.

    Returns
    -------
    SweepResult
    """
    plan_ = plan(spec)
    if isinstance(executor, str) and executor not in EXECUTORS:
        raise ConfigError(f"one of {', '.join(EXECUTORS)} or a concurrent.futures.Executor", source="command line",
                          key="--executor", value=executor)
    output = output if output is not None else spec.output
    if output is not None:
        output = Path(output)
        _check_output_path(output)
    done = _existing_rows(plan_, output) if output is not None else {}
    pending = [(c, s) for c, s in plan_.items if (c, s) not in done]
    resumed = len(plan_.items) - len(pending)
    if progress is not None and hasattr(progress, "total"):
        try:
            progress.total = len(pending)
        except AttributeError:
            pass
    start = time.perf_counter()
    rows = dict(done)
    size = 0
    if pending:
        own = executor is None or isinstance(executor, str)
        ex = make_executor(executor or "threads", scheduler, workers, _context=plan_.context) if own else executor
        journal = _Journal(plan_, output) if output is not None else None
        try:
            size = _execute(plan_, ex, own, pending, chunk_size, progress, journal, rows)
        finally:
            if journal is not None:
                journal.close()
            if own:
                ex.shutdown(wait=True, cancel_futures=True)
    wall = time.perf_counter() - start
    table = _assemble(plan_, rows)
    grid_paths = tuple(p for p, _ in spec.grid)
    result = SweepResult(table, spec.paths, plan_.context.metrics, plan_.spec_hash, ran=len(pending),
                         resumed=resumed, wall_s=wall, chunk_size=size, grid_paths=grid_paths)
    if output is not None:
        from simllm.exports import write_text_atomic  # noqa: PLC0415

        record = {"spec_hash": plan_.spec_hash, "rows": len(table), "configurations": spec.num_configs,
                  "seeds": list(spec.seeds), "paths": list(spec.paths), "grid_paths": list(grid_paths),
                  "metrics": list(plan_.context.metrics), "source": spec.source}
        write_text_atomic(_record_path(output), json.dumps(record, indent=2) + "\n")
        result.save(output)
        _journal_path(output).unlink(missing_ok=True)
    if pending:
        log.info("sweep: %d simulations in %.2f s (%.1f/s), chunks of %d", len(pending), wall, len(pending) / wall,
                 size)
    return result


def _execute(plan_, ex, own, pending, chunk_size, progress, journal, rows):
    ctx = plan_.context
    n_workers = _num_workers(ex)
    size = int(chunk_size) if chunk_size else choose_chunk_size(plan_, len(pending), n_workers)
    if size < 1:
        raise ConfigError("a positive chunk size", key="chunk_size", value=chunk_size)
    client = _dask_client(ex)
    if client is not None:
        ctx_arg = client.scatter(ctx, broadcast=True, hash=False)
        client.run(_init_worker)
    elif own and isinstance(ex, ProcessPoolExecutor):
        ctx_arg = ctx.key  # the pool's initializer got the context
    else:
        ctx_arg = ctx
        if not isinstance(ex, ProcessPoolExecutor):
            warm_up()  # threads share this process's compiled kernels
    overrides = plan_.overrides
    chunks = ([(c, overrides[c], s) for c, s in pending[i:i + size]] for i in range(0, len(pending), size))
    limit = max(2, 2 * n_workers)
    in_flight = set()
    try:
        while True:
            while len(in_flight) < limit:
                chunk = next(chunks, None)
                if chunk is None:
                    break
                in_flight.add(ex.submit(_run_chunk, ctx_arg, chunk))
            if not in_flight:
                break
            finished, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
            for fut in finished:
                out = fut.result()
                if journal is not None:
                    journal.write(out)
                for config_id, seed, metrics, error in out:
                    rows[(config_id, seed)] = (metrics, error)
                if progress is not None:
                    progress.advance(len(out))
    except BaseException:
        for fut in in_flight:
            fut.cancel()
        raise
    return size


def sweep(base=None, grid=None, samples=None, seeds=None, executor=None, *, num_samples=0, sample_seed=0,
          chunk_size=None, progress=None, resume_from=None, slo=None, workers=None, scheduler=None):
    """Simulate every configuration of a grid and/or Monte Carlo samples, for each seed.

    Parameters
    ----------
    base : dict, optional
        ``{"model": ..., "hardware": ..., "serving": ..., "workload": ...}``: config objects,
        preset names or paths, or mappings in the config files' form (defaults: llama-3.1-8b,
        h100-sxm, vLLM's engine defaults, 1000 requests of 1024/128 tokens at once).
    grid : dict, optional
        ``{path: [values]}``: every combination (module docstring: the paths).
    samples : dict, optional
        ``{path: {"uniform": [lo, hi]}}`` (or ``loguniform``, ``normal: [mean, std]``,
        ``choice: [...]``), drawn ``num_samples`` times with ``sample_seed``.
    seeds : int or list of int, optional
        Workload seeds: n means 0..n-1; default the base workload's seed.
    executor : concurrent.futures.Executor or str, optional
        Default: a thread pool of ``os.cpu_count()`` threads. ``"threads"``, ``"processes"``
        or ``"dask"`` make one (:func:`make_executor`, with ``workers`` and ``scheduler``) and
        shut it down at the end; an executor given is left running.
    chunk_size : int, optional
        Configurations per task (default: about 50 ms of simulation per task).
    progress : object, optional
        ``progress.advance(n)`` is called as configurations finish (``simllm.progress.Progress``);
        a ``total`` attribute is set to the number of simulations this call runs.
    resume_from : str or Path, optional
        The output file (``.csv`` or ``.parquet``): rows are journaled as they finish, and a rerun
        of the same spec skips those already there (module docstring).
    slo : dict, optional
        ``{"ttft": ms, "tpot": ms, "e2el": ms}``: adds ``request_goodput``.

    Returns
    -------
    SweepResult

    Raises
    ------
    ConfigError
        A bad spec, before any simulation runs.
    """
    spec = make_spec(base, grid, samples, seeds, num_samples=num_samples, sample_seed=sample_seed, slo=slo)
    return run_spec(spec, executor, workers=workers, scheduler=scheduler, chunk_size=chunk_size,
                    progress=progress, output=resume_from)


# ----------------------------------------------------------------------------- reports

#: The metrics the text report shows: (column, heading).
REPORT_METRICS = (("request_throughput", "req/s"), ("output_throughput", "out tok/s"),
                  ("output_throughput_per_gpu", "tok/s/GPU"), ("p99_ttft_ms", "P99 TTFT ms"),
                  ("p99_tpot_ms", "P99 TPOT ms"), ("mean_e2el_ms", "E2E mean ms"), ("error_rate", "errors"))


def _cell(value, digits=1):
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "-"
        return f"{value:,.{digits}f}" if abs(value) < 1e6 else f"{value:.3g}"
    return str(value)


def format_sweep(result, max_rows=50):
    """A text table: per configuration (over seeds) the mean of the key metrics, with the P5-P95
    band when there are several seeds; failed configurations show their error."""
    from simllm.report import table as text_table  # noqa: PLC0415

    agg = result.aggregate()
    headers = ["config"] + list(result.paths) + ["n"] + [h for _, h in REPORT_METRICS]
    rows = []
    errors = {}  # message -> failed configurations
    t = result.table
    for cid, err in zip(t["config_id"].tolist(), t["error"].tolist()):
        if err and cid not in errors.setdefault(err, []):
            errors[err].append(cid)
    for g in agg[:max_rows]:
        row = [int(g["config_id"])] + [_cell(g[p], 4) for p in result.paths] + [int(g["n"])]
        for m, _ in REPORT_METRICS:
            mean, lo, hi = g[f"{m}_mean"], g[f"{m}_p5"], g[f"{m}_p95"]
            digits = 3 if m == "error_rate" else 1
            cell = _cell(mean, digits)
            if g["n"] - g["n_failed"] > 1 and not math.isnan(mean) and _cell(lo, digits) != _cell(hi, digits):
                cell += f" [{_cell(lo, digits)}-{_cell(hi, digits)}]"
            row.append(cell)
        rows.append(row)
    lines = [f"simllm sweep: {len(agg)} configurations x {len(t) // max(len(agg), 1)} seeds = {len(t)} simulations"
             + (f" ({result.ran} run in {result.wall_s:.1f} s, {result.resumed} resumed)" if result.ran or
                result.resumed else ""),
             text_table(headers, rows)]
    if len(agg) > max_rows:
        lines.append(f"... {len(agg) - max_rows} more configurations (write them with --output FILE)")
    for err, cids in list(errors.items())[:10]:
        shown = ", ".join(str(c) for c in cids[:8]) + (f", ... ({len(cids)} in all)" if len(cids) > 8 else "")
        lines.append(f"failed: config {shown}: {err}")
    if len(errors) > 10:
        lines.append(f"... {len(errors) - 10} more errors")
    return "\n".join(lines)


def result_to_dict(result):
    """JSON-ready: the rows and the per-configuration aggregate."""
    def records(arr):
        names = arr.dtype.names
        cols = [arr[n].tolist() for n in names]
        return [dict(zip(names, vals)) for vals in zip(*cols)] if len(arr) else []

    return {"spec_hash": result.spec_hash, "paths": list(result.paths), "metrics": list(result.metrics),
            "rows": records(result.table), "aggregate": records(result.aggregate())}


def plot_sweep(result, directory, metrics=("output_throughput", "p99_ttft_ms", "p99_tpot_ms", "mean_e2el_ms")):
    """PNGs of ``metrics`` against the first numeric grid path (one line per combination of the
    other grid paths, the P5-P95 band over seeds and draws shaded); without a numeric grid path,
    histograms over all rows. Needs matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
        from matplotlib.figure import Figure  # noqa: PLC0415
    except ImportError:
        raise ConfigError('plotting needs matplotlib, which is not installed: pip install "simllm[plot]"') from None
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    t = result.table
    numeric = [p for p in result.grid_paths if t[p].dtype.kind in "if"]
    written = []
    agg = result.aggregate(by="grid") if result.grid_paths else None
    for m in metrics:
        fig = Figure(figsize=(6.4, 4.8), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        ax.grid(True, alpha=0.3)
        if numeric and agg is not None and len(agg):
            x = numeric[0]
            others = [p for p in result.grid_paths if p != x]
            labels = [" ".join(f"{p}={_cell(g[p], 4)}" for p in others) for g in agg]
            for label in dict.fromkeys(labels):
                sel = np.array([lab == label for lab in labels])
                g = agg[sel]
                order = np.argsort(g[x])
                xs = g[x][order].astype(float)
                ax.plot(xs, g[f"{m}_mean"][order], marker="o", label=label or None)
                ax.fill_between(xs, g[f"{m}_p5"][order], g[f"{m}_p95"][order], alpha=0.2)
            ax.set_xlabel(x)
            ax.set_ylabel(m)
            if xs.size and xs.min() > 0 and xs.max() / xs.min() >= 16:
                ax.set_xscale("log", base=2)
            if len(set(labels)) > 1:
                ax.legend(fontsize="small")
        else:
            vals = t[m][~np.isnan(t[m])]
            ax.hist(vals, bins=min(50, max(5, int(math.sqrt(max(len(vals), 1))))))
            ax.set_xlabel(m)
            ax.set_ylabel("simulations")
        ax.set_title(f"simllm sweep: {m}")
        path = directory / f"sweep_{m}.png"
        fig.savefig(path, dpi=150)
        fig.clear()
        written.append(path)
    return written
