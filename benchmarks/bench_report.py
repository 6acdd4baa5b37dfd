"""asv benchmarks of the interactive HTML report (``--report FILE.html``): building the page of a
run of 10,000 and 100,000 requests, the simulation done in setup. Needs the ``report`` extra
(plotly); skipped without it."""
import simllm
from benchmarks.common import bench_requests, configs


class RunReport:
    """``simllm.report.html.run_report`` of a run kept with its per-request rows: the histograms,
    the time series and the queue derived from the rows, and plotly.js inlined."""

    params = [[10_000, 100_000]]
    param_names = ["requests"]
    timeout = 300
    number = 1
    repeat = 3

    def setup(self, n):
        try:
            from simllm.report import html
        except ImportError as exc:  # asv skips a benchmark whose setup raises NotImplementedError
            raise NotImplementedError(str(exc)) from None
        try:
            html.require_plotly()
        except simllm.ConfigError as exc:
            raise NotImplementedError(str(exc)) from None
        m, h, s = configs()[:3]
        w, req = bench_requests(n)
        self.html = html
        self.result = simllm.simulate(m, h, s, w, requests=req, keep_requests=True)

    def time_run_report(self, n):
        self.html.run_report(self.result)

    def peakmem_run_report(self, n):
        self.html.run_report(self.result)
