"""simcore's decorator policy (simcore/_jit.py): every kernel cached, GIL released, and compiled
without reference counting except the entry points that allocate their workspace."""
import importlib
import pkgutil

import numba
import numpy as np
import pytest

import simcore

pytestmark = pytest.mark.skipif(numba.config.DISABLE_JIT, reason="the compiled kernels' options are what is checked")

ALLOCATING = {"simcore.disagg.simulate_disagg_nb"}


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


def _branchy(x, n):
    """A callee of several blocks whose variables live across them."""
    total = 0.0
    for i in range(n):
        if i % 3 == 0:
            total += x * i
        elif i % 3 == 1:
            total -= x
        else:
            total *= 0.5
    return total if total > 0 else -total


def test_numbas_inliner_copies_with_one_memo_per_scope_and_compiles_the_same():
    """share_inline_copies: numba's inliner then copies a callee's blocks with one scope between
    them (not one per block), shares no object between the copy and what it copied, and the
    functions it inlines compute what the Python functions do, at every call site."""
    from numba.core import inline_closurecall as ic

    from simcore import _jit

    assert _jit.SHARED_INLINE_COPIES and _jit.share_inline_copies()  # applies, idempotent
    func_ir = numba.core.compiler.run_frontend(_branchy)
    assert len(func_ir.blocks) > 3
    token = _jit._INLINE_MEMO.set({})
    try:
        blocks = {label: ic.copy.deepcopy(b) for label, b in func_ir.blocks.items()}
        again = {label: ic.copy.deepcopy(b) for label, b in blocks.items()}
    finally:
        _jit._INLINE_MEMO.reset(token)
    scopes = {id(b.scope) for b in blocks.values()}
    assert len(scopes) == 1 and id(func_ir.blocks[min(func_ir.blocks)].scope) not in scopes
    assert len({id(b.scope) for b in again.values()}) == 1 and not scopes & {id(b.scope) for b in again.values()}
    for src, cpy in ((func_ir.blocks, blocks), (blocks, again)):
        for label in src:
            assert [str(st) for st in src[label].body] == [str(st) for st in cpy[label].body]
            assert all(a is not b for a, b in zip(src[label].body, cpy[label].body))

    inlined_nb = numba.njit(inline="always")(_branchy)

    @numba.njit
    def two_sites_nb(x, n):
        return inlined_nb(x, n) + 2.0 * inlined_nb(x + 1.0, n + 1)

    for x, n in ((1.5, 10), (-2.0, 7), (0.0, 0)):
        assert two_sites_nb(x, n) == _branchy(x, n) + 2.0 * _branchy(x + 1.0, n + 1)
