"""A dependency-free, single-line progress bar for long command-line runs.

::

    with Progress(len(points), "loadtest", enabled=not args.quiet) as bar:
        for p in points:
            ...
            bar.advance()

It draws ``loadtest [########------------]  2/5  40%  elapsed 0:03  ETA 0:05`` on one line,
redrawn in place with ``\\r`` at most ``1 / min_interval_s`` times a second, and ends it with a
newline. It writes nothing when the stream is not a terminal (logs, pipes, tests) or when
``enabled`` is False.

:class:`CompileNotice` says that numba is compiling the simulation kernels (a cold start takes
minutes, in silence otherwise)::

    with CompileNotice(enabled=not args.quiet).listening():
        ...  # anything that may compile

    simllm: compiling simulation kernels (first run only) ... 12 s

redrawn in place on a terminal at most once a second; on any other stream one line when it
starts and one when it ends with the total. Nothing when the compile ends within ``delay_s``.
"""
import contextlib
import sys
import threading
import time

import simcore


def format_duration(seconds):
    """``m:ss``, or ``h:mm:ss`` from an hour; ``--:--`` when unknown (None, negative or inf)."""
    if seconds is None or not seconds >= 0 or seconds == float("inf"):
        return "--:--"
    s = int(seconds + 0.5)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _is_tty(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


class Progress:
    """Single-line progress reporter.

    Parameters
    ----------
    total : int
        Units of work (>= 0).
    label : str
        Text before the bar.
    stream : file, optional
        Where to draw (default ``sys.stderr``, looked up when the reporter is made).
    enabled : bool or None
        False silences it; None or True draws when ``stream`` is a terminal (never otherwise, so
        logs and pipes stay clean).
    clock : callable
        Seconds, monotonic (injectable for tests).
    min_interval_s : float
        Least time between redraws in seconds (0.1: at most 10 redraws per second); the first
        and the final state are always drawn.
    width : int
        Characters of the bar itself.
    """

    def __init__(self, total, label="", stream=None, enabled=None, *, clock=time.monotonic, min_interval_s=0.1,
                 width=30):
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        self.total = int(total)
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.active = enabled is not False and _is_tty(self.stream)
        self.clock = clock
        self.min_interval_s = min_interval_s
        self.width = width
        self.done = 0
        self.start = clock()
        self._last_draw = None  # clock time of the last redraw
        self._drawn_len = 0
        self._dirty = False
        self._closed = False

    def __enter__(self):
        self._draw()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def advance(self, n=1):
        """Count ``n`` more units done; redraw unless the last redraw was too recent (the last
        unit is always drawn)."""
        self.done += n
        self._dirty = True
        now = self.clock()
        if self._last_draw is None or now - self._last_draw >= self.min_interval_s or self.done >= self.total:
            self._draw(now)

    def __call__(self, done, total):
        """The runner's progress protocol (``progress(done, total)``, see
        :mod:`simllm.sim.runner`): ``done`` of ``total`` units are finished."""
        self.total = int(total)
        self.advance(done - self.done)

    def close(self):
        """Draw the final state (if not drawn yet) and end the line; idempotent."""
        if self._closed:
            return
        if self.active and (self._dirty or self._last_draw is None):
            self._draw()
        self._closed = True
        if not self.active:
            return
        self.stream.write("\n")
        self.stream.flush()

    def eta_s(self, now=None):
        """Seconds left at the rate so far; None before the first unit is done."""
        if self.done <= 0:
            return None
        elapsed = (self.clock() if now is None else now) - self.start
        return elapsed / self.done * max(self.total - self.done, 0)

    def line(self, now=None):
        """The text of the bar at ``now`` (default: the clock)."""
        now = self.clock() if now is None else now
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        digits = len(str(self.total))
        label = f"{self.label} " if self.label else ""
        return (f"{label}[{bar}] {self.done:>{digits}}/{self.total} {frac:4.0%}  "
                f"elapsed {format_duration(now - self.start)}  ETA {format_duration(self.eta_s(now))}")

    def _draw(self, now=None):
        if not self.active or self._closed:
            return
        now = self.clock() if now is None else now
        text = self.line(now)
        pad = " " * max(self._drawn_len - len(text), 0)  # wipe the tail of a longer previous line
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self._drawn_len = len(text)
        self._last_draw = now
        self._dirty = False


#: What :class:`CompileNotice` says while numba compiles.
COMPILE_TEXT = "simllm: compiling simulation kernels (first run only) ..."


class CompileNotice:
    """One line on a stream while numba compiles (see the module docstring).

    A *session* runs from the start of a compile while none was under way until no compile has
    been under way for ``merge_s``: the compiles of one command (several entry points, one after
    the other) make one line, its time the wall time from the first start to the last end.

    Parameters
    ----------
    stream : file, optional
        Where to write (default ``sys.stderr``, looked up when the notice is made).
    enabled : bool
        False: nothing is written and nothing listens.
    clock : callable
        Seconds, monotonic (injectable for tests).
    delay_s : float
        A session shorter than this writes nothing (a compile of a second or less, say a small
        kernel, is not worth a line).
    interval_s : float
        Least time between redraws on a terminal.
    merge_s : float
        A compile starting less than this after the previous one ended continues its session.
    poll_s : float or None
        How often a background thread looks at the clock while a session is open; None: no
        thread (the caller calls :meth:`tick`).
    """

    def __init__(self, stream=None, enabled=True, *, clock=time.monotonic, delay_s=1.0, interval_s=1.0,
                 merge_s=1.0, poll_s=0.2):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = bool(enabled)
        self.tty = _is_tty(self.stream)
        self.clock = clock
        self.delay_s, self.interval_s, self.merge_s, self.poll_s = delay_s, interval_s, merge_s, poll_s
        self._lock = threading.RLock()
        self._start = None      # clock time the open session started; None: none open
        self._ended = None      # clock time its last compile ended; None while one is under way
        self._shown = False     # the session's line is on the stream
        self._last_draw = None
        self._drawn_len = 0
        self._wake = None       # the ticker thread's stop signal

    # -- the listener's side

    def started(self):
        """A compile started while none was under way."""
        if not self.enabled:
            return
        with self._lock:
            now = self.clock()
            if self._start is not None and self._ended is not None and now - self._ended >= self.merge_s:
                self._finish()  # the previous session's grace passed without a tick
            if self._start is None:
                self._start, self._shown, self._last_draw = now, False, None
                if self.poll_s is not None:
                    self._wake = threading.Event()
                    threading.Thread(target=self._tick_until, args=(self._wake,), daemon=True,
                                     name="simllm-compile-notice").start()
            self._ended = None

    def ended(self):
        """No compile is under way any more."""
        if not self.enabled:
            return
        with self._lock:
            if self._start is not None:
                self._ended = self.clock()
                if self.merge_s <= 0:
                    self._finish()

    # -- drawing

    def tick(self):
        """Draw what is due at the clock's time: the line once a session has lasted ``delay_s``
        (redrawn on a terminal every ``interval_s``); the end of a session whose last compile
        ended ``merge_s`` ago."""
        with self._lock:
            if self._start is None:
                return
            now = self.clock()
            if self._ended is not None:
                if now - self._ended >= self.merge_s:
                    self._finish()
                return
            if now - self._start < self.delay_s:
                return
            if self.tty:
                if self._last_draw is None or now - self._last_draw >= self.interval_s:
                    self._draw(f"{COMPILE_TEXT} {now - self._start:.0f} s")
                    self._last_draw = now
            elif not self._shown:
                self._write(COMPILE_TEXT + "\n")
            self._shown = True

    def close(self):
        """End the open session, if any (its line with the total so far); idempotent."""
        with self._lock:
            if self._start is not None:
                if self._ended is None:
                    self._ended = self.clock()
                self._finish()

    @contextlib.contextmanager
    def listening(self):
        """Listen to numba's compile events inside the block (nothing when not enabled); the
        open session is ended when the block ends."""
        if not self.enabled:
            yield self
            return
        try:
            with simcore.compile_listener(self.started, self.ended):
                yield self
        finally:
            self.close()

    def _finish(self):
        total_s = self._ended - self._start
        if self._shown or total_s >= self.delay_s:
            if self.tty:
                self._draw(f"{COMPILE_TEXT} {total_s:.0f} s, done")
                self._write("\n")
            else:
                if not self._shown:
                    self._write(COMPILE_TEXT + "\n")
                self._write(f"simllm: compiled simulation kernels in {total_s:.0f} s\n")
        if self._wake is not None:
            self._wake.set()
        self._start = self._ended = self._wake = None
        self._shown, self._drawn_len = False, 0

    def _tick_until(self, wake):
        while not wake.wait(self.poll_s):
            try:
                self.tick()
            except (OSError, ValueError):  # the stream closed under us: stop drawing
                return

    def _draw(self, text):
        pad = " " * max(self._drawn_len - len(text), 0)
        self._write("\r" + text + pad)
        self._drawn_len = len(text)

    def _write(self, text):
        self.stream.write(text)
        self.stream.flush()
