"""Memory model per GPU: resident weights, weights streamed per iteration, KV bytes per token,
activation workspace. All results in bytes."""
from simcore._jit import jit
from simcore.cost import LOGIT_BYTES, expert_shapes_nb, ffn_params_nb, moe_assignments_nb, moe_local_nb


@jit
def resident_weight_bytes_nb(p, tied=False):
    """Bytes of weights stored on one GPU (with ``tied``, the LM head is the embedding table,
    stored once)."""
    n_dense = p.n_layers - p.n_moe_layers
    _, pe_up, pe_down, _, ps_up, ps_down = expert_shapes_nb(p)
    p_up, p_down = ffn_params_nb(p)
    gemm = n_dense * (p_up + p_down)
    gemm += p.n_moe_layers * (p.n_experts * (pe_up + pe_down) + ps_up + ps_down)
    small = p.n_moe_layers * p.hidden * p.n_experts * p.ep  # the routers
    small += (p.n_layers * p.norms_per_layer + 1) * p.norm_params
    small += p.n_layers * p.qk_norm_params
    small += p.vocab * p.hidden / p.tp + (0.0 if tied else p.p_lm_head)  # the embedding table's shard
    return gemm * p.w_bytes + p.n_layers * (p.p_qkv + p.p_o) * p.proj_w_bytes + small * p.a_bytes


@jit
def streamed_weight_bytes_nb(p, n_tokens):
    """Bytes of weights one iteration of ``n_tokens`` tokens reads from memory (emitting at least
    one token): every matrix once, the LM head included, the embedding table only for the rows it
    gathers (not counted here), and for MoE only the experts the batch hits."""
    n_dense = p.n_layers - p.n_moe_layers
    hit = moe_local_nb(p, n_tokens)[1]
    _, pe_up, pe_down, _, ps_up, ps_down = expert_shapes_nb(p)
    p_up, p_down = ffn_params_nb(p)
    gemm = n_dense * (p_up + p_down)
    gemm += p.n_moe_layers * (hit * (pe_up + pe_down) + ps_up + ps_down)
    small = p.n_moe_layers * p.hidden * p.n_experts * p.ep  # the routers
    small += (p.n_layers * p.norms_per_layer + 1) * p.norm_params
    small += p.n_layers * p.qk_norm_params
    small += p.p_lm_head
    return gemm * p.w_bytes + p.n_layers * (p.p_qkv + p.p_o) * p.proj_w_bytes + small * p.a_bytes


@jit
def kv_bytes_per_token_nb(p):
    """KV-cache bytes one token stores on one GPU across all layers, windowed ones included
    (each keeps only its window of tokens: simllm.sim.memory splits them): layers x the elements
    each stores (``kv_width``: 2 x KV heads x head_dim, or MLA's latent + rope key) x bytes per
    element (after compression)."""
    return p.n_layers * (p.kv_width * p.kv_bytes + p.idx_key_bytes)


@jit
def activation_workspace_bytes_nb(p, max_tokens, max_seqs):
    """Peak activation memory of a forward pass over ``max_tokens`` tokens plus the sampler's
    logits and probabilities for ``max_seqs`` rows, as the engine's profiling run reserves it."""
    h = p.hidden
    attn_peak = p.qkv_width + p.p_o / h
    dense_peak = p.ffn_up_width + p.ffn_inner
    moe_peak = 0.0
    if p.n_moe_layers > 0:
        # assignments per local token reaching this GPU's experts (k without expert parallelism)
        moe_peak = moe_assignments_nb(p, 1.0) * (h + 3.0 * p.expert_inner)  # in, gate+up, activation
        moe_peak += 3.0 * p.shared_inner
    per_token = 2.0 * h + max(attn_peak, max(dense_peak, moe_peak))
    logits = max_seqs * p.vocab * LOGIT_BYTES * 2.0
    return max_tokens * per_token * p.a_bytes + logits
