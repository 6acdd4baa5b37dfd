"""The line on stderr while numba compiles (report/progress.py's CompileNotice, switched on by the
commands that simulate through cli/common.py's shows_compiles): drawn from numba's compile events,
redrawn at most once a second on a terminal, a start and an end line elsewhere, nothing for a
compile under a second or under -q."""
import argparse
import io
import time

import numba
import pytest

from simllm.cli.common import shows_compiles
from simllm.report.progress import COMPILE_TEXT, CompileNotice


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Terminal(io.StringIO):
    def isatty(self):
        return True


def notice(stream, clock, **kw):
    return CompileNotice(stream, clock=clock, poll_s=None, **kw)


def at(clock, t, call):
    clock.t = t
    call()


def test_a_pipe_gets_a_start_line_and_an_end_line_with_the_total():
    clock, out = Clock(), io.StringIO()
    n = notice(out, clock)
    at(clock, 0.0, n.started)
    at(clock, 0.5, n.tick)
    assert out.getvalue() == ""  # not yet a second
    at(clock, 1.2, n.tick)
    at(clock, 5.0, n.tick)
    assert out.getvalue() == COMPILE_TEXT + "\n"
    at(clock, 12.4, n.ended)
    at(clock, 12.9, n.tick)  # within merge_s: maybe another compile follows
    assert out.getvalue().count("\n") == 1
    at(clock, 13.5, n.tick)
    assert out.getvalue() == COMPILE_TEXT + "\nsimllm: compiled simulation kernels in 12 s\n"
    at(clock, 20.0, n.tick)
    n.close()
    assert out.getvalue().count("\n") == 2


def test_a_terminal_line_is_redrawn_in_place_at_most_once_a_second():
    clock, out = Clock(), Terminal()
    n = notice(out, clock)
    at(clock, 0.0, n.started)
    for t in (0.3, 1.0, 1.2, 1.5, 1.99, 2.0, 2.3, 3.1):
        at(clock, t, n.tick)
    draws = out.getvalue().split("\r")[1:]
    assert [d.strip() for d in draws] == [f"{COMPILE_TEXT} {s} s" for s in (1, 2, 3)]
    assert "\n" not in out.getvalue()
    at(clock, 3.4, n.ended)
    at(clock, 4.5, n.tick)
    assert out.getvalue().split("\r")[-1] == f"{COMPILE_TEXT} 3 s, done\n"


def test_a_short_compile_or_a_disabled_notice_writes_nothing():
    clock, out = Clock(), io.StringIO()
    n = notice(out, clock)
    at(clock, 0.0, n.started)
    at(clock, 0.8, n.ended)
    at(clock, 3.0, n.tick)
    n.close()
    off = notice(out, clock, enabled=False)
    at(clock, 4.0, off.started)
    at(clock, 9.0, off.tick)
    at(clock, 10.0, off.ended)
    off.close()
    assert out.getvalue() == ""


def test_compiles_close_together_make_one_session():
    clock, out = Clock(), io.StringIO()
    n = notice(out, clock)
    at(clock, 0.0, n.started)
    at(clock, 0.9, n.ended)
    at(clock, 1.3, n.started)  # 0.4 s later: the same command's next kernel
    at(clock, 1.5, n.tick)
    at(clock, 4.0, n.ended)
    n.close()
    assert out.getvalue() == COMPILE_TEXT + "\nsimllm: compiled simulation kernels in 4 s\n"


def test_the_ticker_thread_draws_while_the_caller_is_busy():
    out = io.StringIO()
    n = CompileNotice(out, delay_s=0.05, poll_s=0.01)
    n.started()
    deadline = time.monotonic() + 5
    while COMPILE_TEXT not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)  # stands for a compile: the caller never ticks
    assert out.getvalue() == COMPILE_TEXT + "\n"
    n.ended()
    n.close()
    assert out.getvalue().startswith(COMPILE_TEXT + "\nsimllm: compiled simulation kernels in ")


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="numba compiles nothing")
def test_numbas_compile_events_drive_it_once_per_outermost_compile():
    """A real compile of two throwaway functions, one calling the other (numba compiles the callee
    inside the caller's compile): one session; a second call (compiled already) writes nothing,
    nor does a compile after the block."""
    out = io.StringIO()

    @numba.njit
    def inner_nb(x):
        return x + 1

    @numba.njit
    def outer_nb(x):
        return inner_nb(x) * 2

    n = CompileNotice(out, delay_s=0.0, merge_s=0.0, poll_s=None)
    with n.listening():
        assert outer_nb(1) == 4
        first = out.getvalue()
        assert outer_nb(2) == 6
    assert first.startswith(COMPILE_TEXT + "\nsimllm: compiled simulation kernels in ") and first.count("\n") == 2
    assert out.getvalue() == first
    assert numba.njit(lambda x: x - 1)(1) == 0
    assert out.getvalue() == first


@pytest.mark.parametrize("quiet", [False, True])
def test_the_commands_notice_is_quiet_under_q(quiet, capsys):
    """shows_compiles (what the simulating commands wear) listens to numba's compile events and
    writes to stderr, unless -q."""
    @shows_compiles
    def cmd(args, out):
        with numba.core.event.trigger_event("numba:compile"):  # a compile of 1.2 s
            time.sleep(1.2)
        out.write("done\n")
        return 0

    assert cmd(argparse.Namespace(quiet=quiet), io.StringIO()) == 0
    err = capsys.readouterr().err
    if quiet:
        assert err == ""
    else:
        assert err.startswith(COMPILE_TEXT + "\nsimllm: compiled simulation kernels in 1 s")
    assert cmd(argparse.Namespace(), io.StringIO()) == 0  # a command without -q
    assert COMPILE_TEXT in capsys.readouterr().err
