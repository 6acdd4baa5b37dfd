"""simllm: predict how a large language model serves real traffic on given hardware, without it.

The public API::

    import simllm
    model = simllm.load_model("llama-3.1-8b")          # preset, YAML or HF config.json
    gpu = simllm.load_hardware("h100-sxm")             # preset or YAML: GPU physics only
    simllm.load_framework("vllm")                      # the serving framework's overheads (--framework)
    est = simllm.estimate(model, gpu, simllm.ServingConfig(tensor_parallel_size=1))
    est.to_dict()["summary"]["decode_lower_bound_ms"]
    simllm.capacity(model, gpu).output_throughput_tok_s  # the saturated rate and throughput
    res = simllm.simulate(model, gpu, workload=simllm.load_workload("bench-1m"))
    res.summary["mean_ttft_ms"], res.requests["ttft_s"]
    many = simllm.simulate_many([{"serving": simllm.ServingConfig(max_num_seqs=b)} for b in (64, 256)],
                                model=model, hardware=gpu)    # a ManyResult: one row per run
    many["p99_ttft_ms"]                                 # a column (ndarray)
    sw = simllm.sweep({"model": "llama-3.1-8b", "hardware": "h100-sxm", "workload": "random-1k"},
                      grid={"workload.max_concurrency": [1, 32, 256]}, seeds=3)  # a SweepResult
    sw.table, sw.aggregate()                            # rows; mean and P5/P50/P95 per configuration
    spec = simllm.load_sweep_spec("configs/sweeps/concurrency.yaml")  # a checked SweepSpec
    simllm.pareto(sw.table)                             # row indices of the Pareto frontier
    opt = simllm.optimize("llama-3.1-8b", "h100-sxm", workload=simllm.Workload(request_rate=10.0),
                          slo="ttft_p99<=2000", over={"tp": [1, 2]})
    opt.answer                                          # the best configuration meeting the SLOs

Behind them, subpackages by responsibility, layered one way (docs/architecture.md):
simllm.config (what users write) -> simllm.sim (one simulation) -> simllm.analysis, simllm.search,
simllm.calibration (many simulations) -> simllm.formats, simllm.report (what other tools and people
read) -> simllm.cli (the ``simllm`` command).
"""
from simcore.lazy import lazy_names
from simllm.config.disagg import DisaggConfig
from simllm.config.framework import FrameworkProfile, load_framework
from simllm.config.hardware import HardwareConfig, hardware_from_dict, load_hardware
from simllm.config.model import ModelConfig, load_model, model_from_dict, model_from_hf_config
from simllm.config.presets import preset_names
from simllm.config.serving import ServingConfig
from simllm.config.workload import LengthDist, Workload, generate, load_workload, read_trace, workload_from_dict
from simllm.errors import ConfigError, SimulatedOOM

# What simulates (simllm.sim, simllm.search) is imported with numba the first time one of its names
# is read (PEP 562): ``import simllm`` and the configuration classes cost no compiled code.
_HOMES = {
    "simllm.search.optimize": ("optimize",),
    "simllm.search.pareto": ("pareto",),
    "simllm.search.spec": ("load_sweep_spec",),
    "simllm.search.sweep": ("SweepResult", "sweep"),
    "simllm.sim.capacity": ("Capacity", "capacity"),
    "simllm.sim.disagg": ("simulate_disagg",),
    "simllm.sim.estimate": ("Estimate", "estimate"),
    "simllm.sim.many": ("ManyResult", "simulate_many"),
    "simllm.sim.memory": ("MemoryPlan", "plan_memory"),
    "simllm.sim.pack": ("pack_cost_params",),
    "simllm.sim.results": ("SimResult",),
    "simllm.sim.simulate": ("simulate",),
}
_HOME_OF, __getattr__, __dir__ = lazy_names(globals(), _HOMES)

__version__ = "0.1.0"

__all__ = [
    "Capacity",
    "ConfigError",
    "DisaggConfig",
    "Estimate",
    "FrameworkProfile",
    "HardwareConfig",
    "MemoryPlan",
    "ModelConfig",
    "ServingConfig",
    "LengthDist",
    "ManyResult",
    "SimResult",
    "SimulatedOOM",
    "SweepResult",
    "Workload",
    "capacity",
    "estimate",
    "generate",
    "load_sweep_spec",
    "load_workload",
    "read_trace",
    "optimize",
    "pareto",
    "simulate",
    "simulate_disagg",
    "simulate_many",
    "sweep",
    "workload_from_dict",
    "hardware_from_dict",
    "load_framework",
    "load_hardware",
    "load_model",
    "model_from_dict",
    "model_from_hf_config",
    "pack_cost_params",
    "plan_memory",
    "preset_names",
]
