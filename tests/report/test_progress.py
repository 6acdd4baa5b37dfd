"""simllm.report.progress: a single-line bar on terminals, silent elsewhere."""
import io
import sys

import pytest

from simllm.report.progress import Progress, format_duration


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


class FakeClock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


def _frames(text):
    """The successive drawn lines (between carriage returns), trailing padding removed."""
    return [f.rstrip() for f in text.split("\r") if f.strip()]


def test_draws_count_percentage_elapsed_and_eta():
    out, clock = FakeTTY(), FakeClock()
    with Progress(10, "loadtest", stream=out, clock=clock, width=10) as bar:
        clock.t += 4.0
        bar.advance(2)
        first = out.getvalue()
        clock.t += 56.0
        bar.advance(3)
    frames = _frames(out.getvalue())
    assert frames[0] == "loadtest [----------]  0/10   0%  elapsed 0:00  ETA --:--"
    # 2 of 10 in 4 s: 2 s each, 8 left -> 16 s.
    assert _frames(first)[-1] == "loadtest [##--------]  2/10  20%  elapsed 0:04  ETA 0:16"
    # 5 of 10 in 60 s: 5 left -> 60 s.
    assert frames[-1] == "loadtest [#####-----]  5/10  50%  elapsed 1:00  ETA 1:00"
    assert out.getvalue().endswith("\n") and out.getvalue().count("\n") == 1
    assert bar.eta_s(clock.t) == pytest.approx(60.0)


def test_redraws_in_place_at_most_ten_times_a_second():
    out, clock = FakeTTY(), FakeClock()
    bar = Progress(1000, "x", stream=out, clock=clock)
    with bar:
        for _ in range(100):  # 100 advances within 0.05 s: none redrawn after the first frame
            clock.t += 0.0005
            bar.advance()
        assert out.getvalue().count("\r") == 1
        for _ in range(100):  # 100 advances over 2 s: about 20 redraws, never two within 0.1 s
            clock.t += 0.02
            bar.advance()
        assert 15 <= out.getvalue().count("\r") <= 22
    # Closing draws the final, otherwise-undrawn state once, then ends the line.
    assert _frames(out.getvalue())[-1].startswith("x [")
    assert " 200/1000" in _frames(out.getvalue())[-1]
    assert out.getvalue().endswith("\n")


def test_last_unit_always_drawn_and_shorter_lines_wipe_longer_ones():
    out, clock = FakeTTY(), FakeClock()
    bar = Progress(2, "", stream=out, clock=clock, width=4)
    bar.advance()  # first frame
    clock.t += 3700
    bar.advance()  # within nothing of the rate limit but the last unit: drawn
    assert _frames(out.getvalue())[-1] == "[####] 2/2 100%  elapsed 1:01:40  ETA 0:00"
    bar.close()
    bar.close()  # idempotent
    assert out.getvalue().count("\n") == 1


def test_silent_when_not_a_tty_or_disabled():
    plain = io.StringIO()
    with Progress(5, "x", stream=plain) as bar:
        bar.advance(5)
    assert plain.getvalue() == ""
    tty = FakeTTY()
    with Progress(5, "x", stream=tty, enabled=False) as bar:
        bar.advance(5)
    assert tty.getvalue() == ""
    forced = io.StringIO()
    with Progress(5, "x", stream=forced, enabled=True) as bar:  # never into logs or pipes
        bar.advance(5)
    assert forced.getvalue() == ""


def test_closed_or_odd_streams_are_not_terminals():
    class Closed(io.StringIO):
        def isatty(self):
            raise ValueError("I/O operation on closed file")

    class NoIsatty:
        def write(self, text):
            raise AssertionError("must not write")

    for stream in (Closed(), NoIsatty()):
        with Progress(3, stream=stream) as bar:
            bar.advance()
        assert not bar.active


def test_newline_even_when_the_body_raises():
    out = FakeTTY()
    with pytest.raises(RuntimeError), Progress(3, "x", stream=out, clock=FakeClock()):
        raise RuntimeError("boom")
    assert out.getvalue().endswith("\n")


def test_zero_total_and_bad_total():
    out = FakeTTY()
    with Progress(0, "x", stream=out, clock=FakeClock(), width=4):
        pass
    assert "0/0 100%" in out.getvalue()
    with pytest.raises(ValueError):
        Progress(-1)


@pytest.mark.parametrize("seconds, text", [(0, "0:00"), (59.4, "0:59"), (61, "1:01"), (3599.6, "1:00:00"),
                                           (None, "--:--"), (float("inf"), "--:--"), (-1, "--:--")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_default_stream_is_stderr_at_creation(capsys):
    assert Progress(1).stream is sys.stderr
