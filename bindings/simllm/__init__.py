"""simllm: predict how a large language model serves real traffic on given hardware, without it.

The public API::

    import simllm
    model = simllm.load_model("llama-3.1-8b")          # preset, YAML or HF config.json
    gpu = simllm.load_hardware("h100-sxm")             # preset or YAML
    est = simllm.estimate(model, gpu, simllm.ServingConfig(tensor_parallel_size=1))
    est.to_dict()["summary"]["decode_lower_bound_ms"]
    res = simllm.simulate(model, gpu, workload=simllm.load_workload("bench-1m"))
    res.summary["mean_ttft_ms"], res.requests["ttft_s"]
"""
from simllm.errors import ConfigError, SimulatedOOM
from simllm.estimate import Estimate, estimate
from simllm.hardware import HardwareConfig, hardware_from_dict, load_hardware
from simllm.memory import MemoryPlan, plan_memory
from simllm.model import ModelConfig, load_model, model_from_dict, model_from_hf_config
from simllm.pack import pack_cost_params
from simllm.presets import preset_names
from simllm.results import SimResult
from simllm.serving import ServingConfig
from simllm.simulate import simulate
from simllm.workload import LengthDist, Workload, generate, load_workload, read_trace, workload_from_dict

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Estimate",
    "HardwareConfig",
    "MemoryPlan",
    "ModelConfig",
    "ServingConfig",
    "LengthDist",
    "SimResult",
    "SimulatedOOM",
    "Workload",
    "estimate",
    "generate",
    "load_workload",
    "read_trace",
    "simulate",
    "workload_from_dict",
    "hardware_from_dict",
    "load_hardware",
    "load_model",
    "model_from_dict",
    "model_from_hf_config",
    "pack_cost_params",
    "plan_memory",
    "preset_names",
]
