"""simllm.sim: simulations, from validated configs to results.

Owns packing configs into the kernels' NamedTuples (:mod:`.pack`; random expert routing's
busiest-GPU curve from sampled routings, :mod:`.routing`), the GPU memory plan
(:mod:`.memory`), :func:`~.simulate.simulate` (one engine run), :func:`~.disagg.simulate_disagg` (a prefill
pool and a decode pool), :func:`~.capacity.capacity` (the request rate and throughput a deployment
sustains: one run saturated), :func:`~.estimate.estimate`
(one prefill and one decode step, closed form; a speculative drafter's step priced by
:mod:`.speculative`), :class:`~.results.SimResult` with the summary,
the one runner for many simulations (:mod:`.runner`: threads, processes, Dask, row statuses,
``progress(done, total)``), the one SLO type (:mod:`.slo`), the one statistics module
(:mod:`.stats`), and whether kernels run compiled or interpreted (:mod:`.kernelmode`; the
background compile of what an interpreted command ran, :mod:`.warmup`).

May import: :mod:`simcore`, :mod:`simllm.config` and the foundation modules (:mod:`simllm.errors`,
:mod:`simllm.fileio`, :mod:`simllm.text`).
"""
