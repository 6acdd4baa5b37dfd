"""Packing validated configs into the NamedTuple of scalars the simcore kernels take."""
from simcore import CostParams
from simllm.config import dtypes
from simllm.config import serving as serving_mod
from simllm.config.framework import load_framework
from simllm.config.hardware import FRAMEWORK_OVERRIDE_KEYS
from simllm.sim.efficiency import efficiency_array


def framework_for(hardware, serving, framework=None):
    """The :class:`FrameworkProfile` a run uses: ``framework`` (a profile, name or path) or
    ``serving.framework``'s, with the hardware file's explicit ``launch_overhead_us`` and
    ``frontend_latency_ms`` overrides (where it sets them) applied."""
    profile = load_framework(framework if framework is not None else serving.framework)
    overrides = {k: getattr(hardware, k) for k in FRAMEWORK_OVERRIDE_KEYS
                 if getattr(hardware, k) is not None}
    return profile.with_overrides(**overrides) if overrides else profile


def pack_cost_params(model, hardware, serving, resolved=None, framework=None):
    """Per-GPU :class:`simcore.CostParams` for ``model`` on ``hardware`` under ``serving``.

    Tensor parallelism shards the attention heads, the FFN and expert widths and the vocabulary
    (embedding and LM head) across ``tensor_parallel_size`` GPUs; KV heads are replicated when
    there are fewer of them than GPUs; norms and the router are replicated. When the hardware
    carries kernel tables for the framework, ``eff`` holds them folded to this model's
    shapes (:mod:`simllm.sim.efficiency`).

    Parameters
    ----------
    model : ModelConfig
    hardware : HardwareConfig
    serving : ServingConfig
    resolved : serving.Resolved, optional
        The result of ``serving.resolve``; computed when omitted.
    framework : FrameworkProfile or str, optional
        The serving framework's profile (default ``serving.framework``'s), see :func:`framework_for`.
    """
    fw = framework_for(hardware, serving, framework)
    r = resolved or serving_mod.resolve(model, hardware, serving)
    tp = serving.tensor_parallel_size
    m = model.matrix_params()
    h, d = model.hidden_size, model.head_dim
    q_heads = model.num_attention_heads / tp
    kv_heads = float(r.kv_heads_per_gpu)
    qkv_width = (q_heads + 2.0 * kv_heads) * d
    up_mult = 2.0 if model.ffn == "gated" else 1.0
    inter = model.intermediate_size / tp
    e_inter = model.moe_intermediate_size / tp
    s_inter = model.shared_expert_intermediate_size / tp
    mlp_bias = 1.0 if model.mlp_bias else 0.0

    act_bytes = dtypes.BYTES[r.activation_dtype]
    peak_gemm = hardware.peak_flops(r.weight_dtype)
    peak_act = hardware.peak_flops(r.activation_dtype) or hardware.fp16_tflops * 1e12
    if peak_gemm <= 0.0:  # no tensor cores for this dtype: weight-only, computed at the activation dtype
        peak_gemm = peak_act
    vector = hardware.fp32_tflops * 1e12 or hardware.fp16_tflops * 1e12
    params = CostParams(
        n_layers=model.layers,
        n_moe_layers=model.moe_layers,
        hidden=float(h),
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=float(d),
        rotary_dim=float(model.rope_dim),
        qk_norm=1.0 if model.qk_norm else 0.0,
        norm_params=float(m["norm"]),
        norm_flops_per_elem=7.0 if model.norm == "layernorm" else 4.0,
        norms_per_layer=1 if model.parallel_attention else 2,
        p_qkv=h * qkv_width + (qkv_width if model.attention_bias else 0.0),
        p_o=q_heads * d * h,
        ffn_up_width=up_mult * inter,
        ffn_inner=inter,
        p_ffn_up=h * up_mult * inter + mlp_bias * up_mult * inter,
        p_ffn_down=inter * h + mlp_bias * h,
        n_experts=float(model.num_experts),
        experts_per_token=float(model.experts_per_token),
        p_router=float(m["router"]),
        expert_up_width=2.0 * e_inter,
        expert_inner=e_inter,
        p_expert_up=2.0 * h * e_inter,
        p_expert_down=e_inter * h,
        shared_up_width=2.0 * s_inter,
        shared_inner=s_inter,
        p_shared_up=2.0 * h * s_inter,
        p_shared_down=s_inter * h,
        vocab=float(model.vocab_size),
        p_embed=m["embed"] / tp,
        p_lm_head=m["lm_head"] / tp,
        tied=1.0 if model.tie_word_embeddings else 0.0,
        w_bytes=dtypes.BYTES[r.weight_dtype],
        e_bytes=act_bytes,
        a_bytes=act_bytes,
        kv_bytes=dtypes.BYTES[r.kv_dtype] / r.kv_compression_ratio,
        tp=tp,
        gemm_flops=peak_gemm,
        attn_flops=peak_act,
        vector_flops=vector,
        mem_bw=hardware.memory_bandwidth_bytes_per_s,
        eff_compute=hardware.compute_utilization,
        eff_bw=hardware.bandwidth_utilization,
        launch_s=fw.launch_overhead_us * 1e-6,
        link_bw=hardware.interconnect_bandwidth_gbps * 1e9,
        eff_link=hardware.interconnect_utilization,
        link_latency_s=hardware.interconnect_latency_us * 1e-6,
        iter_overhead_s=fw.iteration_overhead_us * 1e-6,
    )
    tables = hardware.tables_for(fw.name)
    if tables is None:
        return params
    return params._replace(eff=efficiency_array(tables, params, r.weight_dtype if hardware.peak_flops(r.weight_dtype) > 0
                                                else r.activation_dtype))
