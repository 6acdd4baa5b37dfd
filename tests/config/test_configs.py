"""Loading configurations: shipped presets, HuggingFace config.json files, the seed's YAML
examples, and preset-name lookup."""
import shutil

import pytest

import simllm
from helpers import DATA, ROOT

CONFIGS = ROOT / "configs"

MODEL_PRESETS = sorted(p.stem for p in (CONFIGS / "models").glob("*.yaml"))
HARDWARE_PRESETS = sorted(p.stem for p in (CONFIGS / "hardware").glob("*.yaml"))

# Published parameter counts (Hugging Face safetensors totals), which the dimensions must give exactly.
PUBLISHED = {
    "llama-3.1-8b": 8_030_261_248,
    "mistral-7b": 7_241_732_096,
    "qwen2.5-0.5b": 494_032_768,
    "mixtral-8x7b": 46_702_792_704,
    "qwen3-32b": 32_762_123_264,
    "llama-3.1-70b": 70_553_706_496,
}

# tests/data/<name>.config.json -> the preset describing the same model
HF_FIXTURES = ["llama-3.1-8b", "mixtral-8x7b", "qwen2.5-0.5b", "gpt-j-6b", "deepseek-v3"]


def test_presets_found():
    assert len(MODEL_PRESETS) >= 10
    assert len(HARDWARE_PRESETS) >= 5
    assert simllm.preset_names("models") == MODEL_PRESETS
    assert simllm.preset_names("hardware") == HARDWARE_PRESETS


@pytest.mark.parametrize("name", MODEL_PRESETS)
def test_model_preset_loads(name):
    model = simllm.load_model(name)
    assert isinstance(model, simllm.ModelConfig)
    assert model.layers > 0 and model.hidden_size > 0 and model.vocab_size > 0
    assert model.num_attention_heads % model.num_key_value_heads == 0
    assert model.parameter_count() > 0
    # per token of context, in the layers that keep every token (windowed ones hold their window)
    full = model.layers - model.windowed_layers - model.linear_layers
    if model.is_mla:  # one latent and one rope key per token and layer, whatever the heads
        assert model.kv_elements_per_token() == full * (model.kv_lora_rank + model.qk_rope_head_dim)
    else:
        assert model.kv_elements_per_token() == 2 * full * model.num_key_value_heads * model.head_dim


@pytest.mark.parametrize("name", MODEL_PRESETS)
def test_model_preset_matches_declared_parameters(name):
    model = simllm.load_model(name)
    if not model.declared_parameters:
        pytest.skip(f"{name} declares no parameter count")
    if name == "jalapeno":
        # The blog's "13B" does not match its own dimensions: the preset must say so.
        assert any("declared_parameters" in w for w in model.warnings), model.warnings
        return
    derived = model.parameter_count()
    assert abs(derived - model.declared_parameters) <= 1e-3 * model.declared_parameters, (
        name, derived, model.declared_parameters)
    assert not any("declared_parameters" in w for w in model.warnings)


def test_jalapeno_preset_warns_about_declared_parameters():
    model = simllm.load_model("jalapeno")
    assert model.declared_parameters == 13e9
    assert any("declared_parameters" in w for w in model.warnings), model.warnings


@pytest.mark.parametrize("name,count", sorted(PUBLISHED.items()))
def test_published_parameter_counts_exact(name, count):
    assert simllm.load_model(name).parameter_count() == count


def test_mixtral_active_parameters():
    model = simllm.load_model("mixtral-8x7b")
    assert model.is_moe and model.num_experts == 8 and model.experts_per_token == 2
    # Published "12.9B active": all but 6 of 8 experts' FFNs per layer
    active = model.active_parameter_count()
    assert 12.8e9 < active < 13.0e9
    assert active < model.parameter_count()


@pytest.mark.parametrize("name", HARDWARE_PRESETS)
def test_hardware_preset_loads(name):
    hw = simllm.load_hardware(name)
    assert isinstance(hw, simllm.HardwareConfig)
    assert hw.fp16_tflops > 0
    assert hw.memory_bandwidth_gbps > 0
    assert hw.memory_size_bytes > 1e9
    assert 0 < hw.bandwidth_utilization <= 1
    assert 0 < hw.compute_utilization <= 1
    assert hw.peak_flops("bf16") > 0


# ---------------------------------------------------------------- HuggingFace config.json


@pytest.mark.parametrize("name", HF_FIXTURES)
def test_hf_config_matches_preset(name):
    path = DATA / f"{name}.config.json"
    hf = simllm.load_model(str(path))
    preset = simllm.load_model(name)
    assert hf.parameter_count() == preset.parameter_count()
    assert hf.active_parameter_count() == preset.active_parameter_count()
    for field in ("layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "intermediate_size", "vocab_size", "max_sequence_length", "tie_word_embeddings",
                  "num_experts", "experts_per_token", "moe_layers", "num_shared_experts",
                  "shared_expert_intermediate_size", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim",
                  "rotary_dim", "dtype"):
        assert getattr(hf, field) == getattr(preset, field), field
    assert hf.kv_elements_per_token() == preset.kv_elements_per_token()


def test_hf_config_accepts_path_object():
    model = simllm.load_model(DATA / "llama-3.1-8b.config.json")
    assert model.parameter_count() == PUBLISHED["llama-3.1-8b"]


def test_hf_specifics():
    qwen = simllm.load_model(str(DATA / "qwen2.5-0.5b.config.json"))
    assert qwen.tie_word_embeddings is True
    assert qwen.attention_bias is True
    assert qwen.parameter_count() == PUBLISHED["qwen2.5-0.5b"]

    mixtral = simllm.load_model(str(DATA / "mixtral-8x7b.config.json"))
    assert mixtral.num_experts == 8 and mixtral.experts_per_token == 2
    assert mixtral.moe_intermediate_size == 14336
    assert mixtral.parameter_count() == PUBLISHED["mixtral-8x7b"]

    gptj = simllm.load_model(str(DATA / "gpt-j-6b.config.json"))
    assert gptj.hidden_size == 4096 and gptj.layers == 28 and gptj.num_attention_heads == 16
    assert gptj.head_dim == 256
    assert gptj.intermediate_size == 4 * 4096  # n_inner null
    assert gptj.rotary_dim == 64
    assert gptj.ffn == "plain" and gptj.parallel_attention
    assert gptj.dtype == "fp32"


def test_hf_config_without_head_dim_or_kv_heads():
    model = simllm.load_model(str(DATA / "no-head-dim.config.json"))
    assert model.hidden_size == 4096 and model.num_attention_heads == 32
    assert model.head_dim == model.hidden_size // model.num_attention_heads == 128
    assert model.num_key_value_heads == model.num_attention_heads
    # Llama-1/2-7B shape without the rotary buffers: 6,738,415,616
    assert model.parameter_count() == 6_738_415_616
    assert model.dtype == "fp16"


def test_hf_config_directory(tmp_path):
    shutil.copy(DATA / "llama-3.1-8b.config.json", tmp_path / "config.json")
    model = simllm.load_model(str(tmp_path))
    assert model.parameter_count() == PUBLISHED["llama-3.1-8b"]


def test_directory_without_config_json(tmp_path):
    with pytest.raises(simllm.ConfigError) as info:
        simllm.load_model(str(tmp_path))
    assert "config.json" in str(info.value)


def test_model_from_hf_config_dict():
    import json

    data = json.loads((DATA / "llama-3.1-8b.config.json").read_text())
    assert simllm.model_from_hf_config(data).parameter_count() == PUBLISHED["llama-3.1-8b"]


# ---------------------------------------------------------------- the seed's examples


def test_seed_model_yaml():
    model = simllm.load_model(str(CONFIGS / "model.yaml"))
    assert model.name == "Jalapeño"
    assert model.dtype == "fp16"
    assert (model.layers, model.hidden_size, model.num_attention_heads, model.head_dim) == (32, 4096, 16, 64)
    assert model.vocab_size == 32000 and model.max_sequence_length == 2048
    assert model.kv_cache_enabled and model.kv_cache_max_tokens == 16384
    warnings = " | ".join(model.warnings)
    # heads x head_dim (1024) vs hidden_size (4096)
    assert any("head_dim" in w and "hidden_size" in w and "1024" in w for w in model.warnings), warnings
    # no intermediate_size: the assumption is stated
    assert any("intermediate_size" in w and "assum" in w for w in model.warnings), warnings


def test_seed_model_yaml_matches_jalapeno_preset():
    seed = simllm.load_model(str(CONFIGS / "model.yaml"))
    preset = simllm.load_model("jalapeno")
    assert seed.parameter_count() == preset.parameter_count()


def test_seed_hardware_yaml():
    hw = simllm.load_hardware(str(CONFIGS / "hardware.yaml"))
    assert hw.gpu == "custom-gpu"
    assert hw.fp16_tflops == 80
    assert hw.memory_bandwidth_gbps == 2000
    assert hw.memory_bandwidth_bytes_per_s == 2000e9
    assert hw.memory_size_bytes == 40e9
    assert hw.bandwidth_utilization == 0.75
    assert hw.compute_utilization == 0.85
    assert not hw.interconnect_given


def test_seed_hardware_matches_custom_gpu_preset():
    seed = simllm.load_hardware(str(CONFIGS / "hardware.yaml"))
    preset = simllm.load_hardware("custom-gpu")
    for field in ("fp16_tflops", "memory_bandwidth_gbps", "memory_size_bytes", "bandwidth_utilization",
                  "compute_utilization"):
        assert getattr(seed, field) == getattr(preset, field), field


# ---------------------------------------------------------------- preset names


@pytest.mark.parametrize("spelling", ["llama-3.1-8b", "Llama_3.1-8B", "LLAMA-3.1-8B", " llama_3.1_8b ",
                                      "llama-3.1-8b.yaml"])
def test_preset_name_tolerant(spelling):
    assert simllm.load_model(spelling).parameter_count() == PUBLISHED["llama-3.1-8b"]


@pytest.mark.parametrize("spelling", ["H100_SXM", "h100-sxm", "RTX_4090"])
def test_hardware_preset_name_tolerant(spelling):
    assert simllm.load_hardware(spelling).memory_size_bytes > 0


@pytest.mark.parametrize("wrong,nearest", [
    ("lama-3.1-8b", "llama-3.1-8b"),
    ("mistral-7", "mistral-7b"),
    ("qwen2.5-05b", "qwen2.5-0.5b"),
])
def test_unknown_model_preset_suggests(wrong, nearest):
    with pytest.raises(simllm.ConfigError) as info:
        simllm.load_model(wrong)
    text = str(info.value)
    assert wrong in text
    assert "did you mean" in text
    suggestion = text.split("did you mean", 1)[1].split("?", 1)[0]
    assert nearest in suggestion
    assert "\n" not in text


def test_unknown_hardware_preset_suggests():
    with pytest.raises(simllm.ConfigError) as info:
        simllm.load_hardware("h100")
    text = str(info.value)
    assert "did you mean" in text
    assert "h100-sxm" in text.split("did you mean", 1)[1].split("?", 1)[0]


def test_missing_file_is_config_error():
    with pytest.raises(simllm.ConfigError):
        simllm.load_model(str(ROOT / "configs" / "does-not-exist.yaml"))


# ---------------------------------------------------------------- today's MoE / MLA models


def test_deepseek_v3_published_figures():
    """DeepSeek-V3 Technical Report (arXiv 2412.19437): 671B total, 37B activated per token."""
    m = simllm.load_model("deepseek-v3")
    assert m.is_mla and m.is_moe and m.dtype == "fp8"
    assert m.parameter_count() == pytest.approx(671e9, rel=1e-3)
    assert m.active_parameter_count() == pytest.approx(37e9, rel=0.02)
    # MLA caches kv_lora_rank + qk_rope_head_dim per token and layer: 61 x (512 + 64) elements
    assert m.kv_elements_per_token() == 61 * (512 + 64) == 35_136
    assert m.head_dim == 128 + 64 and m.v_head_dim == 128 and m.rope_dim == 64
    assert m.moe_layers == 58 and m.dense_layers == 3 and m.shared_expert_intermediate_size == 2048


@pytest.mark.parametrize("name, total, active, rel", [
    ("kimi-k2", 1.0e12, 32e9, 0.03),  # model card: "1 trillion total parameters, 32 billion activated"
    ("qwen3-235b-a22b", 235e9, 22e9, 0.01),  # model card: 235B in total, 22B activated
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),  # model card: 30.5B in total, 3.3B activated
])
def test_moe_presets_published_counts(name, total, active, rel):
    m = simllm.load_model(name)
    assert m.parameter_count() == pytest.approx(total, rel=rel)
    assert m.active_parameter_count() == pytest.approx(active, rel=rel)


def test_minimax_m2_5_counts():
    """Model card: 229B total, 10B activated (without the embedding and the LM head)."""
    m = simllm.load_model("minimax-m2.5")
    assert m.parameter_count() == pytest.approx(229e9, rel=0.005)
    embed_and_head = 2 * m.vocab_size * m.hidden_size
    assert m.active_parameter_count() - embed_and_head == pytest.approx(10e9, rel=0.03)
    assert m.kv_elements_per_token() == 2 * 62 * 8 * 128 and m.rope_dim == 64


@pytest.mark.parametrize("name, total, active, windowed, window", [
    ("gpt-oss-120b", 116.83e9, 5.13e9, 18, 128),  # OpenAI model card, table 1 (active without the embedding)
    ("gpt-oss-20b", 20.91e9, 3.61e9, 12, 128),
])
def test_gpt_oss_published_counts_and_windows(name, total, active, windowed, window):
    m = simllm.load_model(name)
    embedding = m.vocab_size * m.hidden_size
    assert m.parameter_count() == pytest.approx(total, rel=0.001)
    assert m.active_parameter_count() - embedding == pytest.approx(active, rel=0.002)
    assert (m.windowed_layers, m.window_tokens, m.full_layers) == (windowed, window, m.layers - windowed)
    assert (m.dtype, m.attention_dtype) == ("mxfp4", "bf16")  # MXFP4 experts, BF16 attention
    # only the full-attention layers' KV grows: 2 x 8 KV heads x 64 per layer and token
    assert m.kv_elements_per_token() == m.full_layers * 2 * 8 * 64
    assert m.window_blocks(16) == 128 // 16 + 1  # an unaligned 128-key window spans 9 blocks


def test_hf_gemma3_windows_from_the_sliding_window_pattern():
    """Gemma 3's config has no layer_types: every 6th layer is global, the rest see 1024 keys."""
    m = simllm.load_model(DATA / "gemma-3-27b.config.json")
    ref = simllm.load_model("gemma-3-27b")
    assert (m.windowed_layers, m.sliding_window) == (52, 1024) == (ref.windowed_layers, ref.sliding_window)
    assert m.parameter_count() == ref.parameter_count() == pytest.approx(27.0e9, rel=0.005)
    assert m.tie_word_embeddings and m.qk_norm and m.norms_per_layer == ref.norms_per_layer == 4  # sandwich norms


def test_unused_sliding_window_of_qwen_configs_is_ignored(tmp_path):
    import json
    cfg = json.loads((DATA / "qwen2.5-0.5b.config.json").read_text(encoding="utf-8"))
    cfg.update(sliding_window=4096, use_sliding_window=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    assert simllm.load_model(str(path)).windowed_layers == 0
    cfg.update(use_sliding_window=True)
    path.write_text(json.dumps(cfg), encoding="utf-8")
    assert simllm.load_model(str(path)).windowed_layers == cfg["num_hidden_layers"]


def assert_rejected(change, key):
    """A two-layer model mapping with ``change`` is a ConfigError naming ``key``."""
    data = {"name": "x", "layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 100,
            "max_sequence_length": 128, "intermediate_size": 512, **change}
    with pytest.raises(simllm.ConfigError) as info:
        simllm.model_from_dict(data)
    assert key in str(info.value)


@pytest.mark.parametrize("change, key", [
    ({"sliding_window": 128, "attention_chunk_size": 64}, "attention_chunk_size"),
    ({"windowed_layers": 1}, "windowed_layers"),
    ({"sliding_window": 128, "windowed_layers": 3}, "windowed_layers"),
    ({"sliding_window": 128, "layer_types": ["full_attention"]}, "layer_types"),
    ({"sliding_window": 128, "layer_types": ["full_attention", "linear_attention"]}, "layer_types"),
    ({"layer_types": ["sliding_attention", "full_attention"]}, "sliding_window"),
])
def test_window_keys_are_validated(change, key):
    assert_rejected(change, key)


def test_glm5_published_counts():
    """Z.ai: GLM-5 has 744B total and 40B active parameters (without the embedding and LM head);
    its DeepSeek sparse attention indexer adds 78 x (2048 x 32 x 128 + 6144 x (128 + 32) + 256)."""
    m = simllm.load_model("glm-5")
    assert m.parameter_count() == pytest.approx(744e9, rel=0.002)
    assert m.active_parameter_count() - 2 * m.vocab_size * m.hidden_size == pytest.approx(40e9, rel=0.01)
    assert (m.index_topk, m.index_key_bytes) == (2048, 132)
    assert m.mla_params()["replicated"] - m.with_overrides(index_topk=0).mla_params()["replicated"] == (
        2048 * 32 * 128 + 6144 * (128 + 32) + 256)


def test_qwen3_5_hybrid_counts():
    """Qwen3.5-397B-A17B's model card: 397B total, 17B activated (with its vision encoder); 45 of
    its 60 layers are Gated DeltaNet layers that keep a 64 x 128 x 128 state, 15 keep a KV cache."""
    m = simllm.load_model("qwen3.5-397b-a17b")
    assert m.parameter_count() == pytest.approx(397e9, rel=0.005)
    assert m.active_parameter_count() == pytest.approx(17e9, rel=0.025)
    assert (m.linear_layers, m.full_layers, m.rope_dim) == (45, 15, 64)
    assert m.linear_state_elements() == (64 * 128 * 128, 3 * (2 * 16 * 128 + 64 * 128))
    assert m.kv_elements_per_token() == 15 * 2 * 2 * 256


@pytest.mark.parametrize("change, key", [
    ({"linear_attention": {"layers": 2, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 8,
                           "value_head_dim": 8}}, "linear_attention.layers"),  # no attention layer left
    ({"linear_attention": {"layers": 1, "num_key_heads": 3, "num_value_heads": 4, "key_head_dim": 8,
                           "value_head_dim": 8}}, "num_value_heads"),
    ({"linear_attention": {"layers": 1, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 8}},
     "value_head_dim"),
    ({"layer_types": ["linear_attention", "full_attention"]}, "layer_types"),  # no linear_attention mapping
])
def test_linear_attention_keys_are_validated(change, key):
    assert_rejected(change, key)


def test_tensor_parallelism_must_divide_the_linear_heads():
    m = simllm.load_model("qwen3.5-397b-a17b")
    with pytest.raises(simllm.ConfigError) as info:
        simllm.estimate(m, simllm.load_hardware("b200"), simllm.ServingConfig(tensor_parallel_size=32))
    assert "linear-attention heads" in str(info.value)


def test_hf_quantization_config_sets_the_weight_dtype(tmp_path):
    import json
    cfg = json.loads((DATA / "llama-3.1-8b.config.json").read_text(encoding="utf-8"))
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    assert simllm.load_model(str(path)).dtype == "fp8"
    assert simllm.load_model(DATA / "llama-3.1-8b.config.json").dtype == "bf16"


@pytest.mark.parametrize("change, key", [
    ({"q_lora_rank": 1536}, "q_lora_rank"),  # an MLA key without kv_lora_rank
    ({"kv_lora_rank": 512, "qk_rope_head_dim": 128, "head_dim": 128}, "head_dim"),  # no room for the nope part
    ({"kv_lora_rank": 512}, "qk_rope_head_dim"),
])
def test_mla_keys_are_validated(change, key):
    assert_rejected(change, key)


def _acc_model_configs():
    try:
        import aiconfigurator_core
    except ImportError:
        return None
    from pathlib import Path
    return Path(aiconfigurator_core.__file__).parent / "model_configs"


@pytest.mark.parametrize("stem, preset", [
    ("deepseek-ai--DeepSeek-V3", "deepseek-v3"), ("deepseek-ai--DeepSeek-R1", "deepseek-v3"),
    ("moonshotai--Kimi-K2-Instruct", "kimi-k2"), ("Qwen--Qwen3-235B-A22B", "qwen3-235b-a22b"),
    ("Qwen--Qwen3-30B-A3B", "qwen3-30b-a3b"), ("MiniMaxAI--MiniMax-M2.5", "minimax-m2.5"),
    ("openai--gpt-oss-120b", "gpt-oss-120b"), ("openai--gpt-oss-20b", "gpt-oss-20b"),
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"),
    ("meta-llama--Llama-4-Maverick-17B-128E-Instruct", "llama-4-maverick"),
    ("Qwen--Qwen3.5-397B-A17B", "qwen3.5-397b-a17b"), ("zai-org--GLM-5", "glm-5"),
])
def test_real_configs_match_presets(stem, preset):
    """The config.json files aiconfigurator-core ships (the checkpoints' own) give the presets'
    architecture; skipped without the optional package."""
    folder = _acc_model_configs()
    if folder is None:
        pytest.skip("aiconfigurator-core is not installed (pip install simllm[kernels])")
    hf = simllm.load_model(str(folder / f"{stem}_config.json"))
    ref = simllm.load_model(preset)
    assert hf.parameter_count() == ref.parameter_count()
    assert hf.active_parameter_count() == ref.active_parameter_count()
    assert hf.kv_elements_per_token() == ref.kv_elements_per_token()
    assert hf.dtype == ref.dtype or (hf.dtype == "bf16" and ref.dtype == "bf16")
    assert (hf.windowed_layers, hf.window_tokens, hf.attention_dtype) == (
        ref.windowed_layers, ref.window_tokens, ref.attention_dtype)
    assert hf.linear_state_elements() == ref.linear_state_elements() and hf.linear_layers == ref.linear_layers
    assert hf.index_topk == ref.index_topk and hf.index_key_bytes == ref.index_key_bytes


def test_modelopt_nvfp4_export_keeps_its_excluded_attention_in_bf16():
    """NVIDIA's MiniMax-M2.5-NVFP4: hf_quant_config.json beside config.json (read as
    transformers' quantization_config) quantises the experts to NVFP4 and excludes self_attn."""
    folder = _acc_model_configs()
    if folder is None:
        pytest.skip("aiconfigurator-core is not installed (pip install simllm[kernels])")
    m = simllm.load_model(str(folder / "nvidia--MiniMax-M2.5-NVFP4_config.json"))
    assert (m.dtype, m.attention_dtype) == ("fp4", "bf16")
