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
entry point that allocates its own workspace (``disagg.simulate_disagg_nb``) uses
:data:`jit_alloc`, the same policy with reference counting; the engine's own entry,
``engine.simulate``, is Python that allocates and calls the compiled steps.

Small helpers called per operator, per request or per token inside the hot loops use
:data:`jit_inline`: the same policy, inlined into their callers at numba-IR level. A real call
copies every field of the CostParams/EngineSettings/Layout tuples into its arguments, which cost
more than the helpers' own arithmetic. So are ``engine.step_nb`` and the cohort's paths it takes
(``fast.decode_run.decode_run_nb``, ``fast.cohort.fast_iteration_nb``, ``materialize_nb``,
``rebuild_nb``), which are not small but have one call site each on the hot path: 11% off
bench-1m's kernel for 40 s of cold compile instead of 29 s. Each inlined copy is compiled again at
every site and in every kernel variant (with speculation, pipeline stages, lockstep ranks, a
streamed run), so the cold test suite compiles about twice as long; other big functions stay
real calls (docs/performance.md).

The cache lives in a per-user folder, never next to these files (:mod:`simcore.userdirs`):
``~/.cache/simllm/numba/<key>`` on Linux (``$XDG_CACHE_HOME`` if set), ``~/Library/Caches`` on
macOS, ``%LOCALAPPDATA%`` on Windows, where ``<key>`` holds the Python version, numba's version
and a digest of every simcore source file. Numba's own index checks only a function's own file, so
the key is what makes an edit of any simcore file, a reinstall or a version change compile afresh
instead of loading stale callees; nothing needs deleting by hand. ``NUMBA_CACHE_DIR``, when set,
is used as it is (then stale files there are the user's to clear). Numba reads its cache folder
(``numba.config.CACHE_DIR``) when each decorator is applied, so the decorators below set it for
that moment only and leave numba's setting for other code as they found it.

numba's inliner (``inline="always"``) deep-copies the callee's IR at every call site one block
at a time, each block with a memo of its own, so each block's copy drags along a copy of the
callee's whole variable scope: quadratic in the callee's size. The engine's kernels inline big
functions (``engine.step_nb`` into the event loop), and those copies took about half of a cold
compile. :func:`share_inline_copies` gives the blocks of one inlining one memo (one copy of the
scope, the same deep copy otherwise): the plain kernel's cold compile takes 30 s instead of 56 s on
the project's 2-core VM, and the compiled code is the same. It changes nothing where numba's
inliner is not built as this expects (then it compiles as slowly as before).

Where that folder cannot be written (or numba finds no locator for it), numba would fail every
decorated function at import, or fall back to ``__pycache__`` next to these files; :data:`CACHING`
is then False and the kernels compile in every process instead (the command line says so in one
line).

**Interpreted kernels.** With ``SIMLLM_KERNELS=interpreted`` in the environment when simcore is
imported (:data:`INTERPRETED`), the decorators compile nothing: each function stays Python, the
same source numba would compile, so a run gives the same numbers (the suite checks this under
``NUMBA_DISABLE_JIT``), only slower per request. Its first run needs no minutes of compiling: the
command line runs small work this way while the cache is cold (``simllm.sim.kernelmode``). Each
such function notes the argument types it was called with from outside simcore (not from another
kernel) in its ``signatures`` attribute, numba's own name for the signatures a dispatcher has
compiled, so that another process can compile exactly those (``simllm.sim.warmup``).
"""
import contextlib
import contextvars
import copy
import functools
import inspect
import os
import sys
import tempfile

import numba

from simcore.userdirs import kernel_cache_dir

#: The folder numba caches simcore's kernels in (see the module docstring).
CACHE_DIR = kernel_cache_dir(numba.__version__)


@contextlib.contextmanager
def _numba_cache_dir(path):
    """numba's cache folder is ``path`` inside the block, as it was outside it."""
    before = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = str(path)
    try:
        yield
    finally:
        numba.config.CACHE_DIR = before


def _writable(path):
    """Whether ``path`` is (or can be made) a folder this process can write in."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _caching_possible(path):
    """Whether numba caches the functions of this folder in ``path``: the folder is writable (else
    numba would fall back to ``__pycache__`` here) and numba finds a locator for it."""
    if not _writable(path):
        return False

    def probe():
        pass

    try:
        with _numba_cache_dir(path):
            numba.core.caching.FunctionCache(probe)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return False
    except Exception:  # noqa: BLE001 - a numba without this (private) class: let njit decide
        return True
    return True


#: Whether compiled kernels go to numba's on-disk cache in :data:`CACHE_DIR` (module docstring).
CACHING = _caching_possible(CACHE_DIR)

_INLINE_MEMO = contextvars.ContextVar("simcore_inline_memo", default=None)


class _SharedMemoCopy:
    """The ``copy`` module as numba's inliner sees it: ``deepcopy`` of an IR block without a memo
    takes the memo of its scope in the inlining under way (:func:`share_inline_copies`);
    everything else is ``copy``'s."""

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(x, memo=None):
        memos = _INLINE_MEMO.get()
        scope = getattr(x, "scope", None)
        if memo is None and memos is not None and scope is not None:
            memo = memos.setdefault(id(scope), {})  # the blocks of one IR: one scope
        return copy.deepcopy(x, memo)


def share_inline_copies():
    """Make numba's inliner copy a callee's IR blocks with one memo per inlining (see the module
    docstring). Returns whether it applies: numba's ``InlineWorker.inline_ir`` exists and its
    module's ``copy`` is the standard module (or already this shim). Idempotent."""
    try:
        from numba.core import inline_closurecall as ic

        inline_ir = ic.InlineWorker.inline_ir
    except (ImportError, AttributeError):
        return False
    if getattr(inline_ir, "simcore_shared_memo", False):
        return True
    if getattr(ic, "copy", None) is not copy:
        return False

    @functools.wraps(inline_ir)
    def shared(self, *args, **kwargs):
        # One memo per scope copied from in this inlining: its two copies of the callee's blocks
        # (the one it mutates, and the one it returns, made from the first) each copy one scope
        # and share nothing with each other.
        token = _INLINE_MEMO.set({})
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _INLINE_MEMO.reset(token)

    shared.simcore_shared_memo = True
    ic.copy = _SharedMemoCopy()
    ic.InlineWorker.inline_ir = shared
    return True


#: Whether numba's inliner copies with one memo per inlining (:func:`share_inline_copies`).
SHARED_INLINE_COPIES = share_inline_copies()


#: The environment variable that chooses compiled (the default) or interpreted kernels at import.
KERNELS_ENV = "SIMLLM_KERNELS"
#: Whether this process runs simcore's functions as Python (see the module docstring).
INTERPRETED = os.environ.get(KERNELS_ENV, "").strip().lower() == "interpreted"

#: The code objects of simcore's decorated functions: a call from one of them is a kernel calling a
#: kernel, which numba compiles as part of its caller. Filled as the modules are imported.
_KERNEL_CODES = set()


def call_signature(func, args, kwargs=None, parameters=None):
    """numba's argument types of the call ``func(*args, **kwargs)``: each value's
    ``numba.typeof``, and the parameters left out typed ``Omitted(default)`` as numba types a call
    that leaves them out. ``parameters`` (``inspect.signature(func).parameters`` values) may be
    passed to save looking them up.

    Raises
    ------
    ValueError
        A value has no numba type, or a parameter without a default is missing.
    """
    kwargs = kwargs or {}
    if parameters is None:
        parameters = tuple(inspect.signature(func).parameters.values())
    types = []
    for i, q in enumerate(parameters):
        if i < len(args):
            types.append(numba.typeof(args[i]))
        elif q.name in kwargs:
            types.append(numba.typeof(kwargs[q.name]))
        elif q.default is not inspect.Parameter.empty:
            types.append(numba.types.Omitted(q.default))
        else:
            raise ValueError(f"{func.__name__}: no value for {q.name}")
    return tuple(types)


def _interpreted(func):
    """``func`` as Python that notes the argument types of each call from outside simcore's
    kernels in ``.signatures`` (a set of tuples of numba types); ``.py_func`` is ``func``."""
    _KERNEL_CODES.add(func.__code__)
    parameters = tuple(inspect.signature(func).parameters.values())
    signatures = set()
    kernel_codes, frame = _KERNEL_CODES, sys._getframe

    @functools.wraps(func)
    def call(*args, **kwargs):
        if frame(1).f_code not in kernel_codes:
            try:
                signatures.add(call_signature(func, args, kwargs, parameters))
            except ValueError:  # nothing numba could compile for: nothing to note
                pass
        return func(*args, **kwargs)

    call.py_func = func
    call.signatures = signatures
    return call


def _policy(**options):
    """numba's ``njit`` with the policy's options, caching in :data:`CACHE_DIR`; Python that notes
    its callers' argument types when :data:`INTERPRETED`."""
    if INTERPRETED:
        return _interpreted
    decorate = numba.njit(cache=CACHING, nogil=True, **options)
    if not CACHING:
        return decorate

    def cached(func):
        with _numba_cache_dir(CACHE_DIR):  # numba picks the folder as it wraps the function
            return decorate(func)

    return cached


jit = _policy(_nrt=False)
jit_inline = _policy(inline="always", _nrt=False)
jit_alloc = _policy()
