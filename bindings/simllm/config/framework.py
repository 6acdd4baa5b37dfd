"""Serving-framework profiles: what vLLM, SGLang or TensorRT-LLM add to the GPU time of the
kernels, versioned (``configs/frameworks/*.yaml``). :func:`load_framework` validates and returns
a frozen :class:`FrameworkProfile`.

GPU presets hold GPU physics only; these profiles hold the serving framework's costs: the time a
request spends in the API server before the engine sees it (``frontend_latency_ms``), the CPU
time per engine step that the GPU does not hide (``iteration_overhead_us``, and
``sequence_overhead_us`` per sequence with a token in the step) and the gap between
kernels inside a CUDA graph (``launch_overhead_us``). What a benchmark client adds belongs to
the measurement (``simllm.formats.common.Measurement.client_overhead_ms``).

Each numeric field declares its physical bounds and default with it (:func:`bounded`); a value
outside them is a one-line :class:`ConfigError` naming the file, key, value and range.
Calibration moves the fitted quantities only within the same bounds.
"""
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path

from simllm.config import presets
from simllm.config.sections import Section
from simllm.config.serving import FRAMEWORKS
from simllm.config.yamlio import load_file
from simllm.errors import ConfigError

__all__ = ["BOUNDS", "FRAMEWORKS", "FrameworkProfile", "framework_from_dict", "load_framework"]


def bounded(default, minimum, maximum, doc):
    """A numeric :class:`FrameworkProfile` field with its physical bounds and what bounds them."""
    return field(default=default, metadata={"min": minimum, "max": maximum, "doc": doc})


@dataclass(frozen=True)
class FrameworkProfile:
    """One serving framework's costs outside the GPU kernels. Units are in the field names."""

    name: str = "vllm"
    # The framework version the figures describe (e.g. "0.12" for vLLM).
    version: str = ""
    frontend_latency_ms: float = bounded(
        2.0, 0.0, 10.0,
        "per request, client send to engine queue: HTTP, tokenisation, detokenisation, the API "
        "server's hand-off; a few ms at most on a short prompt")
    iteration_overhead_us: float = bounded(
        0.0, 0.0, 6000.0,
        "per engine step, CPU time the GPU does not hide (scheduler, input preparation, sampling "
        "bookkeeping); 5-6 ms for a synchronous Python scheduler at batch 256 (vllm issue #10634)")
    sequence_overhead_us: float = bounded(
        0.0, 0.0, 100.0,
        "per sequence with a token in a step, CPU time the GPU does not hide: its sampling "
        "bookkeeping, stop checks and streamed response in a scheduler that does them one request "
        "at a time between steps (vllm issue #10634: 5-6 ms a step at batch 256, ~20-23 us a "
        "sequence); 0 where the framework overlaps them with the next step")
    unsplit_decode_ns_per_key: float = bounded(
        0.0, 0.0, 50.0,
        "per key of a sequence's context and per layer, the time of a decode-attention kernel that "
        "gives each sequence (per KV head) one thread block, however long its context (TensorRT-LLM's "
        "masked MHA and XQA without multi-block mode): a decode-only step's attention takes at least "
        "this times the batch's mean context; 0 for kernels that split long sequences over blocks "
        "(flash-decoding, FlashInfer, multi-block mode)")
    quantized_gemm_bf16_share: float = bounded(
        0.0, 0.0, 1.0,
        "where an FP8 or FP4 weight GEMM is memory-bound (small batches), the share of the BF16 "
        "GEMM table's efficiency at its shape it reaches at least: 1 where the engine runs small-M "
        "kernels that read quantised weights as fast as BF16 ones (the measured per-tensor FP8 "
        "tables reach about 0.5-0.65 of the bandwidth there, BF16 0.8); 0: the quantised table alone")
    launch_overhead_us: float = bounded(
        2.0, 0.2, 10.0,
        "per kernel, the gap between kernels inside a CUDA graph (a fraction of a us) up to an "
        "eager launch (~5-10 us)")
    dp_padding_tokens: float = bounded(
        0.0, 0.0, 65536.0,
        "tokens up to which attention data-parallel ranks of an expert-parallel engine all run the "
        "largest rank's token count (a step run as a CUDA graph: the largest captured size; vLLM "
        "pads to the DP ranks' maximum then, vllm/v1/worker/dp_utils.py); 0: no padding")
    source: str = "<dict>"

    def with_overrides(self, **changes):
        return replace(self, **changes)


#: Field name -> (minimum, maximum) of every numeric field, from the declarations above.
BOUNDS = {f.name: (f.metadata["min"], f.metadata["max"]) for f in fields(FrameworkProfile) if "min" in f.metadata}

_KEYS = {"name", "version"} | set(BOUNDS)


def framework_from_dict(data, source="<dict>"):
    """Validate a framework mapping (``{"framework": {...}}`` or the inner mapping).

    Raises
    ------
    ConfigError
        For an unknown key or a value outside its field's bounds (naming file, key, value, range).
    """
    top = Section(data, source)
    sec = top.section("framework") if "framework" in data else top
    sec.reject_unknown(_KEYS)
    values = {}
    for f in fields(FrameworkProfile):
        if f.name in BOUNDS:
            lo, hi = BOUNDS[f.name]
            values[f.name] = float(sec.number(f.name, f.default, minimum=lo, maximum=hi))
    return FrameworkProfile(
        name=sec.string("name", Path(source).stem),
        version=sec.string("version", ""),
        source=source,
        **values,
    )


@lru_cache(maxsize=64)
def _load(path, mtime_ns):
    data = load_file(path)
    if data is None:
        raise ConfigError("a framework profile, got an empty file", source=str(path))
    return framework_from_dict(data, str(path))


def load_framework(name_or_path):
    """Load and validate a framework profile: a shipped name (``"vllm"``, ``"sglang"``,
    ``"trtllm"``) or a YAML file. Cached per file and modification time (simulations of many
    points load the same profile).

    Raises
    ------
    ConfigError
        For an unknown name (with the shipped names), a missing file, or an invalid value.
    """
    if isinstance(name_or_path, FrameworkProfile):
        return name_or_path
    path = presets.resolve("frameworks", name_or_path, flag="--framework")
    return _load(str(path), Path(path).stat().st_mtime_ns)
