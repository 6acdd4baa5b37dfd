"""The one decorator policy of simcore.

Every compiled function in simcore is decorated with :func:`jit`: numba's ``njit`` with an
on-disk cache (a warm start does not recompile) and the GIL released (kernels can run in threads).
No ``fastmath``: reassociation would change results between runs of the reference tests.
"""
import numba

jit = numba.njit(cache=True, nogil=True)
