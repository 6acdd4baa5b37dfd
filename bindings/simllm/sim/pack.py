"""Packing validated configs into the NamedTuple of scalars the simcore kernels take."""
from simcore import CostParams
from simllm.config import dtypes
from simllm.config import serving as serving_mod
from simllm.config.framework import load_framework
from simllm.config.hardware import FRAMEWORK_OVERRIDE_KEYS
from simllm.sim.efficiency import efficiency_array
from simllm.sim.routing import slowest_rank_factors


def framework_for(hardware, serving, framework=None):
    """The :class:`FrameworkProfile` a run uses: ``framework`` (a profile, name or path) or
    ``serving.framework``'s, with the hardware file's explicit ``launch_overhead_us`` and
    ``frontend_latency_ms`` overrides (where it sets them) applied."""
    profile = load_framework(framework if framework is not None else serving.framework)
    overrides = {k: getattr(hardware, k) for k in FRAMEWORK_OVERRIDE_KEYS
                 if getattr(hardware, k) is not None}
    return profile.with_overrides(**overrides) if overrides else profile


def _mla_geometry(model, tp, q_heads):
    """Per-GPU attention fields of multi-head latent attention (DeepSeek-V2/V3, Kimi-K2), as vLLM
    and SGLang shard it: the down-projections (``q_a``, ``kv_a``) and their norms are replicated,
    ``q_b``, ``kv_b`` and the output projection are split by heads, and every GPU caches the whole
    latent (``kv_lora_rank + qk_rope_head_dim`` per token and layer: the latent is shared by the
    heads, so tensor parallelism does not divide it). Attention is priced in the MHA-style prefill
    form (q/k width ``head_dim``, value width ``v_head_dim``); decode reads the latent once per
    token whatever the heads, which the decode table sees as one KV head."""
    h, d, dv = model.hidden_size, model.head_dim, model.v_head_dim
    rope, lat, ql = model.qk_rope_head_dim, model.kv_lora_rank, model.q_lora_rank
    mla = model.mla_params()
    return dict(
        kv_heads=1.0, p_qkv=mla["replicated"] + mla["sharded"] / tp, p_o=q_heads * dv * h,
        qkv_width=ql + q_heads * d + lat + rope + q_heads * (d - rope + dv), kv_width=float(lat + rope),
        pair_flops=2.0 * q_heads * (d + dv),
        # every head's rope part of q and the one shared rope key, rotated in place
        rope_flops=3.0 * (q_heads + 1.0) * rope, rope_bytes=2.0 * (q_heads + 1.0) * rope, qk_norm_params=0.0,
    )


# FLOPs per value head per token of the chunked gated delta rule (Yang et al., "Gated Delta Networks",
# ICLR 2025; fla's chunk_gated_delta_rule, chunks of 64): the state's decay, its product with k,
# the rank-one update and the output's product with q, ~7 dk dv, plus the chunk's own attention,
# 2 x 64 x (dk + dv). The recurrent decode form does the first part only; the upper bound is used.
LINEAR_CHUNK = 64.0


def _linear_geometry(model, tp, attention, act_bytes):
    """Per-GPU fields of the linear-attention layers, with the attention projections' fields
    (``p_qkv``, ``p_o``, ``qkv_width``) and RoPE's made the mean over all layers (linear layers'
    input and output projections in place of QKV and O; no RoPE, q/k norm or KV cache in them).
    Tensor parallelism splits the linear heads; each GPU keeps its heads' states."""
    n = model.linear_layers
    if not n:
        return dict(lin_frac=0.0, lin_flops=0.0, lin_io=0.0, lin_state_bytes=0.0)
    frac = n / model.layers
    h = model.hidden_size
    w = model.linear_widths()
    nv, dk, dv = model.linear_num_value_heads / tp, model.linear_key_head_dim, model.linear_value_head_dim
    kernel = model.linear_conv_kernel_dim
    p_in = h * w["in"] / tp + w["conv"] / tp * kernel
    p_out = w["out"] / tp * h
    ssm, conv = model.linear_state_elements()
    state_b = dtypes.BYTES[model.linear_state_dtype] if model.linear_state_dtype else act_bytes

    def mean(full, linear):
        return full + frac * (linear - full)

    return dict(
        p_qkv=mean(attention["p_qkv"], p_in), p_o=mean(attention["p_o"], p_out),
        qkv_width=mean(attention["qkv_width"], w["in"] / tp),
        rope_flops=(1.0 - frac) * attention["rope_flops"], rope_bytes=(1.0 - frac) * attention["rope_bytes"],
        qk_norm_params=(1.0 - frac) * attention["qk_norm_params"],
        lin_frac=frac,
        lin_flops=nv * (7.0 * dk * dv + 2.0 * LINEAR_CHUNK * (dk + dv)) + 2.0 * kernel * w["conv"] / tp,
        lin_io=w["in"] / tp + w["conv"] / tp + w["out"] / tp,  # projections in, conv out, output
        lin_state_bytes=ssm / tp * state_b + conv / tp * act_bytes,
    )


def _links(hardware, tp, dp, spans_ranks):
    """The collectives' links per GPU: the node's interconnect, or the scale-out network when the
    tensor-parallel group spans nodes (a ring over them runs at the NIC's pace); the MoE layers'
    all-to-all over ``tp x dp`` GPUs (``spans_ranks``: they gather the ranks' tokens) sends ``1 / (n - 1)`` of its bytes to each other GPU, the
    node's ``G - 1`` over the interconnect and the ``n - G`` beyond over the network at once, so its
    bandwidth is ``(n - 1) / max((G - 1) / interconnect, (n - G) / network)``."""
    g = hardware.gpus_per_node
    nvl = hardware.interconnect_bandwidth_gbps * 1e9
    net = hardware.network_bandwidth_gbps * 1e9
    spans = tp > g
    link_bw = net if spans else nvl
    n = tp * dp
    a2a = link_bw
    if spans_ranks and n > g:
        a2a = (n - 1) / max((g - 1) / nvl, (n - g) / net)
    return dict(link_bw=link_bw, a2a_bw=a2a,
                link_latency_s=(hardware.network_latency_us if spans else hardware.interconnect_latency_us) * 1e-6)


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
    if model.is_mla:
        attention = _mla_geometry(model, tp, q_heads)
    else:
        kv_heads = float(r.kv_heads_per_gpu)
        qkv_width = (q_heads + 2.0 * kv_heads) * d + (q_heads * d if model.attn_output_gate else 0.0)
        qk = 1.0 if model.qk_norm else 0.0
        rope_elems = (q_heads + kv_heads) * d  # of q and k, read and written (again by the q/k norms)
        attention = dict(
            kv_heads=kv_heads, p_qkv=h * qkv_width + (qkv_width if model.attention_bias else 0.0),
            p_o=q_heads * d * h, qkv_width=qkv_width, kv_width=2.0 * kv_heads * d, pair_flops=4.0 * d * q_heads,
            rope_flops=3.0 * (q_heads + kv_heads) * model.rope_dim + qk * 4.0 * rope_elems,
            rope_bytes=2.0 * rope_elems * (1.0 + qk), qk_norm_params=qk * 2.0 * d,
        )
    attention.update(_linear_geometry(model, tp, attention, dtypes.BYTES[r.activation_dtype]))
    up_mult = 2.0 if model.ffn == "gated" else 1.0
    inter = model.intermediate_size / tp
    ep = r.expert_parallel_size
    coupled = serving_mod.moe_spans_ranks(serving, r)
    e_inter = model.moe_intermediate_size / r.moe_tensor_parallel_size
    s_inter = model.shared_expert_intermediate_size / tp
    mlp_bias = 1.0 if model.mlp_bias else 0.0

    act_bytes = dtypes.BYTES[r.activation_dtype]
    peak_gemm = hardware.peak_flops(r.weight_dtype)
    peak_act = hardware.peak_flops(r.activation_dtype) or hardware.fp16_tflops * 1e12
    if peak_gemm <= 0.0:  # no tensor cores for this dtype: weight-only, computed at the activation dtype
        peak_gemm = peak_act
    proj_dtype = r.attention_dtype or r.weight_dtype
    peak_proj = peak_gemm if proj_dtype == r.weight_dtype else (hardware.peak_flops(proj_dtype) or peak_act)
    vector = hardware.fp32_tflops * 1e12 or hardware.fp16_tflops * 1e12
    params = CostParams(
        n_layers=model.layers,
        n_moe_layers=model.moe_layers,
        hidden=float(h),
        **attention,
        # DeepSeek sparse attention: every layer's attention over its index_topk best keys
        window=float(model.window_tokens or model.index_topk),
        window_frac=1.0 if model.index_topk else model.windowed_layers / model.layers,
        # its indexer, replicated on every GPU (one FP8 key per token; ReLU-weighted heads)
        idx_pair_flops=2.0 * model.index_n_heads * (model.index_head_dim + 1.0) if model.index_topk else 0.0,
        idx_key_bytes=float(model.index_key_bytes),
        norm_params=float(m["norm"]),
        norms_per_layer=model.norms_per_layer,
        ffn_up_width=up_mult * inter,
        ffn_inner=inter,
        mlp_bias=mlp_bias,
        # this GPU's experts, redundant replicas (EPLB) included; the router still scores the
        # logical ones, but is priced and stored over all n_experts x ep: with replicas that
        # overcounts its FLOPs and weights by the replicas' share (DeepSeek-V3 with 32: 27 MB of
        # 111 GB per GPU, an operator under 1% of a step)
        n_experts=float((model.num_experts + (serving.num_redundant_experts if ep > 1 else 0)) // ep),
        experts_per_token=float(model.experts_per_token),
        ep=float(ep),
        # the most loaded GPU's share: every rank's tokens meet there, skewed by the imbalance
        # (expert parallelism's; with the experts tensor-parallel over the ranks every GPU gets all)
        moe_dp=float(serving.data_parallel_size * (serving.expert_load_imbalance if ep > 1 else 1.0)
                     if coupled else 1),
        expert_inner=e_inter,
        shared_inner=s_inter,
        vocab=float(model.vocab_size),
        p_lm_head=m["lm_head"] / tp,
        w_bytes=dtypes.BYTES[r.weight_dtype],
        proj_w_bytes=dtypes.BYTES[proj_dtype],
        a_bytes=act_bytes,
        kv_bytes=dtypes.BYTES[r.kv_dtype] / r.kv_compression_ratio,
        tp=tp,
        gemm_flops=peak_gemm,
        proj_flops=peak_proj,
        attn_flops=peak_act,
        vector_flops=vector,
        mem_bw=hardware.memory_bandwidth_bytes_per_s,
        eff_compute=hardware.compute_utilization,
        eff_bw=hardware.bandwidth_utilization,
        launch_s=fw.launch_overhead_us * 1e-6,
        eff_link=hardware.interconnect_utilization,
        **_links(hardware, tp, serving.data_parallel_size if coupled else 1, coupled),
        iter_overhead_s=fw.iteration_overhead_us * 1e-6,
        seq_overhead_s=fw.sequence_overhead_us * 1e-6,
        attn_token_s=fw.unsplit_decode_ns_per_key * 1e-9,
    )
    if ep > 1 and serving.expert_routing == "random":
        # the slowest GPU of random routings over the expert slots (redundant replicas included,
        # each as loaded as the balancer can make it), ranked by its expert GEMMs' roofline
        params = params._replace(eff=slowest_rank_factors(
            int(params.n_experts) * ep, model.experts_per_token, ep,
            ranks=serving.data_parallel_size,
            hit_weight=params.w_bytes * params.gemm_flops / (2.0 * params.mem_bw)))
    tables = hardware.tables_for(fw.name)
    if tables is None:
        return params
    native = hardware.peak_flops(r.weight_dtype) > 0
    expert = r.weight_dtype if native or r.weight_dtype in dtypes.WEIGHT_ONLY_DTYPES else r.activation_dtype
    proj_native = hardware.peak_flops(proj_dtype) > 0 and proj_dtype not in dtypes.WEIGHT_ONLY_DTYPES
    return params._replace(eff=efficiency_array(tables, params, r.weight_dtype if native else r.activation_dtype,
                                                expert_dtype=expert,
                                                proj_dtype=proj_dtype if proj_native else r.activation_dtype,
                                                measured_link=tp <= hardware.gpus_per_node,
                                                mla_heads=q_heads if model.is_mla else 0.0,
                                                kv_dtype=r.kv_dtype,
                                                dispatch_kernels=ep > 1 and serving.data_parallel_size > 1,
                                                quantised_share=fw.quantized_gemm_bf16_share))


def pipeline_settings(params, hardware, serving):
    """The :class:`simcore.EngineSettings` fields of ``serving``'s pipeline parallelism
    (``pipeline_*``, see :mod:`simcore.pipeline`) for one tensor-parallel GPU's ``params``.

    Stage ``s``'s GPUs are GPUs ``s x tp`` to ``(s + 1) x tp - 1`` of the replica, nodes holding
    ``gpus_per_node`` each: a boundary crosses nodes after every ``max(1, gpus_per_node // tp)``
    stages. Between stages each token's hidden state and residual (``2 x hidden`` activation
    elements, vLLM's IntermediateTensors) move: each of the ``tp`` GPUs sends its ``1 / tp`` share
    over NVLink or its network NIC (per direction, at the interconnect's achieved fraction; the
    network no quicker to start than NVLink), and the receiving stage all-gathers the shares over
    its tensor-parallel link (vLLM's ``send_tensor_dict`` with ``all_gather_group``). Empty without
    pipeline parallelism."""
    pp = serving.pipeline_parallel_size
    if pp == 1:
        return {}
    tp = serving.tensor_parallel_size
    token_bytes = 2.0 * params.hidden * params.a_bytes
    share_bytes = token_bytes / tp
    eff = hardware.interconnect_utilization
    gather_latency_s = params.link_latency_s if tp > 1 else 0.0
    gather_s = token_bytes * (tp - 1) / tp / (params.link_bw * params.eff_link) if tp > 1 else 0.0
    nvl_bw = hardware.interconnect_bandwidth_gbps * 1e9 * eff
    net_bw = hardware.network_bandwidth_gbps * 1e9 * eff
    return dict(
        pipeline_stages=pp,
        pipeline_batch_seqs=serving.pp_max_micro_batch_size,
        pipeline_stages_per_node=max(1, hardware.gpus_per_node // tp),
        pipeline_latency_s=hardware.interconnect_latency_us * 1e-6 + gather_latency_s,
        pipeline_s_per_token=share_bytes / nvl_bw + gather_s,
        pipeline_net_latency_s=max(hardware.network_latency_us, hardware.interconnect_latency_us) * 1e-6 + gather_latency_s,
        pipeline_net_s_per_token=share_bytes / net_bw + gather_s,
    )


def pipeline_sends_s(settings, n_tokens):
    """Seconds a batch of ``n_tokens`` tokens spends in the sends between all its stages, for
    :func:`pipeline_settings`' ``settings`` (0 without pipeline parallelism); as
    ``simcore.pipeline.send_seconds_nb`` over every boundary."""
    total = 0.0
    for s in range(settings.get("pipeline_stages", 1) - 1):
        if (s + 1) % settings["pipeline_stages_per_node"] == 0:
            total += settings["pipeline_net_latency_s"] + n_tokens * settings["pipeline_net_s_per_token"]
        else:
            total += settings["pipeline_latency_s"] + n_tokens * settings["pipeline_s_per_token"]
    return total
