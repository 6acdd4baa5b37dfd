"""A small pure-Python reference of the cost model, written straight from DESIGN.md from the
validated configs (not from the packed kernel inputs). The numba kernels must agree with it.

Batch: a list of (new_tokens, prior_context, emits) per sequence.
"""
from simllm.config import dtypes

GEMM, ATTN, VECTOR, LINK = "gemm", "attn", "vector", "link"


def _bytes(name):
    return dtypes.BYTES[name]


def reference_ops(model, hw, batch, *, tp=1, weight_dtype=None, act_dtype=None, kv_dtype=None, kv_ratio=1.0):
    """Per-operator (count, flops, bytes, unit) for one iteration, per GPU, per layer instance."""
    weight_dtype = weight_dtype or model.dtype
    act = act_dtype or weight_dtype
    ab, wb = _bytes(act), _bytes(weight_dtype)
    kvb = _bytes(kv_dtype or act) / kv_ratio
    h, d, L = model.hidden_size, model.head_dim, model.layers
    qh = model.num_attention_heads / tp
    kvh = max(1, model.num_key_value_heads // tp)
    T = sum(q for q, _, _ in batch)
    emit = sum(1 for _, _, e in batch if e)
    ops = {}
    if T == 0:
        return ops
    moe = model.num_experts > 0
    dense_layers = L - model.moe_layers
    norm_p = h * (2 if model.norm == "layernorm" else 1)
    norm_f = 7.0 if model.norm == "layernorm" else 4.0

    def norm():
        return (norm_f * T * h, 2 * T * h * ab + norm_p * ab, VECTOR)

    ops["embedding"] = (1, 0.0, T * h * 2 * ab, VECTOR)
    ops["input_norm"] = (L,) + norm()
    qkv_w = (qh + 2 * kvh) * d
    p_qkv = h * qkv_w + (qkv_w if model.attention_bias else 0)
    ops["qkv_proj"] = (L, 2 * T * p_qkv, p_qkv * wb + T * (h + qkv_w) * ab, GEMM)
    rope_elems = T * (qh + kvh) * d
    qk = 1.0 if model.qk_norm else 0.0
    ops["rope"] = (L, 3 * T * (qh + kvh) * model.rope_dim + qk * 4 * rope_elems,
                   2 * rope_elems * ab * (1 + qk) + qk * 2 * d * ab, VECTOR)
    ops["kv_cache_write"] = (L, 0.0, T * 2 * kvh * d * (ab + kvb), VECTOR)
    flops = 0.0
    kv_bytes = 0.0
    for q, c, _ in batch:
        for i in range(q):  # token i of the chunk attends to c + i + 1 keys (causal)
            flops += 4 * d * qh * (c + i + 1)
        kv_bytes += (c + q) * 2 * kvh * d * kvb
    ops["attention"] = (L, flops, kv_bytes + 2 * T * qh * d * ab, ATTN)
    p_o = qh * d * h
    ops["o_proj"] = (L, 2 * T * p_o, p_o * wb + T * (qh * d + h) * ab, GEMM)
    if tp > 1:
        ar = 2 * (tp - 1) / tp * T * h * ab
        ops["allreduce_attn"] = (L, (tp - 1) / tp * T * h, ar, LINK)
        ops["allreduce_ffn"] = (L, (tp - 1) / tp * T * h, ar, LINK)
    ops["residual_add"] = (L, 2 * T * h, 6 * T * h * ab, VECTOR)
    if not model.parallel_attention:
        ops["post_attn_norm"] = (L,) + norm()
    if dense_layers:
        inter = model.intermediate_size / tp
        up = (2 if model.ffn == "gated" else 1) * inter
        bias = 1 if model.mlp_bias else 0
        p_up, p_down = h * up + bias * up, inter * h + bias * h
        ops["ffn_up"] = (dense_layers, 2 * T * p_up, p_up * wb + T * (h + up) * ab, GEMM)
        ops["ffn_act"] = (dense_layers, 5 * T * inter, T * (up + inter) * ab, VECTOR)
        ops["ffn_down"] = (dense_layers, 2 * T * p_down, p_down * wb + T * (inter + h) * ab, GEMM)
    if moe:
        E, k = model.num_experts, model.experts_per_token
        ei = model.moe_intermediate_size / tp
        si = model.shared_expert_intermediate_size / tp
        hit = E * (1 - (1 - k / E) ** T)
        n = model.moe_layers
        ops["moe_router"] = (n, 2 * T * h * E, h * E * ab + T * h * ab + T * E * 4, GEMM)
        ops["moe_experts_up"] = (n, 2 * T * k * 2 * h * ei + 2 * T * 2 * h * si,
                                 (hit * 2 * h * ei + 2 * h * si) * wb + (T * k * (h + 2 * ei) + T * (h + 2 * si)) * ab, GEMM)
        ops["moe_experts_act"] = (n, 5 * (T * k * ei + T * si), (T * k * 3 * ei + T * 3 * si) * ab, VECTOR)
        ops["moe_experts_down"] = (n, 2 * T * k * ei * h + 2 * T * si * h,
                                   (hit * ei * h + si * h) * wb + (T * k * (ei + h) + T * (si + h)) * ab, GEMM)
    ops["final_norm"] = (1,) + norm()
    if emit:
        V = model.vocab_size
        p_lm = (V * h + (V if model.lm_head_bias else 0)) / tp
        ops["lm_head"] = (1, 2 * emit * p_lm, p_lm * ab + emit * (h * ab + p_lm / h * 4), GEMM)
        if tp > 1:
            ops["logits_gather"] = (1, 0.0, (tp - 1) / tp * emit * V * 4, LINK)
        ops["sampling"] = (1, 6 * emit * V, 3 * emit * V * 4, VECTOR)
    return ops


def reference_time(model, hw, batch, *, tp=1, weight_dtype=None, act_dtype=None, kv_dtype=None, kv_ratio=1.0):
    """Iteration seconds and per-op seconds from :func:`reference_ops` on the roofline."""
    weight_dtype = weight_dtype or model.dtype
    act = act_dtype or weight_dtype
    peak_act = hw.peak_flops(act) or hw.fp16_tflops * 1e12
    peaks = {
        GEMM: hw.peak_flops(weight_dtype) or peak_act,
        ATTN: peak_act,
        VECTOR: (hw.fp32_tflops or hw.fp16_tflops) * 1e12,
    }
    launch = hw.launch_overhead_us * 1e-6
    per_op = {}
    for name, (count, flops, nbytes, unit) in reference_ops(
        model, hw, batch, tp=tp, weight_dtype=weight_dtype, act_dtype=act, kv_dtype=kv_dtype, kv_ratio=kv_ratio
    ).items():
        if unit == LINK:
            t = hw.interconnect_latency_us * 1e-6 + nbytes / (hw.interconnect_bandwidth_gbps * 1e9 * hw.interconnect_utilization)
        else:
            t = max(flops / (peaks[unit] * hw.compute_utilization),
                    nbytes / (hw.memory_bandwidth_gbps * 1e9 * hw.bandwidth_utilization))
        per_op[name] = (count * flops, count * nbytes, count * (t + launch))
    return sum(v[2] for v in per_op.values()), per_op
