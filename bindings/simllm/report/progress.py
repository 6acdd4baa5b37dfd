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
"""
import sys
import time


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
