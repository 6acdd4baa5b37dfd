"""The memory plan: KV pool sizing, simulated OOM with its breakdown, dtype and TP effects."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simllm
from helpers import ROOT, build
from simllm.sim.memory import plan_memory


def plan(model, hardware, **serving):
    m, h, s, r, p = build(model, hardware, **serving)
    return plan_memory(p, m, h, s, r)


def test_pool_is_what_is_left_in_whole_blocks():
    mem = plan("llama-3.1-8b", "h100-sxm")
    assert mem.usable_bytes == pytest.approx(80 * 2**30 * 0.9)
    left = mem.usable_bytes - mem.weight_bytes - mem.activation_bytes - mem.runtime_overhead_bytes
    block = mem.kv_bytes_per_token * mem.block_size
    assert mem.num_blocks == int(left // block)
    assert 0 <= mem.free_bytes < block
    assert mem.kv_capacity_tokens == mem.num_blocks * 16
    assert mem.weight_bytes == pytest.approx(8_030_261_248 * 2)
    assert mem.max_concurrent_sequences(1000) == mem.num_blocks // 63  # ceil(1000 / 16) blocks each


def test_model_larger_than_the_gpu_is_a_simulated_oom_with_breakdown():
    with pytest.raises(simllm.SimulatedOOM) as info:
        plan("llama-3.1-70b", "rtx-4090")
    text = str(info.value)
    assert text.startswith("simulated OOM")
    assert "weights 141.11 GB" in text and "GB usable" in text
    assert "\n" not in text
    assert info.value.plan.weight_bytes == pytest.approx(70_553_706_496 * 2)


def test_pool_that_cannot_hold_one_max_length_sequence_is_an_oom_that_says_what_fits():
    with pytest.raises(simllm.SimulatedOOM) as info:
        plan("llama-3.1-8b", "rtx-4090")  # max_model_len 131072 needs 17.2 GB of KV
    fits = info.value.plan.kv_capacity_tokens
    assert f"--max-model-len to at most {fits}" in str(info.value)
    assert plan("llama-3.1-8b", "rtx-4090", max_model_len=fits).kv_capacity_tokens == fits
    with pytest.raises(simllm.SimulatedOOM):
        plan("llama-3.1-8b", "rtx-4090", max_model_len=fits + 1)


def test_seed_max_cache_size_preallocates_that_many_tokens():
    mem = plan(ROOT / "configs" / "model.yaml", ROOT / "configs" / "hardware.yaml")
    assert mem.preallocated and mem.kv_capacity_tokens == 16384
    assert mem.kv_bytes_per_token == 2 * 32 * 16 * 64 * 2
    big = simllm.load_model(ROOT / "configs" / "model.yaml").with_overrides(kv_cache_max_tokens=400_000)
    with pytest.raises(simllm.SimulatedOOM, match="max_cache_size 400000 tokens needs"):
        plan(big, ROOT / "configs" / "hardware.yaml")


def test_kv_cache_disabled_needs_no_pool():
    model = simllm.load_model("jalapeno").with_overrides(kv_cache_enabled=False)
    mem = plan(model, "custom-gpu")
    assert mem.kv_pool_bytes == 0 and mem.kv_bytes_per_token == 0


def test_fp8_kv_and_tensor_parallel_grow_the_pool():
    base = plan("llama-3.1-70b", "h100-sxm", tensor_parallel_size=2, max_model_len=8192)
    fp8 = plan("llama-3.1-70b", "h100-sxm", tensor_parallel_size=2, kv_cache_dtype="fp8", max_model_len=8192)
    four = plan("llama-3.1-70b", "h100-sxm", tensor_parallel_size=4, max_model_len=8192)
    assert fp8.kv_bytes_per_token == base.kv_bytes_per_token / 2
    assert fp8.kv_capacity_tokens >= 2 * base.kv_capacity_tokens - 16
    assert four.weight_bytes == pytest.approx(base.weight_bytes / 2, rel=1e-3)
    assert four.kv_capacity_tokens > 2 * base.kv_capacity_tokens


@given(
    name=st.sampled_from(["llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "mixtral-8x7b", "qwen3-32b"]),
    hw=st.sampled_from(["h100-sxm", "h200-sxm", "a100-sxm-80gb", "l40s", "mi300x", "b200"]),
    util=st.floats(0.5, 0.98),
    block=st.sampled_from([8, 16, 32]),
    tp=st.sampled_from([1, 2, 4]),
)
@settings(max_examples=60, deadline=None)
def test_kv_pool_never_exceeds_what_is_left(name, hw, util, block, tp):
    try:
        mem = plan(name, hw, gpu_memory_utilization=util, block_size=block, tensor_parallel_size=tp, max_model_len=4096)
    except simllm.SimulatedOOM as exc:
        assert exc.plan is not None
        return
    assert mem.kv_pool_bytes <= mem.usable_bytes - mem.weight_bytes - mem.activation_bytes - mem.runtime_overhead_bytes
    assert mem.kv_capacity_tokens >= 4096
    assert mem.free_bytes >= 0


def test_hybrid_kv_cache_of_gpt_oss_counts_full_attention_blocks_and_windows():
    """vLLM's hybrid KV cache manager, gpt-oss-120b on one H100: the pool's blocks hold 16 tokens
    of the 18 full-attention layers (18 x 2 x 8 x 64 x 2 = 36,864 bytes a token); the 18
    sliding-window layers hold at most ceil(128 / 16) + 1 = 9 blocks a sequence, one sliding layer
    per full one, so a request reserves min(9, its blocks) more; capacity is no longer linear in
    context."""
    mem = plan("gpt-oss-120b", "h100-sxm")
    assert mem.kv_bytes_per_token == 18 * 2 * 8 * 64 * 2 == 36_864
    left = mem.usable_bytes - mem.weight_bytes - mem.activation_bytes - mem.runtime_overhead_bytes
    assert mem.num_blocks == int(left // (36_864 * 16))
    assert (mem.window_blocks, mem.window_block_ratio) == (9, 1.0)
    assert mem.window_bytes_per_seq == 9 * 16 * 36_864
    assert [mem.fixed_blocks(t) for t in (1, 16, 17, 128, 144, 145, 10_000, 100_000)] == [1, 1, 2, 8, 9, 9, 9, 9]
    # the KV of a sequence stops growing in the windowed layers: 9 blocks beyond 144 tokens
    assert mem.max_concurrent_sequences(100_000) == mem.num_blocks // (6250 + 9)
    assert mem.max_concurrent_sequences(100) == mem.num_blocks // (7 + 7)


def test_window_blocks_scale_by_windowed_per_full_layer():
    """Gemma 3 27B: 52 sliding-window layers to 10 global ones, a 1024-key window = 65 blocks of
    16 each; a sequence past the window holds ceil(5.2 x 65) = 338 full-attention blocks' worth."""
    mem = plan("gemma-3-27b", "h200-sxm")
    assert mem.window_blocks == 65 and mem.window_block_ratio == pytest.approx(5.2)
    assert mem.fixed_blocks(50_000) == 338 and mem.fixed_blocks(160) == 52
    assert mem.kv_bytes_per_token == 10 * 2 * 16 * 128 * 2


def test_oom_advice_follows_what_the_configuration_already_uses():
    """More GPUs by tensor parallelism while a node has room, else pipeline stages over more nodes;
    quantisation only of what is not already at 8 bits."""
    from simllm.sim.memory import oom_hints

    assert oom_hints(1, 1, 8, "bf16", "bf16") == "use more GPUs (--tensor-parallel-size 2), quantise (--dtype fp8 / --kv-cache-dtype fp8)"
    assert oom_hints(8, 1, 8, "bf16", "fp8") == ("split the layers over more nodes (--pipeline-parallel-size 2 with "
                                                 "--tensor-parallel-size 8: 8 GPUs a node), quantise (--dtype fp8)")
    already = oom_hints(8, 2, 8, "fp8", "fp8")
    assert "quantise" not in already and "--pipeline-parallel-size 4" in already
    assert oom_hints(2, 1, 8, "fp4", "fp8") == ("use more GPUs (--tensor-parallel-size 4), split the layers into stages "
                                                "(--pipeline-parallel-size 2)")
    with pytest.raises(simllm.SimulatedOOM, match=r"--pipeline-parallel-size 2 with --tensor-parallel-size 8"):
        plan("deepseek-v3", "h100-sxm", kv_cache_dtype="fp8", tensor_parallel_size=8)  # fp8 weights, 671B
