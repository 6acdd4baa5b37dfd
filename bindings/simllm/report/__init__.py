"""simllm.report: what people see. Text reports of runs, estimates, validations and calibrations
(:mod:`.text`), the progress bar (:mod:`.progress`) and PNG figures (:mod:`.plots`, matplotlib
imported only there).

May import: every layer below the CLI (:mod:`simllm.analysis`, :mod:`simllm.search`,
:mod:`simllm.calibration`, :mod:`simllm.formats`, :mod:`simllm.sim`, :mod:`simllm.config`)
and the foundation modules.
"""
