"""asv benchmarks of ``simllm validate`` (:mod:`simllm.calibration.validate`) on the measured data in
``../shared/data`` (skipped where it is absent): the seconds to predict every point of
``silicon_sample.csv`` and its peak bound, as the command does (its parsed defaults: threads on
every core), and of TensorRT-LLM's static-batch table. ``setup`` reads the CSV and warms the kernels
on a few points, so the timings are the simulations and their per-run work."""
import time
from pathlib import Path

from simllm.calibration import validate as accuracy
from simllm.cli import common
from simllm.cli.app import build_parser

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _points(name):
    path = DATA / name
    if not path.is_file():
        raise NotImplementedError(f"{path} is not here")  # asv: skipped
    args = build_parser().parse_args(["validate", str(path)])
    points, shape = common.measured_points(args, args.hardware)
    return args, points, shape


def _validate(args, points, shape):
    workers = args.workers or 0
    bounded = accuracy.with_bounds(points, args.num_prompts, shape, workers)
    return accuracy.predict_points(bounded, None, args.num_prompts, shape, workers)


class Validate:
    timeout = 900
    processes = 1
    params = ["silicon_sample.csv", "trtllm_static_batch.csv"]
    param_names = ["data"]

    def setup(self, data):
        self.args, self.points, self.shape = _points(data)
        first = [p for p in self.points if not p.reason][:8]
        _validate(self.args, first, self.shape)  # compiles (or loads) the kernels these rows take

    def track_validate_seconds(self, data):
        start = time.perf_counter()
        _validate(self.args, self.points, self.shape)
        return time.perf_counter() - start

    track_validate_seconds.unit = "seconds"
