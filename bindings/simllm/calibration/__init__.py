"""simllm.calibration: predictions against measurements, and fitting the factors that close the gap.

Owns ``simllm validate``'s point predictions and error tables (:mod:`.validate`), the fit of a
hardware profile's efficiency factors (:mod:`.fit`), ``simllm profile`` on a real GPU
(:mod:`.profile`, the entry points and grids, over :mod:`.profile_timing` — PyTorch imported only
there, inside its functions —, :mod:`.profile_fit`, pure arithmetic, and :mod:`.profile_write`),
the shape-aware kernel tables (:mod:`.kernels`: ``simllm kernels import`` and
:func:`~.kernels.tables_from_rows`, the fit ``simllm profile`` shares), editing hardware YAML in place
(:mod:`.hwyaml`), the accuracy record of validated points
(:mod:`.record`, ``configs/accuracy.json``) and the error bands and calibrated-domain checks made
from it (:mod:`.bands`). Measurements arrive as rows read by
:mod:`simllm.formats.measurements`.

May import: :mod:`simllm.sim`, :mod:`simllm.config` and the foundation modules.
"""
