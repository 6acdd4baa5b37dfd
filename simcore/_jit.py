"""The one decorator policy of simcore.

Every compiled function is numba's ``njit`` with an on-disk cache (a warm start does not
recompile) and the GIL released (kernels can run in threads). No ``fastmath``: reassociation
would change results between runs of the reference tests.

Small helpers called per operator, per request or per token inside the hot loops use
:data:`jit_inline`: the same policy, inlined into their callers at numba-IR level. A real call
copies every field of the CostParams/EngineSettings/Layout tuples into its arguments and increments and
decrements each array argument's reference count atomically, which cost more than the helpers'
own arithmetic.

Numba's cache keys a function on its own source file only: after editing simcore, delete the
``*.nbi``/``*.nbc`` files under ``__pycache__`` (or set ``NUMBA_CACHE_DIR``) so callers in other
files recompile.
"""
import numba

jit = numba.njit(cache=True, nogil=True)
jit_inline = numba.njit(cache=True, nogil=True, inline="always")
