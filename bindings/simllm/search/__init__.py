"""simllm.search: many configurations at once.

Owns the sweep spec (:mod:`.spec`), its files and journal (:mod:`.store`), running sweeps
(:mod:`.sweep`), Pareto frontiers (:mod:`.pareto`) and the SLO-constrained search
(:mod:`.optimize`).

May import: :mod:`simllm.sim`, :mod:`simllm.config` and the foundation modules.
"""
