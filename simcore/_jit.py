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
more than the helpers' own arithmetic. So does ``engine.step_nb``, which is not small but has one
call site per kernel on the hot path. Each inlined copy is compiled again at every site and in
every kernel variant, so bigger functions stay real calls: inlining the decode run or the cohort
iteration too was faster on bench-1m but cost the plain kernel's cold compile or the test suite's
a third to a half more (README, Performance).

Numba's cache keys a function on its own source file only: after editing simcore, delete the
``*.nbi``/``*.nbc`` files under ``__pycache__`` (or set ``NUMBA_CACHE_DIR``) so callers in other
files recompile.

Where numba finds no folder to write its cache in (``__pycache__`` next to these files, then
``NUMBA_CACHE_DIR`` or the user's cache folder), it would fail every decorated function at import;
:data:`CACHING` is then False and the kernels compile in every process instead (the command line
says so in one line).
"""
import numba


def _caching_possible():
    """Whether numba has a writable cache location for the functions of this folder."""
    def probe():
        pass

    try:
        numba.core.caching.FunctionCache(probe)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return False
    except Exception:  # noqa: BLE001 - a numba without this (private) class: let njit decide
        return True
    return True


#: Whether compiled kernels go to numba's on-disk cache (see the module docstring).
CACHING = _caching_possible()

jit = numba.njit(cache=CACHING, nogil=True, _nrt=False)
jit_inline = numba.njit(cache=CACHING, nogil=True, inline="always", _nrt=False)
jit_alloc = numba.njit(cache=CACHING, nogil=True)
