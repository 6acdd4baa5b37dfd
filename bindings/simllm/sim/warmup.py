"""``python -m simllm.sim.warmup FILE``: compile into numba's kernel cache the signatures an
interpreted command ran (:func:`simllm.sim.kernelmode.start_warmup` writes ``FILE``, a pickled
``[(module, name, signature)]``, and starts this in the background at low priority).

One warm-up at a time per cache folder (a lock file beside the kernels; the next waits for it),
so two commands never compile the same kernels at once. ``FILE`` is read and removed once the lock
is held: while it exists or the lock is held, a warm-up is pending or under way
(:func:`wait_for_warmups`). What
fails to compile is written to ``warmup.log`` in the cache folder and skipped: the next command
then finds that kernel cold and runs interpreted again.

May import: :mod:`simcore` and :mod:`simllm.sim`.
"""
import importlib
import os
import pickle
import sys
import time
import traceback

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock
    fcntl = None

from simllm.sim.kernelmode import COMPILED, KERNELS_ENV, cache_dir

#: The lock file's name in the kernel cache folder.
LOCK_NAME = "warmup.lock"
#: The log of what failed, in the kernel cache folder.
LOG_NAME = "warmup.log"
#: Niceness added to this process: the user's own commands come first.
NICENESS = 10


def _lock(folder):
    """An exclusive lock on the folder's lock file, held until the returned handle is closed
    (POSIX; elsewhere nothing is locked and None is returned)."""
    if fcntl is None:  # pragma: no cover - Windows
        return None
    handle = open(os.path.join(folder, LOCK_NAME), "a")  # noqa: SIM115 - the caller closes it
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def wait_for_warmups(folder, timeout_s=1800.0, poll_s=0.2):
    """Wait until no warm-up is pending or under way in the kernel cache ``folder`` (POSIX): no
    ``warmup-*.pickle`` left, then the lock free. Returns whether that happened in ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while any(name.startswith("warmup-") and name.endswith(".pickle") for name in os.listdir(folder)):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    if fcntl is None:  # pragma: no cover - Windows
        return True
    with open(os.path.join(folder, LOCK_NAME), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        fcntl.flock(handle, fcntl.LOCK_UN)
    return True


def compile_signatures(signatures, log=None):
    """Compile each ``(module, name, signature)`` (a cache load when it is already there); returns
    how many compiled or loaded. One that fails is written to ``log`` (a text file) and skipped."""
    done = 0
    for module_name, name, sig in signatures:
        try:
            dispatcher = getattr(importlib.import_module(module_name), name)
            dispatcher.compile(sig)
            done += 1
        except Exception:  # noqa: BLE001 - a warm-up never fails the user's work
            if log is not None:
                log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {module_name}.{name}{sig}\n{traceback.format_exc()}\n")
    return done


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or os.environ.get(KERNELS_ENV) != COMPILED:
        print(f"usage: {KERNELS_ENV}={COMPILED} python -m simllm.sim.warmup FILE", file=sys.stderr)
        return 2
    if hasattr(os, "nice"):
        os.nice(NICENESS)
    path = argv[0]
    folder = cache_dir()
    os.makedirs(folder, exist_ok=True)
    lock = _lock(folder)  # first: while FILE exists or the lock is held, a warm-up is pending or under way
    with open(path, "rb") as f:
        signatures = pickle.load(f)
    os.remove(path)
    with open(os.path.join(folder, LOG_NAME), "a") as log:
        compile_signatures(signatures, log)
    if lock is not None:
        lock.close()  # held until here: a collected handle would have let the lock go
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
