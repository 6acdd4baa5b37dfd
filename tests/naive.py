"""Naive references the kernels must match, named after what they mirror (as stumpy's
tests/naive.py): plain Python straight from the model's description, no numba, no fast path.

- :func:`iteration_ops` / :func:`iteration_time` mirror the cost kernel
  (``simcore.iteration_costs_nb`` / ``iteration_time_nb``), from the validated configs rather
  than the packed kernel inputs. A batch is a list of ``(new_tokens, prior_context, emits)``.
- :func:`iteration_time_shaped` mirrors the same kernels with kernel tables (``CostParams.eff``),
  reading the table JSON file and interpolating in plain Python, without the packed array.
- :func:`simulate` mirrors the engine (``simcore.simulate``): plain objects, lists and a
  deque, one iteration and one token at a time; iteration times come from the cost kernel
  (checked on its own against :func:`iteration_time`).
"""
import functools
import json
import math
from collections import Counter, deque

from simcore import codes, iteration_costs_nb, iteration_time_nb, new_cost_arrays
from simllm.config import dtypes
from simllm.config.serving import ServingConfig
from simllm.sim.pack import framework_for

GEMM, PROJ, ATTN, VECTOR, LINK, A2A = "gemm", "proj", "attn", "vector", "link", "a2a"


def links(hw, tp, dp, ep, moe_over_ranks=False):
    """(collective bandwidth B/s, its latency s, the expert all-to-all's bandwidth B/s) per GPU: a
    tensor-parallel group over more than ``gpus_per_node`` GPUs runs its ring at the network's
    pace; the all-to-all over ``tp x dp`` GPUs sends 1/(n - 1) of its bytes to each other GPU, the
    ``G - 1`` of its node over NVLink and the ``n - G`` others over the network, at once."""
    g = hw.gpus_per_node
    nvl, net = hw.interconnect_bandwidth_gbps * 1e9, hw.network_bandwidth_gbps * 1e9
    bw, lat = (net, hw.network_latency_us) if tp > g else (nvl, hw.interconnect_latency_us)
    n = tp * dp
    a2a = bw
    if (ep > 1 or moe_over_ranks) and n > g:
        a2a = 1.0 / max((g - 1) / (n - 1) / nvl, (n - g) / (n - 1) / net)
    return bw, lat * 1e-6, a2a


def _bytes(name):
    return dtypes.BYTES[name]


def window_totals(batch, window):
    """Query-key pairs and keys read of a batch in a layer whose queries see at most ``window``
    keys (a sliding window: token ``i`` of a chunk after ``c`` cached ones sees the last
    ``min(c + i + 1, window)`` keys; the chunk reads keys ``c + q - window + 1 .. c + q - 1``
    and its own). ``window`` 0: every key."""
    pairs = 0
    kv_tokens = 0
    for q, c, _ in batch:
        for i in range(q):  # token i of the chunk attends to c + i + 1 keys (causal)
            pairs += min(c + i + 1, window) if window else c + i + 1
        kv_tokens += min(c + q, window - 1 + q) if window else c + q  # each cached and new key read once
    return pairs, kv_tokens


def iteration_ops(model, hw, batch, *, tp=1, weight_dtype=None, act_dtype=None, kv_dtype=None, kv_ratio=1.0,
                  ep=1, dp=1, attention_dtype=None, imbalance=1.0, route=None, moe_over_ranks=False):
    """Per-operator (count, flops, bytes, unit) for one iteration, per GPU, per layer instance;
    ``ep`` > 1: the MoE layers' experts spread over ``ep`` GPU groups and the ``dp`` data-parallel
    ranks' tokens meet in them (each rank's batch the same as this one), on the most loaded GPU
    ``imbalance`` times the mean, and with ``route`` (a ``simllm.sim.routing`` curve) the slowest
    GPU's of random routings (:func:`routed`); ``moe_over_ranks`` (``ep`` 1): every expert
    tensor-parallel over all ``tp x dp`` GPUs, which each see every rank's tokens, gathered and
    scattered back."""
    T = sum(q for q, _, _ in batch)
    emit = sum(1 for _, _, e in batch if e)
    pairs, kv_tokens = window_totals(batch, 0)
    window = window_totals(batch, model.window_tokens) if model.windowed_layers else None
    if model.index_topk:  # DeepSeek sparse attention: each query's index_topk best keys
        window = window_totals(batch, model.index_topk)
    return ops_for_totals(model, T, emit, pairs, kv_tokens, tp=tp, weight_dtype=weight_dtype, act_dtype=act_dtype,
                          kv_dtype=kv_dtype, kv_ratio=kv_ratio, ep=ep, dp=dp, window=window,
                          attention_dtype=attention_dtype, imbalance=imbalance, route=route,
                          moe_over_ranks=moe_over_ranks)


def routed(model, T, dp=1, ep=1, imbalance=1.0, route=None, moe_over_ranks=False):
    """(token-expert assignments, hit experts) of the GPU the MoE layer waits for when each rank
    brings ``T`` tokens: the mean GPU's (every rank's tokens times ``imbalance`` meet, each picking
    ``k`` of ``E`` experts uniformly; a ``1 / ep`` share), times the routing curve's factors at
    ``T`` (``route``: assignments at ``2**i`` tokens in its first half, hits in its second; linear
    in log2 T, clamped), the hits at most the GPU's experts."""
    E, k = model.num_experts, model.experts_per_token
    tm = T * dp * imbalance if ep > 1 else (T * dp if moe_over_ranks else T)
    a = tm * k / ep
    hit = E * (1 - (1 - k / E) ** tm) / ep
    if route is not None and len(route):
        n = len(route) // 2
        x = min(math.log2(T) if T > 1 else 0.0, n - 1.0)
        i = min(int(x), n - 2)
        f = x - i
        a *= route[i] + f * (route[i + 1] - route[i])
        hit = min(hit * (route[n + i] + f * (route[n + i + 1] - route[n + i])), E / ep)
    return a, hit


def linear_layer_cost(model, T, emit, tp, ab):
    """FLOPs and bytes of one Gated DeltaNet layer's mixing (Yang et al., ICLR 2025), per GPU: per
    value head and token the chunked delta rule's ~7 dk dv on the state and its 64-token chunk's
    own attention, 2 x 64 (dk + dv), and the causal conv's 2 x kernel per channel; it reads the
    projections' outputs, writes the conv's and its output; each emitting row reads and writes
    its state (value heads x dk x dv, in the state dtype) and its conv's last kernel - 1 inputs."""
    nk, nv = model.linear_num_key_heads / tp, model.linear_num_value_heads / tp
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    lin_in, lin_conv, lin_out = 2 * nk * dk + 2 * nv * dv + 2 * nv, 2 * nk * dk + nv * dv, nv * dv
    state_b = _bytes(model.linear_state_dtype) if model.linear_state_dtype else ab
    lf = T * (nv * (7 * dk * dv + 2 * 64 * (dk + dv)) + 2 * model.linear_conv_kernel_dim * lin_conv)
    state = nv * dk * dv * state_b + (model.linear_conv_kernel_dim - 1) * lin_conv * ab
    return lf, T * (lin_in + lin_conv + lin_out) * ab + emit * 2 * state


def ops_for_totals(model, T, emit, pairs, kv_tokens, *, tp=1, weight_dtype=None, act_dtype=None, kv_dtype=None,
                   kv_ratio=1.0, ep=1, dp=1, window=None, attention_dtype=None, imbalance=1.0, route=None,
                   moe_over_ranks=False):
    """:func:`iteration_ops` given the batch's totals: ``T`` new tokens, ``emit`` emitting rows,
    ``pairs`` query-key pairs and ``kv_tokens`` keys read, and ``window`` the windowed layers'
    ``(pairs, kv_tokens)`` (the shaped reference prices GEMMs at ``T = emit = 2**i`` with it).
    The attention operator is the mean of the full and the windowed layers'; the QKV and output
    projections' weights are in ``attention_dtype`` (default the weight dtype) at its peak."""
    weight_dtype = weight_dtype or model.dtype
    act = act_dtype or weight_dtype
    ab, wb = _bytes(act), _bytes(weight_dtype)
    pb = _bytes(attention_dtype or weight_dtype)
    kvb = _bytes(kv_dtype or act) / kv_ratio
    h, d, L = model.hidden_size, model.head_dim, model.layers
    qh = model.num_attention_heads / tp
    kvh = max(1, model.num_key_value_heads // tp)
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
    if model.is_mla:
        ops.update(_mla_ops(model, T, pairs, kv_tokens, tp, pb, ab, kvb, window))
    else:
        # Softmax-attention layers (full and windowed) and linear-attention layers (Gated
        # DeltaNet) alternate; each operator is the mean over all L layers of what each kind does.
        LL = model.linear_layers
        LA = L - LL  # softmax-attention layers

        def mean(attn, linear):
            return (LA * attn + LL * linear) / L

        qkv_w = (qh + 2 * kvh) * d + (qh * d if model.attn_output_gate else 0)  # (+ the output gate)
        p_qkv = h * qkv_w + (qkv_w if model.attention_bias else 0)
        p_o = qh * d * h
        lin_in = lin_out = lin_conv = 0.0
        if LL:  # Gated DeltaNet, per GPU: in projection to q, k (key heads), v, z (value heads), b, a
            nk, nv = model.linear_num_key_heads / tp, model.linear_num_value_heads / tp
            dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
            lin_in, lin_conv, lin_out = 2 * nk * dk + 2 * nv * dv + 2 * nv, 2 * nk * dk + nv * dv, nv * dv
        p_in = h * lin_in + lin_conv * model.linear_conv_kernel_dim  # with the depthwise conv's weights
        p_out = lin_out * h
        ops["qkv_proj"] = (L, 2 * T * mean(p_qkv, p_in), mean(p_qkv, p_in) * pb + T * (h + mean(qkv_w, lin_in)) * ab,
                           PROJ)
        rope_elems = T * (qh + kvh) * d
        qk = 1.0 if model.qk_norm else 0.0
        ops["rope"] = (L, mean(3 * T * (qh + kvh) * model.rope_dim + qk * 4 * rope_elems, 0.0),
                       mean(2 * rope_elems * ab * (1 + qk) + qk * 2 * d * ab, 0.0), VECTOR)
        ops["kv_cache_write"] = (L, 0.0, mean(T * 2 * kvh * d * (ab + kvb), 0.0), VECTOR)

        def attention(n_pairs, n_kv):
            return 4 * d * qh * n_pairs, n_kv * 2 * kvh * d * kvb + 2 * T * qh * d * ab

        flops, nbytes = attention(pairs, kv_tokens)
        lw = model.windowed_layers
        if window is not None:  # the windowed layers see their window's keys only
            wf, wbytes = attention(*window)
            flops, nbytes = ((LA - lw) * flops + lw * wf) / LA, ((LA - lw) * nbytes + lw * wbytes) / LA
        if LL:
            lf, lb = linear_layer_cost(model, T, emit, tp, ab)
            flops, nbytes = mean(flops, lf), mean(nbytes, lb)
        ops["attention"] = (L, flops, nbytes, ATTN)
        ops["o_proj"] = (L, 2 * T * mean(p_o, p_out), mean(p_o, p_out) * pb + T * (mean(qh * d, lin_out) + h) * ab,
                         PROJ)
    if tp > 1:
        ar = 2 * (tp - 1) / tp * T * h * ab
        ops["allreduce_attn"] = (L, (tp - 1) / tp * T * h, ar, LINK)
        ops["allreduce_ffn"] = (L, (tp - 1) / tp * T * h, ar, LINK)
    ops["residual_add"] = (L, 2 * T * h, 6 * T * h * ab, VECTOR)
    if not model.parallel_attention:  # Gemma's sandwich: after attention, before and after the FFN too
        ops["post_attn_norm"] = (3 * L if model.sandwich_norm else L,) + norm()
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
        # expert parallelism: each GPU holds E / ep whole-width experts (split over the remaining
        # tp x dp / ep GPUs) and sees every data-parallel rank's tokens
        ei = model.moe_intermediate_size / (tp * dp // ep if ep > 1 else (tp * dp if moe_over_ranks else tp))
        si = model.shared_expert_intermediate_size / tp
        a, hit = routed(model, T, dp, ep, imbalance, route, moe_over_ranks)  # to this GPU's experts; of them, hit
        n = model.moe_layers
        ops["moe_router"] = (n, 2 * T * h * E, h * E * ab + T * h * ab + T * E * 4, GEMM)
        ops["moe_experts_up"] = (n, 2 * a * 2 * h * ei + 2 * T * 2 * h * si,
                                 (hit * 2 * h * ei + 2 * h * si) * wb + (a * (h + 2 * ei) + T * (h + 2 * si)) * ab, GEMM)
        ops["moe_experts_act"] = (n, 5 * (a * ei + T * si), (a * 3 * ei + T * 3 * si) * ab, VECTOR)
        ops["moe_experts_down"] = (n, 2 * a * ei * h + 2 * T * si * h,
                                   (hit * ei * h + si * h) * wb + (a * (ei + h) + T * (si + h)) * ab, GEMM)
        if ep > 1:  # dispatch and combine: this GPU's 1/tp of its rank's tokens, (ep-1)/ep of them away
            ops["moe_all_to_all"] = (n, 0.0, 2 * (T / tp) * k * h * ab * (ep - 1) / ep, A2A)
        elif moe_over_ranks:  # all-gather the other ranks' tokens, reduce-scatter their outputs
            ops["moe_all_to_all"] = (n, 0.0, 2 * T * h * ab * (dp - 1), A2A)
    ops["final_norm"] = (1,) + norm()
    if emit:
        V = model.vocab_size
        p_lm = (V * h + (V if model.lm_head_bias else 0)) / tp
        ops["lm_head"] = (1, 2 * emit * p_lm, p_lm * ab + emit * (h * ab + p_lm / h * 4), GEMM)
        if tp > 1:
            ops["logits_gather"] = (1, 0.0, (tp - 1) / tp * emit * V * 4, LINK)
        ops["sampling"] = (1, 6 * emit * V, 3 * emit * V * 4, VECTOR)
    return ops


def _mla_ops(model, T, pairs, kv_tokens, tp, wb, ab, kvb, sparse=None):
    """Multi-head latent attention's operators (DeepSeek-V2 paper, section 2.1), per GPU: queries
    through the low-rank ``q_a`` (h -> q_lora, replicated, then its norm) and ``q_b`` (q_lora ->
    heads x (nope + rope), split by heads); keys and values through ``kv_a`` (h -> latent + rope
    key, replicated, then the latent's norm) and ``kv_b`` (latent -> heads x (nope + v), split);
    the cache holds the latent and the rope key; attention in the MHA form (q/k width nope + rope,
    value width v); the output projection from heads x v. With DeepSeek sparse attention
    (DeepSeek-V3.2 paper: ``sparse`` the top-k keys' pairs and reads) a lightning indexer,
    replicated on every GPU, projects ``index_n_heads x index_head_dim`` queries from the q latent
    and one key from the hidden state, scores every cached key (2 x heads x (dim + 1) FLOPs a pair:
    the dot products and the ReLU-weighted sum), caches its FP8 key with an FP32 scale per 128, and
    attention runs over the top-k keys only."""
    L, h, heads = model.layers, model.hidden_size, model.num_attention_heads
    rope, lat, ql, dv = model.qk_rope_head_dim, model.kv_lora_rank, model.q_lora_rank, model.v_head_dim
    dqk = model.head_dim
    qh = heads / tp
    q_params = (h * ql + ql + ql * heads * dqk / tp) if ql else h * heads * dqk / tp
    kv_params = h * (lat + rope) + lat + lat * heads * (dqk - rope + dv) / tp
    ni, di = model.index_n_heads, model.index_head_dim
    idx_params = ((ql or h) * ni * di + h * di + h * ni + 2 * di) if model.index_topk else 0
    p_qkv = q_params + kv_params + idx_params
    out = (ql + qh * dqk) + (lat + rope) + qh * (dqk - rope + dv)
    idx_key = (di + 4 * -(-di // 128)) if model.index_topk else 0  # FP8 values, FP32 scale per 128
    att_pairs, att_kv = sparse if model.index_topk and sparse is not None else (pairs, kv_tokens)
    rotated = T * (qh + 1) * rope  # every head's rope part of q, and the one shared rope key
    p_o = qh * dv * h
    return {
        "qkv_proj": (L, 2 * T * p_qkv, p_qkv * wb + T * (h + out) * ab, PROJ),
        "rope": (L, 3 * rotated, 2 * rotated * ab, VECTOR),
        "kv_cache_write": (L, 0.0, T * ((lat + rope) * (ab + kvb) + idx_key), VECTOR),
        "attention": (L, 2 * qh * (dqk + dv) * att_pairs + 2 * ni * (di + 1) * pairs * bool(model.index_topk),
                      att_kv * (lat + rope) * kvb + T * qh * (dqk + dv) * ab + kv_tokens * idx_key, ATTN),
        "o_proj": (L, 2 * T * p_o, p_o * wb + T * (qh * dv + h) * ab, PROJ),
    }


def unsplit_floor(fw, batch):
    """The framework's decode-attention floor for one layer of ``batch``: per key of the mean
    context when every row computes one token (``simcore.cost.unsplit_attention_nb``), else 0."""
    T = sum(q for q, _, _ in batch)
    emit = sum(1 for _, _, e in batch if e)
    if fw.unsplit_decode_ns_per_key <= 0 or emit == 0 or T != emit:
        return 0.0
    return fw.unsplit_decode_ns_per_key * 1e-9 * (window_totals(batch, 0)[1] / emit)


def iteration_time(model, hw, batch, *, tp=1, weight_dtype=None, act_dtype=None, kv_dtype=None, kv_ratio=1.0,
                   framework="vllm", ep=1, dp=1, attention_dtype=None, imbalance=1.0, route=None,
                   moe_over_ranks=False):
    """Iteration seconds and per-op seconds from :func:`reference_ops` on the roofline; the
    framework profile's launch gap joins every operator and its per-iteration CPU overhead the
    total of a non-empty batch."""
    fw = framework_for(hw, ServingConfig(), framework)
    weight_dtype = weight_dtype or model.dtype
    act = act_dtype or weight_dtype
    peak_act = hw.peak_flops(act) or hw.fp16_tflops * 1e12
    proj = attention_dtype or weight_dtype
    peaks = {
        GEMM: hw.peak_flops(weight_dtype) or peak_act,
        PROJ: hw.peak_flops(proj) or peak_act,
        ATTN: peak_act,
        VECTOR: (hw.fp32_tflops or hw.fp16_tflops) * 1e12,
    }
    launch = fw.launch_overhead_us * 1e-6
    per_op = {}
    for name, (count, flops, nbytes, unit) in iteration_ops(
        model, hw, batch, tp=tp, weight_dtype=weight_dtype, act_dtype=act, kv_dtype=kv_dtype, kv_ratio=kv_ratio,
        ep=ep, dp=dp, attention_dtype=attention_dtype, imbalance=imbalance, route=route,
        moe_over_ranks=moe_over_ranks
    ).items():
        if unit in (LINK, A2A):
            bw, lat, a2a = links(hw, tp, dp, ep, moe_over_ranks)
            t = lat + nbytes / ((bw if unit == LINK else a2a) * hw.interconnect_utilization)
        else:
            t = max(flops / (peaks[unit] * hw.compute_utilization),
                    nbytes / (hw.memory_bandwidth_gbps * 1e9 * hw.bandwidth_utilization))
        if name == "attention":
            t = max(t + launch, unsplit_floor(fw, batch)) - launch
        per_op[name] = (count * flops, count * nbytes, count * (t + launch))
    emit = sum(1 for _, _, e in batch if e)
    overhead = (fw.iteration_overhead_us + fw.sequence_overhead_us * emit) * 1e-6 if any(new > 0 for new, _, _ in batch) else 0.0
    return sum(v[2] for v in per_op.values()) + overhead, per_op


# ----------------------------------------------------------------------------- shaped cost

# The tables' grids (simllm.config.kernels, simcore.codes.EFF_*), written out again: one point per
# octave (power of two) from its first value.
GEMM_M0, GEMM_NK0 = 0, 7  # GEMM tables: M = 2**0 .., N and K = 2**7 ..
MOE_M0, MOE_BYTES0 = 0, 20  # MoE tables: tokens per hit expert 2**0 .., hit experts' weights 2**20 bytes ..
CURVE_POINTS = 18  # the packed GEMM seconds curve: M = 2**0 .. 2**17
PREFILL_FLOPS0 = 20  # prefill attention: FLOPs of one layer from 2**20; context from 2**0
LINK_BYTES0 = 7  # all-reduce: bus bytes from 2**7
EFF_FLOOR = 1e-4
# Weight GEMMs, and whether their weights are in the weight dtype (False: the activation dtype).
GEMM_OPS = {"qkv_proj": True, "o_proj": True, "ffn_up": True, "ffn_down": True, "moe_router": False,
            "moe_experts_up": True, "moe_experts_down": True, "lm_head": False}


@functools.lru_cache(maxsize=None)
def kernel_table_json(path):
    """The kernel-table JSON file at ``path``, parsed (nested lists, as written)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _coordinate(value, first_log2):
    """Grid coordinate: octaves above the grid's first point (values below 1 count as 1)."""
    return (math.log2(value) if value > 1 else 0.0) - first_log2


def _lerp(values, x):
    """Linear interpolation of a list at coordinate ``x`` (0 = first point), clamped to its ends."""
    last = len(values) - 1
    x = min(max(x, 0.0), float(last))
    i = min(int(math.floor(x)), last - 1)
    return values[i] + (x - i) * (values[i + 1] - values[i])


def _lerp2(table, x1, x2):
    """Bilinear: interpolate each row at ``x2``, then across rows at ``x1``."""
    return _lerp([_lerp(row, x2) for row in table], x1)


def _lerp3(table, x1, x2, x3):
    return _lerp([_lerp2(plane, x2, x3) for plane in table], x1)


def _gemm_shapes(model, tp, moe_tp=None):
    """{op: (N, K)} of the weight GEMMs on one GPU (the projections' output and input widths);
    experts split over ``moe_tp`` GPUs (default ``tp``)."""
    h, d = model.hidden_size, model.head_dim
    qh = model.num_attention_heads / tp
    kvh = max(1, model.num_key_value_heads // tp)
    inter = model.intermediate_size / tp
    ei = model.moe_intermediate_size / (moe_tp or tp)
    si = model.shared_expert_intermediate_size / tp
    vocab_here = (model.vocab_size * h + (model.vocab_size if model.lm_head_bias else 0)) / tp / h
    if model.is_mla:
        dv, rope, lat, ql = model.v_head_dim, model.qk_rope_head_dim, model.kv_lora_rank, model.q_lora_rank
        qkv_n, o_k = ql + qh * d + lat + rope + qh * (d - rope + dv), qh * dv
    else:
        qkv_n, o_k = (qh + 2 * kvh) * d + (qh * d if model.attn_output_gate else 0), qh * d
    if model.linear_layers:  # one curve at the layers' mean widths (linear layers' in and out projections)
        nk, nv = model.linear_num_key_heads / tp, model.linear_num_value_heads / tp
        dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
        f = model.linear_layers / model.layers
        qkv_n += f * (2 * nk * dk + 2 * nv * dv + 2 * nv - qkv_n)
        o_k += f * (nv * dv - o_k)
    return {
        "qkv_proj": (qkv_n, h),
        "o_proj": (h, o_k),
        "ffn_up": ((2 if model.ffn == "gated" else 1) * inter, h),
        "ffn_down": (h, inter),
        "moe_router": (model.num_experts, h),
        "moe_experts_up": (2 * ei + 2 * si, h),
        "moe_experts_down": (h, max(ei, si)),
        "lm_head": (vocab_here, h),
    }


def _own_moe_curve(data, expert_key, model, tp):
    """The set's measured curve for exactly this model's routed experts (hidden, per-GPU width,
    experts, top-k) in ``expert_key``'s kernels (bf16 where the set has none of it), or None."""
    shapes = data.get("moe_shapes", {})
    items = shapes.get(expert_key if expert_key in shapes else "bf16", [])
    for item in items:
        if (item["hidden"], item["experts"], item["topk"]) == (model.hidden_size, model.num_experts,
                                                                 model.experts_per_token) \
                and abs(item["inter"] - model.moe_intermediate_size / tp) < 1e-6:
            return item["eff"]
    return None


def link_points_seconds(curve, link_bw):
    """Seconds at bus bytes ``2**LINK_BYTES0 ..`` of an efficiency curve over a link of ``link_bw``
    bytes/s, a larger message never faster."""
    points = []
    for i, e in enumerate(curve):
        t = 2.0 ** (LINK_BYTES0 + i) / (link_bw * e)
        points.append(max(t, points[-1]) if points else t)
    return points


def pow2_seconds(points, x, log2_min):
    """Seconds off ``points`` sampled at ``x = 2**(log2_min + i)``: the first point's below them,
    proportional to ``x`` beyond the last, linear in ``x`` between two."""
    first, last = 2.0**log2_min, 2.0 ** (log2_min + len(points) - 1)
    if x <= first:
        return points[0]
    if x >= last:
        return points[-1] * x / last
    i = 0
    while 2.0 ** (log2_min + i + 1) <= x:
        i += 1
    lo = 2.0 ** (log2_min + i)
    return points[i] + (x - lo) / lo * (points[i + 1] - points[i])


def iteration_time_shaped(model, hw, batch, *, tp=1, weight_dtype=None, act_dtype=None, kv_dtype=None,
                          kv_ratio=1.0, framework="vllm", tables_path=None, ep=1, dp=1, attention_dtype=None,
                          route=None):
    """Iteration seconds and per-op (flops, bytes, seconds) as :func:`iteration_time`, with the
    operators the kernel tables cover priced from the table JSON file itself (``tables_path``,
    default the file ``hw`` loaded for ``framework``), as simllm.config.kernels documents them:

    - a weight GEMM over ``M`` rows (tokens; the LM head: emitting rows): its seconds at
      ``M = 2**i`` are ``max(flops / peak, bytes / bandwidth) / eff(M', N, K)``, eff trilinear in
      log2 M', log2 N, log2 K on the table of the weight dtype (FP8 when the weights are FP8 and the
      table and the GPU have it, else BF16; the router and the LM head: BF16), ``M' = M`` except for
      routed experts: one grouped kernel, the measured curve of the model's own expert shape over
      log2 tokens where the set has it, else the set's MoE table bilinear in log2 of the tokens each
      hit expert gets (``M k / hit``, at least 1) and of the hit experts' weight bytes, or without
      one the GEMM table at that M and N times the experts hit; the points are
      made non-decreasing; between them seconds are linear in M, beyond the last proportional to M;
    - attention: ``max(flops / (peak * eff_prefill), bytes / (bandwidth * eff_decode))`` (an MLA
      model's own tables where the set has them: its KV dtype's, at the measured heads per GPU
      nearest its own), the prefill table bilinear in log2 FLOPs and log2 (pairs / tokens), the decode table in log2
      (rows x KV heads) and log2 (keys read / rows), rows the emitting rows (at least 1); with
      windowed layers, the full and the windowed layers apart (each at its own pairs and keys
      read) and their times weighted by their share of the layers;
    - collectives: ``bus bytes / (link bandwidth * eff(bus bytes))``, the curve of the largest GPU
      count measured at or below ``tp`` (the smallest when all are larger), linear in log2 bytes;
      the experts' all-to-all the set's measured all-to-all curve the same way where it has one
      (attention data parallelism with expert parallelism, the TP group in a node), else the
      collectives' curve;
    - the rest: the scalar roofline plus the launch gap, as :func:`iteration_time`.

    Every coordinate is clamped to its grid. No kernel launch or collective latency is added to a
    table-priced operator (the measured latency holds it); the framework's per-iteration CPU time
    joins a non-empty batch's total.
    """
    fw = framework_for(hw, ServingConfig(), framework)
    weight_dtype = weight_dtype or model.dtype
    act = act_dtype or weight_dtype
    data = kernel_table_json(str(tables_path or hw.tables_for(fw.name).source))
    peak_act = hw.peak_flops(act) or hw.fp16_tflops * 1e12
    peak_gemm = hw.peak_flops(weight_dtype) or peak_act
    vector = (hw.fp32_tflops or hw.fp16_tflops) * 1e12
    bw = hw.memory_bandwidth_gbps * 1e9
    link_bw = hw.interconnect_bandwidth_gbps * 1e9
    launch = fw.launch_overhead_us * 1e-6
    # FP8 / FP4 weights run their own GEMM table where the GPU has the tensor cores and the set the
    # table; the experts also run a weight-only format's own MoE kernels (int4, mxfp4)
    native = hw.peak_flops(weight_dtype) > 0
    key = weight_dtype if native and weight_dtype in ("fp8", "fp4") and weight_dtype in data["gemm"] else "bf16"
    tables = {op: data["gemm"][key if in_weights else "bf16"] for op, in_weights in GEMM_OPS.items()}
    proj = attention_dtype or weight_dtype  # the attention projections' own dtype, peak and table
    proj_native = hw.peak_flops(proj) > 0 and proj not in ("int4", "mxfp4")
    peak_proj = peak_gemm if proj == weight_dtype else (hw.peak_flops(proj) or peak_act)
    for op in ("qkv_proj", "o_proj"):
        tables[op] = data["gemm"][proj if proj_native and proj in ("fp8", "fp4") and proj in data["gemm"] else "bf16"]
    expert_key = weight_dtype if native or weight_dtype in ("int4", "mxfp4") else "bf16"
    counts = sorted((int(n), curve) for n, curve in data["allreduce"].items())
    link_curve = counts[0][1]
    for n, curve in counts:
        if n <= tp:
            link_curve = curve
    moe_tables = data.get("moe", {})
    moe_table = moe_tables.get(expert_key if expert_key in moe_tables else "bf16")
    moe_tp = tp * dp // ep if ep > 1 else tp
    shapes = _gemm_shapes(model, tp, moe_tp)
    kvh = 1 if model.is_mla else max(1, model.num_key_value_heads // tp)  # MLA: one latent per token
    E = model.num_experts
    dtypes_kw = dict(tp=tp, weight_dtype=weight_dtype, act_dtype=act, kv_dtype=kv_dtype, kv_ratio=kv_ratio, ep=ep, dp=dp,
                     attention_dtype=attention_dtype, route=route)

    curves = {}  # op -> seconds at M = 2**0 .. 2**17

    def gemm_seconds(op, rows):
        if op not in curves:
            n, kk = shapes[op]
            points = []
            for i in range(CURVE_POINTS):
                m = 2.0**i
                _, flops, nbytes, _ = ops_for_totals(model, m, m, m, m, **dtypes_kw)[op]
                if op.startswith("moe_experts") and E > 0:
                    # one grouped kernel over the hit experts: the MoE table at (tokens per hit
                    # expert, hit experts' weight bytes), or without one the GEMM table at N x hit
                    a, hit = routed(model, m, dp, ep, route=route)  # to this GPU's experts; of them, hit
                    hit = max(hit, 1.0)
                    m_eff = max(a / hit, 1.0)
                    own = _own_moe_curve(data, expert_key, model, tp) if ep == 1 else None  # measured at EP 1
                    if own is not None:  # the model's own expert shape, measured
                        e = _lerp(own, _coordinate(m, 0))
                    elif moe_table is not None:
                        ei = model.moe_intermediate_size / moe_tp
                        hit_bytes = hit * 3 * model.hidden_size * ei * _bytes(weight_dtype)
                        e = _lerp2(moe_table, _coordinate(m_eff, MOE_M0), _coordinate(hit_bytes, MOE_BYTES0))
                    else:
                        e = _lerp3(tables[op], _coordinate(m_eff, GEMM_M0), _coordinate(n * hit, GEMM_NK0),
                                   _coordinate(kk, GEMM_NK0))
                else:
                    e = _lerp3(tables[op], _coordinate(m, GEMM_M0), _coordinate(n, GEMM_NK0), _coordinate(kk, GEMM_NK0))
                    bf16 = data["gemm"]["bf16"]
                    peak = peak_proj if op in ("qkv_proj", "o_proj") else peak_gemm
                    share = fw.quantized_gemm_bf16_share
                    if share > 0 and tables[op] is not bf16 and flops / peak < nbytes / bw:
                        # a quantised GEMM, memory-bound: at least that share of the BF16 kernel's efficiency
                        e = max(e, share * _lerp3(bf16, _coordinate(m, GEMM_M0), _coordinate(n, GEMM_NK0),
                                                  _coordinate(kk, GEMM_NK0)))
                peak = peak_proj if op in ("qkv_proj", "o_proj") else peak_gemm
                t = max(flops / peak, nbytes / bw) / max(e, EFF_FLOOR)
                points.append(max(t, points[-1]) if points else t)  # a larger M never runs faster
            curves[op] = points
        return pow2_seconds(curves[op], rows, 0)  # linear in M between 2**i and 2**(i + 1)

    link_points = link_points_seconds(link_curve, link_bw)

    coll_bw, coll_lat, a2a_bw = links(hw, tp, dp, ep)

    def link_seconds(x):
        if tp > hw.gpus_per_node:  # over the network: the scalar model, not the node's measured curve
            return coll_lat + launch + x / (coll_bw * hw.interconnect_utilization)
        return pow2_seconds(link_points, x, LINK_BYTES0)  # linear in bytes

    # the measured all-to-all (one node) where the set has it
    measured_a2a = data.get("alltoall") and ep > 1 and dp > 1 and tp <= hw.gpus_per_node
    a2a_points = link_points_seconds(data["alltoall"], link_bw) if measured_a2a else None

    def a2a_seconds(x):
        return link_seconds(x) if a2a_points is None else pow2_seconds(a2a_points, x, LINK_BYTES0)

    T = sum(q for q, _, _ in batch)
    emit = sum(1 for _, _, e in batch if e)
    pairs, kv_tokens = window_totals(batch, 0)
    window = window_totals(batch, model.window_tokens) if model.windowed_layers else None
    if model.index_topk:
        window = window_totals(batch, model.index_topk)

    softmax_only = model.with_overrides(linear_layers=0, windowed_layers=0, index_topk=0)  # one layer's own attention
    att_prefill, att_decode = data["attention_prefill"], data["attention_decode"]
    if model.is_mla and data.get("mla"):
        # MLA's own tables: the KV dtype's (else BF16's), at the measured heads nearest this GPU's
        by_heads = data["mla"].get("fp8" if (kv_dtype or act) == "fp8" else "bf16") or data["mla"]["bf16"]
        qh = model.num_attention_heads / tp
        nearest = min(by_heads, key=lambda n: abs(math.log2(int(n) / qh)))
        att_prefill, att_decode = by_heads[nearest]["prefill"], by_heads[nearest]["decode"]

    def attention_seconds(n_pairs, n_kv):
        _, flops, nbytes, _ = ops_for_totals(softmax_only, T, emit, n_pairs, n_kv, **dtypes_kw)["attention"]
        rows = max(emit, 1)
        e_pf = _lerp2(att_prefill, _coordinate(flops, PREFILL_FLOPS0), _coordinate(n_pairs / T, 0))
        e_dec = _lerp2(att_decode, _coordinate(rows * kvh, 0), _coordinate(n_kv / rows, 0))
        # the prefill tokens' queries and outputs (all but one per emitting row) stream at the
        # bandwidth; the rest at the decode table's efficiency
        qh = model.num_attention_heads / tp
        io = qh * (model.head_dim + model.v_head_dim) if model.is_mla else 2 * qh * model.head_dim
        stream = max(T - emit, 0) * io * _bytes(act)
        return max(flops / (peak_act * e_pf), (nbytes - stream) / (bw * e_dec) + stream / bw)

    per_op = {}
    for name, (count, flops, nbytes, unit) in ops_for_totals(model, T, emit, pairs, kv_tokens, window=window,
                                                             **dtypes_kw).items():
        if unit in (GEMM, PROJ):
            t = gemm_seconds(name, emit if name == "lm_head" else T)
            if name.startswith("moe_experts"):  # never faster than the datasheet roofline
                t = max(t, flops / peak_gemm, nbytes / bw)
        elif unit == ATTN:
            if model.index_topk:  # the top-k keys off the tables; the indexer at the scalar roofline
                ni, di = model.index_n_heads, model.index_head_dim
                idx_key = di + 4 * -(-di // 128)
                per_op[name] = (count * flops, count * nbytes, count * max(attention_seconds(*window) + max(
                    2 * ni * (di + 1) * pairs / (peak_act * hw.compute_utilization),
                    kv_tokens * idx_key / (bw * hw.bandwidth_utilization)), unsplit_floor(fw, batch)))
                continue
            t = attention_seconds(pairs, kv_tokens)
            lw, LL = model.windowed_layers, model.linear_layers
            tw = attention_seconds(*window) if window is not None else 0.0
            # linear-attention layers: no measured table, the scalar roofline
            lf, lb = linear_layer_cost(model, T, emit, tp, _bytes(act)) if LL else (0.0, 0.0)
            tl = max(lf / (peak_act * hw.compute_utilization), lb / (bw * hw.bandwidth_utilization))
            t = ((model.layers - lw - LL) * t + lw * tw + LL * tl) / model.layers
            t = max(t, unsplit_floor(fw, batch))
        elif unit == LINK:
            t = link_seconds(nbytes)
        elif unit == A2A:  # the curve at the bytes that take as long on the node's links
            t = a2a_seconds(nbytes * coll_bw / a2a_bw)
        else:
            t = max(flops / (vector * hw.compute_utilization), nbytes / (bw * hw.bandwidth_utilization)) + launch
        per_op[name] = (count * flops, count * nbytes, count * t)
    overhead = (fw.iteration_overhead_us + fw.sequence_overhead_us * emit) * 1e-6 if T > 0 else 0.0
    return sum(v[2] for v in per_op.values()) + overhead, per_op


# ----------------------------------------------------------------------------- the engine

class Req:
    def __init__(self, idx, arrival, ready, prompt, output, cached, fixed=0):
        self.idx = idx
        self.fixed = fixed  # blocks held whatever the context (windowed layers), with the first block
        self.arrival = arrival
        self.ready = ready
        self.prompt = prompt
        self.output = output
        self.cached = cached
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        self.preemptions = 0
        self.status = codes.STATUS_PENDING
        self.first_sched = -1.0
        self.first_token = -1.0
        self.finish = -1.0
        self.last_emit = -1.0
        self.itls = []
        self.spec_drafts = self.spec_draft_tokens = self.spec_accepted = 0  # speculative decoding
        self.spec_accepted_at = Counter()  # ... drafts accepted by position

    @property
    def tokens_so_far(self):
        return self.prompt + self.generated


def _blocks(tokens, cached, bs):
    return math.ceil(tokens / bs) - cached // bs


def experts_seconds(p, n_tokens):
    """Seconds of an iteration's expert GEMMs and activation at ``n_tokens`` of this rank, from the
    per-operator costs (``iteration_costs_nb``)."""
    flops, nbytes, seconds, bound = new_cost_arrays()
    iteration_costs_nb(p, float(n_tokens), 0.0, 0.0, 0.0, flops, nbytes, seconds, bound)
    return float(seconds[codes.OP_MOE_UP] + seconds[codes.OP_MOE_ACT] + seconds[codes.OP_MOE_DOWN])


def spec_uniform(seed, r, g):
    """The acceptance draw of request ``r`` after its ``g``-th token: lowbias32 chained over the
    seed (salted), the request and the token count, to (h + 0.5) / 2**32."""
    def mix(x):
        x ^= x >> 16
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x846CA68B) & 0xFFFFFFFF
        return x ^ (x >> 16)
    h = mix((int(seed) & 0xFFFFFFFF) ^ 0x9E3779B9)
    h = mix(h ^ (int(r) & 0xFFFFFFFF))
    h = mix(h ^ (int(g) & 0xFFFFFFFF))
    return (h + 0.5) / 2.0 ** 32


def draft_seconds(sp, k, batch):
    """The drafter's ``k`` passes after a step ``[(request, new tokens)]`` (before it advances):
    the first over all its tokens, the next over one token of each request that samples."""
    if sp is None or not sp.has_drafter:
        return 0.0
    d = sp.drafter

    def proj(tokens):
        if sp.proj_params <= 0:
            return 0.0
        return max(2 * tokens * sp.proj_params / (d.gemm_flops * d.eff_compute),
                   (sp.proj_params * d.w_bytes + tokens * 3 * d.hidden * d.a_bytes) / (d.mem_bw * d.eff_bw)) + d.launch_s

    T = sum(new for _, new in batch)
    pairs = sum(new * r.computed + new * (new + 1) / 2 for r, new in batch)
    kv = sum(r.computed + new for r, new in batch)
    sampling = [r.computed + new for r, new in batch if r.computed + new >= r.tokens_so_far]
    total = iteration_time_nb(d, float(T), float(pairs), float(kv), float(len(sampling))) + proj(T)
    if sampling:
        for i in range(1, k):
            ctx = float(sum(sampling) + len(sampling) * i)
            total += iteration_time_nb(d, float(len(sampling)), ctx, ctx, float(len(sampling))) + proj(len(sampling))
    return total


def pipeline_pass(p, e, free, ring, now, batch_agg, dt):
    """A batch scheduled at ``now`` (aggregates ``batch_agg``, whole-model time ``dt``) through
    ``e.pipeline_stages`` stages, vLLM's layer split (``L // P`` each, one more for the ``L % P``
    stages before the last); the embedding and the CPU step on the first, the final norm, LM head,
    gather and sampling on the last (a MoE model's dense first layers' FFNs on their stages, the
    experts on the others); sends between stages over NVLink, or the network after every
    ``pipeline_stages_per_node``-th stage. ``free`` (stage free times) and ``ring`` (last batches'
    completions) are updated. Returns its completion time."""
    P = e.pipeline_stages
    n_tokens, _, _, n_emit = batch_agg
    flops, nbytes, seconds, bound = new_cost_arrays()
    iteration_costs_nb(p, *batch_agg, flops, nbytes, seconds, bound)
    first = float(seconds[codes.OP_EMBEDDING])
    last = float(sum(seconds[op] for op in (codes.OP_FINAL_NORM, codes.OP_LM_HEAD, codes.OP_LOGITS_GATHER,
                                            codes.OP_SAMPLING)))
    L = p.n_layers
    n_dense = L - p.n_moe_layers
    dense = moe = 0.0
    if 0 < p.n_moe_layers < L:  # a MoE model's first layers dense: their FFNs apart from the experts
        dense = float(sum(seconds[op] for op in (codes.OP_FFN_UP, codes.OP_FFN_ACT, codes.OP_FFN_DOWN)))
        moe = float(sum(seconds[op] for op in (codes.OP_MOE_ROUTER, codes.OP_MOE_UP, codes.OP_MOE_ACT,
                                                codes.OP_MOE_DOWN, codes.OP_MOE_ALLTOALL)))
    alike = max(dt - p.iter_overhead_s - first - last - dense - moe, 0.0)
    sizes = [L // P] * P
    for i in range(2, L % P + 2):
        sizes[-i] += 1
    t = now
    for s in range(P):
        lo = sum(sizes[:s])
        d = len(set(range(lo, lo + sizes[s])) & set(range(n_dense)))  # dense layers in the stage
        work = alike * sizes[s] / L + (first + p.iter_overhead_s if s == 0 else 0.0) + (last if s == P - 1 else 0.0)
        if dense or moe:
            work += dense * d / n_dense + moe * (sizes[s] - d) / p.n_moe_layers
        t = max(t, free[s]) + work
        free[s] = t
        if s < P - 1:
            if (s + 1) % e.pipeline_stages_per_node == 0:
                t += e.pipeline_net_latency_s + n_tokens * e.pipeline_net_s_per_token
            else:
                t += e.pipeline_latency_s + n_tokens * e.pipeline_s_per_token
    ring[ring.index(min(ring))] = t
    return t


class Replica:
    """One engine replica's queues and KV blocks."""

    def __init__(self, e):
        self.free = e.num_blocks - e.prefix_blocks
        self.waiting = deque()
        self.running = []

    @property
    def busy(self):
        return bool(self.running or self.waiting)


class _Engine:
    """One engine's scheduling rules over :class:`Replica` queues: ``now`` is the time of the
    iteration being scheduled; ``end(r, t, status)`` ends a request."""

    def __init__(self, e, end, sp=None):
        self.e = e
        self.sp = sp
        self.bs = e.block_size
        self.end = end
        self.now = 0.0

    def preempt_last(self, rep):
        v = rep.running.pop()
        rep.free += v.blocks
        v.blocks = 0
        v.preemptions += 1
        v.status = codes.STATUS_WAITING
        v.computed = v.cached
        rep.waiting.appendleft(v)
        return v

    def admit(self, rep, r):
        rep.waiting.popleft()
        r.status = codes.STATUS_RUNNING
        rep.running.append(r)
        if r.first_sched < 0:
            r.first_sched = self.now
        if r.first_token == codes.FIRST_TOKEN_ON_ADMISSION:
            r.first_token = r.last_emit = self.now

    def allocate_running(self, rep, r, new):
        """Blocks for running ``r`` to compute ``new`` more tokens, preempting from the back while
        short (``r`` itself may be the last preempted). Returns (``r`` got them, anything preempted)."""
        preempted = False
        while _blocks(r.computed + new, r.cached, self.bs) + r.fixed - r.blocks > rep.free:
            preempted = True
            if self.preempt_last(rep) is r:
                break
        if r.status != codes.STATUS_RUNNING:
            return False, preempted
        extra = _blocks(r.computed + new, r.cached, self.bs) + r.fixed - r.blocks
        rep.free -= extra
        r.blocks += extra
        return True, preempted

    def admit_waiting(self, rep, batch, budget, whole):
        """Admit the waiting head FCFS while a sequence slot, budget and blocks allow: its next chunk
        within the budget, or with ``whole`` (v0) its whole prompt, which must fit. Returns the
        budget left."""
        cap = self.e.pipeline_batch_seqs or math.inf  # a pipelined engine may cap a micro-batch's rows
        while rep.waiting and len(rep.running) < self.e.max_num_seqs and budget > 0 and len(batch) < cap:
            r = rep.waiting[0]
            need = r.tokens_so_far - r.computed
            new = min(need, budget)
            extra = _blocks(r.computed + new, r.cached, self.bs) + r.fixed - r.blocks
            if (whole and need > budget) or extra > rep.free:
                break
            self.admit(rep, r)
            rep.free -= extra
            r.blocks += extra
            batch.append((r, new))
            budget -= new
        return budget

    def need(self, r):
        """Tokens running ``r`` schedules: to catch up, and a decoding request's drafts (no more
        than the output tokens it has left after this step's own)."""
        need = r.tokens_so_far - r.computed
        k = self.e.num_speculative_tokens
        if k and r.generated >= 1 and need == 1:
            need += min(k, r.output - r.generated - 1)
        return need

    def in_flight(self, r):
        """Pipeline parallelism: a decoding request whose last token comes back after ``now`` sits out."""
        return self.e.pipeline_stages > 1 and r.generated >= 1 and r.last_emit > self.now

    def schedule_continuous(self, rep):
        """This iteration's ``[(request, new tokens)]`` of ``rep`` (empty: nothing runs; a head that
        can never get blocks is rejected)."""
        batch = []
        preempted = False
        budget = self.e.max_num_batched_tokens
        if self.e.chunked_prefill:
            i = 0
            while i < len(rep.running) and budget > 0 and len(batch) < (self.e.pipeline_batch_seqs or math.inf):
                r = rep.running[i]
                if self.in_flight(r):
                    i += 1
                    continue
                new = min(self.need(r), budget)
                ok, pre = self.allocate_running(rep, r, new)
                preempted = preempted or pre
                if not ok:
                    break
                batch.append((r, new))
                budget -= new
                i += 1
            if not preempted:
                self.admit_waiting(rep, batch, budget, False)
        else:
            self.admit_waiting(rep, batch, budget, True)
            if not batch:
                i = 0
                while i < len(rep.running) and len(batch) < (self.e.pipeline_batch_seqs or math.inf):
                    r = rep.running[i]
                    if self.in_flight(r):
                        i += 1
                        continue
                    need = self.need(r)
                    ok, pre = self.allocate_running(rep, r, need)
                    preempted = preempted or pre
                    if not ok:
                        break
                    batch.append((r, need))
                    i += 1
        if not batch and not preempted and not rep.running:
            self.end(rep.waiting.popleft(), self.now, codes.STATUS_REJECTED)
        return batch

    def aggregates(self, batch, pad_to, static):
        n_tokens = pairs = kv_read = n_emit = 0.0
        for r, new in batch:
            q = float(pad_to or new)
            n_tokens += q
            pairs += q * r.computed + q * (q + 1) / 2
            kv_read += r.computed + q
            if static:
                n_emit += 1
            elif r.computed + new >= r.tokens_so_far:
                n_emit += 1 + r.computed + new - r.tokens_so_far  # logits at each draft too
        return n_tokens, pairs, kv_read, n_emit

    def advance(self, rep, batch, t_end, static):
        for r, new in batch:
            emitted = 1
            if new > 1 and not static and r.generated >= 1 and r.computed == r.tokens_so_far - 1:
                # drafts verified: keep them up to the first rejection, then the target's own token
                u = spec_uniform(self.sp.seed, r.idx, r.generated)
                accepted = sum(1 for i in range(new - 1) if all(u < self.sp.rates[j] for j in range(i + 1)))
                r.spec_drafts += 1
                r.spec_draft_tokens += new - 1
                r.spec_accepted += accepted
                r.spec_accepted_at.update(range(accepted))
                emitted += accepted
                new = emitted
            r.computed += new
            if r.status != codes.STATUS_RUNNING:
                continue
            if r.computed == r.tokens_so_far + emitted - 1 or (static and r.computed > r.tokens_so_far):
                if r.generated == 0:
                    r.first_token = t_end
                else:
                    r.itls.append(t_end - r.last_emit)
                r.last_emit = t_end
                r.generated += emitted
                if r.generated == r.output:
                    if not static:
                        rep.free += r.blocks
                        r.blocks = 0
                    late = self.e.timeout_s > 0 and t_end - r.arrival > self.e.timeout_s  # the client gave up first
                    self.end(r, t_end, codes.STATUS_TIMED_OUT if late else codes.STATUS_DONE)
        if not static:
            rep.running = [r for r in rep.running if r.status == codes.STATUS_RUNNING]
        elif all(r.status != codes.STATUS_RUNNING for r in rep.running):
            rep.running = []



def simulate(p, e, arrival, ready, prompt, output, cached, delay=None, fixed=None, sp=None):
    """Simulate with the engine's rules; returns the list of :class:`Req` (index order).
    ``delay``: a closed loop's client delays (seconds; <= 0 none), one per request sent;
    ``fixed``: blocks each request holds whatever its context (``RI_FIXED_BLOCKS``); ``sp``:
    speculative decoding (``simcore.Speculation``) with ``e.num_speculative_tokens`` drafts.
    One replica, or with ``e.lockstep`` (continuous batching) ``e.n_replicas`` attention
    data-parallel ranks behind a round-robin router that step together: each step takes the
    slowest rank's work outside the experts plus the experts over all ranks' tokens (every rank at
    the largest rank's tokens when those are at most ``e.dp_pad_tokens``). With
    ``e.pipeline_stages`` > 1 (one replica, continuous batching, no speculation) up to that many
    batches are in flight (:func:`pipeline_pass`): a new one is scheduled at once while the queue
    has room, from the requests not in flight; else when the oldest returns."""
    assert e.pipeline_stages == 1 or not e.num_speculative_tokens
    n = len(prompt)
    reqs = [Req(i, arrival[i], ready[i], int(prompt[i]), int(output[i]), int(cached[i]),
                0 if fixed is None else int(fixed[i])) for i in range(n)]
    bs = e.block_size
    lockstep = e.lockstep and e.n_replicas > 1 and e.policy == codes.POLICY_CONTINUOUS
    assert e.n_replicas == 1 or lockstep, "the reference engine covers one replica or lockstep ranks"
    reps = [Replica(e) for _ in range(e.n_replicas)]
    routed = 0
    next_client = min(e.n_clients, n) if e.n_clients else n
    arrived = 0
    now = 0.0
    done = 0
    static_blocks = math.ceil(e.max_model_len / bs)

    def end(r, t, status):
        nonlocal done, next_client
        r.status = status
        r.finish = t
        done += 1
        if e.n_clients and next_client < n:
            send = max(t, reqs[next_client].ready)
            if delay is not None and delay[next_client] > 0:
                send += delay[next_client]
            send += e.frontend_s
            # Requests reach the engine in index order: the k-th arrival goes to row k.
            pending = sorted([r.arrival for r in reqs[arrived:next_client]] + [send])
            for r, a in zip(reqs[arrived:next_client + 1], pending):
                r.arrival = a
            next_client += 1

    eng = _Engine(e, end, sp)
    k_spec = e.num_speculative_tokens
    free = [0.0] * e.pipeline_stages  # pipeline parallelism: when each stage is free ...
    ring = [0.0] * e.pipeline_stages  # ... and the last batches' completion times

    while done < n:
        while arrived < n and reqs[arrived].arrival <= now:
            r = reqs[arrived]
            arrived += 1
            never_fits = _blocks(r.prompt + r.output - 1, r.cached, bs) + r.fixed > e.num_blocks - e.prefix_blocks
            if r.prompt + r.output > e.max_model_len or (e.policy == codes.POLICY_CONTINUOUS and never_fits):
                end(r, r.arrival, codes.STATUS_REJECTED)
                continue
            r.status = codes.STATUS_WAITING
            r.computed = r.cached
            reps[routed % len(reps)].waiting.append(r)
            routed += 1
        if e.timeout_s > 0:
            any_late = False
            for rep in reps:
                late = [r for r in rep.running + list(rep.waiting)
                        if r.arrival + e.timeout_s <= now and r.status in (codes.STATUS_RUNNING, codes.STATUS_WAITING)]
                for r in late:
                    if r in rep.running:
                        rep.running.remove(r)
                        rep.free += r.blocks
                        r.blocks = 0
                    else:
                        rep.waiting.remove(r)
                    end(r, now, codes.STATUS_TIMED_OUT)
                any_late = any_late or bool(late)
            if any_late:
                continue
        if not any(rep.busy for rep in reps):
            if arrived < n and reqs[arrived].arrival < math.inf:
                now = max(now, reqs[arrived].arrival)
                continue
            break

        if lockstep:
            eng.now = now
            plans = [(rep, eng.schedule_continuous(rep)) if rep.busy else (rep, []) for rep in reps]
            plans = [(rep, batch) for rep, batch in plans if batch]
            if not plans:
                continue
            slowest = all_tokens = most_tokens = 0.0
            for rep, batch in plans:
                agg = eng.aggregates(batch, 0, False)
                own = iteration_time_nb(p, *agg) + (draft_seconds(sp, k_spec, batch) if k_spec else 0.0)
                slowest = max(slowest, own - experts_seconds(p, agg[0]))
                all_tokens += agg[0]
                most_tokens = max(most_tokens, agg[0])
                assert e.num_blocks - rep.free <= e.num_blocks
            padded = most_tokens <= e.dp_pad_tokens  # a CUDA-graph step: every rank at the largest's tokens
            t_end = now + slowest + experts_seconds(p, most_tokens if padded else all_tokens / len(reps))
            for rep, batch in plans:
                eng.advance(rep, batch, t_end, False)
            now = t_end
            continue

        rep = reps[0]
        pad_to = 0
        static = e.policy != codes.POLICY_CONTINUOUS
        if not static:
            eng.now = now
            batch = eng.schedule_continuous(rep)
            if not batch:
                later = [c for c in ring if c > now]
                if later:  # every runnable request is in flight: wait for the first batch back
                    now = min(later)
                continue
            used = e.num_blocks - rep.free
        else:
            batch = []
            if not rep.running:
                if e.policy == codes.POLICY_DYNAMIC and len(rep.waiting) < e.batch_max:
                    start = rep.waiting[0].arrival + e.batch_window_s
                    if now < start:
                        later = reqs[arrived].arrival if arrived < n else math.inf
                        now = min(start, later)
                        continue
                cap = min(e.max_num_seqs, e.static_slots)
                if e.batch_max > 0:
                    cap = min(cap, e.batch_max)
                while rep.waiting and len(batch) < cap:
                    r = rep.waiting[0]
                    eng.now = now
                    eng.admit(rep, r)
                    batch.append((r, r.prompt - r.computed))
                if e.pad_prompts:
                    pad_to = max(new for _, new in batch)
            else:
                batch = [(r, 1) for r in rep.running]
            used = len(rep.running) * static_blocks

        agg = eng.aggregates(batch, pad_to, static)
        dt = iteration_time_nb(p, *agg)
        if k_spec:
            dt += draft_seconds(sp, k_spec, batch)
        if e.pipeline_stages > 1:
            t_end = pipeline_pass(p, e, free, ring, now, agg, dt)
            eng.advance(rep, batch, t_end, static)
            in_flight = [c for c in ring if c > now]
            if len(in_flight) == e.pipeline_stages:  # the batch queue is full: wait for the oldest
                now = min(in_flight)
            continue
        t_end = now + dt
        assert used <= e.num_blocks
        eng.advance(rep, batch, t_end, static)
        now = t_end
    return reqs


def simulate_disagg(pp, ep, pd, ed, x, arrival, prompt, output, nbytes, sp_p=None, sp_d=None):
    """Disaggregated prefill/decode with the engine's rules (``simcore.disagg``): one prefill and
    one decode replica, continuous batching, an open loop without time-outs or prefix caching;
    ``sp_p``, ``sp_d`` each pool's speculative decoding.
    Returns the list of :class:`Req` with ``prefill_done``, ``xfer_start`` and ``xfer_done``."""
    n = len(prompt)
    reqs = [Req(i, arrival[i], 0.0, int(prompt[i]), 1, 0) for i in range(n)]
    total_out = [int(o) for o in output]
    pool_p, pool_d = Replica(ep), Replica(ed)
    done = 0
    handed = []

    def end(r, t, status):
        nonlocal done
        r.status = status
        r.finish = t
        done += 1

    def handoff(r, t, status):
        assert status == codes.STATUS_DONE
        r.status = codes.STATUS_TRANSFER
        handed.append(r)

    eng_p, eng_d = _Engine(ep, handoff, sp_p), _Engine(ed, end, sp_d)
    clock = {"p": 0.0, "d": 0.0}
    pending = []  # (first byte's time, request)
    active = []  # [request, bytes left] on the one link
    last = 0.0
    arrived = 0

    def wake(rep, key, t):
        if not rep.busy:
            clock[key] = max(clock[key], t)

    def step(rep, key, eng, p):
        eng.now = clock[key]
        batch = eng.schedule_continuous(rep)
        assert batch, "the reference covers runs where every scheduled step runs something"
        t_end = clock[key] + iteration_time_nb(p, *eng.aggregates(batch, 0, False))
        if eng.e.num_speculative_tokens:
            t_end += draft_seconds(eng.sp, eng.e.num_speculative_tokens, batch)
        eng.advance(rep, batch, t_end, False)
        clock[key] = t_end

    while done < n:
        a = reqs[arrived].arrival if arrived < n else math.inf
        tp = clock["p"] if pool_p.busy else math.inf
        td = clock["d"] if pool_d.busy else math.inf
        t_start = min(t for t, _ in pending) if pending else math.inf
        t_link = last + max(min(left for _, left in active), 0.0) * len(active) / x.bandwidth if active else math.inf
        if a <= min(tp, td, t_start, t_link):
            r = reqs[arrived]
            arrived += 1
            wake(pool_p, "p", a)
            r.status = codes.STATUS_WAITING
            pool_p.waiting.append(r)
            continue
        if min(t_start, t_link) <= min(tp, td):
            t = min(t_start, t_link)
            for item in active:  # processor sharing up to t
                item[1] -= (t - last) * x.bandwidth / len(active)
            last = t
            if t_start <= t_link:
                i = min(range(len(pending)), key=lambda j: pending[j][0])
                _, r = pending.pop(i)
                r.xfer_start = t
                active.append([r, float(nbytes[r.idx])])
                continue
            least = min(left for _, left in active)
            finished = [r for r, left in active if left <= least + x.bandwidth * 1e-12]
            active = [item for item in active if item[0] not in finished]
            for r in finished:
                r.xfer_done = t
                r.output = total_out[r.idx]
                if x.first_token_on_decode:
                    r.first_token = -1.0
                    r.generated = 0
                    computed = r.prompt - 1
                else:  # the decode instance streams the prefill's token when it admits the request
                    r.generated = 1
                    if r.output == 1:
                        r.first_token = r.last_emit = t
                        end(r, t, codes.STATUS_DONE)
                        continue
                    r.first_token = codes.FIRST_TOKEN_ON_ADMISSION
                    computed = r.prompt
                wake(pool_d, "d", t)
                r.status = codes.STATUS_WAITING
                r.computed = computed
                pool_d.waiting.append(r)
            continue
        if tp <= td:
            step(pool_p, "p", eng_p, pp)
            for r in handed:
                r.prefill_done = r.first_token
                pending.append((r.first_token + x.latency_s, r))
            handed.clear()
        else:
            step(pool_d, "d", eng_d, pd)
    return reqs
