"""asv benchmarks of the one runner (:mod:`simllm.sim.runner`), the path optimize, compare,
loadtest, the what-ifs and validation share: 16 configurations (TP 1/2 x max_num_seqs 64..512 x
two GPUs) of 10,000 bench-1m-shaped requests each, on threads or processes, as
``simllm optimize --executor ...`` runs them. ``setup`` compiles (or loads the numba cache) in this
process; a process executor's start and warm-up are part of its timing, as a user sees them."""
import time

import simllm
from benchmarks.common import bench_requests, configs
from simllm.sim.runner import Base, Task, run_simulations, warm_up

RUNNER_REQUESTS = 10_000


def _tasks():
    hardware = [simllm.load_hardware("h100-sxm"), simllm.load_hardware("h200-sxm")]
    return [Task(hardware=h, serving=simllm.ServingConfig(tensor_parallel_size=tp, max_num_seqs=n))
            for h in hardware for tp in (1, 2) for n in (64, 128, 256, 512)]


class RunnerExecutors:
    """16 simulations of 10,000 requests through ``run_simulations`` on 2 workers."""

    params = [["threads", "processes"]]
    param_names = ["executor"]
    number = 1
    repeat = 3
    timeout = 600

    def setup(self, executor):
        warm_up()
        m, _, _, _ = configs()
        w, req = bench_requests(RUNNER_REQUESTS)
        self.base = Base(model=m, workload=w, requests=req, percentiles=(50, 90, 99))
        self.tasks = _tasks()

    def _run(self, executor):
        out = run_simulations(self.base, self.tasks, executor, workers=2)
        assert all(o.ok for o in out)
        return out

    def time_run_simulations(self, executor):
        self._run(executor)

    def track_configs_per_second(self, executor):
        start = time.perf_counter()
        self._run(executor)
        return len(self.tasks) / (time.perf_counter() - start)

    track_configs_per_second.unit = "configs/s"


class RunnerDisaggregatedGrid:
    """``simllm optimize --over-disagg``'s path: 8 disaggregated configurations (1-2 prefill x
    1-2 decode instances x decode max_num_seqs 128/256) of 10,000 requests each through
    ``run_simulations`` on 2 threads, beside the same count aggregated."""

    params = [["agg", "disagg"]]
    param_names = ["mode"]
    number = 1
    repeat = 3
    timeout = 600

    def setup(self, mode):
        warm_up()
        m, h, _, _ = configs()
        w, req = bench_requests(RUNNER_REQUESTS)
        self.base = Base(model=m, hardware=h, workload=w, requests=req, percentiles=(50, 90, 99))
        if mode == "agg":
            self.tasks = [Task(serving=simllm.ServingConfig(tensor_parallel_size=tp, data_parallel_size=dp,
                                                            max_num_seqs=n))
                          for tp in (1, 2) for dp in (1, 2) for n in (128, 256)]
        else:
            self.tasks = [Task(serving=simllm.ServingConfig(),
                               disagg=simllm.DisaggConfig(prefill_instances=p, decode_instances=d,
                                                          decode=(("max_num_seqs", n),)))
                          for p in (1, 2) for d in (1, 2) for n in (128, 256)]
        run_simulations(self.base, self.tasks[:1], "threads", workers=1)  # compile the disaggregated kernel

    def _run(self):
        out = run_simulations(self.base, self.tasks, "threads", workers=2)
        assert all(o.ok for o in out)

    def time_run_simulations(self, mode):
        self._run()

    def track_configs_per_second(self, mode):
        start = time.perf_counter()
        self._run()
        return len(self.tasks) / (time.perf_counter() - start)

    track_configs_per_second.unit = "configs/s"
