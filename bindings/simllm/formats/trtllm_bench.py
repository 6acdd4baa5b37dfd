"""TensorRT-LLM's static-batch benchmark tables (``gptSessionBenchmark``-style: one batch of
identical requests run to completion, no client, queue or scheduler between the numbers and the
engine), read into :class:`~simllm.formats.common.Measurement` rows of mode ``static``.

One row per run: ``Model``, ``GPU``, ``Precision`` (``FP8``, or ``Mixed``: FP16), ``Tensor Model
Parallel Size``, ``Pipeline Model Parallel Size``, ``Batch Size``, ``Input/Output Lengths``
(``ISL,OSL``); measured ``1st Token Latency (ms)`` (the batch's context phase: every
request's first token), ``Token-to-token Latency (ms)`` (one generation step of the batch),
``Latency (ms)`` (the whole batch), ``Throughput (tokens / sec)`` (generated tokens over the
batch's latency) and ``GPU Peak Memory Usage (GB)`` (each GPU's, read as 10**9 bytes), each blank where the run measured nothing (rows with neither a first-token
nor a step time are left out: the runs that did not fit or failed). Read as a closed loop of ``Batch Size`` clients sending one request each
(``num_prompts`` = ``concurrency`` = the batch), every request exactly its stated lengths.

The benchmark's names are mapped to what the presets answer to: its model names to their
HuggingFace ids (:data:`MODELS`), its GPU names to simllm's systems (:data:`GPUS`); a name it does
not list is kept as written (``--model-map``/``--hardware-map`` then apply).
"""
import math

from simllm.errors import ConfigError
from simllm.formats.common import Measurement, csv_rows, field_number

#: The columns a static-batch table must have.
COLUMNS = ("Model", "GPU", "Precision", "Batch Size", "Input/Output Lengths", "Tensor Model Parallel Size", "Pipeline Model Parallel Size", "1st Token Latency (ms)",
           "Token-to-token Latency (ms)", "Latency (ms)")

#: The benchmark's model names and the checkpoints they are (the sweep's TensorRT-LLM 0.9.0 examples).
MODELS = {"LLaMA v2 7B": "meta-llama/Llama-2-7b-hf", "LLaMA v2 13B": "meta-llama/Llama-2-13b-hf",
          "LLaMA v2 70B": "meta-llama/Llama-2-70b-hf", "Falcon 180B": "tiiuae/falcon-180B",
          "Mixtral 8x7B": "mistralai/Mixtral-8x7B-v0.1", "GPTJ 6B": "EleutherAI/gpt-j-6b",
          "Mistral 7B": "mistralai/Mistral-7B-v0.1"}

#: The benchmark's GPU names (``nvidia-smi``'s) and simllm's systems.
GPUS = {"H100 80GB HBM3": "h100_sxm", "A100-SXM4-80GB": "a100_sxm_80gb", "L40S": "l40s"}

#: ``Precision``: FP8 weights and activations, or "Mixed" (FP16 weights and activations).
PRECISIONS = {"FP8": "fp8", "Mixed": "fp16"}


def is_static_batch_header(fieldnames):
    """Whether a CSV header is a static-batch table's."""
    return bool(fieldnames) and "Token-to-token Latency (ms)" in fieldnames and "1st Token Latency (ms)" in fieldnames


def read_static_batch_csv(path):
    """Rows of a TensorRT-LLM static-batch benchmark table (see the module docstring)."""
    out = []
    for line, row in csv_rows(path, COLUMNS, "a static-batch table's"):
        ttft_ms = field_number(row, "1st Token Latency (ms)", path, line, default=math.nan)
        step_ms = field_number(row, "Token-to-token Latency (ms)", path, line, default=math.nan)
        if math.isnan(ttft_ms) and math.isnan(step_ms):
            continue  # a run that measured nothing (it did not fit, or failed): nothing to compare
        lengths = row["Input/Output Lengths"].split(",")
        try:
            input_len, output_len = (int(n) for n in lengths)
        except ValueError:  # not two integers
            raise ConfigError("two token counts, input and output, as 'ISL,OSL'", source=str(path), line=line,
                              key="Input/Output Lengths", value=row["Input/Output Lengths"]) from None
        precision = row["Precision"].strip()
        if precision not in PRECISIONS:
            raise ConfigError(f"one of {', '.join(PRECISIONS)}", source=str(path), line=line, key="Precision",
                              value=precision)
        batch = field_number(row, "Batch Size", path, line, integer=True)
        out.append(Measurement(
            source=str(path), line=line, model=MODELS.get(row["Model"].strip(), row["Model"].strip()),
            hardware=GPUS.get(row["GPU"].strip(), row["GPU"].strip()), backend="trtllm",
            precision=PRECISIONS[precision], mode="static",
            tp=field_number(row, "Tensor Model Parallel Size", path, line, integer=True),
            pp=field_number(row, "Pipeline Model Parallel Size", path, line, integer=True), dp=1,
            input_len=input_len, output_len=output_len, concurrency=batch, request_rate=math.inf, num_prompts=batch,
            ttft_ms=ttft_ms, tpot_ms=step_ms, itl_ms=step_ms,
            e2el_ms=field_number(row, "Latency (ms)", path, line, default=math.nan),
            output_throughput=field_number(row, "Throughput (tokens / sec)", path, line, default=math.nan),
            peak_memory_gb=field_number(row, "GPU Peak Memory Usage (GB)", path, line, default=math.nan),
            fixed_lengths=True,
        ))
    if not out:
        raise ConfigError("at least one measured row, got none", source=str(path))
    return out
