"""The kernels' settings, each a NamedTuple: the packed, per-GPU numbers a cost kernel needs
(:class:`CostParams`: scalars plus one read-only array of shape-aware costs: the expert-routing
curve and the efficiency tables) and an
engine replica's scheduler settings (:class:`EngineSettings`, scalars only).

simllm builds a :class:`CostParams` from validated model, hardware and serving configs
(``simllm.sim.pack.pack_cost_params``) and an :class:`EngineSettings` from the serving settings;
kernels only read them. Parameter counts are per GPU, i.e.
already sharded by tensor parallelism; bytes are per element of the dtype in use.
"""
from typing import NamedTuple

import numpy as np

# No shape-aware tables: every operator runs at the scalar efficiencies (``eff_compute``, ...).
NO_EFF_TABLE = np.zeros(0, dtype=np.float64)
NO_EFF_TABLE.flags.writeable = False


class CostParams(NamedTuple):
    # --- architecture (per GPU after tensor-parallel sharding) ---
    n_layers: int  # transformer layers
    n_moe_layers: int  # layers whose FFN is a mixture of experts (the rest are dense)
    hidden: float  # hidden size (the residual stream is replicated on every GPU)
    kv_heads: float  # key/value heads on this GPU (replicated when TP > KV heads; MLA: 1, its latent)
    # attention geometry per token on this GPU, elements (MHA/GQA: from the heads; MLA: the
    # compressed latent, see simllm.sim.pack):
    qkv_width: float  # written by the QKV projection(s)
    kv_width: float  # stored in the KV cache per layer (K and V, or MLA's latent + rope key)
    pair_flops: float  # FLOPs per query-key pair scored (QK^T and PV over this GPU's heads); half
    #                    of it is the query and output elements per token attention reads and writes
    rope_flops: float  # FLOPs per token of RoPE (and Qwen3's per-head q/k norms)
    rope_bytes: float  # activation elements per token RoPE (and the q/k norms) reads and writes
    qk_norm_params: float  # weights of the per-head q/k norms per layer (2 x head_dim, or 0)
    # windowed layers (sliding-window or chunked local attention): each query sees at most
    # ``window`` keys; they are ``window_frac`` of the layers (0: every layer attends to all keys)
    window: float
    window_frac: float
    # linear-attention layers (Gated DeltaNet: Qwen3-Next, Qwen3.5): ``lin_frac`` of the layers keep
    # a constant recurrent state per sequence instead of a KV cache; per token on this GPU they do
    # ``lin_flops`` FLOPs and move ``lin_io`` activation elements, per sequence and step they read
    # and write their state of ``lin_state_bytes``
    lin_frac: float
    lin_flops: float
    lin_io: float
    lin_state_bytes: float
    # DeepSeek sparse attention: attention sees its ``window`` best keys (``window_frac`` 1) chosen
    # by an indexer that scores every pair at ``idx_pair_flops`` and reads each cached key's
    # ``idx_key_bytes`` (0: no indexer)
    idx_pair_flops: float
    idx_key_bytes: float
    norm_params: float  # parameters of one norm (hidden for RMSNorm: 4 FLOPs an element; 2 x hidden
    #                     for LayerNorm: 7 FLOPs an element)
    norms_per_layer: int  # 2, 1 with parallel attention (GPT-J), 4 with sandwich norms (Gemma 2/3)
    p_qkv: float  # parameters of the fused QKV projection (+ bias)
    p_o: float  # parameters of the output projection (+ bias)
    ffn_up_width: float  # output width of the dense up projection (2 x intermediate when gated)
    ffn_inner: float  # width after the activation (intermediate)
    mlp_bias: float  # 1.0 when the dense FFN's projections have biases (see ffn_params_nb)
    n_experts: float  # routed experts per MoE layer on this GPU (all of them without expert parallelism)
    experts_per_token: float  # routed experts each token is sent to
    ep: float  # expert-parallel degree: the layer's experts are spread over ep GPU groups
    moe_dp: float  # attention data-parallel ranks whose tokens meet in each MoE layer, times the
    #                expert-load imbalance (the most loaded GPU's tokens over the mean; 1 without EP)
    # Experts are gated (SwiGLU): an expert of intermediate width i has a gate+up of 2 x hidden x i
    # parameters writing 2 i, and a down of i x hidden (see expert_shapes_nb in cost.py).
    expert_inner: float  # one routed expert's intermediate width on this GPU (its width / the MoE's TP)
    shared_inner: float  # all shared experts' intermediate width on this GPU (0 if none)
    vocab: float  # full vocabulary (sampling runs over it after the logits gather; the embedding
    #               table holds vocab x hidden / tp on each GPU)
    p_lm_head: float  # LM head parameters on this GPU (vocab-parallel; the embedding if tied)
    # --- dtypes, bytes per element ---
    w_bytes: float  # GEMM weights (fp16 2, fp8 1, int4 0.5 + scales)
    proj_w_bytes: float  # attention projections' weights (QKV, O): checkpoints often keep them
    #                      unquantised when the FFN or experts are FP4 (gpt-oss, NVFP4 exports)
    a_bytes: float  # activations, and the embedding, LM head, norms and router (kept in the activation dtype)
    kv_bytes: float  # KV cache per element, after the optional compression ratio
    # --- hardware, already in FLOP/s, B/s and s ---
    tp: int  # tensor-parallel degree
    gemm_flops: float  # peak FLOP/s for weight GEMMs in the weight dtype
    proj_flops: float  # peak FLOP/s for the attention projections in their weights' dtype
    attn_flops: float  # peak FLOP/s for attention matmuls in the activation dtype
    vector_flops: float  # peak FLOP/s for elementwise work
    mem_bw: float  # memory bandwidth, B/s
    eff_compute: float  # achieved fraction of peak FLOP/s
    eff_bw: float  # achieved fraction of memory bandwidth
    launch_s: float  # per-kernel launch overhead
    link_bw: float  # interconnect bandwidth per direction per GPU, B/s
    eff_link: float  # achieved fraction of link bandwidth in collectives
    link_latency_s: float  # latency of one collective
    a2a_bw: float  # the expert all-to-all's bandwidth per GPU, B/s: link_bw within a node; over more
    #                GPUs, their NVLink and network shares at once (simllm.sim.pack)
    # --- serving framework ---
    iter_overhead_s: float = 0.0  # CPU time per non-empty engine iteration the GPU does not hide
    seq_overhead_s: float = 0.0  # and per row with logits in it (a sequence's token: its bookkeeping and response)
    # Decode attention that scans each sequence's keys in one thread block per KV head (no split of
    # the sequence: TensorRT-LLM before multi-block mode): each layer takes at least this per key of
    # the batch's mean context (cost.unsplit_attention_nb); 0 = the kernel splits long sequences
    attn_token_s: float = 0.0
    # --- shape-aware costs (codes.EFF_*): empty = balanced expert routing and the scalar factors
    # above for every shape; (codes.ROUTE_SIZE,) = random routing's curve only; (codes.EFF_SIZE,) =
    # the routing curve (ones when balanced) and the kernel tables ---
    eff: np.ndarray = NO_EFF_TABLE  # float64


class AttentionParams(NamedTuple):
    """The :class:`CostParams` fields that price attention where every layer attends to all its
    keys (``simcore.cost.full_attention_totals_nb``), under the same names: the kernels pass these
    to its real call instead of the whole CostParams, whose every field a call copies
    (``simcore.cost.attention_params_nb`` takes them from one)."""

    n_layers: int
    kv_heads: float
    kv_width: float
    pair_flops: float
    a_bytes: float
    kv_bytes: float
    attn_flops: float
    mem_bw: float
    eff_compute: float
    eff_bw: float
    launch_s: float
    attn_token_s: float
    eff: np.ndarray


class EngineSettings(NamedTuple):
    """Scheduler settings of one engine replica (scalars only; where things live in its arrays is
    the separate :class:`simcore.layout.Layout`)."""

    policy: int  # POLICY_* code
    chunked_prefill: bool  # vLLM v1 (True) or v0 prefill-first iterations (False)
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_blocks: int  # paged KV pool, in blocks
    prefix_blocks: int  # blocks pinned by the shared, cached prompt prefix
    max_model_len: int
    static_slots: int  # static/dynamic batching: sequences the preallocated KV holds
    pad_prompts: bool  # static/dynamic: prefill pads every prompt to the batch's longest
    batch_max: int  # dynamic batching: a batch starts with this many requests ...
    batch_window_s: float  # ... or when its oldest request has waited this long
    timeout_s: float  # client timeout (0 = none): unfinished requests then count as errors
    n_clients: int  # closed loop: concurrent clients (0 = open loop)
    fast_forward: bool  # advance runs of identical decode iterations in closed form
    itl_min_exp: int  # the ITL histogram starts at 2**(itl_min_exp - 1) seconds ...
    itl_sub_bits: int  # ... with 2**itl_sub_bits bins per octave
    window_s: float  # width of one time-series window
    n_replicas: int = 1  # data-parallel engine replicas
    frontend_s: float = 0.0  # a request reaches the engine this long after its client sends it
    router: int = 0  # ROUTER_* code
    warmup: int = 0  # requests 0..warmup-1 are a warm-up: their inter-token latencies are not recorded
    lockstep: bool = False  # replicas are attention data-parallel ranks of one expert-parallel engine: they
    #                         step together (engine.lockstep_step_nb; continuous batching only)
    dp_pad_tokens: int = 0  # lockstep: a step whose largest rank has at most this many tokens (a CUDA
    #                         graph) runs every rank at that many (0: never padded)
    handoff: bool = False  # a disaggregated prefill pool: a request that emitted its first token is
    #                        handed to the decode pool (scheduler.finish_nb), not ended
    num_speculative_tokens: int = 0  # speculative decoding: drafts ``k`` a decoding request verifies per
    #                                  step (continuous batching; the acceptance and the drafter are the
    #                                  kernels' Speculation argument); 0: none
    # pipeline parallelism (simcore.pipeline): stages the layers are split over (1: none), stages a
    # node holds (every boundary after that many stages crosses nodes), and one boundary's send of
    # the activations: latency and seconds per token within a node and between nodes
    pipeline_stages: int = 1
    pipeline_batch_seqs: int = 0  # most sequences in one micro-batch (SGLang's --pp-max-micro-batch-size); 0:
    #                               no cap (vLLM: a batch takes every request it can)
    pipeline_stages_per_node: int = 1
    pipeline_latency_s: float = 0.0
    pipeline_s_per_token: float = 0.0
    pipeline_net_latency_s: float = 0.0
    pipeline_net_s_per_token: float = 0.0
    block_shift: int = -1  # log2(block_size) where block_size is a power of two (block_shift_of): divisions
    #                        by it become shifts (scheduler.block_div_nb); -1: divisions


def block_shift_of(block_size):
    """``EngineSettings.block_shift`` of ``block_size``: its log2 when a power of two, else -1."""
    block_size = int(block_size)
    return block_size.bit_length() - 1 if block_size > 0 and block_size & (block_size - 1) == 0 else -1


NO_RATES = np.zeros(0, dtype=np.float64)
NO_RATES.flags.writeable = False
NO_THRESHOLDS = np.zeros(0, dtype=np.int64)
NO_THRESHOLDS.flags.writeable = False


class Speculation(NamedTuple):
    """Speculative decoding's acceptance and drafter (``simcore.speculative``), read by the engine's
    kernels when ``EngineSettings.num_speculative_tokens`` > 0; the kernels take None without it."""

    rates: np.ndarray  # float64, read-only, (k,): unconditional per-position acceptance, non-increasing
    #                    (entry i: the probability that the first i + 1 drafts all pass)
    thresholds: np.ndarray  # int64, read-only, (k,): the rates as the draws' 32-bit hashes test them
    #                         (simcore.speculative.acceptance_thresholds)
    seed: int  # the acceptance draws' seed (one draw per request and step: simcore.speculative.uniform_nb)
    drafter: CostParams  # the drafter on one GPU (any CostParams when has_drafter is False)
    proj_params: float  # parameters of the drafter's input projection on one GPU (eh_proj / fc; 0: none)
    has_drafter: bool  # False: drafts cost no GPU time (n-gram prompt lookup, or no speculation)



class Transfer(NamedTuple):
    """How a disaggregated run moves KV caches from the prefill pool to the decode pool
    (``simcore.disagg``): each prefill instance sends over its own link, concurrent transfers on a
    link sharing its bandwidth equally (processor sharing)."""

    bandwidth: float  # B/s of one prefill instance's link
    latency_s: float  # before a transfer's first byte moves
    prefill_group: int  # prefill replicas per instance (its attention data-parallel ranks)
    decode_group: int  # decode replicas per instance
    first_token_on_decode: bool  # vLLM: the decode pool recomputes the prompt's last token and
    #                              samples the first token itself; SGLang / TensorRT-LLM: the prefill's
    #                              token arrives with the KV cache and the decode pool streams it
