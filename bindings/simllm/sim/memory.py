"""GPU memory plan: weights + activation workspace + runtime overhead + paged KV pool must fit in
``memory x gpu_memory_utilization``; a pool that cannot hold one max-length sequence is a
simulated OOM, as the real engine refuses to start.

Models with windowed layers (sliding-window or chunked local attention) follow vLLM's hybrid KV
cache manager, one block pool shared by the attention types: a full-attention block holds
``block_size`` tokens of every full-attention layer, the unit the engine counts; a windowed layer
holds at most :meth:`ModelConfig.window_blocks` blocks per sequence (vLLM frees the blocks that
fell out of the window), which the engine reserves as a request's fixed blocks
(:func:`fixed_blocks`, ``RI_FIXED_BLOCKS``) when it gets its first block: an upper bound while
the sequence is shorter than its final length, exact once it reaches it. Linear-attention layers
(Gated DeltaNet) hold a constant recurrent state per sequence, reserved the same way (vLLM's
mamba groups take one state per sequence from the same pool). Capacity in tokens is then no
longer linear in context.
"""
import math
from dataclasses import asdict, dataclass

import numpy as np

from simcore import activation_workspace_bytes_nb, kv_bytes_per_token_nb, resident_weight_bytes_nb
from simcore.pipeline import stage_layers_nb
from simllm.config import dtypes
from simllm.config.hardware import GIB
from simllm.errors import SimulatedOOM


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory breakdown, in bytes (token counts where named)."""

    total_bytes: float
    usable_bytes: float  # total x gpu_memory_utilization
    weight_bytes: float
    activation_bytes: float
    runtime_overhead_bytes: float
    kv_pool_bytes: float  # bytes of whole KV blocks allocated
    kv_bytes_per_token: float  # of the layers that keep every token (the full-attention layers)
    block_size: int
    num_blocks: int
    kv_capacity_tokens: int
    max_model_len: int
    preallocated: bool  # kv_cache.max_cache_size fixed the pool size
    window_blocks: int = 0  # blocks one windowed layer holds per sequence at most (0: none)
    window_block_ratio: float = 0.0  # windowed layers per full-attention layer: a windowed block's
    #                                  size in full-attention blocks
    window_bytes_per_seq: float = 0.0  # bytes the windowed layers hold per sequence at most
    state_bytes_per_seq: float = 0.0  # linear-attention layers' recurrent states of one sequence
    state_blocks: int = 0  # ... in full-attention blocks (rounded up)
    stage_share: float = 1.0  # pipeline parallelism: the share of the layers the stage that sizes the pool holds

    def fixed_blocks(self, tokens):
        """Full-attention blocks a sequence holds besides its context's, reaching ``tokens`` tokens
        (int or array): its windowed layers' ``ceil(ratio x min(window_blocks, ceil(tokens /
        block_size)))`` and its recurrent states' ``state_blocks``."""
        if not self.window_blocks:
            out = np.full(np.shape(tokens), self.state_blocks, dtype=np.int64)
        else:
            grown = np.minimum(self.window_blocks, -(-np.asarray(tokens) // self.block_size))
            out = np.ceil(self.window_block_ratio * grown - 1e-9).astype(np.int64) + self.state_blocks
        return out if isinstance(tokens, np.ndarray) else int(out)

    @property
    def free_bytes(self):
        """Usable bytes left after weights, activations, runtime overhead and the KV pool."""
        return self.usable_bytes - self.weight_bytes - self.activation_bytes - self.runtime_overhead_bytes - self.kv_pool_bytes

    def max_concurrent_sequences(self, tokens_per_sequence):
        """How many sequences of ``tokens_per_sequence`` tokens the KV pool holds at once."""
        blocks = math.ceil(tokens_per_sequence / self.block_size)
        blocks += self.fixed_blocks(tokens_per_sequence) if blocks else 0
        return self.num_blocks // blocks if blocks else 0

    def to_dict(self):
        out = asdict(self)
        out["free_bytes"] = self.free_bytes
        return out


def oom_hints(tp, pp, gpus_per_node, weight_dtype, kv_dtype):
    """What an out-of-memory message suggests, from what the configuration already uses: more
    GPUs by tensor parallelism while one node has room for them, else pipeline stages over more
    nodes (vLLM's multi-node layout: TP inside a node, PP across nodes); quantisation only of what
    is not already at 8 bits or fewer (weights to fp8, the KV cache to fp8)."""
    ways = []
    if tp * 2 <= gpus_per_node:
        ways.append(f"use more GPUs (--tensor-parallel-size {tp * 2})")
    else:
        ways.append(f"split the layers over more nodes (--pipeline-parallel-size {pp * 2} with "
                    f"--tensor-parallel-size {tp}: {gpus_per_node} GPUs a node)")
    quantise = []
    if dtypes.BYTES[weight_dtype] > 1.0:
        quantise.append("--dtype fp8")
    if dtypes.BYTES[kv_dtype] > 1.0:
        quantise.append("--kv-cache-dtype fp8")
    if quantise:
        ways.append(f"quantise ({' / '.join(quantise)})")
    elif tp * 2 <= gpus_per_node:
        ways.append(f"split the layers into stages (--pipeline-parallel-size {pp * 2})")
    return ", ".join(ways)


def _gb(x):
    return f"{x / 1e9:.2f} GB"


def pipeline_stages(params, model, serving):
    """Each pipeline stage's ``(layers, weight bytes)`` on one of its GPUs, vLLM's split
    (``simcore.pipeline.stage_layers_nb``): its layers' weights (a MoE model's first layers dense,
    the rest with their experts), the embedding shard on the first stage, the final norm and the
    LM head on the last (a tied head is a copy of the embedding there). One stage holding
    everything without pipeline parallelism."""
    tied = model.tie_word_embeddings
    pp = serving.pipeline_parallel_size
    if pp == 1:
        return [(model.layers, resident_weight_bytes_nb(params, tied))]
    ends = resident_weight_bytes_nb(params._replace(n_layers=0, n_moe_layers=0), tied)
    dense_layer = resident_weight_bytes_nb(params._replace(n_layers=1, n_moe_layers=0), tied) - ends
    moe_layer = resident_weight_bytes_nb(params._replace(n_layers=1, n_moe_layers=1), tied) - ends
    n_dense = params.n_layers - params.n_moe_layers
    out = []
    below = 0
    for s in range(pp):
        layers = stage_layers_nb(params.n_layers, pp, s)
        dense = max(0, min(below + layers, n_dense) - below)
        weights = dense * dense_layer + (layers - dense) * moe_layer
        if s == 0:
            weights += params.vocab * params.hidden / params.tp * params.a_bytes
        if s == pp - 1:
            weights += (params.p_lm_head + params.norm_params) * params.a_bytes
        out.append((layers, weights))
        below += layers
    return out


def plan_memory(params, model, hardware, serving, resolved, *, draft_weight_bytes=0.0, draft_kv_bytes_per_token=0.0):
    """Size the KV pool for one GPU.

    Parameters
    ----------
    params : simcore.CostParams
        Packed per-GPU parameters (``pack_cost_params``).
    model, hardware, serving, resolved
        The validated configs and ``serving.resolve``'s result.
    draft_weight_bytes, draft_kv_bytes_per_token : float
        A speculative drafter's own weights on this GPU and the KV cache its layers keep per
        token in the same pool (vLLM keeps an MTP or EAGLE layer's KV beside the target's; see
        ``simllm.sim.speculative``); 0 without one.

    Returns
    -------
    MemoryPlan

    Raises
    ------
    SimulatedOOM
        When the weights and workspace do not fit, or the KV pool cannot hold one sequence of
        ``max_model_len`` tokens; the message gives the breakdown in GB.
    """
    total = hardware.memory_size_bytes
    usable = total * serving.gpu_memory_utilization
    workspace = activation_workspace_bytes_nb(params, float(resolved.max_num_batched_tokens), float(serving.max_num_seqs))
    runtime = hardware.runtime_overhead_gib * GIB
    # Pipeline parallelism: the stage whose GPU holds the fewest tokens' KV sizes the pool (vLLM
    # takes the smallest block count over its workers); one stage without it.
    room = usable - workspace - runtime
    layers, weights = min(pipeline_stages(params, model, serving), key=lambda st: (room - st[1]) / st[0])
    share = layers / model.layers
    weights += draft_weight_bytes
    bs = serving.block_size
    full, windowed = model.full_layers, model.windowed_layers
    if not full:  # every layer windowed: the pool's unit is their block, grown with the context
        full, windowed = windowed, 0
    # one layer's KV per token on this GPU, times the share of the layers its stage holds: the
    # layer counts below then count that stage's
    per_layer = kv_bytes_per_token_nb(params) / model.layers * share
    per_token = (kv_bytes_per_token_nb(params) * share if full == model.layers else full * per_layer) if model.kv_cache_enabled else 0.0
    per_token += draft_kv_bytes_per_token if model.kv_cache_enabled else 0.0
    block_bytes = per_token * bs
    window_blocks = model.window_blocks(bs) if windowed and model.kv_cache_enabled else 0
    state = model.linear_layers * params.lin_state_bytes * share if model.kv_cache_enabled else 0.0
    left = usable - weights - workspace - runtime
    tp = serving.tensor_parallel_size
    stages = f", PP={serving.pipeline_parallel_size}" if serving.pipeline_parallel_size > 1 else ""
    where = f"{model.name} on {hardware.gpu} (TP={tp}{stages}, weights {resolved.weight_dtype}, KV {resolved.kv_dtype})"
    budget = (
        f"{hardware.memory_size_gb:.1f} GB x gpu_memory_utilization {serving.gpu_memory_utilization:g} = "
        f"{_gb(usable)} usable: weights {_gb(weights)} + activations {_gb(workspace)} + runtime {_gb(runtime)}"
    )
    preallocated = bool(model.kv_cache_max_tokens) and model.kv_cache_enabled
    if not model.kv_cache_enabled:
        blocks = 0
    elif preallocated:
        blocks = math.ceil(model.kv_cache_max_tokens / serving.block_size)
    else:
        blocks = int(max(left, 0.0) // block_bytes)
    plan = MemoryPlan(
        total_bytes=total,
        usable_bytes=usable,
        weight_bytes=weights,
        activation_bytes=workspace,
        runtime_overhead_bytes=runtime,
        kv_pool_bytes=blocks * block_bytes,
        kv_bytes_per_token=per_token,
        block_size=serving.block_size,
        num_blocks=blocks,
        kv_capacity_tokens=blocks * serving.block_size,
        max_model_len=resolved.max_model_len,
        preallocated=preallocated,
        window_blocks=window_blocks,
        window_block_ratio=windowed / full if window_blocks else 0.0,
        window_bytes_per_seq=window_blocks * bs * windowed * per_layer,
        state_bytes_per_seq=state,
        state_blocks=math.ceil(state / block_bytes - 1e-9) if state and block_bytes else 0,
        stage_share=share,
    )
    hints = oom_hints(serving.tensor_parallel_size, serving.pipeline_parallel_size, hardware.gpus_per_node,
                      resolved.weight_dtype, resolved.kv_dtype)
    if left <= 0.0:
        raise SimulatedOOM(
            f"simulated OOM: {where} does not fit: {budget} = {_gb(weights + workspace + runtime)}, "
            f"{_gb(-left)} over with no room for the KV cache; {hints}, or raise --gpu-memory-utilization",
            plan,
        )
    if preallocated and plan.kv_pool_bytes > left:
        raise SimulatedOOM(
            f"simulated OOM: {where}: kv_cache.max_cache_size {model.kv_cache_max_tokens} tokens needs "
            f"{_gb(plan.kv_pool_bytes)} of KV cache but only {_gb(left)} is left ({budget}); lower "
            f"kv_cache.max_cache_size to at most {int(left // block_bytes) * serving.block_size} tokens or {hints}",
            plan,
        )
    if model.kv_cache_enabled and plan.max_concurrent_sequences(resolved.max_model_len) < 1:
        fits = (blocks - plan.fixed_blocks(resolved.max_model_len)) * bs
        raise SimulatedOOM(
            f"simulated OOM: {where}: one {resolved.max_model_len}-token sequence needs "
            f"{_gb(resolved.max_model_len * per_token)} of KV cache but the pool holds {fits} tokens "
            f"({_gb(plan.kv_pool_bytes)}; {budget} + KV); lower --max-model-len to at most {fits}, "
            f"raise --gpu-memory-utilization, or {hints}",
            plan,
        )
    return plan
