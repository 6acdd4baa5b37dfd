"""asv benchmarks of the serving engine on the bench-1m workload shape."""
import time

import simllm
from benchmarks.common import bench_requests, configs


class EngineOpenLoop:
    params = [[10_000, 100_000], [True, False]]
    param_names = ["requests", "chunked_prefill"]
    timeout = 300

    def setup(self, n, chunked):
        self.m, self.h, _, _ = configs()
        self.s = simllm.ServingConfig(enable_chunked_prefill=chunked, max_model_len=8192)
        self.w, self.req = bench_requests(n)
        simllm.simulate(self.m, self.h, self.s, self.w, requests=bench_requests(100)[1])  # compile

    def time_simulate(self, n, chunked):
        simllm.simulate(self.m, self.h, self.s, self.w, requests=self.req)

    def track_requests_per_second(self, n, chunked):
        start = time.perf_counter()
        simllm.simulate(self.m, self.h, self.s, self.w, requests=self.req)
        return n / (time.perf_counter() - start)

    track_requests_per_second.unit = "requests/s"

    def track_output_tokens_per_second(self, n, chunked):
        start = time.perf_counter()
        res = simllm.simulate(self.m, self.h, self.s, self.w, requests=self.req)
        return res.summary["total_output_tokens"] / (time.perf_counter() - start)

    track_output_tokens_per_second.unit = "tokens/s"
