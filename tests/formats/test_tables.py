"""Measured CSV tables beyond the silicon CSV: TensorRT-LLM's static-batch benchmark table and a
table of genai-perf runs (NVIDIA's NIM sizing data), told from their headers. Fixtures are written
here in each table's layout (a few of its columns in its own order, values chosen so that every
field is checkable); the shipped datasets are read whole where ../shared/data has them."""
import math
from dataclasses import replace

import pytest

import simllm
from helpers import SHARED_DATA
from simcore import iteration_seconds
from simllm.calibration import validate as accuracy
from simllm.config.framework import load_framework
from simllm.config.workload import fixed
from simllm.errors import ConfigError
from simllm.formats.measurements import load_measurements
from simllm.sim import simulate as simulate_mod
from simllm.sim.simulate import prepare_pool

STATIC_HEADER = ("Number of Runs,Batch Size,Number of GPUs,Precision,Input/Output Lengths,Tensor Model Parallel Size,"
                 "Pipeline Model Parallel Size,Model,GPU,1st Token Latency (ms),GPU Peak Memory Usage (GB),"
                 "Latency (ms),Throughput (tokens / sec),Token-to-token Latency (ms)")
STATIC_ROWS = [
    '1,8,1,FP8,"128,2048",1,1,LLaMA v2 7B,H100 80GB HBM3,40.5,20.1,31000.0,528.5,15.1',
    '1,64,2,Mixed,"2048,128",2,1,Mixtral 8x7B,A100-SXM4-80GB,3000.0,70.0,,,25.5',
    '1,1536,8,Mixed,"2048,2048",8,1,Falcon 180B,L40S,,,,,',  # measured nothing: left out
]

GENAI_HEADER = ("task_inputs-model,task_inputs-GPU,task_inputs-n_gpus,task_inputs-precision,request_latency-unit,"
                "request_latency-avg,time_to_first_token-unit,time_to_first_token-avg,inter_token_latency-unit,"
                "inter_token_latency-avg,output_token_throughput-unit,output_token_throughput-avg,"
                "input_config-concurrency,input_config-synthetic_input_tokens_mean,"
                "input_config-synthetic_input_tokens_stddev,input_config-output_tokens_mean")
GENAI_ROWS = [
    "meta-llama3-8b-instruct,H100_80GB_HBM3,1,fp16,ns,5834349060.5,ns,18789978.5,ns,5821378.5,tokens/sec,856.75,5,200,0,1000",
    "meta-llama3-70b-instruct,H100_80GB_HBM3,4,fp8,ms,9000.0,ms,150.0,ms,9.0,tokens/sec,2000.0,50,2000,10,200",
]


def table(tmp_path, name, header, rows):
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_static_batch_rows(tmp_path):
    path = table(tmp_path, "static.csv", STATIC_HEADER, STATIC_ROWS)
    a, b = load_measurements([path])
    assert (a.source, a.line, a.model, a.hardware, a.backend, a.precision, a.mode) == (
        str(path), 2, "meta-llama/Llama-2-7b-hf", "h100_sxm", "trtllm", "fp8", "static")
    assert (a.tp, a.pp, a.dp, a.input_len, a.output_len, a.concurrency, a.num_prompts, a.request_rate) == (
        1, 1, 1, 128, 2048, 8, 8, math.inf)
    assert (a.ttft_ms, a.tpot_ms, a.itl_ms, a.e2el_ms, a.output_throughput) == (40.5, 15.1, 15.1, 31000.0, 528.5)
    assert a.fixed_lengths and a.warmup_requests == 0 and a.client_overhead_ms == 0.0
    assert (b.model, b.hardware, b.precision, b.tp, b.input_len, b.output_len, b.concurrency) == (
        "mistralai/Mixtral-8x7B-v0.1", "a100_sxm_80gb", "fp16", 2, 2048, 128, 64)
    assert math.isnan(b.e2el_ms) and math.isnan(b.output_throughput) and b.ttft_ms == 3000.0


def test_genai_perf_table_rows(tmp_path):
    path = table(tmp_path, "nim.csv", GENAI_HEADER, GENAI_ROWS)
    a, b = load_measurements([path])
    assert (a.model, a.hardware, a.backend, a.precision, a.mode, a.tp, a.pp, a.dp) == (
        "meta-llama/Meta-Llama-3-8B-Instruct", "h100_sxm", "trtllm", "fp16", "agg", 1, 1, 1)
    assert (a.input_len, a.output_len, a.concurrency, a.request_rate, a.num_prompts) == (200, 1000, 5, math.inf, 0)
    assert a.ttft_ms == pytest.approx(18.7899785) and a.tpot_ms == a.itl_ms == pytest.approx(5.8213785)
    assert a.e2el_ms == pytest.approx(5834.3490605) and a.output_throughput == 856.75
    assert a.fixed_lengths and a.warmup_requests == 10  # two a client
    assert (b.tp, b.precision, b.ttft_ms, b.tpot_ms, b.e2el_ms, b.concurrency, b.warmup_requests) == (
        4, "fp8", 150.0, 9.0, 9000.0, 50, 100)
    assert not b.fixed_lengths  # a standard deviation of 10: lengths as BenchmarkShape draws them


def test_tables_resolve_to_presets(tmp_path):
    rows = load_measurements([table(tmp_path, "static.csv", STATIC_HEADER, STATIC_ROWS),
                              table(tmp_path, "nim.csv", GENAI_HEADER, GENAI_ROWS)])
    points = accuracy.resolve(rows)
    assert [(p.model, p.hardware, p.reason) for p in points] == [
        ("llama-2-7b", "h100-sxm", ""), ("mixtral-8x7b", "a100-sxm-80gb", ""),
        ("llama-3.1-8b", "h100-sxm", ""), ("llama-3.1-70b", "h100-sxm", "")]


@pytest.mark.parametrize("header, rows, key", [
    (STATIC_HEADER, ['1,8,1,FP4,"128,2048",1,1,LLaMA v2 7B,L40S,1,1,1,1,1'], "Precision"),
    (STATIC_HEADER, ['1,8,1,FP8,"128",1,1,LLaMA v2 7B,L40S,1,1,1,1,1'], "Input/Output Lengths"),
    (STATIC_HEADER, ['1,eight,1,FP8,"128,128",1,1,LLaMA v2 7B,L40S,1,1,1,1,1'], "Batch Size"),
    (GENAI_HEADER, [GENAI_ROWS[0].replace(",ns,18789978.5", ",parsecs,18789978.5")], "time_to_first_token-unit"),
    (GENAI_HEADER, [GENAI_ROWS[0].replace(",5,200,0,1000", ",0,200,0,1000")], "input_config-concurrency"),
])
def test_bad_cells_name_file_line_and_column(tmp_path, header, rows, key):
    path = table(tmp_path, "bad.csv", header, rows)
    with pytest.raises(ConfigError) as err:
        load_measurements([path])
    assert f"{path}:2" in str(err.value) and key in str(err.value)


def test_unknown_header_and_missing_columns(tmp_path):
    with pytest.raises(ConfigError, match="unrecognized CSV header"):
        load_measurements([table(tmp_path, "x.csv", "a,b,c", ["1,2,3"])])
    cut = STATIC_HEADER.replace("Batch Size,", "")
    with pytest.raises(ConfigError, match="missing Batch Size"):
        load_measurements([table(tmp_path, "y.csv", cut, ['1,1,FP8,"128,2048",1,1,LLaMA v2 7B,L40S,1,1,1,1,1'])])


@pytest.mark.skipif(not (SHARED_DATA / "trtllm_static_batch.csv").is_file(), reason="../shared/data not present")
def test_shared_tables_read_whole():
    static = load_measurements([SHARED_DATA / "trtllm_static_batch.csv"])
    assert len(static) == 1331  # of 1,653 runs: 322 measured neither a first token nor a step
    assert {m.hardware for m in static} == {"h100_sxm", "a100_sxm_80gb", "l40s"}
    nim = load_measurements([SHARED_DATA / "nim_genai_perf.csv"])
    assert len(nim) == 523 and all(m.fixed_lengths and m.concurrency >= 1 for m in nim)
    resolved = accuracy.resolve(static + nim)
    assert not [p.measurement.model for p in resolved if p.reason]  # every model and GPU has its preset


def test_a_static_batch_is_posed_with_nothing_between_the_numbers_and_the_engine(tmp_path):
    """validate poses a static-batch row as one batch of its requests sent at once, exactly its
    lengths, no HTTP frontend: the predicted first token is the cost model's one iteration over
    every prompt (the benchmark's context phase: 16,384 tokens here, past the 8,192 of a serving
    step), and TPOT the mean of its decode steps over the batch's growing contexts."""

    batch, isl, osl = 8, 2048, 16
    row = f'1,{batch},1,FP8,"{isl},{osl}",1,1,LLaMA v2 7B,H100 80GB HBM3,1.0,1.0,1.0,1.0,1.0'
    (m,) = load_measurements([table(tmp_path, "one.csv", STATIC_HEADER, [row])])
    got = accuracy.predict(m, "llama-2-7b", "h100-sxm")
    serving = simllm.ServingConfig(dtype="fp8", kv_cache_dtype="fp8", max_model_len=isl + osl, max_num_seqs=batch,
                                   framework="trtllm", batching="static", enable_chunked_prefill=False,
                                   max_num_batched_tokens=batch * isl)
    framework = replace(load_framework("trtllm"), frontend_latency_ms=0.0)
    p = prepare_pool(simllm.load_model("llama-2-7b"), simllm.load_hardware("h100-sxm"), serving, framework).params
    prefill_s = iteration_seconds(p, batch * isl, batch * isl * (isl + 1) / 2, batch * isl, batch)
    steps_s = [iteration_seconds(p, batch, batch * (isl + k), batch * (isl + k), batch) for k in range(1, osl)]
    assert got["ttft"] == pytest.approx(prefill_s * 1e3, rel=1e-9)
    assert got["tpot"] == pytest.approx(sum(steps_s) / len(steps_s) * 1e3, rel=1e-9)
    assert got["e2el"] == pytest.approx((prefill_s + sum(steps_s)) * 1e3, rel=1e-9)


def test_a_genai_perf_run_is_a_closed_loop_whose_warm_up_is_left_out(tmp_path, monkeypatch):
    """A genai-perf row is simulated as a closed loop of its clients, 10 measured requests a client
    after two warm-up ones each, exactly its lengths (standard deviation 0); at one client every
    request meets an idle engine: TTFT is the framework's frontend and one prefill iteration, TPOT
    the mean of the decode steps at batch 1."""

    isl, osl = 200, 12
    row = f"meta-llama3-8b-instruct,H100_80GB_HBM3,1,fp16,ms,1,ms,1,ms,1,tokens/sec,1,1,{isl},0,{osl}"
    (m,) = load_measurements([table(tmp_path, "one.csv", GENAI_HEADER, [row])])
    seen = []
    real = simulate_mod.simulate
    monkeypatch.setattr(accuracy, "simulate", lambda *a, **k: seen.append(a[3]) or real(*a, **k))
    got = accuracy.predict(m, "llama-3.1-8b", "h100-sxm")
    (w,) = seen
    assert (w.num_prompts, w.warmup_requests, w.max_concurrency) == (12, 2, 1)
    assert (w.input_len, w.output_len) == (fixed(isl), fixed(osl))
    serving = simllm.ServingConfig(dtype="fp16", max_model_len=isl + osl, framework="trtllm")
    framework = load_framework("trtllm")
    p = prepare_pool(simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"), serving, framework).params
    steps_s = [iteration_seconds(p, 1, isl + k, isl + k, 1) for k in range(1, osl)]
    prefill_s = iteration_seconds(p, isl, isl * (isl + 1) / 2, isl, 1)
    assert got["ttft"] == pytest.approx(framework.frontend_latency_ms + prefill_s * 1e3, rel=1e-9)
    assert got["tpot"] == pytest.approx(sum(steps_s) / len(steps_s) * 1e3, rel=1e-9)


def test_a_nim_row_runs_on_the_2024_stack_with_its_client_in_step(tmp_path, monkeypatch):
    """A row whose execution type is NIM_TRT-LLM names its server: the nim-trtllm profile, prompts
    unchunked (TensorRT-LLM's executor default), a step of at most 8,192 tokens; its perf_analyzer
    clients send without delay. At one client: TTFT is the frontend and one prefill step, TPOT the
    mean decode step, each priced with that profile's per-step and per-sequence CPU time and its
    one-block decode-attention floor."""
    header = GENAI_HEADER + ",task_inputs-execution_type"
    isl, osl = 3000, 12
    row = f"meta-llama3-8b-instruct,H100_80GB_HBM3,1,fp16,ms,1,ms,1,ms,1,tokens/sec,1,1,{isl},0,{osl},NIM_TRT-LLM"
    (m,) = load_measurements([table(tmp_path, "nim1.csv", header, [row])])
    assert (m.framework_profile, m.client_jitter_ms, m.chunked_prefill) == ("nim-trtllm", 0.0, False)
    seen = []
    real = simulate_mod.simulate
    monkeypatch.setattr(accuracy, "simulate", lambda *a, **k: seen.append((a[2], a[3], k["framework"])) or real(*a, **k))
    got = accuracy.predict(m, "llama-3.1-8b", "h100-sxm")
    ((serving, w, framework),) = seen
    assert framework == load_framework("nim-trtllm") and w.client_jitter_ms == 0.0
    assert not serving.enable_chunked_prefill and serving.max_num_batched_tokens == 8192
    p = prepare_pool(simllm.load_model("llama-3.1-8b"), simllm.load_hardware("h100-sxm"), serving, framework).params
    assert p.attn_token_s > 0 and p.seq_overhead_s > 0
    steps_s = [iteration_seconds(p, 1, isl + k, isl + k, 1) for k in range(1, osl)]
    prefill_s = iteration_seconds(p, isl, isl * (isl + 1) / 2, isl, 1)
    assert got["ttft"] == pytest.approx(framework.frontend_latency_ms + prefill_s * 1e3, rel=1e-9)
    assert got["tpot"] == pytest.approx(sum(steps_s) / len(steps_s) * 1e3, rel=1e-9)
    # at 3,000 keys the floor sets attention: the step is dearer than without it
    plain = p._replace(attn_token_s=0.0)
    assert steps_s[0] > iteration_seconds(plain, 1, isl + 1, isl + 1, 1)


def test_a_static_batch_rows_peak_memory_is_weights_workspace_and_its_kv(tmp_path):
    """The static table's ``GPU Peak Memory Usage (GB)`` is read per GPU; the prediction is the
    memory plan's weights, activations and runtime plus the KV blocks at their peak use: for one
    batch of 8 x (128 + 2048) tokens of Llama-2-7B, all of their KV at once."""
    (a, _) = load_measurements([table(tmp_path, "static.csv", STATIC_HEADER, STATIC_ROWS)])[:2]
    assert a.peak_memory_gb == 20.1
    got = accuracy.predict(a, "llama-2-7b", "h100-sxm")
    serving = simllm.ServingConfig(dtype="fp8", kv_cache_dtype="fp8", max_model_len=128 + 2048, max_num_seqs=8,
                                   batching="static", framework="trtllm",  # TensorRT-LLM's FP8: an FP8 KV cache
                                   enable_chunked_prefill=False, max_num_batched_tokens=8192)  # the context in one step
    pool = prepare_pool(simllm.load_model("llama-2-7b"), simllm.load_hardware("h100-sxm"), serving,
                        load_framework("trtllm"))
    mem = pool.memory
    blocks = 8 * -(-(128 + 2048) // mem.block_size)  # every request's blocks, the whole run
    want = (mem.weight_bytes + mem.activation_bytes + mem.runtime_overhead_bytes
            + blocks * mem.block_size * mem.kv_bytes_per_token) / 1e9
    assert got["peak_memory_gb"] == pytest.approx(want, rel=1e-9)
    p = accuracy.Point(a, "llama-2-7b", "h100-sxm", got)
    assert accuracy.memory_error(p) == pytest.approx(want / 20.1 - 1, rel=1e-9)
