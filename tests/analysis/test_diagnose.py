"""``simllm.diagnose``: the bottleneck classes on runs built to hit each one, the evidence behind
them, and what-if lines that equal a direct re-simulation with the one change."""
import json
from dataclasses import replace

import pytest

import simllm
from simllm.analysis import diagnose as dg
from simllm.config.workload import Workload, fixed

MODEL = simllm.load_model("llama-3.1-8b")
GPU = simllm.load_hardware("h100-sxm")
DEFAULT = simllm.ServingConfig()

DECODE_HEAVY = Workload(num_prompts=4, max_concurrency=1, input_len=fixed(128), output_len=fixed(2048))
PREFILL_HEAVY = Workload(num_prompts=128, max_concurrency=64, input_len=fixed(8192), output_len=fixed(16))
# Two clients at most, sending short requests at 2 req/s: the engine idles most of the run.
LOW_LOAD = Workload(num_prompts=40, max_concurrency=2, request_rate=2.0, input_len=fixed(128), output_len=fixed(32))
# 30% of 80 GiB leaves ~7 GB of KV (57k tokens) after 16 GB of weights, for 128 sequences of 2048 tokens.
TIGHT_KV = simllm.ServingConfig(gpu_memory_utilization=0.3, max_model_len=4096)
LONG_AND_MANY = Workload(num_prompts=128, max_concurrency=128, input_len=fixed(1024), output_len=fixed(1024))


def run(serving, workload, model=MODEL):
    result = simllm.simulate(model, GPU, serving, workload, keep_requests=False)
    return result, dg.diagnose(result, model, GPU, serving, workload)


@pytest.fixture(scope="module")
def decode_run():
    return run(DEFAULT, DECODE_HEAVY)


@pytest.mark.slow
def test_decode_heavy_run_is_bandwidth_bound(decode_run):
    result, d = decode_run
    assert d.kind == dg.DECODE_BOUND, d
    ev = d.evidence
    # Each step streams ~15 GB of weights at batch 1; MBU is below 100% because of the
    # profile's bandwidth_utilization (0.92) and one launch overhead per kernel (~19% of a step).
    assert ev["mbu_pct"] > 50.0, ev
    assert ev["mbu_pct"] == pytest.approx(result.summary["bandwidth_utilization"] * 100)
    assert ev["decode_time_share_pct"] > 95.0
    assert ev["decode_memory_bound_time_pct"] > 90.0
    assert ev["preemptions_count"] == 0
    assert 90.0 < ev["recosted_over_busy_pct"] < 110.0  # the re-costing explains the simulated busy time
    assert f"{ev['mbu_pct']:.1f}%" in d.reason
    names = [o.name for o in d.operators]
    assert names[0] == "ffn_up" and {"attention", "qkv_proj", "lm_head"} <= set(names)
    # The operators and the framework's per-iteration CPU overhead make up the re-costed time.
    assert ev["iteration_overhead_time_pct"] > 0.0
    assert sum(o.time_pct for o in d.operators) + ev["iteration_overhead_time_pct"] == pytest.approx(100.0)
    assert all(o.bound == "memory" for o in d.operators[:5])


@pytest.mark.slow
def test_prefill_heavy_run_is_prefill_bound():
    _, d = run(DEFAULT, PREFILL_HEAVY)
    assert d.kind == dg.PREFILL_BOUND, d
    assert d.evidence["prefill_time_share_pct"] > 90.0
    assert d.evidence["mfu_of_attainable_pct"] > 50.0
    assert d.operators[0].bound == "compute"


@pytest.mark.slow
def test_small_kv_cache_is_memory_bound_with_preemptions():
    _, d = run(TIGHT_KV, LONG_AND_MANY)
    assert d.kind == dg.MEMORY_BOUND, d
    assert d.evidence["preemptions_count"] > 0
    assert d.evidence["kv_cache_usage_peak_pct"] >= 95.0
    assert f"{d.evidence['preemptions_count']} preemptions" in d.reason
    assert d.rule == "num_preemptions > 0"


@pytest.mark.slow
def test_low_load_is_concurrency_bound():
    _, d = run(DEFAULT, LOW_LOAD)
    assert d.kind == dg.CONCURRENCY_BOUND, d
    assert d.evidence["batch_fill_pct"] < 25.0
    assert d.evidence["gpu_busy_pct"] < 75.0
    assert d.evidence["max_num_seqs"] == 256


@pytest.mark.slow
def test_diagnose_rebuilds_preset_configs_from_the_summary(decode_run):
    result, d = decode_run
    alone = dg.diagnose(result)
    assert alone.kind == d.kind
    assert alone.evidence.keys() <= d.evidence.keys()
    for key, value in alone.evidence.items():
        assert value == pytest.approx(d.evidence[key]), key


@pytest.mark.slow
def test_fp8_what_if_equals_a_direct_simulation(decode_run):
    base, _ = decode_run
    lines = dg.what_if(MODEL, GPU, DEFAULT, DECODE_HEAVY, changes=("fp8",), base=base)
    assert len(lines) == 1
    fp8 = lines[0]
    assert fp8.skipped is None and fp8.change == "--dtype fp8"
    direct = simllm.simulate(MODEL, GPU, simllm.ServingConfig(dtype="fp8"), DECODE_HEAVY).summary
    assert fp8.ttft_ms == direct["mean_ttft_ms"]
    assert fp8.tpot_ms == direct["mean_tpot_ms"]
    assert fp8.output_throughput == direct["output_throughput"]
    assert fp8.tpot_ms < base.summary["mean_tpot_ms"]
    assert fp8.tpot_change == pytest.approx(fp8.tpot_ms / base.summary["mean_tpot_ms"] - 1.0)
    assert fp8.throughput_change > 0


@pytest.mark.heavy  # the default what-ifs include speculative decoding and P/D: two kernels of their own
@pytest.mark.slow
def test_default_what_ifs_skip_what_cannot_apply(decode_run):
    base, d = decode_run
    lines = dg.what_if(MODEL, GPU, DEFAULT, DECODE_HEAVY, base=base)
    by_key = dict(zip(dg.DEFAULT_CHANGES, lines))
    assert len(lines) == len(dg.DEFAULT_CHANGES)
    assert "already GQA" in by_key["gqa"].skipped and by_key["gqa"].ttft_ms is None
    assert "no shared prefix" in by_key["prefix-caching"].skipped
    for key in ("fp8", "int8", "int4", "kv-fp8", "tp2", "max-num-seqs", "gpu-memory-utilization"):
        assert by_key[key].skipped is None, by_key[key]
    assert by_key["int4"].tpot_ms < by_key["fp8"].tpot_ms < base.summary["mean_tpot_ms"]
    text = dg.format_diagnosis(d, lines)
    assert "--dtype fp8" in text and "Skipped:" in text and "already GQA" in text
    data = json.loads(json.dumps(dg.diagnosis_to_dict(d, lines)))
    assert data["kind"] == dg.DECODE_BOUND and len(data["what_if"]) == len(lines)
    assert "Bottleneck" in dg.format_run_section(d)


@pytest.mark.slow
def test_invalid_or_oom_changes_are_skipped_not_raised():
    serving = simllm.ServingConfig(gpu_memory_utilization=0.3, max_model_len=4096, max_num_batched_tokens=2048)
    small = Workload(num_prompts=2, input_len=fixed(64), output_len=fixed(8))
    fp32 = dg.Change("fp32", "FP32 weights", lambda m, h, s, w: (m, replace(s, dtype="fp32"), "--dtype fp32"))
    bad_tp = dg.Change("tp3", "TP 3", lambda m, h, s, w: (m, replace(s, tensor_parallel_size=3), "-tp 3"))
    lines = dg.what_if(MODEL, GPU, serving, small, changes=("chunked-prefill", fp32, bad_tp, "gpu-memory-utilization"))
    toggled, oom, tp3, memory = lines
    # Without chunked prefill a whole prompt must fit one iteration: 2048 < max_model_len 4096.
    assert toggled.change == "--no-enable-chunked-prefill" and "max_model_len" in toggled.skipped
    assert "simulated OOM" in oom.skipped  # 32 GB of fp32 weights in 25.8 GB
    assert "divisor" in tp3.skipped
    assert memory.skipped is None and memory.output_throughput > 0
    with pytest.raises(simllm.ConfigError):
        dg.what_if(MODEL, GPU, serving, small, changes=("no-such-change",))


@pytest.mark.slow
def test_gqa_what_if_on_an_mha_model():
    mha = simllm.load_model("llama-2-7b")
    work = Workload(num_prompts=8, max_concurrency=8, input_len=fixed(1024), output_len=fixed(256))
    (gqa,) = dg.what_if(mha, GPU, DEFAULT, work, changes=("gqa",))
    assert gqa.skipped is None and gqa.change == "model num_key_value_heads 32 -> 8"
    assert gqa.tpot_change < 0  # a quarter of the KV bytes read per decode step
    direct = simllm.simulate(replace(mha, num_key_value_heads=8), GPU, DEFAULT, work).summary
    assert gqa.tpot_ms == direct["mean_tpot_ms"]


def _evidence(**over):
    ev = {"preemptions_count": 0, "kv_cache_usage_peak_pct": 10.0, "batch_fill_pct": 50.0, "gpu_busy_pct": 99.0,
          "mfu_of_attainable_pct": 80.0, "mbu_of_attainable_pct": 80.0, "prefill_time_share_pct": 20.0}
    ev.update(over)
    return ev


def test_rules_in_priority_order():
    assert dg.classify(_evidence())[0] == dg.DECODE_BOUND
    assert dg.classify(_evidence(prefill_time_share_pct=50.1))[0] == dg.PREFILL_BOUND
    assert dg.classify(_evidence(prefill_time_share_pct=50.0))[0] == dg.DECODE_BOUND
    # A small batch alone is not enough: the GPU must also idle, or be poorly used.
    assert dg.classify(_evidence(batch_fill_pct=5.0))[0] == dg.DECODE_BOUND
    assert dg.classify(_evidence(batch_fill_pct=5.0, gpu_busy_pct=60.0))[0] == dg.CONCURRENCY_BOUND
    assert dg.classify(_evidence(batch_fill_pct=5.0, mfu_of_attainable_pct=10.0,
                                 mbu_of_attainable_pct=40.0))[0] == dg.CONCURRENCY_BOUND
    assert dg.classify(_evidence(batch_fill_pct=5.0, gpu_busy_pct=60.0,
                                 prefill_time_share_pct=90.0))[0] == dg.CONCURRENCY_BOUND
    # Memory comes first.
    assert dg.classify(_evidence(batch_fill_pct=5.0, gpu_busy_pct=10.0, preemptions_count=1))[0] == dg.MEMORY_BOUND
    assert dg.classify(_evidence(kv_cache_usage_peak_pct=95.0))[0] == dg.MEMORY_BOUND
    assert dg.classify(_evidence(rejected_for_kv_count=2))[0] == dg.MEMORY_BOUND
    assert dg.KINDS[0] == dg.MEMORY_BOUND and dg.KINDS[-1] == dg.DECODE_BOUND


def test_gqa_what_if_is_skipped_for_latent_attention():
    """MLA (DeepSeek-V3) caches one latent per token whatever its 128 KV heads say: GQA would
    change nothing simllm prices, so the change is skipped with the reason."""
    work = Workload(num_prompts=2, input_len=fixed(64), output_len=fixed(8))
    (gqa,) = dg.what_if(simllm.load_model("deepseek-v3"), simllm.load_hardware("h200-sxm"),
                        simllm.ServingConfig(tensor_parallel_size=8), work, changes=("gqa",))
    assert "latent attention" in gqa.skipped and gqa.ttft_ms is None


@pytest.mark.heavy
def test_balanced_routing_what_if_prices_the_busiest_gpu():
    """DeepSeek-V3 with attention DP 8 x EP 8 and a few clients: random routing leaves the busiest
    GPU well above the mean; the what-if equals a direct run with --expert-routing balanced (faster
    TPOT), and is skipped without expert parallelism or when already balanced."""
    model, gpu = simllm.load_model("deepseek-v3"), simllm.load_hardware("h200-sxm")
    work = Workload(num_prompts=32, max_concurrency=8, input_len=fixed(256), output_len=fixed(32))
    ep = simllm.ServingConfig(data_parallel_size=8, expert_parallel_size=8)
    (line,) = dg.what_if(model, gpu, ep, work, changes=("balanced-experts",))
    direct = simllm.simulate(model, gpu, replace(ep, expert_routing="balanced"), work).summary
    assert line.skipped is None and line.change == "--expert-routing balanced"
    assert line.tpot_ms == direct["mean_tpot_ms"] and line.tpot_change < -0.03
    (tp,) = dg.what_if(model, gpu, simllm.ServingConfig(tensor_parallel_size=8), work, changes=("balanced-experts",))
    assert "no expert parallelism" in tp.skipped
    (done,) = dg.what_if(model, gpu, replace(ep, expert_routing="balanced"), work, changes=("balanced-experts",))
    assert "already balanced" in done.skipped


@pytest.mark.heavy
@pytest.mark.slow
def test_disaggregate_what_if_equals_simulate_disagg():
    """The run's replicas split into a prefill pool and a decode pool (the larger half decoding),
    one replica into one prefill and one decode instance; the line equals simulate_disagg of that
    split; ranks of one expert-parallel engine are not split."""
    w = Workload(num_prompts=64, max_concurrency=16, input_len=fixed(2048), output_len=fixed(64))
    for dp, (p, d) in ((3, (1, 2)), (1, (1, 1))):
        serving = simllm.ServingConfig(data_parallel_size=dp)
        (line,) = dg.what_if(MODEL, GPU, serving, w, changes=("disaggregate",))
        assert line.skipped is None and f"--prefill-instances {p} --decode-instances {d}" in line.change
        one = (("data_parallel_size", 1),) if dp > 1 else ()
        direct = simllm.simulate_disagg(MODEL, GPU, serving, w, simllm.DisaggConfig(
            prefill_instances=p, decode_instances=d, prefill=one, decode=one), keep_requests=False).summary
        assert direct["num_gpus"] == (dp if dp > 1 else 2)
        assert line.ttft_ms == direct["mean_ttft_ms"] and line.tpot_ms == direct["mean_tpot_ms"]
        assert line.output_throughput == direct["output_throughput"]
    moe = simllm.load_model("qwen3-30b-a3b")
    (line,) = dg.what_if(moe, GPU, simllm.ServingConfig(data_parallel_size=2, expert_parallel_size=2), w,
                         changes=("disaggregate",))
    assert "one MoE engine" in line.skipped
