"""asv benchmarks of ``simllm.sweep`` (:mod:`simllm.search.sweep`): configurations per second of a sweep
of mixed loads on one and two threads, and the speed-up from one to two. ``setup`` compiles (or
loads the numba cache) and validates the spec, so the timings are the simulations, chunking and
table assembly.

The mixed loads: bench-1m's lengths (prompts uniform in [100, 1000), outputs in [20, 400)),
10,000 requests per configuration, 200 Monte Carlo configurations drawn with a fixed seed:
request rate log-uniform in 5..100 req/s, open loop or capped at 16, 64 or 256 in flight,
``max_num_seqs`` 128 or 256."""
import random
import time
from concurrent.futures import ThreadPoolExecutor

from simllm.config.hardware import load_hardware
from simllm.config.model import load_model
from simllm.config.serving import ServingConfig
from simllm.config.workload import LengthDist, Workload, generate
from simllm.search import sweep as sw
from simllm.search.spec import make_spec
from simllm.sim.many import simulate_many
from simllm.sim.simulate import simulate
from benchmarks.plain_loop import plain_loop

SWEEP_CONFIGS = 200
SWEEP_REQUESTS = 10_000
MIXED_LOADS = {
    "workload.request_rate": {"loguniform": [5, 100]},
    "workload.max_concurrency": {"choice": [0, 0, 16, 64, 256]},
    "serving.max_num_seqs": {"choice": [128, 256]},
}


def mixed_spec(configs=SWEEP_CONFIGS, requests=SWEEP_REQUESTS, seed=0):
    """The benchmark's sweep: ``configs`` mixed-load configurations of ``requests`` requests."""
    base = {"model": "llama-3.1-8b", "hardware": "h100-sxm",
            "workload": {"num_prompts": requests, "request_rate": 20,
                         "input_len": {"distribution": "uniform", "low": 100, "high": 1000},
                         "output_len": {"distribution": "uniform", "low": 20, "high": 400}}}
    return make_spec(base, samples=MIXED_LOADS, num_samples=configs, sample_seed=seed)


def _run(spec, executor):
    start = time.perf_counter()
    res = sw.run_spec(spec, executor=executor)
    elapsed = time.perf_counter() - start
    assert not res.table["error"].any()
    return elapsed


class SweepThreads:
    """200 configurations x 10,000 requests on a thread pool of 1 or 2 threads."""

    params = [[1, 2]]
    param_names = ["threads"]
    number = 1
    repeat = 3
    timeout = 600

    def setup(self, threads):
        sw.warm_up()
        self.spec = mixed_spec()
        sw.plan(self.spec)  # validation and layout, kept on the spec
        self.executor = ThreadPoolExecutor(threads)
        sw.run_spec(mixed_spec(configs=2 * threads, requests=100), executor=self.executor)  # threads started

    def teardown(self, threads):
        self.executor.shutdown()

    def time_sweep_200x10k(self, threads):
        sw.run_spec(self.spec, executor=self.executor)

    def track_configs_per_second(self, threads):
        return SWEEP_CONFIGS / _run(self.spec, self.executor)

    track_configs_per_second.unit = "configs/s"

    def track_requests_per_second(self, threads):
        return SWEEP_CONFIGS * SWEEP_REQUESTS / _run(self.spec, self.executor)

    track_requests_per_second.unit = "requests/s"


class SweepSpeedup:
    """Wall time on 1 thread over wall time on 2 threads for the same sweep (target >= 1.8)."""

    number = 1
    repeat = 3
    timeout = 600

    def setup(self):
        sw.warm_up()
        self.spec = mixed_spec()
        sw.plan(self.spec)
        self.one = ThreadPoolExecutor(1)
        self.two = ThreadPoolExecutor(2)
        for ex, n in ((self.one, 1), (self.two, 2)):
            sw.run_spec(mixed_spec(configs=2 * n, requests=100), executor=ex)

    def teardown(self):
        self.one.shutdown()
        self.two.shutdown()

    def track_speedup_1_to_2_threads(self):
        return _run(self.spec, self.one) / _run(self.spec, self.two)

    track_speedup_1_to_2_threads.unit = "x"


class SweepOverhead:
    """The runner's cost per configuration apart from the simulation: 1,000 configurations of 10
    requests each (their simulations take ~0.1 ms), on one thread and on a pool of two processes
    made for the sweep (``executor="processes"``: the processes start, import simllm, load the
    numba cache and get the base configuration once; a task ships only its overrides and seed).
    ``track_`` results are milliseconds per configuration."""

    params = [["threads", "processes"]]
    param_names = ["executor"]
    number = 1
    repeat = 3
    timeout = 600
    CONFIGS = 1000

    def setup(self, executor):
        sw.warm_up()
        self.spec = mixed_spec(configs=self.CONFIGS, requests=10)
        sw.plan(self.spec)
        self.pool = ThreadPoolExecutor(1) if executor == "threads" else "processes"
        self.kwargs = {} if executor == "threads" else {"workers": 2}

    def teardown(self, executor):
        if executor == "threads":
            self.pool.shutdown()

    def track_ms_per_config(self, executor):
        start = time.perf_counter()
        res = sw.run_spec(self.spec, executor=self.pool, **self.kwargs)
        elapsed = time.perf_counter() - start
        assert not res.table["error"].any()
        return 1e3 * elapsed / self.CONFIGS

    track_ms_per_config.unit = "ms"


def small_cases(runs, requests):
    """``runs`` (serving, workload) pairs of mixed loads (``MIXED_LOADS``' request rates, concurrency
    caps and ``max_num_seqs``, bench-1m's lengths) of ``requests`` requests, seeds 0, 1, ..."""
    rng = random.Random(0)
    cases = []
    for seed in range(runs):
        workload = Workload(num_prompts=requests, request_rate=5 * 20 ** rng.random(),
                            max_concurrency=rng.choice([0, 0, 16, 64, 256]),
                            input_len=LengthDist("uniform", low=100, high=1000),
                            output_len=LengthDist("uniform", low=20, high=400), seed=seed)
        cases.append((ServingConfig(max_num_seqs=rng.choice([128, 256])), workload))
    return cases


class SmallRuns:
    """Many small runs through ``simllm.simulate`` on one thread, as a sweep's rows make them:
    ``RUNS`` mixed loads (``MIXED_LOADS``' request rates, concurrency caps and ``max_num_seqs``,
    bench-1m's lengths) of 1,000 or 10,000 requests each, summary only. ``track_`` results: runs per
    second, and the milliseconds of each run spent outside the engine kernel (resolving and packing
    the configuration, drawing the requests, the summary): issue 47's per-run overhead."""

    params = [[1000, 10000]]
    param_names = ["requests"]
    number = 1
    repeat = 3
    timeout = 600
    RUNS = 200

    def setup(self, requests):
        sw.warm_up()
        self.model, self.hardware = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
        self.cases = small_cases(self.RUNS, requests)
        self._runs()  # every kernel of these runs compiled or loaded

    def _runs(self):
        kernel_s = 0.0
        start = time.perf_counter()
        for serving, workload in self.cases:
            res = simulate(self.model, self.hardware, serving, workload, keep_requests=False, percentiles=(50, 90, 99))
            kernel_s += res.summary["simulation_wall_s"]
        return time.perf_counter() - start, kernel_s

    def track_runs_per_second(self, requests):
        wall_s, _ = self._runs()
        return self.RUNS / wall_s

    track_runs_per_second.unit = "runs/s"

    def track_ms_outside_kernel_per_run(self, requests):
        wall_s, kernel_s = self._runs()
        return 1e3 * (wall_s - kernel_s) / self.RUNS

    track_ms_outside_kernel_per_run.unit = "ms"


class SweepAgainstPlainLoop:
    """Issue 47's yardsticks, measured in one run: a sweep of 1,000 mixed-load configurations x
    10,000 requests on two threads against ``benchmarks/plain_loop.py`` over the same 10^7 requests
    (each row's own draw) on one thread (target: the sweep takes at most the plain loop's time), and
    a sweep of 1,000 x 1,000 requests on two threads (target 2 s). ``track_`` results: the ratio, and
    seconds."""

    number = 1
    repeat = 1
    timeout = 900

    def setup(self):
        sw.warm_up()
        self.big = mixed_spec(configs=1000, requests=SWEEP_REQUESTS)
        self.small = mixed_spec(configs=1000, requests=1000)
        p = sw.plan(self.big)
        sw.plan(self.small)
        self.model, self.hardware = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
        # each row's own requests (seed 0, the spec's only seed)
        self.requests = [generate(sw.row_configs(p.context, ov, 0)[3]) for ov in p.overrides]
        plain_loop(self.model, self.hardware, ServingConfig(), self.requests[0])  # compiled here
        self.executor = ThreadPoolExecutor(2)
        sw.run_spec(mixed_spec(configs=4, requests=100), executor=self.executor)

    def teardown(self):
        self.executor.shutdown()

    def track_sweep_1000x10k_over_plain_loop(self):
        start = time.perf_counter()
        for req in self.requests:
            plain_loop(self.model, self.hardware, ServingConfig(), req)
        plain_s = time.perf_counter() - start
        return _run(self.big, self.executor) / plain_s

    track_sweep_1000x10k_over_plain_loop.unit = "x"

    def track_sweep_1000x1k_seconds(self):
        return _run(self.small, self.executor)

    track_sweep_1000x1k_seconds.unit = "s"

    def track_sweep_1000x1k_processes_seconds(self):
        """The same on two processes (``--executor processes``, the pool's start included): a
        small run's time outside the kernel is Python holding its process's GIL."""
        return _run(self.small, "processes")

    track_sweep_1000x1k_processes_seconds.unit = "s"


class SimulateMany:
    """``simllm.simulate_many`` over :class:`SmallRuns`' runs (200 mixed loads of 1,000 or 10,000
    requests) on two threads, and over 200 engine settings of one workload (4 ``max_num_seqs`` x
    10 seeds x 5 concurrency caps: 50 draws, each served by 4 runs). ``track_`` results: runs per
    second."""

    params = [[1000, 10000]]
    param_names = ["requests"]
    number = 1
    repeat = 3
    timeout = 600

    def setup(self, requests):
        sw.warm_up()
        self.model, self.hardware = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
        self.runs = [{"serving": serving, "workload": workload} for serving, workload in small_cases(200, requests)]
        lengths = dict(input_len=LengthDist("uniform", low=100, high=1000),
                       output_len=LengthDist("uniform", low=20, high=400))
        self.shared = [{"serving": ServingConfig(max_num_seqs=b),
                        "workload": Workload(num_prompts=requests, seed=s, max_concurrency=c, **lengths)}
                       for b in (32, 64, 128, 256) for s in range(10) for c in (8, 16, 32, 64, 128)]
        simulate_many(self.runs[:4], model=self.model, hardware=self.hardware, workers=2)

    def _time(self, runs):
        start = time.perf_counter()
        many = simulate_many(runs, model=self.model, hardware=self.hardware, workers=2,
                                  percentiles=(50, 90, 99))
        elapsed = time.perf_counter() - start
        assert many.ok.all()
        return len(runs) / elapsed

    def track_runs_per_second(self, requests):
        return self._time(self.runs)

    track_runs_per_second.unit = "runs/s"

    def track_shared_draws_runs_per_second(self, requests):
        return self._time(self.shared)

    track_shared_draws_runs_per_second.unit = "runs/s"
