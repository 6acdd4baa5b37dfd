"""The one runner (simllm.sim.runner): every executor gives the same outcomes in the order of the
items, configuration and OOM errors become statuses, progress follows one protocol, and the
commands that share it (optimize, compare, loadtest, diagnose, validate, sweep) take
--executor/--scheduler/--workers with identical output."""
import contextlib
import io
from concurrent.futures import ThreadPoolExecutor

import pytest

import simllm
import simllm.cli
from simllm.sim import runner
from simllm.sim.runner import OK, OOM, Base, Task, run_many, run_simulations

MODEL = simllm.load_model("llama-3.1-8b")
H100 = simllm.load_hardware("h100-sxm")
WORKLOAD = simllm.Workload(num_prompts=24, max_concurrency=4)


def square(context, item):
    """A module-level evaluate (picklable for processes)."""
    if item < 0:
        raise simllm.ConfigError("a number >= 0", key="item", value=item)
    return context * item * item


def tasks():
    return [Task(serving=simllm.ServingConfig(tensor_parallel_size=tp)) for tp in (1, 2)] + [
        Task(serving=simllm.ServingConfig(tensor_parallel_size=3)),  # 32 heads: invalid
        Task(model=simllm.load_model("llama-3.1-405b")),  # does not fit one H100: OOM
    ]


def test_run_many_keeps_order_and_turns_config_errors_into_statuses():
    calls = []
    out = run_many(square, 2, [3, -1, 4, 0], "threads", workers=2, chunk_size=1,
                   progress=lambda done, total: calls.append((done, total)))
    assert [o.value for o in out] == [18, None, 32, 0]
    assert [o.status for o in out] == [OK, "invalid", OK, OK]
    assert "item = -1" in out[1].error and isinstance(out[1].exception, simllm.ConfigError)
    assert sorted(calls) == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_run_many_in_this_thread_with_one_worker_and_on_chunk():
    seen = []
    out = run_many(square, 1, [1, 2, 3], workers=1, on_chunk=seen.extend)
    assert [o.value for o in out] == [1, 4, 9]
    assert [i for i, _ in seen] == [0, 1, 2]


def test_an_executor_given_is_used_and_not_shut_down():
    with ThreadPoolExecutor(2) as pool:
        assert [o.value for o in run_many(square, 1, range(5), pool)] == [0, 1, 4, 9, 16]
        assert pool.submit(lambda: 7).result() == 7  # still open


def test_unknown_executor_and_bad_chunk_size_are_one_line_errors():
    with pytest.raises(simllm.ConfigError, match="--executor"):
        run_many(square, 1, [1, 2], "gpu")
    with pytest.raises(simllm.ConfigError, match="chunk"):
        run_many(square, 1, [1, 2], "threads", chunk_size=lambda n_workers, n_items: 0)


def test_progress_objects_with_advance_are_adapted():
    class Bar:
        total = 0
        done = 0

        def advance(self, n=1):
            self.done += n

    bar = Bar()
    run_many(square, 1, range(7), "threads", workers=2, chunk_size=2, progress=bar)
    assert (bar.done, bar.total) == (7, 7)


@pytest.mark.slow
def test_simulations_match_direct_calls_on_every_executor():
    base = Base(model=MODEL, hardware=H100, workload=WORKLOAD, percentiles=(50, 99))
    direct = simllm.simulate(MODEL, H100, simllm.ServingConfig(tensor_parallel_size=2), WORKLOAD,
                             keep_requests=False, percentiles=(50, 99)).summary
    for executor in (None, "threads", "processes"):
        out = run_simulations(base, tasks(), executor, workers=2)
        assert [o.status for o in out] == [OK, OK, "invalid", OOM], executor
        got = out[1].value
        assert {k: got[k] for k in direct if "wall" not in k and "_per_s" not in k} == \
            {k: direct[k] for k in direct if "wall" not in k and "_per_s" not in k}


@pytest.mark.slow
def test_dask_executor_gives_the_same_outcomes():
    pytest.importorskip("dask.distributed")
    base = Base(model=MODEL, hardware=H100, workload=WORKLOAD)
    local = run_simulations(base, tasks(), "threads", workers=2)
    remote = run_simulations(base, tasks(), "dask", workers=2)
    assert [o.status for o in remote] == [o.status for o in local]
    assert remote[0].value["mean_ttft_ms"] == local[0].value["mean_ttft_ms"]


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = simllm.cli.main(argv)
    return rc, out.getvalue(), err.getvalue()


COMMANDS = {
    "optimize": ["optimize", "--slo", "ttft_p99<=2000", "--over", "tp=1,2", "--num-prompts", "30", "--request-rate", "5",
                 "-q"],
    "compare": ["compare", "--hardware", "h100-sxm", "h200-sxm", "--num-prompts", "24", "--max-concurrency", "4"],
    "loadtest": ["loadtest", "--parallel", "1", "4", "--number", "4", "16", "-q"],
    "diagnose": ["diagnose", "--num-prompts", "24", "--max-concurrency", "4", "--what-if", "tp2", "fp8"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMMANDS))
def test_commands_sharing_the_runner_take_executor_flags(name):
    threads = _cli(COMMANDS[name] + ["--executor", "threads", "--workers", "2"])
    processes = _cli(COMMANDS[name] + ["--executor", "processes", "--workers", "2"])
    assert threads[0] == 0 and threads == processes


def test_scheduler_with_another_executor_is_a_command_line_error():
    rc, _, err = _cli(COMMANDS["compare"] + ["--executor", "threads", "--scheduler", "tcp://127.0.0.1:1"])
    assert rc == 2 and "--scheduler is a dask scheduler's address" in err


def test_chunk_size_for_bounds():
    assert runner.chunk_size_for(runner.TARGET_TASK_S / 10, 1000, 2) == 10
    assert runner.chunk_size_for(1e-9, 10**6, 1) == runner.MAX_CHUNK
    assert runner.chunk_size_for(1e-9, 16, 2) == 2  # at least 4 tasks per worker


def test_default_executor_takes_processes_for_many_small_runs_where_the_platform_forks(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "fork")
    small, big = runner.estimated_cost_s(1000), runner.estimated_cost_s(10_000)
    assert small <= runner.AUTO_PROCESS_COST_S < big
    assert runner.default_executor(1000, small, workers=2) == "processes"
    assert runner.default_executor(runner.AUTO_PROCESS_ITEMS - 1, small, workers=2) == "threads"  # too few
    assert runner.default_executor(1000, big, workers=2) == "threads"  # the kernel's own time: threads do as well
    assert runner.default_executor(1000, small, workers=1) == "threads"
    assert runner.default_executor(1000, small, workers=2, scheduler="tcp://h:8786") == "dask"
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    assert runner.default_executor(1000, small, workers=2) == "threads"  # a script would need a __main__ guard
