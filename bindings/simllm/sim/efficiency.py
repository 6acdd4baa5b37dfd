"""Folding a GPU's kernel tables into the one efficiency array a cost kernel reads
(``CostParams.eff``, laid out by ``simcore.codes.EFF_*``).

A GEMM's N, K and dtype are fixed by the model, its tensor-parallel sharding and the weight dtype,
so each weight GEMM's 3-D table collapses here, once, to its seconds at M = 2**i rows (the cost
kernel's own FLOPs and bytes over the roofline, divided by the table's efficiency): the kernel then
interpolates one curve per operator and an iteration stays O(1); the layer-weighted sum of the
curves over the batch's tokens is packed too (``EFF_GEMM_SUM``), so an iteration's total reads one. A curve is made non-decreasing in
M (a larger batch never runs faster: engines pad to the captured size that is fast), and linear
interpolation in M keeps it so between the points. MoE expert GEMMs take the efficiency of one
grouped kernel: the model's own expert shape's measured curve over tokens where the set has it,
else the set's MoE table at the tokens each hit expert receives
(``tokens x experts_per_token / experts hit``) and the hit experts' weight bytes; a set without
one prices them as one GEMM of M those tokens and N all hit experts' widths side by side. The all-reduce curve of this TP degree becomes seconds at its bus-byte points, made
non-decreasing and interpolated linearly in bytes the same way; tables without an all-reduce curve
(no collective measured) get the scalar model's ``latency + launch + bytes / (link bandwidth x
utilisation)`` at those points, which linear interpolation in bytes reproduces exactly. The
experts' all-to-all of attention data-parallel ranks (DeepEP's dispatch and combine) reads the
set's measured all-to-all curve in seconds the same way where it has one and the tensor-parallel
group stays in a node, else the collectives' curve. The
attention tables are copied as they are: an MLA model's own (its heads per GPU, its KV dtype)
where the set measured MLA kernels, else the GQA ones.
"""
import collections
import threading

import numpy as np

from simcore import codes
from simcore.cost import expert_shapes_nb, moe_local_nb, op_cost_nb, op_count_nb
from simllm.config import kernels as kt


WEIGHTS, PROJ, ACTS = 0, 1, 2  # which dtype's GEMM table an op reads


def _gemm_shapes(p):
    """``{op: (N, K, table)}`` of the weight GEMMs of packed params ``p``; ``table`` says whose
    dtype the op's weights are in: the weights' (``WEIGHTS``), the attention projections'
    (``PROJ``) or the activations' (``ACTS``)."""
    h = p.hidden
    e_up, _, _, s_up, _, _ = expert_shapes_nb(p)
    return {
        codes.OP_QKV_PROJ: (p.qkv_width, h, PROJ),
        codes.OP_O_PROJ: (h, p.p_o / h, PROJ),
        codes.OP_FFN_UP: (p.ffn_up_width, h, WEIGHTS),
        codes.OP_FFN_DOWN: (h, p.ffn_inner, WEIGHTS),
        codes.OP_MOE_ROUTER: (p.n_experts * p.ep, h, ACTS),  # every expert's logit
        codes.OP_MOE_UP: (e_up + s_up, h, WEIGHTS),
        codes.OP_MOE_DOWN: (h, max(p.expert_inner, p.shared_inner), WEIGHTS),
        codes.OP_LM_HEAD: (p.p_lm_head / h, h, ACTS),
    }


_MEMO_SIZE = 256  # arrays kept (28 KB each, 7 MB at most): a sweep's distinct models x GPUs x parallelisms
# (validate's silicon CSV has 251)
_memo = collections.OrderedDict()
_memo_lock = threading.Lock()


def efficiency_array(tables, p, weight_dtype, expert_dtype=None, proj_dtype=None, measured_link=True,
                     mla_heads=0.0, kv_dtype="bf16", dispatch_kernels=False, quantised_share=0.0):
    """:func:`build_efficiency_array`, kept for the last ``_MEMO_SIZE`` distinct inputs: the
    array is read-only, and a sweep that varies the load, not the model, the GPU or the
    parallelism, would otherwise rebuild the same one for every configuration (about two thirds
    of a small configuration's time: 2.7 of 4 ms)."""
    key = (id(tables), p._replace(eff=None), p.eff.tobytes(), weight_dtype, expert_dtype, proj_dtype,
           bool(measured_link), float(mla_heads), kv_dtype, bool(dispatch_kernels), float(quantised_share))
    with _memo_lock:
        hit = _memo.get(key)
        if hit is not None and hit[0] is tables:  # the tables held by the memo: their id is theirs
            _memo.move_to_end(key)
            return hit[1]
    eff = build_efficiency_array(tables, p, weight_dtype, expert_dtype, proj_dtype, measured_link, mla_heads,
                                 kv_dtype, dispatch_kernels, quantised_share)
    with _memo_lock:
        _memo[key] = (tables, eff)
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return eff


def build_efficiency_array(tables, p, weight_dtype, expert_dtype=None, proj_dtype=None, measured_link=True,
                           mla_heads=0.0, kv_dtype="bf16", dispatch_kernels=False, quantised_share=0.0):
    """The ``(codes.EFF_SIZE,)`` read-only float64 array for packed params ``p`` (GEMM and
    collective curves in seconds, the attention tables efficiencies in ``[EFF_FLOOR, 1]``).

    Parameters
    ----------
    tables : KernelTables
    p : CostParams
        Packed without tables (its shapes are what is looked up); its ``eff`` empty or random
        expert routing's curve (``codes.ROUTE_SIZE`` slots), which the result keeps.
    weight_dtype : str
        The dtype the weight GEMMs run at (``fp8`` / ``fp4`` pick their own GEMM table when the
        tables have one and the GPU's peak for it is what ``p.gemm_flops`` holds).
    expert_dtype : str, optional
        The routed experts' weight dtype for the MoE tables (default ``weight_dtype``); a
        weight-only format (``int4``, ``mxfp4``) has its own measured MoE kernels.
    proj_dtype : str, optional
        The dtype the attention projections run at (default ``weight_dtype``; its peak is
        ``p.proj_flops``).
    measured_link : bool
        False when the tensor-parallel group spans nodes: the collectives then take the scalar
        model over ``p.link_bw`` (the network), not the node's measured all-reduce curve.
    mla_heads : float
        An MLA model's query heads per GPU (0 for other attention): its attention reads the
        set's MLA tables of that head count (:meth:`KernelTables.mla_tables`) where it has them.
    kv_dtype : str
        The KV cache's dtype (which MLA tables).
    dispatch_kernels : bool
        The experts' all-to-all runs dispatch/combine kernels (DeepEP's, as wide-EP deployments
        with attention data parallelism do): it reads the set's measured all-to-all curve. Without
        attention data parallelism every GPU of the TP group already holds the tokens and the
        engines combine the experts' outputs over the collectives' path.
    quantised_share : float
        Where a quantised weight GEMM (its dtype's own table: FP8, FP4) is memory-bound, its
        efficiency is at least this share of the BF16 table's at the same shape (the framework
        profile's ``quantized_gemm_bf16_share``; 0: the quantised table alone).
    """
    expert_dtype = expert_dtype or weight_dtype
    eff = np.ones(codes.EFF_SIZE, dtype=np.float64)
    if p.eff.shape[0] == codes.ROUTE_SIZE:  # random expert routing's curve (simllm.sim.routing)
        eff[:codes.ROUTE_SIZE] = p.eff
    eff[codes.EFF_GEMM_SUM:codes.EFF_GEMM_SUM + codes.EFF_M_POINTS] = 0.0
    rows = kt.log2_grid(0, codes.EFF_M_POINTS)
    weights = tables.gemm_table(weight_dtype)
    acts = tables.gemm_table("bf16")
    by_table = {WEIGHTS: (weights, p.gemm_flops), PROJ: (tables.gemm_table(proj_dtype or weight_dtype), p.proj_flops),
                ACTS: (acts, p.gemm_flops)}
    moe = tables.moe_table(expert_dtype)
    # the model's own expert shape where it was measured (inter per GPU, as the tables store it)
    own = None  # (measured without expert parallelism)
    if p.ep == 1.0 and p.moe_dp == 1.0:
        own = tables.moe_shape_curve(expert_dtype, p.hidden, p.expert_inner, p.n_experts, p.experts_per_token)
    for op, (n, k, table) in _gemm_shapes(p).items():
        if n <= 0 or k <= 0 or op_count_nb(p, op) == 0:
            continue
        if op in (codes.OP_MOE_UP, codes.OP_MOE_DOWN) and p.n_experts > 0:
            # One grouped kernel runs every hit expert (vLLM's fused_moe, SGLang's, TensorRT-LLM's):
            # priced off the measured MoE table where the set has one, else as one GEMM of the hit
            # experts' widths side by side (its fixed latency paid once per layer, not per expert).
            local = np.array([moe_local_nb(p, t) for t in rows])  # assignments to this GPU's experts, hit
            hit = np.maximum(local[:, 1], 1.0)
            m = np.maximum(local[:, 0] / hit, 1.0)
            if own is not None:
                e = kt.moe_curve_efficiency(own, rows)
            elif moe is not None:
                e = kt.moe_efficiency(moe, m, hit * 3.0 * p.hidden * p.expert_inner * p.w_bytes)
            else:
                e = kt.gemm_efficiency(weights, m, n * hit, k)
        else:
            e = kt.gemm_efficiency(by_table[table][0], rows, n, k)
        # A quantised weight GEMM (FP8, FP4) where it is memory-bound moves its bytes at least at
        # quantised_share of the BF16 GEMM's efficiency at its shape.
        quantised = (quantised_share > 0.0 and table != ACTS and by_table[table][0] is not acts
                     and not (op in (codes.OP_MOE_UP, codes.OP_MOE_DOWN) and p.n_experts > 0))
        e16 = quantised_share * kt.gemm_efficiency(acts, rows, n, k) if quantised else None
        peak = by_table[table][1]
        seconds = np.empty(codes.EFF_M_POINTS)
        for i, t in enumerate(rows):
            flops, nbytes, _ = op_cost_nb(p, op, t, t, t, t)
            ei = e[i]
            if e16 is not None and flops / peak < nbytes / p.mem_bw:
                ei = max(ei, e16[i])
            seconds[i] = max(flops / peak, nbytes / p.mem_bw) / max(ei, codes.EFF_FLOOR)
        start = codes.EFF_GEMM_S + op * codes.EFF_M_POINTS
        eff[start:start + codes.EFF_M_POINTS] = np.maximum.accumulate(seconds)
        if op not in (codes.OP_LM_HEAD, codes.OP_MOE_UP, codes.OP_MOE_DOWN):  # (see simcore.cost.gemm_op_seconds_nb)
            eff[codes.EFF_GEMM_SUM:codes.EFF_GEMM_SUM + codes.EFF_M_POINTS] += (
                op_count_nb(p, op) * eff[start:start + codes.EFF_M_POINTS])
    curve = tables.allreduce_curve(p.tp) if measured_link else None
    link = eff[codes.EFF_LINK:codes.EFF_LINK + codes.EFF_LINK_POINTS]
    link[:] = scalar_link_seconds(p) if curve is None else kt.link_seconds_curve(curve, p.link_bw)
    # the experts' all-to-all: the measured one-node curve (its bytes scaled to the node's links by
    # the kernel where the all-to-all crosses nodes), else the collectives' curve
    a2a = tables.alltoall if dispatch_kernels and measured_link and p.ep > 1.0 else None
    eff[codes.EFF_A2A:codes.EFF_A2A + codes.EFF_LINK_POINTS] = (
        link if a2a is None else kt.link_seconds_curve(a2a, p.link_bw))
    attention = (tables.attention_prefill, tables.attention_decode)
    if mla_heads > 0:
        attention = tables.mla_tables(kv_dtype, mla_heads) or attention
    eff[codes.EFF_PREFILL:codes.EFF_DECODE] = attention[0].reshape(-1)
    eff[codes.EFF_DECODE:codes.EFF_GEMM_SUM] = attention[1].reshape(-1)
    eff.flags.writeable = False
    return eff


def scalar_link_seconds(p):
    """Seconds of the scalar cost model, ``link_latency + launch + bytes / (link_bw x eff_link)``,
    at the all-reduce curve's bus-byte points: what tables without a measured collective use
    (affine in bytes, so the kernel's linear interpolation gives the scalar model between them)."""
    nbytes = kt.log2_grid(codes.EFF_LINK_LOG2_MIN, codes.EFF_LINK_POINTS)
    return p.link_latency_s + p.launch_s + nbytes / (p.link_bw * p.eff_link)
