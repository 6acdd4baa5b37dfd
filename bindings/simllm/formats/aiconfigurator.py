"""NVIDIA aiconfigurator's measured results: its ``silicon_sample.csv``, read into
:class:`~simllm.formats.common.Measurement` rows.

One row per measured point: model, system, backend, precision, mode, isl/osl, concurrency
``batch_size``, TP/PP/DP, mean TTFT and TPOT. Disaggregated rows describe their workers in
``prefill_*``/``decode_*`` columns instead (read into the measurement's ``prefill`` and
``decode`` :class:`~simllm.formats.common.WorkerPool`), leaving TP and ``batch_size`` blank:
their concurrency is the ``silicon_concurrency=`` their ``silicon_data_source`` states, else
the decode pool's slots (``decode_batch_size`` x ``decode_num_workers`` x
``decode_attention_dp_size``, which equals it on every row that states both). Most
disaggregated rows leave the worker counts and batch sizes blank: their pool sizes are not
recorded (0 in the pool).
The CSV does not say which client measured it nor what that client adds to each request's
TTFT. What its rows' harness adds beyond the engine is therefore a property of this data, fitted
once per backend with ``simllm calibrate --fit client_overhead_ms`` on the dense aggregated H100
and H200 rows (with the shipped kernel tables and framework profiles) and declared here as each
row's ``client_overhead_ms`` (:data:`SILICON_CLIENT_OVERHEAD_MS`): it is added to the prediction
before comparing, and never enters a GPU or framework profile (``simllm run`` does not add it).
"""
import math
import re

from simllm.errors import ConfigError
from simllm.formats.common import Measurement, WorkerPool, csv_rows, field_number

#: Per backend, ms each silicon_sample.csv row's benchmark client adds to TTFT and E2E latency
#: beyond the engine (see the module docstring): simllm.calibration.fit.fit_client_overhead on the
#: dense aggregated H100 and H200 rows (Llama-3.1-8B/70B, Qwen3-32B: 193 vLLM, 97 SGLang and 428
#: TensorRT-LLM points within the peaks), simulated with the shipped kernel tables and framework
#: profiles, 2026-12-07 (refitted once memory-bound FP8 GEMMs took a share of the BF16 tables' efficiency
#: bandwidth: 51.9, 179.9 and 135.4 ms before). As large as they are, the rows' low-load TTFTs exceed what the GPU and the
#: framework's own costs can produce by this much (docs/accuracy.md).
SILICON_CLIENT_OVERHEAD_MS = {"vllm": 51.9, "sglang": 180.3, "trtllm": 134.9}

#: The columns a silicon_sample.csv must have.
SILICON_COLUMNS = ("model_path", "system", "backend", "precision", "mode", "isl", "osl", "batch_size", "tp_size",
                   "silicon_ttft_ms", "silicon_tpot_ms")


_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")


def _pool(row, role, path, line):
    """The ``role`` (prefill or decode) pool of a disaggregated row; a blank count is 0 (not
    recorded), a blank or 0 parallel size 1 (off)."""
    def count(key, default):
        return field_number(row, f"{role}_{key}", path, line, integer=True, default=default)

    return WorkerPool(workers=count("num_workers", 0), tp=max(1, count("tp_size", 1)),
                      dp=max(1, count("attention_dp_size", 1)), ep=max(1, count("moe_ep_size", 1)),
                      moe_tp=max(1, count("moe_tp_size", 1)),
                      pp=max(1, count("pp_size", 1)), batch_size=count("batch_size", 0))


def _disagg_concurrency(row, decode):
    """A disaggregated row's clients: its source's ``silicon_concurrency=``, else its decode
    pool's slots, else 0 (unknown)."""
    found = _CONCURRENCY.search(row.get("silicon_data_source") or "")
    if found:
        return int(found.group(1))
    return decode.batch_size * decode.workers * decode.dp


def read_silicon_csv(path):
    """Rows of an aiconfigurator-style ``silicon_sample.csv``."""
    out = []
    for line, row in csv_rows(path, SILICON_COLUMNS, "the silicon_sample.csv"):
        # Disaggregated rows describe their workers in prefill_*/decode_* columns instead.
        disagg = row.get("mode") != "agg"
        opt = 0 if disagg else None
        pools = {role: _pool(row, role, path, line) for role in ("prefill", "decode")} if disagg else {}
        concurrency = field_number(row, "batch_size", path, line, integer=True, default=opt)
        if disagg and not concurrency:
            concurrency = _disagg_concurrency(row, pools["decode"])
        out.append(Measurement(
            source=str(path), line=line, model=row["model_path"], hardware=row["system"], backend=row["backend"],
            precision=row["precision"], mode=row["mode"],
            tp=field_number(row, "tp_size", path, line, integer=True, default=opt),
            pp=field_number(row, "pp_size", path, line, integer=True, default=1),
            # 0 in these columns means the feature is off, as a blank does
            dp=max(1, field_number(row, "attention_dp_size", path, line, integer=True, default=1)),
            input_len=field_number(row, "isl", path, line, integer=True),
            output_len=field_number(row, "osl", path, line, integer=True),
            concurrency=concurrency,
            request_rate=math.inf, num_prompts=0,
            ttft_ms=field_number(row, "silicon_ttft_ms", path, line),
            tpot_ms=field_number(row, "silicon_tpot_ms", path, line),
            client_overhead_ms=SILICON_CLIENT_OVERHEAD_MS.get(row["backend"], 0.0),
            ep=max(1, field_number(row, "moe_ep_size", path, line, integer=True, default=1)),
            moe_tp=max(1, field_number(row, "moe_tp_size", path, line, integer=True, default=1)),
            **pools,
        ))
    if not out:
        raise ConfigError("at least one measured row, got none", source=str(path))
    return out
