"""Pipeline parallelism through simulate, the CLI and optimize: memory per stage, the sends
(within a node and across nodes), the micro-batch cap, GPU counts, and bad input."""
import json

import pytest

import simllm
from simcore import iteration_time_nb
from simllm.cli.app import main
from simllm.config.workload import Workload, fixed
from simllm.errors import ConfigError
from simllm.search.optimize import optimize, parse_over
from simllm.sim.disagg import simulate_disagg
from simllm.sim.memory import pipeline_stages
from simllm.sim.pack import pipeline_sends_s, pipeline_settings
from simllm.sim.results import output_throughput_per_gpu
from simllm.sim.simulate import prepare_pool

# heavy: pipeline parallelism's kernel variant (CI's second step)
pytestmark = pytest.mark.heavy

MODEL = simllm.load_model("llama-3.1-70b")
GPU = simllm.load_hardware("h100-sxm")


def serving(**kw):
    return simllm.ServingConfig(**{"tensor_parallel_size": 4, "max_model_len": 8192, **kw})


def test_each_stage_holds_its_share_of_weights_and_kv():
    """80 layers over 2 stages: each GPU holds 40 layers' weights and KV (half of TP=4 alone), plus
    the embedding or the LM head and final norm (that stage sizes the pool); the KV pool grows by
    what the weights free."""
    one, two = (prepare_pool(MODEL, GPU, serving(pipeline_parallel_size=pp)).memory for pp in (1, 2))
    p = prepare_pool(MODEL, GPU, serving()).params
    head = p.p_lm_head * p.a_bytes  # untied: the LM head on the last stage, the embedding on the first
    norm = p.norm_params * p.a_bytes
    assert two.weight_bytes == pytest.approx((one.weight_bytes - 2 * head - norm) / 2 + head + norm, rel=1e-12)
    stages = pipeline_stages(p, MODEL, serving(pipeline_parallel_size=2))
    assert [n for n, _ in stages] == [40, 40] and two.weight_bytes == max(w for _, w in stages)
    assert two.kv_bytes_per_token == pytest.approx(one.kv_bytes_per_token / 2, rel=1e-12)
    assert two.stage_share == 0.5 and one.stage_share == 1.0
    assert two.num_blocks > 2 * one.num_blocks  # twice the tokens per byte, and more bytes free
    # uneven: 80 layers over 3 stages, the largest holds 27
    three = prepare_pool(MODEL, GPU, serving(pipeline_parallel_size=3)).memory
    assert three.stage_share == 27 / 80
    assert three.kv_bytes_per_token == pytest.approx(one.kv_bytes_per_token * 27 / 80, rel=1e-12)


def test_a_moe_models_expert_stages_size_the_pool():
    """DeepSeek-V3 on TP=8 x PP=2 (two nodes of H200): 31 + 30 layers, the first three dense. The
    second stage's 30 MoE layers and LM head weigh more than the first's 3 dense + 28 MoE layers
    and embedding; the pool is sized by the stage with room for the fewest tokens (free bytes over
    its layers' KV), as vLLM takes the smallest block count over its workers."""
    ds, h200 = simllm.load_model("deepseek-v3"), simllm.load_hardware("h200-sxm")
    sv = simllm.ServingConfig(tensor_parallel_size=8, pipeline_parallel_size=2, max_model_len=8192)
    pool = prepare_pool(ds, h200, sv)
    stages = pipeline_stages(pool.params, ds, sv)
    assert [n for n, _ in stages] == [31, 30] and stages[1][1] > stages[0][1]
    mem = pool.memory
    room = mem.usable_bytes - mem.activation_bytes - mem.runtime_overhead_bytes
    layers, weights = min(stages, key=lambda st: (room - st[1]) / st[0])
    assert mem.weight_bytes == weights and mem.stage_share == layers / 61
    per_layer = mem.kv_bytes_per_token / layers
    assert mem.num_blocks == min(int((room - w) // (n * per_layer * mem.block_size)) for n, w in stages)
    whole = pipeline_stages(pool.params, ds, simllm.ServingConfig(tensor_parallel_size=8))[0][1]
    assert stages[0][1] + stages[1][1] == pytest.approx(whole, rel=1e-12)  # nothing lost or doubled (untied)


def lone_request(sv):
    w = Workload(num_prompts=1, input_len=fixed(2000), output_len=fixed(65))
    return simllm.simulate(MODEL, GPU, sv, w).summary


def test_a_lone_request_pays_the_sends_between_stages():
    """TP=4 x PP=2 in one node: TTFT and TPOT are the whole model's steps plus one NVLink send; TP=8
    x PP=2 spans two nodes of 8: the send goes over the network, slower."""
    for tp, crossing in ((4, False), (8, True)):
        sv = serving(tensor_parallel_size=tp, pipeline_parallel_size=2)
        pool = prepare_pool(MODEL, GPU, sv)
        settings = pipeline_settings(pool.params, GPU, sv)
        assert settings["pipeline_stages_per_node"] == 8 // tp
        s = lone_request(sv)
        frontend_ms = pool.framework.frontend_latency_ms
        prefill_s = iteration_time_nb(pool.params, 2000.0, 2000 * 2001 / 2, 2000.0, 1.0)
        assert s["mean_ttft_ms"] == pytest.approx(frontend_ms + 1e3 * (prefill_s + pipeline_sends_s(settings, 2000)),
                                                  rel=1e-9)
        decode_s = sum(iteration_time_nb(pool.params, 1.0, 2001.0 + g, 2001.0 + g, 1.0) for g in range(64)) / 64
        assert s["mean_tpot_ms"] == pytest.approx(1e3 * (decode_s + pipeline_sends_s(settings, 1)), rel=1e-9)
        if crossing:
            assert settings["pipeline_net_s_per_token"] > settings["pipeline_s_per_token"]
        assert s["pipeline_parallel_size"] == 2
        assert s["output_throughput"] / output_throughput_per_gpu(s) == tp * 2


def test_micro_batches_keep_the_stages_busy():
    """128 clients of short prompts on TP=4 x PP=4: vLLM's scheduler fills one batch with every
    request and the stages take turns (vllm-project/vllm#41682): each GPU busy a quarter of the
    time, no faster than TP=4 alone. Four micro-batches of 32 keep the stages busy; decode reads
    each stage's weights once per micro-batch, so on this memory-bound step the gain is small.
    (Longer prompts split into micro-batches by themselves: the token budget spreads the first
    prefills.)"""
    w = Workload(num_prompts=512, max_concurrency=128, input_len=fixed(32), output_len=fixed(256))
    alone, one, micro = (simllm.simulate(MODEL, GPU, serving(**kw), w, keep_requests=False).summary
                         for kw in ({}, dict(pipeline_parallel_size=4),
                                    dict(pipeline_parallel_size=4, pp_max_micro_batch_size=32)))
    assert one["output_throughput"] == pytest.approx(alone["output_throughput"], rel=0.03)
    assert one["gpu_busy_fraction"] == pytest.approx(0.25, abs=0.01)
    assert micro["gpu_busy_fraction"] > 0.9
    assert 1.1 < micro["output_throughput"] / one["output_throughput"] < 1.5
    assert micro["max_batch_size"] <= 32 < one["max_batch_size"]
    for s in (one, micro):
        assert 0.0 < s["compute_utilization"] < 1.0


@pytest.mark.parametrize("kw, key", [
    (dict(pipeline_parallel_size=81), "--pipeline-parallel-size"),
    (dict(pipeline_parallel_size=2, batching="static"), "--pipeline-parallel-size"),
    (dict(pipeline_parallel_size=2, speculative_config={"method": "ngram", "num_speculative_tokens": 2,
                                                        "synthetic_acceptance_rates": [0.5, 0.3]}),
     "--pipeline-parallel-size"),
    (dict(pipeline_parallel_size=0), "--pipeline-parallel-size"),
    (dict(pp_max_micro_batch_size=-1), "--pp-max-micro-batch-size"),
])
def test_what_cannot_run_pipelined_is_refused(kw, key):
    with pytest.raises(ConfigError) as err:
        simllm.simulate(MODEL, GPU, serving(**kw), Workload(num_prompts=2))
    assert key in str(err.value)


def test_attention_data_parallel_and_disaggregated_pools_are_refused():
    moe = simllm.load_model("qwen3-30b-a3b")
    with pytest.raises(ConfigError, match="attention data parallelism"):
        simllm.simulate(moe, GPU, simllm.ServingConfig(data_parallel_size=2, enable_expert_parallel=True,
                                                       pipeline_parallel_size=2), Workload(num_prompts=2))
    with pytest.raises(ConfigError, match="disaggregated"):
        simulate_disagg(MODEL, GPU, serving(pipeline_parallel_size=2), Workload(num_prompts=2))


def test_cli_runs_pipelined_and_names_a_bad_size(capsys):
    args = ["run", "llama-3.1-70b", "h100-sxm", "-tp", "4", "-pp", "2", "--max-model-len", "8192",
            "--num-prompts", "20", "--max-concurrency", "8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "(TP=4, PP=2, DP=1)" in out
    assert main(args + ["--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pipeline_parallel_size"] == 2 and data["completed"] == 20
    assert main(["run", "llama-3.1-8b", "-pp", "33", "--num-prompts", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--pipeline-parallel-size" in err[0] and "32 layers" in err[0]


def test_estimate_adds_the_sends_to_a_lone_request():
    sv = serving(pipeline_parallel_size=2)
    est = simllm.estimate(MODEL, GPU, sv, input_len=1000, output_len=100)
    plain = simllm.estimate(MODEL, GPU, serving(), input_len=1000, output_len=100)
    settings = pipeline_settings(prepare_pool(MODEL, GPU, sv).params, GPU, sv)
    assert est.ideal_tpot_s - plain.ideal_tpot_s == pytest.approx(pipeline_sends_s(settings, 1.0), rel=1e-6)
    assert any("pipeline parallelism" in w for w in est.warnings)
    d = est.to_dict()
    assert d["summary"]["kv_cache_bytes_per_token"] == pytest.approx(
        plain.to_dict()["summary"]["kv_cache_bytes_per_token"], rel=1e-12)


def test_optimize_counts_the_stages_gpus():
    w = Workload(num_prompts=40, max_concurrency=8, input_len=fixed(512), output_len=fixed(64))
    result = optimize(MODEL, GPU, serving(), w, over=parse_over(["pp=1,2"]))
    gpus = sorted(c.gpus for c in result.candidates)
    assert gpus == [4, 8]
    two = next(c for c in result.candidates if c.gpus == 8)
    assert two.status in ("ok", "slo") and "-pp 2" in two.run_flags()


def test_sweep_takes_pipeline_sizes():
    from simllm.search import sweep as sw
    w = {"num_prompts": 20, "max_concurrency": 4, "input_len": 256, "output_len": 32}
    res = sw.sweep({"model": "llama-3.1-70b", "hardware": "h100-sxm", "serving": {"tensor_parallel_size": 4,
                                                                              "max_model_len": 8192},
                    "workload": w}, grid={"serving.pipeline_parallel_size": [1, 2]})
    t = res.table
    assert t["serving.pipeline_parallel_size"].tolist() == [1, 2]
    direct = simllm.simulate(MODEL, GPU, serving(pipeline_parallel_size=2), Workload(
        num_prompts=20, max_concurrency=4, input_len=fixed(256), output_len=fixed(32)), keep_requests=False).summary
    assert t["mean_tpot_ms"][1] == pytest.approx(direct["mean_tpot_ms"], rel=1e-12)


def test_exports_carry_the_pipeline(tmp_path):
    from simllm.formats.exports import export
    r = simllm.simulate(MODEL, GPU, serving(pipeline_parallel_size=2), Workload(num_prompts=6, max_concurrency=2))
    export(r, tmp_path / "vllm.json", "vllm")
    assert json.loads((tmp_path / "vllm.json").read_text())["pipeline_parallel_size"] == 2
    export(r, tmp_path / "guidellm.json", "guidellm")
    (bench,) = json.loads((tmp_path / "guidellm.json").read_text())["benchmarks"]
    assert bench["extras"]["simllm"]["pipeline_parallel_size"] == 2
