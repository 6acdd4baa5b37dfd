"""simllm.analysis: questions asked of simulations of one configuration family.

Owns :mod:`.diagnose` (what limits a run and what one change would do), :mod:`.compare` (one
workload on several GPUs or models, side by side) and :mod:`.loadtest` (EvalScope-style load
levels and the knee).

May import: :mod:`simllm.sim`, :mod:`simllm.config` and the foundation modules.
"""
