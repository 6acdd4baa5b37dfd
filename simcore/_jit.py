"""The one decorator policy of simcore.

Every compiled function is numba's ``njit`` with an on-disk cache (a warm start does not
recompile) and the GIL released (kernels can run in threads). No ``fastmath``: reassociation
would change results between runs of the reference tests.

Kernels allocate nothing and keep no array beyond their call: they borrow the arrays their
caller passes (``p.eff`` inside CostParams, ``reqi``, ``ws``, ``acc``), so they are compiled
without numba's runtime reference counting (``_nrt=False``). With it, every call that passed an
array and every ``p.eff`` read cost an atomic increment and decrement of the array's count:
profiled with ``perf`` on bench-1m, those two instructions took about half of the kernels' time. A
kernel that tried to allocate would fail to compile, so the rule is checked, not trusted. The
entry points that allocate their own workspace (``engine.simulate_nb``,
``engine.simulate_into_nb``, ``disagg.simulate_disagg_nb``) use :data:`jit_alloc`, the same
policy with reference counting.

Small helpers called per operator, per request or per token inside the hot loops use
:data:`jit_inline`: the same policy, inlined into their callers at numba-IR level. A real call
copies every field of the CostParams/EngineSettings/Layout tuples into its arguments, which cost
more than the helpers' own arithmetic.

Numba's cache keys a function on its own source file only: after editing simcore, delete the
``*.nbi``/``*.nbc`` files under ``__pycache__`` (or set ``NUMBA_CACHE_DIR``) so callers in other
files recompile.
"""
import numba

jit = numba.njit(cache=True, nogil=True, _nrt=False)
jit_inline = numba.njit(cache=True, nogil=True, inline="always", _nrt=False)
jit_alloc = numba.njit(cache=True, nogil=True)
