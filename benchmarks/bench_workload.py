"""Workload input: reading a request trace (a CSV of arrival_s, input_len, output_len)."""
import tempfile
import time
from pathlib import Path

import numpy as np

import simllm


class TraceLoad:
    """A 200,000-row CSV trace read column-wise (``simllm.read_trace``, the cache bypassed)."""

    rows = 200_000

    def setup(self):
        self.dir = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(0)
        t = np.cumsum(rng.exponential(0.05, self.rows))
        i = rng.integers(100, 1000, self.rows)
        o = rng.integers(20, 400, self.rows)
        self.path = Path(self.dir.name) / "trace.csv"
        self.path.write_text("arrival_s,input_len,output_len\n"
                             + "".join(f"{a:.6f},{b},{c}\n" for a, b, c in zip(t, i, o)), encoding="utf-8")

    def teardown(self):
        self.dir.cleanup()

    def time_read_trace(self):
        simllm.read_trace(self.path, cached=False)

    def track_rows_per_second(self):
        start = time.perf_counter()
        simllm.read_trace(self.path, cached=False)
        return self.rows / (time.perf_counter() - start)

    track_rows_per_second.unit = "rows/s"
