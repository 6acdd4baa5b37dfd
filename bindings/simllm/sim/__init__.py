"""simllm.sim: one simulation, from validated configs to results.

Owns packing configs into the kernels' NamedTuples (:mod:`.pack`), the GPU memory plan
(:mod:`.memory`), :func:`~.simulate.simulate` (the engine run), :func:`~.estimate.estimate`
(one prefill and one decode step, closed form), and :class:`~.results.SimResult` with the
summary statistics (:mod:`.results`).

May import: :mod:`simcore`, :mod:`simllm.config` and the foundation modules (:mod:`simllm.errors`,
:mod:`simllm.fileio`, :mod:`simllm.text`).
"""
