"""simcore: the compiled core of simllm. numba kernels over plain arrays and NamedTuples of
scalars; no files, no YAML, no printing. simllm builds the inputs and reads the outputs.

Kernels take their arguments in one order: cost params ``p``, speculative decoding ``sp``, engine
settings ``e``, layout ``lay``,
times (``now`` or ``t_end`` first, then bounds such as ``next_arrival``), request arrays ``reqi``,
``reqf``, the replica's workspace ``ws``, the shared counters ``glob``, the accumulator ``acc``, then
the kernel's own operands (a request, a count, a value, a flag). A kernel takes only those it uses.

Importing simcore imports :mod:`simcore.codes` (plain constants, which the configuration layer
reads) and nothing compiled: the names below come from their modules, numba with them, the first
time one is read (PEP 562), so ``import simllm`` does not pay numba's import until it simulates.
"""

from simcore import codes
from simcore.lazy import lazy_names

# Each public name and the module that defines it, imported when the name is first read.
_HOMES = {
    "simcore._jit": ("CACHE_DIR", "CACHING", "call_signature"),
    "simcore.cost": (
        "batch_aggregates_nb", "decode_run_time_nb", "experts_hit_nb", "moe_assignments_nb",
        "moe_experts_seconds_nb", "moe_local_nb", "iteration_costs_nb", "iteration_seconds", "iteration_time_nb",
        "iteration_totals_memo_nb", "iteration_totals_nb", "attention_totals_nb", "new_cost_arrays",
        "op_cost_nb", "op_count_nb", "op_seconds_nb", "op_time_nb", "op_total_seconds_nb", "rest_totals_nb",
        "routing_factors_nb", "step_overhead_nb",
    ),
    "simcore.memory": (
        "activation_workspace_bytes_nb", "kv_bytes_per_token_nb", "resident_weight_bytes_nb",
        "streamed_weight_bytes_nb",
    ),
    "simcore.engine": ("simulate",),
    "simcore.events": ("compile_listener",),
    "simcore.layout": ("Layout", "make_layout", "split_accumulator"),
    "simcore.params": ("CostParams", "EngineSettings", "Speculation"),
    "simcore.speculative": ("acceptance_thresholds", "accepted_nb", "draft_totals_nb", "uniform_nb"),
}
_HOME_OF, __getattr__, __dir__ = lazy_names(globals(), _HOMES)

__all__ = ["codes", *_HOME_OF]
