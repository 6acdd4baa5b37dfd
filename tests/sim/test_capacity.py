"""simllm.capacity: the saturated request rate and throughput, against closed forms of the engine's
own runs, Little's law and the limits that bind."""
import math
from dataclasses import replace

import pytest

import simllm
from simllm.config.workload import fixed
from simllm.errors import ConfigError
from simllm.sim.capacity import capacity, saturating_workload

MODEL = simllm.load_model("llama-3.1-8b")
GPU = simllm.load_hardware("h100-sxm")
SHORT = simllm.Workload(input_len=fixed(256), output_len=fixed(32), client_jitter_ms=0.0)


def test_static_batches_back_to_back_give_the_batch_over_its_time():
    """Static batches of b identical requests run one after another with a queue always waiting:
    the rate is b over one batch's time, which a single batch's run measures as its E2E latency
    less the frontend's latency (the requests of every later batch were queued already)."""
    b = 16
    serving = simllm.ServingConfig(batching="static", max_num_seqs=b, max_model_len=288)  # b slots fit
    one = simllm.simulate(MODEL, GPU, serving, replace(SHORT, num_prompts=b, max_concurrency=b), percentiles=(50,))
    frontend_s = simllm.load_framework("vllm").frontend_latency_ms / 1e3
    batch_s = one.summary["mean_e2el_ms"] / 1e3 - frontend_s
    cap = capacity(MODEL, GPU, serving, SHORT)
    assert cap.request_throughput_rps == pytest.approx(b / batch_s, rel=1e-9)
    assert cap.output_throughput_tok_s == pytest.approx(32 * b / batch_s, rel=1e-9)
    assert cap.total_token_throughput_tok_s == pytest.approx((256 + 32) * b / batch_s, rel=1e-9)
    assert cap.clients == 2 * b and cap.num_requests == 2 * b * 6
    assert cap.limited_by == "max_num_seqs" and cap.concurrency == pytest.approx(b, rel=1e-9)
    # at the default max_model_len (131,072) a few slots fit: the KV cache limits the batches,
    # which are whole all the same
    small = capacity(MODEL, GPU, replace(serving, max_model_len=0), SHORT)
    assert small.limited_by == "kv_cache" and 1 <= small.concurrency < b
    assert small.concurrency == pytest.approx(round(small.concurrency), rel=1e-9)


def test_continuous_batching_saturates_its_sequences_and_obeys_littles_law():
    serving = simllm.ServingConfig(max_num_seqs=32)
    cap = capacity(MODEL, GPU, serving, SHORT)
    assert cap.limited_by == "max_num_seqs"
    assert 0.95 * 32 <= cap.concurrency <= 32 + 1e-9
    # Little: requests in the engine = rate x time in it (TTFT less the queue, plus the decode)
    res = simllm.simulate(MODEL, GPU, serving, saturating_workload(SHORT, serving), percentiles=(50,))
    r = res.requests
    in_engine_s = (r["finish_s"] - r["first_scheduled_s"]).mean()
    assert cap.concurrency == pytest.approx(cap.request_throughput_rps * in_engine_s, rel=0.05)
    # fewer clients than sequences never beat it; more clients do not raise it
    for c in (4, 16):
        closed = simllm.simulate(MODEL, GPU, serving, replace(SHORT, num_prompts=10 * c, max_concurrency=c),
                                 percentiles=(50,))
        assert closed.summary["request_throughput"] < cap.request_throughput_rps
    more = capacity(MODEL, GPU, serving, SHORT, clients=256)
    assert more.request_throughput_rps == pytest.approx(cap.request_throughput_rps, rel=0.02)


def test_a_small_kv_cache_is_the_limit():
    """768-token requests on a KV pool of a few tens of them, with 128 sequences allowed: the KV
    cache binds."""
    serving = simllm.ServingConfig(max_num_seqs=128, gpu_memory_utilization=0.25, max_model_len=1024)
    w = simllm.Workload(input_len=fixed(512), output_len=fixed(256), client_jitter_ms=0.0)
    cap = capacity(MODEL, GPU, serving, w, requests_per_client=3)
    plan = simllm.estimate(MODEL, GPU, serving, input_len=512, output_len=256).memory
    assert cap.limited_by == "kv_cache"
    assert cap.concurrency <= plan.kv_capacity_tokens / 512  # at most what holds their prompts
    assert all(math.isfinite(v) and v > 0 for v in (cap.request_throughput_rps, cap.output_throughput_tok_s,
                                                     cap.mean_tpot_ms, cap.concurrency))


def test_data_parallel_replicas_add_up():
    one = capacity(MODEL, GPU, simllm.ServingConfig(max_num_seqs=16), SHORT)
    two = capacity(MODEL, GPU, simllm.ServingConfig(max_num_seqs=16, data_parallel_size=2), SHORT)
    assert two.replicas == 2 and two.clients == 64
    assert two.request_throughput_rps == pytest.approx(2 * one.request_throughput_rps, rel=0.05)


def test_bad_requests_are_refused():
    with pytest.raises(ConfigError, match="requests_per_client"):
        capacity(MODEL, GPU, None, SHORT, requests_per_client=2)
    with pytest.raises(ConfigError, match="trace"):
        saturating_workload(replace(SHORT, trace="t.jsonl"), simllm.ServingConfig())


def test_to_dict_uses_vllm_bench_names():
    d = capacity(MODEL, GPU, simllm.ServingConfig(max_num_seqs=8), SHORT).to_dict()
    assert {"request_throughput", "output_throughput", "total_token_throughput", "limited_by"} <= set(d)
    assert not any(k.endswith("_rps") or k.endswith("_tok_s") for k in d)
