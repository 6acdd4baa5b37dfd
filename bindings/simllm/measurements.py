"""Measured serving results, read into one table of :class:`Measurement` rows.

Formats: the CSV of NVIDIA aiconfigurator's ``silicon_sample.csv`` (one row per measured point:
model, system, backend, precision, mode, isl/osl, concurrency ``batch_size``, TP/PP/DP, mean TTFT
and TPOT), and ``vllm bench serve`` result JSON (``--save-result``; the older
``benchmark_serving.py`` keys too: ``model_id``, ``num_prompts``, ``request_rate``,
``max_concurrency``, ``total_input_tokens``, ``total_output_tokens``, ``completed``,
``mean_ttft_ms``, ``mean_tpot_ms``, ``mean_itl_ms``, ``mean_e2el_ms``, ``output_throughput``),
which carries no hardware or parallel layout: those come from the caller.
"""
import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from simllm.errors import ConfigError

NAN = float("nan")


@dataclass(frozen=True)
class Measurement:
    """One measured serving point. Times in ms (``nan`` when not measured); ``concurrency`` is a
    closed loop's clients (0 for an open loop at ``request_rate``)."""

    source: str
    line: int
    model: str  # as the measurement names it (a HuggingFace id)
    hardware: str  # as the measurement names it ("h100_sxm"), or "" when it does not say
    backend: str
    precision: str  # "" = the model's native dtype
    mode: str  # "agg" (one engine) or "disagg" (separate prefill/decode workers)
    tp: int
    pp: int
    dp: int
    input_len: int
    output_len: int
    concurrency: int
    request_rate: float
    num_prompts: int
    ttft_ms: float
    tpot_ms: float
    itl_ms: float = NAN
    e2el_ms: float = NAN
    output_throughput: float = NAN

    @property
    def where(self):
        return f"{self.source}:{self.line}" if self.line else self.source


def _number(row, key, source, line, integer=False, default=None):
    value = row.get(key)
    if value in (None, ""):
        if default is not None:
            return default
        raise ConfigError("a value", source=source, line=line, key=key, value=value)
    try:
        f = float(value)
        if integer:
            if f != int(f):
                raise ValueError
            return int(f)
        return f
    except (TypeError, ValueError):
        raise ConfigError("an integer" if integer else "a number", source=source, line=line, key=key,
                          value=value) from None


_SILICON_COLUMNS = ("model_path", "system", "backend", "precision", "mode", "isl", "osl", "batch_size", "tp_size",
                    "silicon_ttft_ms", "silicon_tpot_ms")


def read_silicon_csv(path):
    """Rows of an aiconfigurator-style ``silicon_sample.csv``."""
    out = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _SILICON_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"expected the silicon_sample.csv columns; missing {', '.join(missing)}",
                              source=str(path), line=1)
        for row in reader:
            line = reader.line_num
            # Disaggregated rows describe their workers in prefill_*/decode_* columns instead.
            opt = 0 if row.get("mode") != "agg" else None
            out.append(Measurement(
                source=str(path), line=line, model=row["model_path"], hardware=row["system"], backend=row["backend"],
                precision=row["precision"], mode=row["mode"],
                tp=_number(row, "tp_size", path, line, integer=True, default=opt),
                pp=_number(row, "pp_size", path, line, integer=True, default=1),
                dp=_number(row, "attention_dp_size", path, line, integer=True, default=1),
                input_len=_number(row, "isl", path, line, integer=True),
                output_len=_number(row, "osl", path, line, integer=True),
                concurrency=_number(row, "batch_size", path, line, integer=True, default=opt),
                request_rate=math.inf, num_prompts=0,
                ttft_ms=_number(row, "silicon_ttft_ms", path, line),
                tpot_ms=_number(row, "silicon_tpot_ms", path, line),
            ))
    if not out:
        raise ConfigError("at least one measured row, got none", source=str(path))
    return out


def read_vllm_result(path, hardware="", tp=1, precision=""):
    """One ``vllm bench serve`` result JSON (current or ``benchmark_serving.py`` keys)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"invalid JSON: {exc.msg}", source=str(path), line=exc.lineno) from None
    if not isinstance(data, dict) or "mean_ttft_ms" not in data:
        raise ConfigError("a vllm bench serve result (a JSON object with mean_ttft_ms)", source=str(path))
    completed = _number(data, "completed", path, None, integer=True)
    if completed <= 0:
        raise ConfigError("completed > 0", source=str(path), key="completed", value=completed)
    rate = data.get("request_rate", "inf")
    rate = math.inf if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    return [Measurement(
        source=str(path), line=0, model=str(data.get("model_id") or data.get("tokenizer_id") or ""),
        hardware=hardware, backend=str(data.get("backend", "vllm")), precision=precision, mode="agg",
        tp=tp, pp=1, dp=1,
        input_len=round(_number(data, "total_input_tokens", path, None) / completed),
        output_len=round(_number(data, "total_output_tokens", path, None) / completed),
        concurrency=int(data.get("max_concurrency") or 0), request_rate=rate,
        num_prompts=int(data.get("num_prompts") or completed),
        ttft_ms=_number(data, "mean_ttft_ms", path, None),
        tpot_ms=_number(data, "mean_tpot_ms", path, None, default=NAN),
        itl_ms=_number(data, "mean_itl_ms", path, None, default=NAN),
        e2el_ms=_number(data, "mean_e2el_ms", path, None, default=NAN),
        output_throughput=_number(data, "output_throughput", path, None, default=NAN),
    )]


def load_measurements(paths, hardware="", tp=1, precision=""):
    """Read measured results from CSV (silicon_sample format) and JSON (vllm bench serve) files.

    ``hardware``, ``tp`` and ``precision`` fill in what a vllm result does not record.
    """
    out = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise ConfigError("no such file", source=str(p))
        if p.suffix.lower() == ".csv":
            out += read_silicon_csv(p)
        elif p.suffix.lower() == ".json":
            out += read_vllm_result(p, hardware=hardware, tp=tp, precision=precision)
        else:
            raise ConfigError("a .csv (silicon_sample format) or .json (vllm bench serve result) file",
                              source=str(p))
    return out
