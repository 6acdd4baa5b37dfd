"""simcore's decorator policy (simcore/_jit.py): every kernel cached, GIL released, and compiled
without reference counting except the entry points that allocate their workspace."""
import importlib
import pkgutil

import numba
import numpy as np
import pytest

import simcore

pytestmark = pytest.mark.skipif(numba.config.DISABLE_JIT, reason="the compiled kernels' options are what is checked")

ALLOCATING = {"simcore.engine.simulate_nb", "simcore.engine.simulate_into_nb", "simcore.disagg.simulate_disagg_nb"}


def _kernels():
    for info in pkgutil.walk_packages(simcore.__path__, "simcore."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, numba.core.registry.CPUDispatcher) and obj.py_func.__module__ == info.name:
                yield f"{info.name}.{name}", obj


def test_every_kernel_follows_the_policy():
    kernels = dict(_kernels())
    assert len(kernels) > 60 and ALLOCATING <= set(kernels)
    for name, k in kernels.items():
        assert k.targetoptions.get("nogil"), name
        assert type(k._cache).__name__ == "FunctionCache", name  # cache=True
        assert k.targetoptions.get("_nrt", True) == (name in ALLOCATING), name


def test_a_kernel_without_reference_counting_cannot_allocate():
    allocates_nb = numba.njit(nogil=True, _nrt=False)(lambda n: np.zeros(n))
    with pytest.raises(numba.core.errors.TypingError):
        allocates_nb(3)
