"""simcore: the compiled core of simllm. numba kernels over plain arrays and NamedTuples of
scalars; no files, no YAML, no printing. simllm builds the inputs and reads the outputs.

Kernels take their arguments in one order: cost params ``p``, speculative decoding ``sp``, engine
settings ``e``, layout ``lay``,
times (``now`` or ``t_end`` first, then bounds such as ``next_arrival``), request arrays ``reqi``,
``reqf``, the replica's workspace ``ws``, the shared counters ``glob``, the accumulator ``acc``, then
the kernel's own operands (a request, a count, a value, a flag). A kernel takes only those it uses.
"""
from simcore import codes
from simcore._jit import CACHING
from simcore.cost import (
    batch_aggregates_nb,
    decode_run_time_nb,
    experts_hit_nb,
    moe_assignments_nb,
    moe_experts_seconds_nb,
    moe_local_nb,
    iteration_costs_nb,
    iteration_time_nb,
    iteration_totals_memo_nb,
    iteration_totals_nb,
    attention_totals_nb,
    new_cost_arrays,
    op_cost_nb,
    op_count_nb,
    op_seconds_nb,
    op_time_nb,
    op_total_seconds_nb,
    rest_totals_nb,
    routing_factors_nb,
)
from simcore.memory import (
    activation_workspace_bytes_nb,
    kv_bytes_per_token_nb,
    resident_weight_bytes_nb,
    streamed_weight_bytes_nb,
)
from simcore.engine import simulate_nb
from simcore.layout import Layout, make_layout, split_accumulator
from simcore.params import CostParams, EngineSettings, Speculation
from simcore.speculative import acceptance_thresholds, accepted_nb, draft_totals_nb, uniform_nb

__all__ = [
    "CACHING",
    "CostParams",
    "EngineSettings",
    "Speculation",
    "acceptance_thresholds",
    "accepted_nb",
    "draft_totals_nb",
    "uniform_nb",
    "Layout",
    "make_layout",
    "simulate_nb",
    "split_accumulator",
    "activation_workspace_bytes_nb",
    "batch_aggregates_nb",
    "decode_run_time_nb",
    "codes",
    "experts_hit_nb",
    "moe_assignments_nb",
    "moe_experts_seconds_nb",
    "moe_local_nb",
    "iteration_costs_nb",
    "iteration_time_nb",
    "iteration_totals_nb",
    "iteration_totals_memo_nb",
    "attention_totals_nb",
    "rest_totals_nb",
    "kv_bytes_per_token_nb",
    "new_cost_arrays",
    "op_cost_nb",
    "op_count_nb",
    "op_seconds_nb",
    "op_total_seconds_nb",
    "op_time_nb",
    "resident_weight_bytes_nb",
    "routing_factors_nb",
    "streamed_weight_bytes_nb",
]
