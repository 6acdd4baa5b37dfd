"""Measured serving results of any supported tool, read into one table of
:class:`~simllm.formats.common.Measurement` rows: which tool wrote a file, and dispatch to that
tool's reader.

- ``.csv``, the table told from its header: NVIDIA aiconfigurator's ``silicon_sample.csv``
  (:mod:`.aiconfigurator`), TensorRT-LLM's static-batch benchmark tables (:mod:`.trtllm_bench`),
  tables of genai-perf runs such as NVIDIA's NIM sizing data (:func:`.genai_perf.read_genai_perf_csv`).
- ``.json``, the format told from its keys, not its name: ``vllm bench serve`` results
  (:mod:`.vllm_bench`), GuideLLM ``benchmarks.json`` (:mod:`.guidellm`), EvalScope perf
  ``benchmark_summary.json`` (:mod:`.evalscope`), genai-perf and AIPerf profile exports
  (:mod:`.genai_perf`). Each module describes the keys it reads.

None of the JSON formats records the GPU, the parallel layout or the precision: those come from
the caller. A GuideLLM, EvalScope, genai-perf or AIPerf result that records a finite request rate
is an open loop at that rate (``concurrency`` 0, whatever in-flight cap it also names); otherwise
it is a closed loop of the recorded concurrency (``request_rate`` inf).
"""
import csv
from pathlib import Path

from simllm.errors import ConfigError
from simllm.formats.aiconfigurator import SILICON_COLUMNS, read_silicon_csv
from simllm.formats.common import Measurement, load_json
from simllm.formats.evalscope import evalscope_rows, is_evalscope_summary
from simllm.formats.genai_perf import is_genai_perf_csv_header, profile_kind, profile_rows, read_genai_perf_csv
from simllm.formats.guidellm import guidellm_rows, is_guidellm_report
from simllm.formats.trtllm_bench import is_static_batch_header, read_static_batch_csv
from simllm.formats.vllm_bench import is_vllm_result, vllm_rows

__all__ = ["JSON_FORMATS", "Measurement", "detect_json_format", "json_format", "load_measurements",
           "read_json_result"]

JSON_FORMATS = ("vllm", "guidellm", "evalscope", "genai-perf", "aiperf")
_ACCEPTED = ("a vllm bench serve result (mean_ttft_ms), a GuideLLM benchmarks.json (benchmarks), an EvalScope "
             "perf benchmark_summary.json or a genai-perf/AIPerf profile export (time_to_first_token)")

_JSON_ROWS = {"vllm": vllm_rows, "guidellm": guidellm_rows, "evalscope": evalscope_rows,
              "genai-perf": profile_rows, "aiperf": profile_rows}


def json_format(data):
    """Which of :data:`JSON_FORMATS` a parsed result is, from its keys; None when none fits. The
    first tool whose keys are there wins, in the order of :data:`JSON_FORMATS`."""
    if is_vllm_result(data):
        return "vllm"
    if is_guidellm_report(data):
        return "guidellm"
    if is_evalscope_summary(data):
        return "evalscope"
    return profile_kind(data)


def detect_json_format(path):
    """The format of a result JSON file (one of :data:`JSON_FORMATS`), told from its keys."""
    fmt = json_format(load_json(path))
    if fmt is None:
        raise ConfigError(f"unrecognized result JSON: expected {_ACCEPTED}", source=str(path))
    return fmt


def read_json_result(path, hardware="", tp=1, precision=""):
    """The rows of a result JSON in any of :data:`JSON_FORMATS`, told from its keys."""
    data = load_json(path)
    fmt = json_format(data)
    if fmt is None:
        raise ConfigError(f"unrecognized result JSON: expected {_ACCEPTED}", source=str(path))
    return _JSON_ROWS[fmt](data, str(path), hardware, tp, precision)


_CSV_ACCEPTED = ("a silicon_sample.csv (silicon_ttft_ms), a TensorRT-LLM static-batch table (Token-to-token "
                 "Latency (ms)) or a table of genai-perf runs (input_config-concurrency)")


def read_csv_measurements(path):
    """The rows of a measured CSV table, its kind told from its header (see the module docstring)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            header = next(csv.reader(f), [])
    except UnicodeDecodeError as exc:
        raise ConfigError(f"a UTF-8 CSV file ({exc.reason} at byte {exc.start})", source=str(path)) from None
    if is_static_batch_header(header):
        return read_static_batch_csv(path)
    if is_genai_perf_csv_header(header):
        return read_genai_perf_csv(path)
    if not any(c in header for c in SILICON_COLUMNS):
        raise ConfigError(f"unrecognized CSV header: expected {_CSV_ACCEPTED}", source=str(path), line=1)
    return read_silicon_csv(path)


def load_measurements(paths, hardware="", tp=1, precision=""):
    """Read measured results from CSV tables (silicon_sample, TensorRT-LLM static batch, genai-perf
    runs) and JSON files (vllm bench serve, GuideLLM, EvalScope perf, genai-perf or AIPerf); the
    format is told from the content.

    ``hardware``, ``tp`` and ``precision`` fill in what a JSON result does not record.
    """
    out = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise ConfigError("no such file", source=str(p))
        if p.suffix.lower() == ".csv":
            out += read_csv_measurements(p)
        elif p.suffix.lower() == ".json":
            out += read_json_result(p, hardware=hardware, tp=tp, precision=precision)
        else:
            raise ConfigError("a .csv (silicon_sample, TensorRT-LLM static batch or genai-perf table) or .json "
                              "(vllm bench serve, GuideLLM, EvalScope, genai-perf or AIPerf result) file",
                              source=str(p))
    return out
