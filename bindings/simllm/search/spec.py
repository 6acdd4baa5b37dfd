"""The sweep spec: what :func:`simllm.search.sweep.sweep` varies, checked before anything runs.

A base configuration (``model``, ``hardware``, ``serving``, ``workload``: preset names, file
paths, mappings in the files' own form, or the config objects) and the fields to vary, by dotted
path: ``model.<field>`` and ``hardware.<field>`` (the :class:`ModelConfig` and
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
- Disaggregated prefill/decode: ``base.disagg`` (the :class:`~simllm.config.disagg.DisaggConfig`
  fields, with ``prefill`` and ``decode`` mappings of ServingConfig fields over ``base.serving``)
  or any path ``disagg.<field>`` (``prefill_instances``, ``decode_instances``, the link's
  ``kv_transfer_bandwidth_gbps`` / ``kv_transfer_latency_us``, ``first_token``,
  ``prefill_gpu`` / ``decode_gpu``), ``prefill.<field>`` or ``decode.<field>`` (a pool's
  ServingConfig field) makes every row a disaggregated run (:func:`simllm.simulate_disagg`).
- ``seeds``: an int n (seeds 0..n-1) or a list, applied to ``workload.seed``; by default the base
  workload's seed. ``workload.seed`` itself cannot be swept.

Everything is validated before any simulation runs (:func:`spec_from_dict` checks every value
through :func:`spec_values`): unknown paths (with the nearest name), empty grids, bad
distributions, values of the wrong type or out of range (each distinct value is built into its
dataclass once, so :class:`ServingConfig`'s own checks apply). Problems that only a
model-hardware-serving combination shows (tensor parallelism not dividing the heads, a simulated
OOM) do not stop the sweep: :mod:`simllm.search.sweep` gives that row NaN metrics and the message in its
``error`` column.
"""
import dataclasses
import difflib
import functools
import json
import math
from pathlib import Path

import numpy as np

from simllm.config.disagg import DisaggConfig
from simllm.config.hardware import HardwareConfig, hardware_from_dict, load_hardware
from simllm.config.model import ModelConfig, load_model, model_from_dict
from simllm.config.sections import Section, spec_path
from simllm.config.serving import ServingConfig
from simllm.config.speculative import SpeculativeConfig, speculative_config
from simllm.config.workload import LengthDist, Workload, load_workload, workload_from_dict
from simllm.config.yamlio import line_of, load_file
from simllm.errors import ConfigError
from simllm.sim.slo import GOODPUT_METRICS

DISTRIBUTIONS = ("uniform", "loguniform", "normal", "choice")
SECTIONS = ("model", "hardware", "serving", "workload")
#: Sections of a disaggregated sweep: the pools' ServingConfig overrides and DisaggConfig's own fields.
DISAGG_SECTIONS = ("prefill", "decode", "disagg")
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"

# Fields that are not settings (or not sweepable) per section.
_NOT_FIELDS = {
    "model": ("source", "warnings"),
    "hardware": ("source", "frameworks", "interconnect_given"),
    "serving": (),
    "workload": ("source",),
    "prefill": (),
    "decode": (),
    "disagg": ("prefill", "decode"),
}
_CLASSES = {"model": ModelConfig, "hardware": HardwareConfig, "serving": ServingConfig, "workload": Workload,
            "prefill": ServingConfig, "decode": ServingConfig, "disagg": DisaggConfig}
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
    for section in SECTIONS + DISAGG_SECTIONS:
        out += [f"{section}.{name}" for name in _fields(section)]
    return tuple(out)


def _unknown_path(path, where, line, source):
    near = difflib.get_close_matches(str(path), known_paths(), n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    return ConfigError(
        f"unknown field path ({hint}paths are model, hardware or workload (a preset), or "
        f"<model|hardware|serving|workload|prefill|decode|disagg>.<field>)",
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


_INT_FIELDS = {s: _int_fields(s) for s in SECTIONS + DISAGG_SECTIONS}


def _target(path, where, line, source):
    if not isinstance(path, str):
        raise _unknown_path(path, where, line, source)
    section, _, field = path.partition(".")
    if path == "workload.seed":
        raise ConfigError("not a swept field: give the seeds with seeds: (an int n for 0..n-1, or a list)",
                          source=source, key=f"{where}.{path}", line=line)
    if path in ("serving",) + DISAGG_SECTIONS:
        raise ConfigError(f"a {path} field path ({path}.{_fields(path)[0]}, ...): {path} has no presets to swap",
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

def is_number(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _check_type(target, base_value, value):
    """``value`` converted to the field's type (``base_value``'s), or a ConfigError text."""
    if target.field == "speculative_config":  # a mapping of vLLM's keys, or null for none
        try:
            return speculative_config(value)
        except ConfigError as exc:
            raise ValueError(f"{exc.expected} (at its key {exc.key})" if exc.key else exc.expected) from None
    if isinstance(base_value, bool):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError("true or false")
        return bool(value)
    if isinstance(base_value, int):
        if not is_number(value) or not math.isfinite(value) or value != int(value):
            raise ValueError("an integer")
        return int(value)
    if isinstance(base_value, float):
        if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", ".inf"):
            return math.inf
        if not is_number(value) or math.isnan(value):
            raise ValueError("a number")
        return float(value)
    if isinstance(base_value, str):
        if not isinstance(value, str):
            raise ValueError("a string")
        return value
    raise ValueError(f"not a sweepable field ({type(base_value).__name__})")


def _check_model_or_hardware(target, base, value):
    value = value * target.scale if target.scale != 1.0 and is_number(value) else value
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
    if not is_number(value) or math.isnan(value):
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
    if field == "max_concurrency" and is_number(value) and value == 0:
        return 0  # open loop
    if field in ("input_len", "output_len") and isinstance(value, LengthDist):
        return value
    if field in ("input_len", "output_len") and not isinstance(value, dict) and not is_number(value):
        raise ValueError("a length (a positive integer) or a length mapping ({distribution: uniform, low:, high:})")
    if field == "request_rate" and isinstance(value, str) and value.strip().lower() in ("inf", "infinity", ".inf"):
        return math.inf
    if field == "request_rate" and is_number(value) and value == math.inf:
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
        if target.section in ("serving", "prefill", "decode", "disagg"):
            v = _check_type(target, getattr(base, target.field), value)
        elif target.section == "workload":
            v = _check_workload(target, base, value)
        else:
            v = _check_model_or_hardware(target, base, value)
    except ValueError as exc:
        raise ConfigError(str(exc), source=source, key=key, value=value, line=line) from None
    try:
        built = dataclasses.replace(base, **{target.field: v})
    except ConfigError as exc:  # ServingConfig's or DisaggConfig's __post_init__
        raise _reraise(exc, source, key, value, line) from None
    return built, getattr(built, target.field)


def _display(value):
    """How a swept value shows in the table: numbers and strings as given; objects by name."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if is_number(value):
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
    return json.dumps(spec_jsonable(value), sort_keys=True)


def spec_jsonable(obj):
    if isinstance(obj, SpeculativeConfig):  # as vLLM's --speculative-config reads it
        return obj.vllm_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        skip = ("source", "warnings")
        return {f.name: spec_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in skip}
    if isinstance(obj, dict):
        return {str(k): spec_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [spec_jsonable(v) for v in obj]
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
    disagg: DisaggConfig = None  # the base of a disaggregated sweep (None: aggregated, unless a path says)

    @property
    def disaggregated(self):
        """Whether the rows are disaggregated runs: a ``base.disagg`` or a swept
        ``prefill.`` / ``decode.`` / ``disagg.`` path."""
        return self.disagg is not None or any(p.partition(".")[0] in DISAGG_SECTIONS for p in self.paths)

    @property
    def disagg_base(self):
        """The DisaggConfig the swept disaggregated paths apply to."""
        return self.disagg or DisaggConfig()

    @property
    def prefill(self):
        """The prefill pool's base settings (what ``prefill.<field>`` values are checked against)."""
        return self.disagg_base.pool_serving(self.serving, "prefill")

    @property
    def decode(self):
        return self.disagg_base.pool_serving(self.serving, "decode")

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


#: The most simulations one sweep runs (a table row each).
MAX_RUNS = 10_000_000

_SPEC_KEYS = {"base", "grid", "samples", "num_samples", "sample_seed", "seeds", "slo", "output"}
_BASE_KEYS = set(SECTIONS) | {"disagg"}


def _seeds(value, source, line, base_seed):
    if value is None:
        return (base_seed,)
    if is_number(value) and not isinstance(value, float):
        if not 1 <= value <= MAX_RUNS:
            raise ConfigError(f"a number of seeds in [1, {MAX_RUNS}], or a list of seeds", source=source,
                              key="seeds", value=value, line=line)
        return tuple(range(int(value)))
    if isinstance(value, (list, tuple)) and value:
        out = []
        for s in value:
            if not is_number(s) or s != int(s) or s < 0:
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
    if len(args) != 2 or not all(is_number(a) and math.isfinite(a) for a in args):
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
        expected, for anything :func:`simllm.search.sweep.plan` would refuse too.
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
    disagg = _disagg_from(base.get("disagg"), source, "base.disagg", bl("disagg"))
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
        s.reject_unknown(set(GOODPUT_METRICS))
        slo = tuple((k, float(s.number(k, exclusive_minimum=0))) for k in GOODPUT_METRICS if s.has(k))
    output = data.get("output")
    if output is not None:
        output = top.string("output")
        output = str(spec_path(output, source, key="output", line=line_of(data, "output"))
                     if Path(source).is_file() else Path(base_dir) / output if base_dir is not None else output)
    spec = SweepSpec(model=model, hardware=hardware, serving=serving, workload=workload, grid=tuple(grid),
                     samples=tuple(samples), num_samples=num_samples if samples else 0, sample_seed=sample_seed,
                     seeds=seeds, slo=slo, output=output, source=source, lines=lines, disagg=disagg)
    if len(spec) > MAX_RUNS:
        raise ConfigError(f"at most {MAX_RUNS} simulations (configurations x seeds), got {len(spec)}",
                          source=source, key="grid", line=line_of(data, "grid"))
    for role in ("prefill", "decode"):  # the pools' base settings, each field checked as ServingConfig does
        try:
            getattr(spec, role)
        except ConfigError as exc:
            raise ConfigError(exc.expected, source=source, key=f"base.disagg.{role}", value=exc.value,
                              line=bl("disagg")) from None
    spec_values(spec)  # every value checked now, before any work
    return spec


def _disagg_from(value, source, key, line):
    """``base.disagg``: a DisaggConfig, or a mapping of its fields with ``prefill`` / ``decode``
    mappings of ServingConfig fields; None when absent."""
    if value is None or isinstance(value, DisaggConfig):
        return value
    sec = Section(value, source, key)
    sec.reject_unknown(set(_fields("disagg")) | {"prefill", "decode"})
    out = DisaggConfig()
    for name in value:
        if name in ("prefill", "decode"):
            pool = Section(value[name], source, f"{key}.{name}")
            pool.reject_unknown({f.name for f in dataclasses.fields(ServingConfig)})
            for field, v in value[name].items():  # type-checked here, ranges with the base serving's
                target = _Target(f"{name}.{field}", name, field)
                try:
                    v = _check_type(target, getattr(ServingConfig(), field), v)
                except ValueError as exc:
                    raise ConfigError(str(exc), source=source, key=f"{key}.{name}.{field}", value=v,
                                      line=line_of(value[name], field) or line) from None
                out = dataclasses.replace(out, **{name: tuple(sorted({**dict(getattr(out, name)), field: v}.items()))})
            continue
        out = _replace_checked(_Target(f"disagg.{name}", "disagg", name), out, value[name], source, f"{key}.{name}",
                               line_of(value, name) or line)[0]
    return out


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
    """A :class:`SweepSpec` from Python values (see :func:`simllm.search.sweep.sweep`)."""
    if isinstance(base, SweepSpec):
        base = {"model": base.model, "hardware": base.hardware, "serving": base.serving, "workload": base.workload,
                **({"disagg": base.disagg} if base.disagg is not None else {})}
    if isinstance(base, (tuple, list)):
        base = dict(zip(SECTIONS, base))
    data = {"base": dict(base or {}), "grid": dict(grid or {}), "samples": dict(samples or {}),
            "num_samples": num_samples, "sample_seed": sample_seed, "seeds": seeds}
    if slo:
        data["slo"] = dict(slo)
    if output is not None:
        data["output"] = str(output)
    return spec_from_dict(data, "<sweep>")



# ----------------------------------------------------------------------------- the values

def _parse_values(spec, path, values, where, rounding):
    """Each distinct value of ``path`` checked once: {index: (override value, display)}; swaps
    are loaded and kept in ``swaps``."""
    source = spec.source
    line = spec.lines.get(f"{where}.{path}")
    target = _target(path, where, line, source)
    key = f"{where}.{path}"
    base = spec.disagg_base if target.section == "disagg" else getattr(spec, target.section)
    out = []
    cache = {}
    objects = []
    for value in values:
        if rounding and target.integer and is_number(value):
            value = int(round(float(value)))
        try:
            ck = ("v", type(value).__name__, value)
            hash(ck)
        except TypeError:
            ck = ("j", json.dumps(spec_jsonable(value), sort_keys=True))
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


def _register_swaps(swaps, target, parsed, objects):
    """Append the whole-section objects (a swapped hardware preset, say) of one swept path to
    ``swaps[section]`` and point its parsed values at their index there."""
    if not objects:
        return parsed
    swaps[target.section] = tuple(swaps.get(target.section, ())) + tuple(objects)
    offset = len(swaps[target.section]) - len(objects)
    return [((s, f, i + offset), d) if f is None else ((s, f, i), d) for (s, f, i), d in parsed]


def spec_values(spec):
    """Every value of ``spec`` checked once, and the Monte Carlo draws made (no simulation).

    Returns
    -------
    swaps : dict
        Per section, the whole objects swapped in (``model``, ``hardware``, ``workload`` paths).
    grid_axes : list
        Per grid path, per value: ``((section, field, value), display)``; ``field`` None means
        ``value`` is an index into ``swaps[section]``.
    sample_columns : list
        The same per sampled path, per draw. All three are kept on the spec: a second call
        returns them again.

    Raises
    ------
    ConfigError
        The first bad value, naming its key (and file and line for a spec file).
    """
    cached = spec.__dict__.get("_values")
    if cached is not None:
        return cached
    swaps = {}
    grid_axes = []
    for path, values in spec.grid:
        target, parsed, objects = _parse_values(spec, path, values, "grid", rounding=False)
        grid_axes.append(_register_swaps(swaps, target, parsed, objects))
    sample_cols = []
    if spec.samples:
        ss = np.random.SeedSequence(spec.sample_seed)
        for (path, dist), child in zip(spec.samples, ss.spawn(len(spec.samples))):
            draws = dist.draw(np.random.default_rng(child), spec.num_samples)
            target, parsed, objects = _parse_values(spec, path, draws, "samples", rounding=True)
            sample_cols.append(_register_swaps(swaps, target, parsed, objects))
    out = (swaps, grid_axes, sample_cols)
    object.__setattr__(spec, "_values", out)  # a frozen dataclass: cached outside its fields
    return out
