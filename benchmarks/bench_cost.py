"""asv benchmarks of the cost model: the per-iteration kernel and ``simllm.estimate``."""
import time

import simllm
from benchmarks.common import configs, decode_batches, time_many_nb
from simcore.params import NO_EFF_TABLE
from simllm.config.speculative import SpeculativeConfig
from simllm.sim.pack import pack_cost_params
from simllm.sim.routing import slowest_rank_factors


class CostKernel:
    """100,000 calls of ``iteration_time_nb`` (decode batches of 1..256 sequences) from a
    compiled loop: the engine's inner call."""

    params = [["llama-3.1-8b", "mixtral-8x7b"], [1, 2]]
    param_names = ["model", "tp"]

    def setup(self, model, tp):
        self.p = configs(model, "h100-sxm", tp)[3]
        self.sizes, self.ctx = decode_batches()
        time_many_nb(self.p, self.sizes[:10], self.ctx[:10])  # compile outside the timing

    def time_iteration_time_100k(self, model, tp):
        time_many_nb(self.p, self.sizes, self.ctx)

    def track_iterations_per_second(self, model, tp):
        start = time.perf_counter()
        time_many_nb(self.p, self.sizes, self.ctx)
        return self.sizes.shape[0] / (time.perf_counter() - start)

    track_iterations_per_second.unit = "iterations/s"


class CostKernelTables:
    """The same 100,000 decode iterations with and without h100-sxm's kernel tables (the
    shape-aware path: one interpolation per operator) on Llama-3.1-8B."""

    params = [[True, False]]
    param_names = ["kernel_tables"]

    def setup(self, tables):
        p = configs()[3]
        self.p = p if tables else p._replace(eff=NO_EFF_TABLE)
        self.sizes, self.ctx = decode_batches()
        time_many_nb(self.p, self.sizes[:10], self.ctx[:10])

    def time_iteration_time_100k(self, tables):
        time_many_nb(self.p, self.sizes, self.ctx)

    def track_iterations_per_second(self, tables):
        start = time.perf_counter()
        time_many_nb(self.p, self.sizes, self.ctx)
        return self.sizes.shape[0] / (time.perf_counter() - start)

    track_iterations_per_second.unit = "iterations/s"


class KernelTableImport:
    """Loading a hardware preset with its kernel tables (three JSON files) and folding them into
    the packed parameters of a run: what every ``simllm run`` pays once."""

    def setup(self):
        self.m, _, self.s, _ = configs()
        simllm.load_hardware("h100-sxm")

    def time_load_hardware_with_tables(self):
        simllm.load_hardware("h100-sxm")

    def time_pack_with_tables(self):
        pack_cost_params(self.m, simllm.load_hardware("h100-sxm"), self.s)


class Estimate:
    def setup(self):
        self.m, self.h, self.s, _ = configs()
        self.spec = SpeculativeConfig("eagle3", 3, (0.73, 0.521, 0.355))
        simllm.estimate(self.m, self.h, self.s)

    def time_estimate(self):
        simllm.estimate(self.m, self.h, self.s, batch_size=32, input_len=1024, output_len=128)

    def time_estimate_speculative(self):
        """The same with an EAGLE-3 drafter (its one-layer head packed, k = 3 passes priced)."""
        simllm.estimate(self.m, self.h, self.s, batch_size=32, input_len=1024, output_len=128, speculative=self.spec)


class Capacity:
    """``simllm.capacity``: the engine saturated (2 x 256 clients, 3,072 requests of 1,024 / 128
    tokens), what ``simllm estimate`` adds to its closed form."""

    def setup(self):
        self.m, self.h, self.s, _ = configs()
        self.w = simllm.Workload()
        simllm.capacity(self.m, self.h, self.s, self.w)

    def time_capacity(self):
        simllm.capacity(self.m, self.h, self.s, self.w)

    def track_capacity_requests_per_second(self):
        """Simulated requests per second of wall time."""
        t = time.perf_counter()
        cap = simllm.capacity(self.m, self.h, self.s, self.w)
        return cap.num_requests / (time.perf_counter() - t)

    track_capacity_requests_per_second.unit = "requests/s"


class ExpertRouting:
    """Sampling random expert routings for the busiest GPU's curve (simllm.sim.routing): what
    packing a random-routing expert-parallel run pays the first time it sees a layout (later
    packs of the same layout take the cached curve)."""

    params = [["deepseek-v3 dp8 ep8", "deepseek-v3 tp8 ep8", "qwen3-235b dp4 ep16"]]
    param_names = ["layout"]
    LAYOUTS = {"deepseek-v3 dp8 ep8": (256, 8, 8, 8), "deepseek-v3 tp8 ep8": (256, 8, 8, 1),
               "qwen3-235b dp4 ep16": (128, 8, 16, 4)}

    def time_slowest_rank_factors(self, layout):
        e, k, ep, ranks = self.LAYOUTS[layout]
        slowest_rank_factors.__wrapped__(e, k, ep, ranks=ranks, hit_weight=295.0)
