"""asv benchmarks of ``simllm validate`` (:mod:`simllm.calibration.validate`) on the measured data in
``../shared/data`` (skipped where it is absent): the seconds to predict every point of
``silicon_sample.csv`` and its peak bound with the command's defaults (:func:`validate`: threads on
every core), of TensorRT-LLM's static-batch table and of the NIM closed loops (the nim-trtllm
profile's per-sequence overhead and decode-attention floor). ``setup`` reads the CSV and warms the kernels
on a few points, so the timings are the simulations and their per-run work."""
import time
from pathlib import Path

from simllm.calibration.validate import validate
from simllm.formats.measurements import load_measurements

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


class Validate:
    timeout = 900
    processes = 1
    params = ["silicon_sample.csv", "trtllm_static_batch.csv", "nim_genai_perf.csv"]
    param_names = ["data"]

    def setup(self, data):
        path = DATA / data
        if not path.is_file():
            raise NotImplementedError(f"{path} is not here")  # asv: skipped
        self.measured = load_measurements([path])
        validate(self.measured[:8])  # compiles (or loads) the kernels these rows take

    def track_validate_seconds(self, data):
        start = time.perf_counter()
        validate(self.measured)
        return time.perf_counter() - start

    track_validate_seconds.unit = "seconds"
