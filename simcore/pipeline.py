"""Pipeline parallelism in the engine: a replica's layers split over ``e.pipeline_stages`` stages
(each a tensor-parallel group of GPUs), micro-batches in flight through them at once.

vLLM v1 (``vllm/v1/engine/core.py``, ``step_with_batch_queue``): with ``pipeline_parallel_size``
P the engine keeps a queue of up to P scheduled batches. It schedules a new batch whenever the
queue has room and something can run, and otherwise waits for the oldest batch's output. A
decoding request whose last token is still in flight has nothing to schedule (its next token
depends on it), so it sits out until its batch returns; a prompt's next chunk can go in the
next batch at once. Layers are split as ``vllm.distributed.utils.get_pp_indices`` does: ``L // P``
a stage, the ``L % P`` left over one each to the stages before the last (the last also runs the
LM head and the sampler).

A batch passes the stages in order. Stage ``s`` starts it once the batch left stage ``s - 1`` and
its activations arrived (the send: hidden state and residual, ``2 x hidden`` elements a token,
each of the stage's ``tp`` GPUs sending its ``1 / tp`` share, within a node over NVLink, between
nodes over the network; ``EngineSettings.pipeline_*``) and once stage ``s`` finished the batch
before; a stage runs one batch at a time. A lone request therefore waits the sum of the stage
times plus the sends for each token; with at least P batches in flight the replica completes one
batch per slowest-stage time.

A stage's time is its share of the batch's whole-model time: its layers' part, the embedding and
the framework's CPU time per step on the first stage, the final norm, LM head, logits gather and
sampling on the last. The layers are alike but for their FFN where a MoE model's first layers are
dense (DeepSeek's ``first_k_dense_replace``): the dense FFNs go to the stages that hold those
layers, the MoE layers' experts, router and all-to-all to the others.

The engine advances a batch's requests when it schedules it (tokens emitted, requests retired
at the batch's completion time), as it does without pipelining; their KV blocks are freed then,
up to one pipeline pass before vLLM frees them. The replica's per-GPU figures (busy time, FLOPs,
bytes) are the batch's totals over its P stages.

State, per replica in ``acc`` at ``Layout.off_pipe``: each stage's free time, then the completion
times of the last P batches (a ring).

May import: :mod:`simcore._jit`, :mod:`simcore.codes`, :mod:`simcore.cost`.
"""
from simcore._jit import jit, jit_inline
from simcore.codes import (
    OP_EMBEDDING,
    OP_FFN_ACT,
    OP_FFN_DOWN,
    OP_FFN_UP,
    OP_FINAL_NORM,
    OP_LM_HEAD,
    OP_LOGITS_GATHER,
    OP_MOE_ACT,
    OP_MOE_ALLTOALL,
    OP_MOE_DOWN,
    OP_MOE_ROUTER,
    OP_MOE_UP,
    OP_SAMPLING,
)
from simcore.cost import op_total_seconds_nb, step_overhead_nb


@jit_inline
def stage_layers_nb(n_layers, stages, s):
    """Layers of stage ``s`` (vLLM's ``get_pp_indices``): ``n_layers // stages``, plus one for the
    ``n_layers % stages`` stages before the last."""
    extra = n_layers % stages
    return n_layers // stages + (1 if stages - 1 - extra <= s < stages - 1 else 0)


@jit
def ffn_split_nb(p, n_tokens, n_emit):
    """Seconds of a batch's dense FFNs over the dense layers and of its MoE layers' router,
    experts and all-to-all over the MoE layers, when a model has both (0, 0 otherwise: every layer
    is alike)."""
    dense = 0.0
    moe = 0.0
    if p.n_moe_layers == 0 or p.n_moe_layers == p.n_layers:
        return dense, moe
    for op in (OP_FFN_UP, OP_FFN_ACT, OP_FFN_DOWN):
        dense += op_total_seconds_nb(p, op, n_tokens, n_emit)
    for op in (OP_MOE_ROUTER, OP_MOE_UP, OP_MOE_ACT, OP_MOE_DOWN, OP_MOE_ALLTOALL):
        moe += op_total_seconds_nb(p, op, n_tokens, n_emit)
    return dense, moe


@jit
def pipeline_ends_nb(p, n_tokens, n_emit):
    """Seconds of a batch's work outside the layers: (the embedding, on the first stage; the final
    norm, LM head, logits gather and sampling, on the last), priced as in
    :func:`simcore.cost.iteration_totals_nb`."""
    first = op_total_seconds_nb(p, OP_EMBEDDING, n_tokens, n_emit)
    last = 0.0
    for op in (OP_FINAL_NORM, OP_LM_HEAD, OP_LOGITS_GATHER, OP_SAMPLING):
        last += op_total_seconds_nb(p, op, n_tokens, n_emit)
    return first, last


@jit_inline
def send_seconds_nb(e, s, n_tokens):
    """Seconds to send ``n_tokens`` tokens' activations from stage ``s`` to stage ``s + 1``: over
    the network when the boundary is between nodes (every ``pipeline_stages_per_node``-th)."""
    if (s + 1) % e.pipeline_stages_per_node == 0:
        return e.pipeline_net_latency_s + n_tokens * e.pipeline_net_s_per_token
    return e.pipeline_latency_s + n_tokens * e.pipeline_s_per_token


@jit
def pipeline_pass_nb(p, e, lay, acc, now, n_tokens, n_emit, dt):
    """A batch scheduled at ``now`` whose whole-model time is ``dt`` (``iteration_totals_nb``)
    passes the stages: each stage's free time moves to when it finishes the batch, and the
    batch's completion goes into the ring (over the oldest entry). Returns the completion time."""
    stages = e.pipeline_stages
    first, last = pipeline_ends_nb(p, n_tokens, n_emit)
    dense, moe = ffn_split_nb(p, n_tokens, n_emit)
    alike = dt - step_overhead_nb(p, n_emit) - first - last - dense - moe  # what every layer does alike
    if alike < 0.0:
        alike = 0.0
    n_dense = p.n_layers - p.n_moe_layers
    free = lay.off_pipe
    t = now
    below = 0  # layers of the stages before
    for s in range(stages):
        layers = stage_layers_nb(p.n_layers, stages, s)
        work = alike * layers / p.n_layers
        if dense > 0.0 or moe > 0.0:  # the first n_dense layers are dense
            d = min(below + layers, n_dense) - below if below < n_dense else 0
            work += dense * d / n_dense + moe * (layers - d) / p.n_moe_layers
        below += layers
        if s == 0:
            work += first + step_overhead_nb(p, n_emit)
        if s == stages - 1:
            work += last
        start = t if t > acc[free + s] else acc[free + s]
        t = start + work
        acc[free + s] = t
        if s < stages - 1:
            t += send_seconds_nb(e, s, n_tokens)
    ring = free + stages
    oldest = ring
    for i in range(1, stages):
        if acc[ring + i] < acc[oldest]:
            oldest = ring + i
    acc[oldest] = t
    return t


@jit_inline
def _in_flight_nb(e, lay, acc, now):
    """Batches in flight at ``now`` (completing after it) and the first of their completions
    (``now`` when none)."""
    ring = lay.off_pipe + e.pipeline_stages
    count = 0
    first = now
    for i in range(e.pipeline_stages):
        c = acc[ring + i]
        if c > now:
            count += 1
            if first == now or c < first:
                first = c
    return count, first


@jit
def pipeline_next_nb(e, lay, acc, now):
    """When the replica schedules next after ``now``: at ``now`` while fewer than
    ``pipeline_stages`` batches are in flight (completing after ``now``), else when the oldest
    returns."""
    count, first = _in_flight_nb(e, lay, acc, now)
    return now if count < e.pipeline_stages else first


@jit
def pipeline_wait_nb(e, lay, acc, now):
    """Nothing could be scheduled at ``now``: the earliest completion of a batch in flight (its
    requests can then go on), or ``now`` when none is."""
    return _in_flight_nb(e, lay, acc, now)[1]
