"""Operator-level cost of one engine iteration on the roofline.

A batch is described by four aggregates (see :func:`batch_aggregates_nb`):

- ``n_tokens``: new tokens processed (prefill chunk tokens + one per decoding sequence);
- ``attn_pairs``: query-key pairs scored by attention, summed over sequences. A chunk of ``q``
  new tokens after ``c`` tokens of context scores ``q*c + q*(q+1)/2`` pairs (causal); a decode
  token (q = 1) scores ``c + 1``;
- ``kv_read_tokens``: tokens whose K and V attention reads, summed over sequences (``c + q``):
  each is read once per KV head, which is how GQA/MQA cut the bytes to n_kv_heads/n_heads of MHA;
  with multi-head latent attention (MLA: DeepSeek-V2/V3, Kimi-K2) each token stores and attention
  reads one compressed latent plus a shared rope key (``kv_width``), whatever the heads;
- ``n_emit``: rows that emit a token (decode rows and chunks that finish their prompt); only
  these go through the LM head and the sampler.

Each operator's time is ``max(flops / (peak * eff_compute), bytes / (bw * eff_bw)) + launch``;
collectives are ``latency + 2 (tp - 1) / tp * message / (link_bw * eff_link)`` (ring all-reduce).
Weights are read once per iteration whatever the batch, which is why batching pays in decode.
The attention geometry (``CostParams.qkv_width`` ... ``qk_norm_params``) is packed per GPU; for MLA the
FLOPs per query-key pair are those of the MHA-style prefill form (``2 x heads x (qk + v head
dims)``), which vLLM and SGLang run for prefill; their absorbed decode form scores each pair
against the latent instead (``2 x heads x (2 kv_lora_rank + rope)``, about 3.4x the FLOPs) but
stays memory-bound at TP >= 2, where the latent read dominates.

With shape-aware tables (``p.eff`` not empty, see ``codes.EFF_*``) the measured operators take
their efficiency from the shape instead, as a fraction of the datasheet roofline that already
holds the kernel's fixed latency (no launch or collective latency is added on top):

- weight GEMMs: seconds per instance read off one curve over the rows M per operator, which
  packing computed as ``max(flops / peak, bytes / bw) / eff(M, N, K, dtype)`` at M = 2**i for the
  model's N, K and dtype (made non-decreasing in M) and the kernel interpolates linearly in M;
- attention: ``max(flops / (peak * eff_prefill(flops, ctx)), bytes / (bw * eff_decode(rows x
  kv_heads, ctx)))`` with ``ctx`` the mean keys per query (prefill side) or per emitting row
  (decode side): long prefills sit on the compute side, decode batches on the memory side; the
  queries and outputs of prefill tokens beyond one per emitting row stream at the bandwidth (the
  decode table prices what a decode kernel moves, not a prefill chunk's activations);
- collectives: seconds read off one curve over the bus bytes, which packing computed as
  ``bus_bytes / (link_bw * eff_link(bus_bytes))`` at bus bytes 2**i (made non-decreasing) and the
  kernel interpolates linearly in bytes (a larger message never takes less time).

Elementwise operators keep the scalar efficiencies and the launch overhead.
"""
import math

import numpy as np

from simcore._jit import jit, jit_inline
from simcore.codes import (
    BOUND_COMM,
    BOUND_COMPUTE,
    BOUND_LATENCY,
    BOUND_MEMORY,
    BOUND_NONE,
    EFF_A2A,
    EFF_CTX_POINTS,
    EFF_DEC_POINTS,
    EFF_DECODE,
    EFF_GEMM_S,
    EFF_GEMM_SUM,
    EFF_LINK,
    EFF_LINK_LOG2_MIN,
    EFF_LINK_POINTS,
    EFF_M_POINTS,
    EFF_PF_LOG2_MIN,
    EFF_PF_POINTS,
    EFF_PREFILL,
    EFF_SIZE,
    N_OPS,
    EMIT_GATHER,
    EMIT_LM_HEAD,
    EMIT_ROWS,
    EMIT_SAMPLING,
    N_EMIT,
    N_PREFIX,
    N_REST,
    REST_BYTES,
    REST_EMIT,
    REST_FLOPS,
    REST_S,
    REST_TOKENS,
    ROUTE_ASSIGN,
    ROUTE_HIT,
    ROUTE_POINTS,
    OP_ALLREDUCE_ATTN,
    OP_ALLREDUCE_FFN,
    OP_ATTENTION,
    OP_EMBEDDING,
    OP_FFN_ACT,
    OP_FFN_DOWN,
    OP_FFN_UP,
    OP_FINAL_NORM,
    OP_INPUT_NORM,
    OP_KV_WRITE,
    OP_LM_HEAD,
    OP_LOGITS_GATHER,
    OP_MOE_ACT,
    OP_MOE_ALLTOALL,
    OP_MOE_DOWN,
    OP_MOE_ROUTER,
    OP_MOE_UP,
    OP_O_PROJ,
    OP_POST_NORM,
    OP_QKV_PROJ,
    OP_RESIDUAL,
    OP_ROPE,
    OP_SAMPLING,
    PREFIX_A2A_FLOPS,
    PREFIX_A2A_S,
    PREFIX_BYTES,
    PREFIX_FLOPS,
    PREFIX_GEMM_S,
    PREFIX_MOE_S,
    PREFIX_S,
    PREFIX_TOKENS,
    UNIT_A2A,
    UNIT_ATTN,
    UNIT_GEMM,
    UNIT_LINK,
    UNIT_PROJ,
    UNIT_VECTOR,
)
from simcore.params import AttentionParams

# prefix_memo_nb's order: the operators before the LM head, the three by rows with logits, the all-to-all.
assert (OP_LOGITS_GATHER, OP_SAMPLING, OP_MOE_ALLTOALL, N_OPS) == tuple(OP_LM_HEAD + i for i in (1, 2, 3, 4))

# FLOPs per element of the FFN activation (SiLU(x) * y or GELU) and of the sampler's passes
# over the vocabulary (max, exp, sum, normalise, top-k/top-p threshold), and the number of
# fp32 passes the sampler makes over the logits.
ACT_FLOPS_PER_ELEM = 5.0
SAMPLING_FLOPS_PER_LOGIT = 6.0
SAMPLING_PASSES = 3.0
LOGIT_BYTES = 4.0  # logits are fp32


@jit_inline
def op_count_nb(p, op):
    """How many times operator ``op`` runs in one iteration (layers it appears in).

    Returns
    -------
    int
        0 when the operator does not exist for this model / parallel layout.
    """
    n_dense = p.n_layers - p.n_moe_layers
    if op == OP_EMBEDDING or op == OP_FINAL_NORM or op == OP_LM_HEAD or op == OP_SAMPLING:
        return 1
    if op == OP_LOGITS_GATHER:
        return 1 if p.tp > 1 else 0
    if op == OP_ALLREDUCE_ATTN or op == OP_ALLREDUCE_FFN:
        return p.n_layers if p.tp > 1 else 0
    if op == OP_POST_NORM:
        return p.n_layers * (p.norms_per_layer - 1)  # every norm of a layer but its input norm
    if op == OP_FFN_UP or op == OP_FFN_ACT or op == OP_FFN_DOWN:
        return n_dense
    if op == OP_MOE_ROUTER or op == OP_MOE_UP or op == OP_MOE_ACT or op == OP_MOE_DOWN:
        return p.n_moe_layers
    if op == OP_MOE_ALLTOALL:
        return p.n_moe_layers if p.ep > 1.0 or p.moe_dp > 1.0 else 0
    return p.n_layers


@jit_inline
def experts_hit_nb(n_experts, experts_per_token, n_tokens):
    """Expected number of distinct routed experts hit when ``n_tokens`` tokens each pick
    ``experts_per_token`` of ``n_experts`` uniformly: ``E * (1 - (1 - k/E) ** T)``."""
    if n_experts <= 0.0 or n_tokens <= 0.0:
        return 0.0
    return n_experts * (1.0 - (1.0 - experts_per_token / n_experts) ** n_tokens)


@jit_inline
def moe_assignments_nb(p, n_tokens):
    """Token-expert assignments routed to one GPU's experts in a MoE layer when the GPU's engine
    rank brings ``n_tokens``: every attention data-parallel rank's tokens meet in the layer
    (``moe_dp`` ranks with expert parallelism), each choosing ``experts_per_token`` of all
    ``n_experts x ep`` experts uniformly; this GPU holds ``n_experts`` of them (a ``1 / ep`` share)."""
    return n_tokens * p.moe_dp * p.experts_per_token / p.ep


@jit_inline
def shaped_nb(p):
    """Whether ``p.eff`` carries the kernel tables (else every operator runs at the scalar roofline)."""
    return p.eff.shape[0] == EFF_SIZE


@jit_inline
def routing_factors_nb(p, n_tokens):
    """The slowest expert-parallel GPU's token-expert assignments and hit experts over the mean when
    the GPU's engine rank brings ``n_tokens`` (``p.eff``'s routing curve, interpolated over log2 of
    the tokens); (1, 1) with balanced routing."""
    if p.eff.shape[0] == 0:
        return 1.0, 1.0
    i, f = grid_pos_nb(log2_nb(n_tokens), ROUTE_POINTS)
    return lerp_nb(p.eff, ROUTE_ASSIGN, i, f), lerp_nb(p.eff, ROUTE_HIT, i, f)


@jit_inline
def moe_local_nb(p, n_tokens):
    """Token-expert assignments to the slowest GPU's experts and how many of them those tokens
    hit: :func:`moe_assignments_nb` and the expected hit experts (:func:`experts_hit_nb` over every
    rank's tokens, this GPU's share), each times its :func:`routing_factors_nb`, the hits at most
    the GPU's experts. The step waits for that GPU."""
    tm = n_tokens * p.moe_dp
    f_assign, f_hit = routing_factors_nb(p, n_tokens)
    hit = experts_hit_nb(p.n_experts * p.ep, p.experts_per_token, tm) / p.ep
    return moe_assignments_nb(p, n_tokens) * f_assign, min(hit * f_hit, p.n_experts)


@jit_inline
def expert_shapes_nb(p):
    """One routed expert's and all shared experts' shapes on this GPU, gated (SwiGLU) as every MoE
    simllm models is: (expert up width, expert gate+up params, expert down params, shared up width,
    shared gate+up params, shared down params)."""
    h = p.hidden
    ei = p.expert_inner
    si = p.shared_inner
    return 2.0 * ei, 2.0 * h * ei, h * ei, 2.0 * si, 2.0 * h * si, h * si


@jit_inline
def ffn_params_nb(p):
    """Parameters of the dense FFN's up (gate+up when gated) and down projections on this GPU,
    biases included."""
    return p.ffn_up_width * (p.hidden + p.mlp_bias), (p.ffn_inner + p.mlp_bias) * p.hidden


@jit_inline
def attention_cost_nb(p, n_tokens, attn_pairs, kv_read_tokens):
    """FLOPs and bytes of one layer's attention over every key (see the module docstring)."""
    flops = p.pair_flops * attn_pairs
    nbytes = kv_read_tokens * p.kv_width * p.kv_bytes + n_tokens * (0.5 * p.pair_flops) * p.a_bytes
    return flops, nbytes


@jit_inline
def window_aggregates_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """Query-key pairs and keys read of a windowed layer (each query sees at most ``p.window``
    keys): at most ``window`` pairs per token, and per emitting row at most ``window - 1`` keys
    besides its new tokens. Exact when every sequence's context exceeds the window (decode past
    it); an upper bound when shorter sequences share the batch with longer ones."""
    w = p.window
    return min(attn_pairs, n_tokens * w), min(kv_read_tokens, n_emit * (w - 1.0) + n_tokens)


@jit_inline
def linear_attention_cost_nb(p, n_tokens, n_emit):
    """FLOPs and bytes of one linear-attention layer: its per-token work and activations, and each
    emitting row's recurrent state read and written once (a chunk that does not finish its
    prompt is not counted: its state moves once beside its whole chunk's activations)."""
    return n_tokens * p.lin_flops, n_tokens * p.lin_io * p.a_bytes + n_emit * 2.0 * p.lin_state_bytes


@jit_inline
def mixed_attention_nb(p):
    """Whether some layers attend otherwise than to every key (windowed, linear-attention or sparse
    layers): attention is then a mix of kinds, not affine in the context."""
    return p.window_frac > 0.0 or p.lin_frac > 0.0 or p.idx_pair_flops > 0.0


@jit_inline
def untabled_seconds_nb(p, flops, nbytes):
    """Seconds of attention work no kernel table measured (linear attention, the sparse indexer):
    the scalar roofline, its latency held by the table-priced attention it runs beside."""
    return max(flops / (p.attn_flops * p.eff_compute), nbytes / (p.mem_bw * p.eff_bw))


@jit_inline
def op_cost_nb(p, op, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """FLOPs and bytes of one instance of operator ``op`` (one layer) for a batch.

    Parameters
    ----------
    p : CostParams
    op : int
        An ``OP_*`` code.
    n_tokens, attn_pairs, kv_read_tokens, n_emit : float
        The batch aggregates (see the module docstring).

    Returns
    -------
    flops : float
    nbytes : float
        Bytes moved through memory, or over the interconnect for a collective.
    unit : int
        A ``UNIT_*`` code: which peak the FLOPs run at (``UNIT_LINK`` for collectives).
    """
    t = n_tokens
    h = p.hidden
    ab = p.a_bytes
    if op == OP_EMBEDDING:
        # Gather t rows of the table: only those rows are read, not the whole table.
        return 0.0, 2.0 * t * h * ab, UNIT_VECTOR
    if op == OP_INPUT_NORM or op == OP_POST_NORM or op == OP_FINAL_NORM:
        # RMSNorm (hidden weights): 4 FLOPs an element; LayerNorm (weights and biases): 7
        flops_per_elem = 4.0 + 3.0 * (p.norm_params / h - 1.0)
        return flops_per_elem * t * h, 2.0 * t * h * ab + p.norm_params * ab, UNIT_VECTOR
    if op == OP_QKV_PROJ:
        return 2.0 * t * p.p_qkv, p.p_qkv * p.proj_w_bytes + t * (h + p.qkv_width) * ab, UNIT_PROJ
    if op == OP_ROPE:
        return t * p.rope_flops, t * p.rope_bytes * ab + p.qk_norm_params * ab, UNIT_VECTOR
    if op == OP_KV_WRITE:  # linear-attention layers keep no KV cache; the indexer caches its own keys
        return 0.0, t * (p.kv_width * (ab + p.kv_bytes) * (1.0 - p.lin_frac) + p.idx_key_bytes), UNIT_VECTOR
    if op == OP_ATTENTION:
        # per layer: the mean of the full-attention, windowed and linear-attention layers'
        f_full, b_full = attention_cost_nb(p, t, attn_pairs, kv_read_tokens)
        flops = f_full
        nbytes = b_full
        if p.window_frac > 0.0:
            pw, kw = window_aggregates_nb(p, t, attn_pairs, kv_read_tokens, n_emit)
            fw, bw = attention_cost_nb(p, t, pw, kw)
            flops += p.window_frac * (fw - f_full)
            nbytes += p.window_frac * (bw - b_full)
        if p.lin_frac > 0.0:
            fl, bl = linear_attention_cost_nb(p, t, n_emit)
            flops += p.lin_frac * (fl - f_full)
            nbytes += p.lin_frac * (bl - b_full)
        if p.idx_pair_flops > 0.0:  # the sparse attention's indexer over every key
            flops += p.idx_pair_flops * attn_pairs
            nbytes += kv_read_tokens * p.idx_key_bytes
        return flops, nbytes, UNIT_ATTN
    if op == OP_O_PROJ:
        return 2.0 * t * p.p_o, p.p_o * p.proj_w_bytes + t * (p.p_o / h + h) * ab, UNIT_PROJ
    if op == OP_ALLREDUCE_ATTN or op == OP_ALLREDUCE_FFN or op == OP_LOGITS_GATHER:
        tp = float(p.tp)
        if op == OP_LOGITS_GATHER:
            # Vocab-parallel logits gathered to the sampling rank.
            return 0.0, (tp - 1.0) / tp * n_emit * p.vocab * LOGIT_BYTES, UNIT_LINK
        msg = t * h * ab
        return (tp - 1.0) / tp * t * h, 2.0 * (tp - 1.0) / tp * msg, UNIT_LINK
    if op == OP_RESIDUAL:
        # Two residual adds per layer: read two streams, write one.
        return 2.0 * t * h, 2.0 * 3.0 * t * h * ab, UNIT_VECTOR
    if op == OP_FFN_UP:
        p_up = ffn_params_nb(p)[0]
        return 2.0 * t * p_up, p_up * p.w_bytes + t * (h + p.ffn_up_width) * ab, UNIT_GEMM
    if op == OP_FFN_ACT:
        return (
            ACT_FLOPS_PER_ELEM * t * p.ffn_inner,
            t * (p.ffn_up_width + p.ffn_inner) * ab,
            UNIT_VECTOR,
        )
    if op == OP_FFN_DOWN:
        p_down = ffn_params_nb(p)[1]
        return 2.0 * t * p_down, p_down * p.w_bytes + t * (p.ffn_inner + h) * ab, UNIT_GEMM
    if op == OP_MOE_ROUTER:
        p_router = h * p.n_experts * p.ep  # one logit per expert (replicated)
        return 2.0 * t * p_router, p_router * ab + t * h * ab + t * (p.n_experts * p.ep) * LOGIT_BYTES, UNIT_GEMM
    if op == OP_MOE_UP or op == OP_MOE_DOWN:
        routed, hit = moe_local_nb(p, t)  # token-expert assignments to this GPU's experts, experts hit
        e_up, pe_up, pe_down, s_up, ps_up, ps_down = expert_shapes_nb(p)
        if op == OP_MOE_UP:
            pe = pe_up
            ps = ps_up
            act = routed * (h + e_up) + t * (h + s_up)
        else:
            pe = pe_down
            ps = ps_down
            act = routed * (p.expert_inner + h) + t * (p.shared_inner + h)
        flops = 2.0 * routed * pe + 2.0 * t * ps
        nbytes = (hit * pe + ps) * p.w_bytes + act * ab
        return flops, nbytes, UNIT_GEMM
    if op == OP_MOE_ACT:
        routed = moe_local_nb(p, t)[0]
        inner = routed * p.expert_inner + t * p.shared_inner
        up = 2.0 * inner  # gated
        return ACT_FLOPS_PER_ELEM * inner, (up + inner) * ab, UNIT_VECTOR
    if op == OP_LM_HEAD:
        vocab_here = p.p_lm_head / h
        nbytes = p.p_lm_head * ab + n_emit * (h * ab + vocab_here * LOGIT_BYTES)
        return 2.0 * n_emit * p.p_lm_head, nbytes, UNIT_GEMM
    if op == OP_MOE_ALLTOALL:
        # Expert parallelism's dispatch and combine: the GPU's share of its rank's tokens (the
        # rank's tp GPUs split them) goes to the experts' GPUs and comes back, each assignment's
        # hidden state once each way, (ep - 1) / ep of them to another GPU.
        # Without expert parallelism (the experts tensor-parallel over the moe_dp ranks) it is an
        # all-gather of the other ranks' tokens and a reduce-scatter of their outputs.
        if p.ep > 1.0:
            sent = t / p.tp * p.experts_per_token * h * ab * (p.ep - 1.0) / p.ep
        else:
            sent = t * h * ab * (p.moe_dp - 1.0)
        return 0.0, 2.0 * sent, UNIT_A2A
    if op == OP_SAMPLING:
        logits = n_emit * p.vocab
        return SAMPLING_FLOPS_PER_LOGIT * logits, SAMPLING_PASSES * logits * LOGIT_BYTES, UNIT_VECTOR
    return 0.0, 0.0, UNIT_VECTOR


@jit_inline
def op_time_nb(p, flops, nbytes, unit):
    """Roofline time of one operator instance.

    Returns
    -------
    seconds : float
        Including one kernel launch overhead.
    bound : int
        ``BOUND_COMPUTE``, ``BOUND_MEMORY`` or ``BOUND_COMM``.
    """
    if unit == UNIT_LINK or unit == UNIT_A2A:
        bw = p.link_bw if unit == UNIT_LINK else p.a2a_bw
        return p.link_latency_s + nbytes / (bw * p.eff_link) + p.launch_s, BOUND_COMM
    if unit == UNIT_GEMM:
        peak = p.gemm_flops
    elif unit == UNIT_PROJ:
        peak = p.proj_flops
    elif unit == UNIT_ATTN:
        peak = p.attn_flops
    else:
        peak = p.vector_flops
    t_compute = flops / (peak * p.eff_compute)
    t_memory = nbytes / (p.mem_bw * p.eff_bw)
    if t_compute > t_memory:
        return t_compute + p.launch_s, BOUND_COMPUTE
    return t_memory + p.launch_s, BOUND_MEMORY


@jit_inline
def log2_nb(x):
    """``log2(x)`` for ``x >= 1``, else 0 (a table's first point)."""
    return math.log2(x) if x > 1.0 else 0.0


@jit_inline
def grid_pos_nb(x, n):
    """Segment ``i`` and fraction ``f`` of grid coordinate ``x`` on an ``n``-point grid, clamped:
    the value there is ``v[i] + f * (v[i + 1] - v[i])``."""
    if x <= 0.0:
        return 0, 0.0
    if x >= n - 1.0:
        return n - 2, 1.0
    i = int(x)
    return i, x - i


@jit_inline
def lerp_nb(tab, off, i, f):
    """``tab[off + i] + f * (tab[off + i + 1] - tab[off + i])``."""
    a = tab[off + i]
    return a + f * (tab[off + i + 1] - a)


@jit_inline
def gemm_seconds_nb(tab, op, rows):
    """Seconds of one instance of weight GEMM ``op`` over ``rows`` rows: linear in M between
    the curve's points at M = 2**i, proportional to M beyond the last one."""
    return gemm_curve_nb(tab, EFF_GEMM_S + op * EFF_M_POINTS, rows)


@jit_inline
def gemm_op_seconds_nb(p, op, flops, nbytes, rows):
    """Seconds of one instance of weight GEMM ``op`` (``flops``, ``nbytes`` over ``rows`` rows) off
    its curve. Routed-expert GEMMs are held at the datasheet roofline: their weight bytes follow
    the experts hit, concave in M, so a chord between the curve's points can dip below it (a dense
    GEMM's roofline is convex in M and its chords stay above)."""
    seconds = gemm_seconds_nb(p.eff, op, rows)
    if op == OP_MOE_UP or op == OP_MOE_DOWN:
        roof = max(flops / p.gemm_flops, nbytes / p.mem_bw)
        if roof > seconds:
            return roof
    return seconds


@jit_inline
def gemm_curve_nb(tab, off, rows):
    """The GEMM seconds curve at ``tab[off:off + EFF_M_POINTS]`` (M = 2**i) at ``rows`` rows:
    linear in M between points, proportional to M beyond the last one."""
    return pow2_curve_nb(tab, off, EFF_M_POINTS, 0, rows)


@jit_inline
def pow2_curve_nb(tab, off, n, log2_min, x):
    """A seconds curve ``tab[off:off + n]`` sampled at ``x = 2**(log2_min + i)``, at ``x``: linear
    in ``x`` between points (so a non-decreasing curve stays so between them), the first point's
    value below it, proportional to ``x`` beyond the last."""
    m, e = math.frexp(x)  # x = m * 2**e, 0.5 <= m < 1: between 2**(e-1) and 2**e
    i = e - 1 - log2_min
    if i < 0 or (i == 0 and m == 0.5):
        return tab[off]
    if i >= n - 1:
        return tab[off + n - 1] * (x / 2.0 ** (log2_min + n - 1))
    return lerp_nb(tab, off, i, 2.0 * m - 1.0)


@jit_inline
def link_seconds_nb(tab, bus_bytes):
    """Seconds of one collective moving ``bus_bytes`` per GPU, off the packed ``EFF_LINK`` curve."""
    return pow2_curve_nb(tab, EFF_LINK, EFF_LINK_POINTS, EFF_LINK_LOG2_MIN, bus_bytes)


@jit_inline
def a2a_seconds_nb(p, nbytes):
    """Seconds of the expert all-to-all moving ``nbytes`` per GPU, off its packed ``EFF_A2A`` curve
    at the bytes that take as long on the node's links (``nbytes x link_bw / a2a_bw``: more where
    part of it crosses the network)."""
    return pow2_curve_nb(p.eff, EFF_A2A, EFF_LINK_POINTS, EFF_LINK_LOG2_MIN, nbytes * (p.link_bw / p.a2a_bw))


@jit_inline
def interp2_nb(tab, off, n1, n2, x1, x2):
    """Bilinear interpolation of the row-major ``n1 x n2`` table at ``tab[off]`` at grid
    coordinates ``(x1, x2)``, clamped to its edges."""
    x1 = min(max(x1, 0.0), n1 - 1.0)
    x2 = min(max(x2, 0.0), n2 - 1.0)
    i1 = min(int(x1), n1 - 2)
    i2 = min(int(x2), n2 - 2)
    f1 = x1 - i1
    f2 = x2 - i2
    r0 = off + i1 * n2 + i2
    r1 = r0 + n2
    a = tab[r0] + f2 * (tab[r0 + 1] - tab[r0])
    b = tab[r1] + f2 * (tab[r1 + 1] - tab[r1])
    return a + f1 * (b - a)


@jit_inline
def shaped_time_nb(p, op, flops, nbytes, unit, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """Time of one operator instance with the shape-aware tables (``p.eff`` not empty); see the
    module docstring. Elementwise operators fall back to :func:`op_time_nb`.

    Returns
    -------
    seconds : float
    bound : int
    """
    if unit == UNIT_LINK:
        return link_seconds_nb(p.eff, nbytes), BOUND_COMM
    if unit == UNIT_A2A:
        return a2a_seconds_nb(p, nbytes), BOUND_COMM
    if unit == UNIT_GEMM or unit == UNIT_PROJ:
        seconds = gemm_op_seconds_nb(p, op, flops, nbytes, n_emit if op == OP_LM_HEAD else n_tokens)
        if flops / (p.proj_flops if unit == UNIT_PROJ else p.gemm_flops) > nbytes / p.mem_bw:
            return seconds, BOUND_COMPUTE
        return seconds, BOUND_MEMORY
    if unit == UNIT_ATTN:
        return shaped_attention_nb(p, flops, nbytes, n_tokens, attn_pairs, kv_read_tokens, n_emit)
    return op_time_nb(p, flops, nbytes, unit)


@jit_inline
def shaped_attention_nb(p, flops, nbytes, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """Attention's time with the tables: the compute side at the prefill table's efficiency for
    its FLOPs and keys per query, the memory side at the decode table's for its rows x KV heads
    and keys per row; the slower side sets it. With windowed layers (``p.window_frac`` > 0) the
    full and the windowed layers are looked up apart, at their own keys per query and per row, and
    their times weighted by their share of the layers (``flops`` and ``nbytes``, the mean, are then
    not used); linear-attention layers (``p.lin_frac``) join at the scalar roofline. Returns
    ``(seconds, bound)``."""
    if mixed_attention_nb(p):
        f, b = attention_cost_nb(p, n_tokens, attn_pairs, kv_read_tokens)
        full, bound = _shaped_attention_part_nb(p, f, b, n_tokens, attn_pairs, kv_read_tokens, n_emit)
        seconds = full
        if p.window_frac > 0.0:
            pw, kw = window_aggregates_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit)
            f, b = attention_cost_nb(p, n_tokens, pw, kw)
            windowed, _ = _shaped_attention_part_nb(p, f, b, n_tokens, pw, kw, n_emit)
            seconds += p.window_frac * (windowed - full)
        if p.lin_frac > 0.0:
            f, b = linear_attention_cost_nb(p, n_tokens, n_emit)
            seconds += p.lin_frac * (untabled_seconds_nb(p, f, b) - full)
        if p.idx_pair_flops > 0.0:
            seconds += untabled_seconds_nb(p, p.idx_pair_flops * attn_pairs, kv_read_tokens * p.idx_key_bytes)
        return seconds, bound
    return _shaped_attention_part_nb(p, flops, nbytes, n_tokens, attn_pairs, kv_read_tokens, n_emit)


@jit_inline
def _shaped_attention_part_nb(p, flops, nbytes, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """:func:`shaped_attention_nb` of layers that all see the same keys."""
    rows = n_emit if n_emit > 1.0 else 1.0
    # The queries and outputs of prefill tokens (beyond one per emitting row) stream through a
    # prefill kernel at the bandwidth; the decode table prices what a decode kernel moves.
    stream = (n_tokens - n_emit) * (0.5 * p.pair_flops) * p.a_bytes if n_tokens > n_emit else 0.0
    return shaped_attention_at_nb(p, flops, nbytes - stream, log2_nb(flops) - EFF_PF_LOG2_MIN,
                                  log2_nb(attn_pairs / n_tokens), log2_nb(rows * p.kv_heads),
                                  log2_nb(kv_read_tokens / rows), stream)


@jit_inline
def shaped_attention_at_nb(p, flops, nbytes, x_flops, x_ctx_q, x_rows, x_ctx_row, stream_bytes):
    """:func:`shaped_attention_nb` given the tables' grid coordinates (log2 of FLOPs over
    ``2**EFF_PF_LOG2_MIN``, of keys per query, of rows x KV heads, of keys per row): the decode
    fast path keeps the ones that do not change over a run. ``nbytes`` move at the decode table's
    efficiency, ``stream_bytes`` (prefill queries and outputs) at the bandwidth."""
    ef = interp2_nb(p.eff, EFF_PREFILL, EFF_PF_POINTS, EFF_CTX_POINTS, x_flops, x_ctx_q)
    ed = interp2_nb(p.eff, EFF_DECODE, EFF_DEC_POINTS, EFF_CTX_POINTS, x_rows, x_ctx_row)
    t_compute = flops / (p.attn_flops * ef)
    t_memory = nbytes / (p.mem_bw * ed)
    if stream_bytes != 0.0:  # (adding 0 / p.mem_bw would change nothing but cost a division)
        t_memory += stream_bytes / p.mem_bw
    if t_compute > t_memory:
        return t_compute, BOUND_COMPUTE
    return t_memory, BOUND_MEMORY


@jit_inline
def unsplit_attention_nb(a, seconds, n_tokens, kv_read_tokens, n_emit):
    """One layer's attention ``seconds`` no faster than a decode kernel that scans each sequence's
    keys in one thread block (per KV head) allows: ``a.attn_token_s`` per key of the batch's mean
    context, where every row computes one token (``n_tokens`` = ``n_emit``: a decode-only batch;
    a batch with prefill chunks runs its decode rows in the same kernels and is left as priced).
    ``a`` is a CostParams or AttentionParams. With ``attn_token_s`` 0 (kernels that split long
    sequences over blocks) it returns ``seconds`` itself."""
    if a.attn_token_s > 0.0 and n_emit > 0.0 and n_tokens == n_emit:
        floor = a.attn_token_s * (kv_read_tokens / n_emit)
        if floor > seconds:
            return floor
    return seconds


@jit_inline
def op_seconds_nb(p, op, flops, nbytes, unit, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """Time and bound of one instance of ``op`` in a batch: :func:`shaped_time_nb` when the
    parameters carry efficiency tables, else the scalar roofline :func:`op_time_nb`."""
    if not shaped_nb(p):
        return op_time_nb(p, flops, nbytes, unit)
    return shaped_time_nb(p, op, flops, nbytes, unit, n_tokens, attn_pairs, kv_read_tokens, n_emit)


@jit_inline
def op_runs_nb(op, n_tokens, n_emit):
    if n_tokens <= 0.0:
        return False
    if op == OP_LM_HEAD or op == OP_SAMPLING or op == OP_LOGITS_GATHER:
        return n_emit > 0.0
    return True


@jit_inline
def _rest_totals_nb(p, n_tokens, n_emit):
    """:func:`rest_totals_nb` (``n_tokens`` > 0): every operator but attention in order
    (:func:`rest_ops_nb`), then, with tables, the summed curve of the weight GEMMs it leaves out."""
    total, total_flops, total_bytes = rest_ops_nb(p, 0, N_OPS, n_tokens, n_emit, 0.0, 0.0, 0.0)
    if shaped_nb(p):
        total += gemm_curve_nb(p.eff, EFF_GEMM_SUM, n_tokens)  # every other weight GEMM, count-weighted
    return total, total_flops, total_bytes


@jit_inline
def rest_ops_nb(p, op_lo, op_hi, n_tokens, n_emit, total, total_flops, total_bytes):
    """The sums of :func:`rest_totals_nb` (seconds, FLOPs, memory bytes; ``n_tokens`` > 0) carried
    on from ``total``, ``total_flops``, ``total_bytes`` over operators ``op_lo`` .. ``op_hi - 1`` but
    attention, in order: over ``0 .. N_OPS - 1`` from zeros, less the summed weight-GEMM curve that
    the tables add at the end. Operators before ``OP_LM_HEAD`` depend on ``n_tokens`` alone."""
    if shaped_nb(p):
        # The tables' times (as :func:`shaped_time_nb`), the elementwise divisions hoisted and the
        # weight GEMMs over the batch's tokens read off their summed curve ``EFF_GEMM_SUM`` in one
        # lookup (by the caller).
        tab = p.eff
        per_vector = 1.0 / (p.vector_flops * p.eff_compute)
        per_byte = 1.0 / (p.mem_bw * p.eff_bw)
        for op in range(op_lo, op_hi):
            count = op_count_nb(p, op)
            if op == OP_ATTENTION or count == 0 or not op_runs_nb(op, n_tokens, n_emit):
                continue
            flops, nbytes, unit = op_cost_nb(p, op, n_tokens, 0.0, 0.0, n_emit)
            if unit == UNIT_GEMM or unit == UNIT_PROJ:
                # The LM head's M is the emitting rows, routed experts are held at the roofline;
                # the others are in the summed curve below.
                if op == OP_LM_HEAD:
                    seconds = gemm_seconds_nb(tab, op, n_emit)
                elif op == OP_MOE_UP or op == OP_MOE_DOWN:
                    seconds = gemm_op_seconds_nb(p, op, flops, nbytes, n_tokens)
                else:
                    seconds = 0.0
            elif unit == UNIT_LINK:
                seconds = link_seconds_nb(tab, nbytes)
            elif unit == UNIT_A2A:
                seconds = a2a_seconds_nb(p, nbytes)
            else:
                seconds = max(flops * per_vector, nbytes * per_byte) + p.launch_s
            total += count * seconds
            total_flops += count * flops
            if unit != UNIT_LINK and unit != UNIT_A2A:
                total_bytes += count * nbytes
        return total, total_flops, total_bytes
    # The scalar roofline, the divisions by peak rates hoisted out of the operator loop (they
    # dominated its cost).
    per_gemm = 1.0 / (p.gemm_flops * p.eff_compute)
    per_proj = 1.0 / (p.proj_flops * p.eff_compute)
    per_vector = 1.0 / (p.vector_flops * p.eff_compute)
    per_byte = 1.0 / (p.mem_bw * p.eff_bw)
    per_link_byte = 1.0 / (p.link_bw * p.eff_link)
    for op in range(op_lo, op_hi):
        count = op_count_nb(p, op)
        if op == OP_ATTENTION or count == 0 or not op_runs_nb(op, n_tokens, n_emit):
            continue
        flops, nbytes, unit = op_cost_nb(p, op, n_tokens, 0.0, 0.0, n_emit)
        if unit == UNIT_LINK:
            seconds = p.link_latency_s + nbytes * per_link_byte + p.launch_s
        elif unit == UNIT_A2A:
            seconds = p.link_latency_s + nbytes / (p.a2a_bw * p.eff_link) + p.launch_s
        else:
            if unit == UNIT_GEMM:
                per_flop = per_gemm
            elif unit == UNIT_PROJ:
                per_flop = per_proj
            else:
                per_flop = per_vector
            seconds = max(flops * per_flop, nbytes * per_byte) + p.launch_s
        total += count * seconds
        total_flops += count * flops
        if unit != UNIT_LINK and unit != UNIT_A2A:
            total_bytes += count * nbytes
    return total, total_flops, total_bytes


@jit_inline
def _attention_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """:func:`attention_totals_nb` (``n_tokens`` > 0): every layer attending to all its keys, from
    :func:`attention_params_nb` (a real call of a dozen fields instead of CostParams' hundred: the
    copy cost more than the lookups), else :func:`mixed_attention_totals_nb`."""
    if mixed_attention_nb(p):
        return mixed_attention_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit)
    return full_attention_totals_nb(attention_params_nb(p), n_tokens, attn_pairs, kv_read_tokens, n_emit)


@jit_inline
def attention_params_nb(p):
    """The :class:`simcore.params.AttentionParams` of CostParams ``p``."""
    return AttentionParams(p.n_layers, p.kv_heads, p.kv_width, p.pair_flops, p.a_bytes, p.kv_bytes, p.attn_flops,
                           p.mem_bw, p.eff_compute, p.eff_bw, p.launch_s, p.attn_token_s, p.eff)


@jit_inline
def _attention_roofline_nb(p, flops, nbytes):
    """One layer's attention seconds at the scalar roofline (no tables)."""
    return max(flops * (1.0 / (p.attn_flops * p.eff_compute)), nbytes * (1.0 / (p.mem_bw * p.eff_bw))) + p.launch_s


@jit
def full_attention_totals_nb(a, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """:func:`attention_totals_nb` of a model whose every layer attends to all its keys
    (``mixed_attention_nb`` False; ``n_tokens`` > 0), from its :class:`simcore.params.AttentionParams`
    ``a``: the same arithmetic, bit for bit."""
    count = a.n_layers  # op_count_nb's for attention
    if count == 0:
        return 0.0, 0.0, 0.0
    flops, nbytes = attention_cost_nb(a, n_tokens, attn_pairs, kv_read_tokens)  # op_cost_nb's, unmixed
    if shaped_nb(a):
        seconds, _ = _shaped_attention_part_nb(a, flops, nbytes, n_tokens, attn_pairs, kv_read_tokens, n_emit)
    else:
        seconds = _attention_roofline_nb(a, flops, nbytes)
    seconds = unsplit_attention_nb(a, seconds, n_tokens, kv_read_tokens, n_emit)
    return count * seconds, count * flops, count * nbytes


@jit_inline
def decode_rows_coord_nb(p, n_rows):
    """The decode table's grid coordinate of a batch with ``n_rows`` emitting rows (log2 of rows x
    KV heads, at least one row): :func:`shaped_attention_nb`'s, for
    :func:`decode_attention_totals_nb`."""
    return log2_nb((n_rows if n_rows > 1.0 else 1.0) * p.kv_heads)


@jit_inline
def decode_attention_totals_nb(a, n_rows, ctx, x_rows):
    """:func:`full_attention_totals_nb` of ``n_rows`` (>= 1) rows that each compute one token, over
    ``ctx`` keys in all (``attn_pairs`` = ``kv_read_tokens`` = ``ctx``, ``n_emit`` = ``n_rows``),
    given ``x_rows`` (:func:`decode_rows_coord_nb`): the same arithmetic bit for bit, with keys
    per query and per row (the same number) taken once for both tables and ``x_rows`` kept by
    the caller over passes with the same rows."""
    count = a.n_layers
    if count == 0:
        return 0.0, 0.0, 0.0
    flops, nbytes = attention_cost_nb(a, n_rows, ctx, ctx)
    if shaped_nb(a):
        x_ctx = log2_nb(ctx / n_rows)
        seconds, _ = shaped_attention_at_nb(a, flops, nbytes, log2_nb(flops) - EFF_PF_LOG2_MIN, x_ctx, x_rows, x_ctx,
                                            0.0)
    else:
        seconds = _attention_roofline_nb(a, flops, nbytes)
    seconds = unsplit_attention_nb(a, seconds, n_rows, ctx, n_rows)
    return count * seconds, count * flops, count * nbytes


@jit
def mixed_attention_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """:func:`attention_totals_nb` of any model (``n_tokens`` > 0)."""
    count = op_count_nb(p, OP_ATTENTION)
    if count == 0:
        return 0.0, 0.0, 0.0
    flops, nbytes, _ = op_cost_nb(p, OP_ATTENTION, n_tokens, attn_pairs, kv_read_tokens, n_emit)
    if shaped_nb(p):
        seconds, _ = shaped_attention_nb(p, flops, nbytes, n_tokens, attn_pairs, kv_read_tokens, n_emit)
    else:
        seconds = _attention_roofline_nb(p, flops, nbytes)
    seconds = unsplit_attention_nb(p, seconds, n_tokens, kv_read_tokens, n_emit)
    return count * seconds, count * flops, count * nbytes


@jit
def rest_totals_nb(p, n_tokens, n_emit):
    """Seconds, FLOPs and memory bytes of every operator of an iteration but attention, without the
    per-step overhead: what depends on the batch's ``n_tokens`` and ``n_emit`` alone. With
    :func:`attention_totals_nb` and :func:`step_overhead_nb` it makes :func:`iteration_totals_nb`."""
    if n_tokens <= 0.0:
        return 0.0, 0.0, 0.0
    return _rest_totals_nb(p, n_tokens, n_emit)


@jit_inline
def attention_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """Seconds, FLOPs and memory bytes of an iteration's attention over every layer it runs in."""
    if n_tokens <= 0.0:
        return 0.0, 0.0, 0.0
    return _attention_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit)


@jit_inline
def step_overhead_nb(p, n_emit):
    """The framework's CPU time in a non-empty step that the GPU does not hide: ``p.iter_overhead_s``
    per step and ``p.seq_overhead_s`` per row with logits (each sequence's token: its sampling
    bookkeeping, stop checks and response). With ``seq_overhead_s`` 0 it is ``iter_overhead_s``
    exactly."""
    return p.iter_overhead_s + p.seq_overhead_s * n_emit


@jit
def iteration_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """Seconds, FLOPs and memory bytes of one engine iteration, summed over its operators: every
    operator but attention (:func:`rest_totals_nb`), then attention (looked up apart: inside the
    operator loop its table lookups slowed the whole loop ~3x), then the framework's per-step CPU
    time (:func:`step_overhead_nb`).

    Interconnect bytes of collectives are not memory bytes and are left out of the third value.
    Allocates nothing; an empty batch costs 0. Same times as :func:`op_seconds_nb`.
    """
    if n_tokens <= 0.0:
        return 0.0, 0.0, 0.0
    rs, rf, rb = _rest_totals_nb(p, n_tokens, n_emit)
    a_s, af, ab = _attention_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit)
    return rs + a_s + step_overhead_nb(p, n_emit), rf + af, rb + ab


@jit_inline
def rest_memo_nb(p, acc, off, slots, n_tokens, n_emit):
    """:func:`rest_totals_nb` (to a few ulps; ``n_tokens`` > 0) kept in the memo table at
    ``acc[off]`` (``slots`` entries, a power of two, of ``N_REST`` slots, direct-mapped by
    (tokens, rows with logits), NaN until set: ``simcore.layout.Layout.off_rest``). A hit is read
    in place; a miss is a real call (:func:`rest_fill_nb`). A key's value is always the same, so a
    caller may keep it while the key stays."""
    slot = off + ((np.int64(n_tokens) * 40503 + np.int64(n_emit)) & (slots - 1)) * N_REST
    if acc[slot + REST_TOKENS] != n_tokens or acc[slot + REST_EMIT] != n_emit:
        rest_fill_nb(p, acc, slot, n_tokens, n_emit)
    return acc[slot + REST_S], acc[slot + REST_FLOPS], acc[slot + REST_BYTES]


@jit
def rest_fill_nb(p, acc, slot, n_tokens, n_emit):
    """Set memo entry ``acc[slot:slot + N_REST]`` (:func:`rest_memo_nb`) to (``n_tokens``,
    ``n_emit``)'s rest: the whole iteration at no context (the compiled loop of
    :func:`iteration_totals_nb`) less its attention and overhead (each inlined copy of the
    operator loop costs numba seconds of compile)."""
    rs, rf, rb = iteration_totals_nb(p, n_tokens, 0.0, 0.0, n_emit)
    a_s, af, ab = attention_totals_nb(p, n_tokens, 0.0, 0.0, n_emit)
    acc[slot + REST_TOKENS] = n_tokens
    acc[slot + REST_EMIT] = n_emit
    acc[slot + REST_S] = rs - (a_s + step_overhead_nb(p, n_emit))
    acc[slot + REST_FLOPS] = rf - af
    acc[slot + REST_BYTES] = rb - ab


@jit_inline
def prefix_memo_nb(p, acc, off, slots, n_tokens, n_emit):
    """:func:`rest_totals_nb` bit for bit (``n_tokens`` > 0) from two memo tables at ``acc[off]``
    (``slots`` entries each, a power of two, NaN until set: ``simcore.layout.Layout.off_prefix``):
    by tokens (``N_PREFIX`` slots, direct-mapped) the sums of the operators before the LM head, the
    experts' all-to-all after the sampler and the summed weight-GEMM curve, which depend on the
    tokens alone; by rows with logits (``N_EMIT`` slots, ``slots * N_PREFIX`` further) the LM head,
    the logits gather and the sampler. A hit adds them up in the operator loop's order (an operator
    that does not run adds an exact zero); a miss is a real call (:func:`prefix_fill_nb`,
    :func:`emit_fill_nb`)."""
    slot = off + (np.int64(n_tokens) & (slots - 1)) * N_PREFIX
    if acc[slot + PREFIX_TOKENS] != n_tokens:
        prefix_fill_nb(p, acc, slot, n_tokens)
    rows = off + slots * N_PREFIX + (np.int64(n_emit) & (slots - 1)) * N_EMIT
    if acc[rows + EMIT_ROWS] != n_emit:
        emit_fill_nb(p, acc, rows, n_emit)
    total = acc[slot + PREFIX_S] + acc[rows + EMIT_LM_HEAD] + acc[rows + EMIT_GATHER] + acc[rows + EMIT_SAMPLING]
    total += acc[slot + PREFIX_A2A_S]
    total_flops = acc[slot + PREFIX_FLOPS] + acc[rows + EMIT_LM_HEAD + 1] + acc[rows + EMIT_GATHER + 1]
    total_flops += acc[rows + EMIT_SAMPLING + 1]
    total_flops += acc[slot + PREFIX_A2A_FLOPS]
    total_bytes = acc[slot + PREFIX_BYTES] + acc[rows + EMIT_LM_HEAD + 2] + acc[rows + EMIT_GATHER + 2]
    total_bytes += acc[rows + EMIT_SAMPLING + 2]
    if shaped_nb(p):
        total += acc[slot + PREFIX_GEMM_S]
    return total, total_flops, total_bytes


@jit
def prefix_fill_nb(p, acc, slot, n_tokens):
    """Set the tokens memo entry ``acc[slot:slot + N_PREFIX]`` (:func:`prefix_memo_nb`) to
    ``n_tokens``'s."""
    # Operator bounds as int64, not literals: numba would compile rest_range_nb once per literal.
    total, total_flops, total_bytes = rest_range_nb(p, np.int64(0), np.int64(OP_LM_HEAD), n_tokens, 0.0)
    a2a_s, a2a_flops, _ = rest_range_nb(p, np.int64(OP_MOE_ALLTOALL), np.int64(OP_MOE_ALLTOALL + 1), n_tokens, 0.0)
    acc[slot + PREFIX_TOKENS] = n_tokens
    acc[slot + PREFIX_S] = total
    acc[slot + PREFIX_FLOPS] = total_flops
    acc[slot + PREFIX_BYTES] = total_bytes
    acc[slot + PREFIX_A2A_S] = a2a_s
    acc[slot + PREFIX_A2A_FLOPS] = a2a_flops
    acc[slot + PREFIX_GEMM_S] = gemm_curve_nb(p.eff, EFF_GEMM_SUM, n_tokens) if shaped_nb(p) else 0.0
    acc[slot + PREFIX_MOE_S] = moe_experts_seconds_nb(p, n_tokens)


@jit
def rest_range_nb(p, op_lo, op_hi, n_tokens, n_emit):
    """:func:`rest_ops_nb` from zeros: one compiled copy of the operator loop for the memo's
    misses (each inlined copy costs numba seconds of compile)."""
    return rest_ops_nb(p, op_lo, op_hi, n_tokens, n_emit, 0.0, 0.0, 0.0)


@jit
def emit_fill_nb(p, acc, slot, n_emit):
    """Set the rows memo entry ``acc[slot:slot + N_EMIT]`` (:func:`prefix_memo_nb`) to ``n_emit``'s:
    each of the LM head, logits gather and sampler alone (seconds, FLOPs, memory bytes summed over
    its layers), as :func:`rest_ops_nb` adds it."""
    acc[slot + EMIT_ROWS] = n_emit
    for i in range(3):
        op = np.int64(OP_LM_HEAD + i)
        s, f, b = rest_range_nb(p, op, op + 1, 1.0, n_emit)
        acc[slot + EMIT_LM_HEAD + 3 * i] = s
        acc[slot + EMIT_LM_HEAD + 3 * i + 1] = f
        acc[slot + EMIT_LM_HEAD + 3 * i + 2] = b


@jit_inline
def totals_from_rest_nb(p, rest, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """:func:`iteration_totals_nb` (``n_tokens`` > 0) from its ``rest`` (a :func:`rest_totals_nb`
    triple, bit for bit from :func:`prefix_memo_nb`, to a few ulps from :func:`rest_memo_nb`): the
    rest, then attention (:func:`attention_totals_nb`: a real call of a dozen fields), then the
    per-step overhead, summed as that function sums them."""
    a_s, af, ab = attention_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit)
    return rest[0] + a_s + step_overhead_nb(p, n_emit), rest[1] + af, rest[2] + ab


@jit
def iteration_totals_memo_nb(p, acc, off, slots, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """:func:`iteration_totals_nb` bit for bit, every operator but attention read from the memo
    tables at ``acc[off]`` (by tokens and by rows with logits, ``slots`` entries each:
    :func:`prefix_memo_nb`): the explicit scheduler's iterations
    (:func:`iteration_totals_memo_inline_nb` is the same inlined, for the decode cohort's)."""
    return iteration_totals_memo_inline_nb(p, acc, off, slots, n_tokens, attn_pairs, kv_read_tokens, n_emit)


@jit_inline
def iteration_totals_memo_inline_nb(p, acc, off, slots, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """:func:`iteration_totals_memo_nb` inlined (saves the call's copy of CostParams)."""
    if n_tokens <= 0.0:
        return 0.0, 0.0, 0.0
    return totals_from_rest_nb(p, prefix_memo_nb(p, acc, off, slots, n_tokens, n_emit), n_tokens, attn_pairs,
                               kv_read_tokens, n_emit)


def iteration_seconds(p, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """:func:`iteration_time_nb` bit for bit, through :func:`iteration_totals_memo_nb` with a
    scratch memo of one entry: the engine's own compiled cost kernel, so that a caller pricing a
    few iterations from Python (sizing a run's windows) compiles nothing a run does not compile
    anyway (``iteration_time_nb`` is another copy of the operator loop: 15 s of a cold start)."""
    memo = np.full(N_PREFIX + N_EMIT, np.nan)
    return iteration_totals_memo_nb(p, memo, 0, 1, float(n_tokens), float(attn_pairs), float(kv_read_tokens),
                                    float(n_emit))[0]


@jit
def op_total_seconds_nb(p, op, n_tokens, n_emit):
    """Seconds of operator ``op`` over every layer it runs in, for a batch of ``n_tokens`` tokens
    (``n_emit`` of them with logits) whose cost does not depend on attention context, priced as in
    :func:`iteration_totals_nb`; 0 where it does not run."""
    count = op_count_nb(p, op)
    if count == 0 or not op_runs_nb(op, n_tokens, n_emit):
        return 0.0
    flops, nbytes, unit = op_cost_nb(p, op, n_tokens, 0.0, 0.0, n_emit)
    return count * op_seconds_nb(p, op, flops, nbytes, unit, n_tokens, 0.0, 0.0, n_emit)[0]


@jit_inline
def moe_experts_memo_nb(p, acc, off, slots, n_tokens):
    """:func:`moe_experts_seconds_nb` bit for bit, read from the tokens memo at ``acc[off]``
    (:func:`prefix_memo_nb`) where it holds ``n_tokens`` (a rank's step after its
    :func:`iteration_totals_memo_nb`), else computed: a wide-EP lockstep step asks it of every rank,
    and on DeepSeek-V3 with kernel tables it took twice the rest of the rank's step cost."""
    slot = off + (np.int64(n_tokens) & (slots - 1)) * N_PREFIX
    if acc[slot + PREFIX_TOKENS] == n_tokens:
        return acc[slot + PREFIX_MOE_S]
    return moe_experts_seconds_nb(p, n_tokens)


@jit
def moe_experts_seconds_nb(p, n_tokens):
    """Seconds of one iteration's expert GEMMs and activation (routed and shared: ``OP_MOE_UP``,
    ``OP_MOE_ACT``, ``OP_MOE_DOWN``) when this GPU's rank brings ``n_tokens``: the part of
    :func:`iteration_totals_nb` that runs over every attention data-parallel rank's tokens
    (``moe_dp``), priced the same way. 0 for a dense model or an empty batch."""
    total = 0.0
    if n_tokens <= 0.0 or p.n_moe_layers == 0:
        return total
    for op in (OP_MOE_UP, OP_MOE_ACT, OP_MOE_DOWN):
        total += op_total_seconds_nb(p, op, n_tokens, 0.0)
    return total


@jit
def iteration_time_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit):
    """Seconds of one engine iteration: the sum of every operator's roofline time.

    This is the hot-path kernel the engine calls once per (run of) iteration(s); it allocates
    nothing. An empty batch takes 0 s.
    """
    return iteration_totals_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit)[0]


@jit
def iteration_costs_nb(p, n_tokens, attn_pairs, kv_read_tokens, n_emit, flops, nbytes, seconds, bound):
    """Per-operator totals of one iteration, written into the output arrays.

    Parameters
    ----------
    flops, nbytes, seconds : ndarray of float64, shape (N_OPS,)
        Filled with each operator's FLOPs, bytes and time summed over the layers it runs in.
    bound : ndarray of int64, shape (N_OPS,)
        Filled with ``BOUND_*`` codes (``BOUND_NONE`` where the operator does not run).

    Returns
    -------
    float
        The iteration time, equal to ``iteration_time_nb`` on the same batch.
    """
    total = 0.0
    for op in range(N_OPS):
        count = op_count_nb(p, op)
        if count == 0 or not op_runs_nb(op, n_tokens, n_emit):
            flops[op] = 0.0
            nbytes[op] = 0.0
            seconds[op] = 0.0
            bound[op] = BOUND_NONE
            continue
        f, b, unit = op_cost_nb(p, op, n_tokens, attn_pairs, kv_read_tokens, n_emit)
        s, bd = op_seconds_nb(p, op, f, b, unit, n_tokens, attn_pairs, kv_read_tokens, n_emit)
        if op == OP_ATTENTION:
            floor = unsplit_attention_nb(p, s, n_tokens, kv_read_tokens, n_emit)
            if floor != s:
                s, bd = floor, BOUND_LATENCY
        flops[op] = count * f
        nbytes[op] = count * b
        seconds[op] = count * s
        bound[op] = bd
        total += count * s
    return total + step_overhead_nb(p, n_emit) if n_tokens > 0.0 else total  # as iteration_totals_nb


@jit
def batch_aggregates_nb(new_tokens, prior_context, emits):
    """Reduce a batch given per sequence to the aggregates the cost kernels take.

    Parameters
    ----------
    new_tokens : ndarray of float64, shape (n_seqs,)
        Tokens each sequence processes in this iteration (a prefill chunk, or 1 when decoding).
    prior_context : ndarray of float64, shape (n_seqs,)
        Tokens already in each sequence's KV cache before this iteration.
    emits : ndarray of bool, shape (n_seqs,)
        Whether each sequence emits a token this iteration.

    Returns
    -------
    n_tokens, attn_pairs, kv_read_tokens, n_emit : float
    """
    n_tokens = 0.0
    pairs = 0.0
    kv_read = 0.0
    n_emit = 0.0
    for i in range(new_tokens.shape[0]):
        q = new_tokens[i]
        c = prior_context[i]
        n_tokens += q
        pairs += q * c + q * (q + 1.0) * 0.5
        kv_read += c + q
        if emits[i]:
            n_emit += 1.0
    return n_tokens, pairs, kv_read, n_emit


def new_cost_arrays():
    """Output arrays for :func:`iteration_costs_nb`: flops, bytes, seconds, bound."""
    return (
        np.zeros(N_OPS, dtype=np.float64),
        np.zeros(N_OPS, dtype=np.float64),
        np.zeros(N_OPS, dtype=np.float64),
        np.zeros(N_OPS, dtype=np.int64),
    )


@jit
def decode_run_time_nb(p, n_seqs, ctx_sum, n_steps):
    """Seconds of ``n_steps`` consecutive decode iterations of ``n_seqs`` sequences.

    Parameters
    ----------
    n_seqs : float
        Sequences decoding together (each emits one token per iteration).
    ctx_sum : float
        Sum of their contexts (tokens already cached) at the first iteration; each iteration
        adds ``n_seqs``.
    n_steps : int
    """
    total = 0.0
    for i in range(n_steps):
        c = ctx_sum + i * n_seqs
        total += iteration_time_nb(p, n_seqs, c + n_seqs, c + n_seqs, n_seqs)
    return total
