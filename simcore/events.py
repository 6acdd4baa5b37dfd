"""numba's compile events, for a caller that wants to say that kernels are compiling (simcore
itself never prints): :func:`compile_listener` calls its two callbacks when the first compile
starts and when the last one ends, however deeply numba nests compiles of callees and from
however many threads. A function loaded from numba's on-disk cache raises no event.

May import: numba.
"""
import contextlib
import threading

from numba.core import event

#: numba's event around each function's compilation (a cache load raises none).
COMPILE_EVENT = "numba:compile"


class _Outermost(event.Listener):
    """Calls ``on_start`` when the count of compiles under way goes from 0 to 1 and ``on_end``
    when it returns to 0."""

    def __init__(self, on_start, on_end):
        self.on_start_cb, self.on_end_cb = on_start, on_end
        self.active = 0
        self.lock = threading.Lock()

    def on_start(self, ev):
        with self.lock:
            self.active += 1
            first = self.active == 1
        if first:
            self.on_start_cb()

    def on_end(self, ev):
        with self.lock:
            self.active -= 1
            last = self.active == 0
        if last:
            self.on_end_cb()


@contextlib.contextmanager
def compile_listener(on_start, on_end):
    """Inside the block, call ``on_start()`` when numba starts compiling while nothing else
    compiles, and ``on_end()`` when no compile is left under way.

    Parameters
    ----------
    on_start, on_end : callable
        No arguments; called in the compiling thread, so they should return quickly.
    """
    with event.install_listener(COMPILE_EVENT, _Outermost(on_start, on_end)):
        yield
