"""Hardware profiles: the seed's YAML form plus datasheet and calibration fields.
:func:`load_hardware` validates and returns a frozen :class:`HardwareConfig`."""
from dataclasses import dataclass, replace
from pathlib import Path

from simllm.config import kernels as kernel_tables_mod
from simllm.config import presets
from simllm.config.sections import Section
from simllm.config.serving import FRAMEWORKS
from simllm.config.yamlio import load_file
from simllm.errors import ConfigError

GIB = 2.0**30

_KEYS = {
    "gpu", "name", "fp16_tflops", "bf16_tflops", "fp8_tflops", "fp4_tflops", "int8_tops", "fp32_tflops",
    "memory_bandwidth_gbps", "memory_size_gb", "memory_size_gib", "bandwidth_utilization",
    "compute_utilization", "interconnect", "interconnect_bandwidth_gbps", "interconnect_latency_us",
    "interconnect_utilization", "gpus_per_node", "launch_overhead_us", "runtime_overhead_gib",
    "frontend_latency_ms", "kernel_tables", "network_bandwidth_gbps", "network_latency_us",
}
# The GPU efficiency factors calibration fits into a hardware profile (the serving framework's
# costs live in framework profiles: simllm.config.framework).
FACTOR_KEYS = ("compute_utilization", "bandwidth_utilization", "interconnect_latency_us", "interconnect_utilization")
# Serving-framework keys a user's hardware file may still set, as an explicit override of the
# framework profile's value (None: the profile's).
FRAMEWORK_OVERRIDE_KEYS = ("launch_overhead_us", "frontend_latency_ms")

_INTERCONNECTS = ("nvlink", "pcie", "infinity-fabric", "none")

# Used when a profile (the seed's, say) gives no interconnect: PCIe Gen4 x16, 32 GB/s each way.
DEFAULT_INTERCONNECT = ("pcie", 32.0, 15.0)
# Between nodes, when a profile gives no network: one 400 Gb/s NIC per GPU (InfiniBand NDR /
# ConnectX-7, as in DGX H100/H200/B200), 50 GB/s each way; 15 us per collective, an assumption
# (NCCL's small-message all-reduce across two nodes over InfiniBand is of that order).
DEFAULT_NETWORK = (50.0, 15.0)


@dataclass(frozen=True)
class HardwareConfig:
    """One GPU (all GPUs of a tensor-parallel group are alike).

    Throughputs are dense datasheet peaks; the ``*_utilization`` factors are the achieved fractions
    the roofline applies. Units are in the field names.
    """

    gpu: str
    name: str
    fp16_tflops: float
    bf16_tflops: float
    memory_bandwidth_gbps: float  # GB/s (decimal), as the seed writes it
    memory_size_bytes: float
    fp8_tflops: float = 0.0  # 0 = no FP8 tensor cores (FP8 weights then run weight-only)
    fp4_tflops: float = 0.0  # NVFP4 tensor cores (Blackwell); 0 = none (FP4 weights run weight-only)
    int8_tops: float = 0.0
    fp32_tflops: float = 0.0
    bandwidth_utilization: float = 0.8
    compute_utilization: float = 0.7
    interconnect: str = DEFAULT_INTERCONNECT[0]
    interconnect_bandwidth_gbps: float = DEFAULT_INTERCONNECT[1]  # per direction per GPU
    interconnect_latency_us: float = DEFAULT_INTERCONNECT[2]
    interconnect_utilization: float = 0.8
    gpus_per_node: int = 8
    # Scale-out network between nodes (collectives over more than gpus_per_node GPUs): per GPU per
    # direction, GB/s, and the latency of one collective that crosses it
    network_bandwidth_gbps: float = DEFAULT_NETWORK[0]
    network_latency_us: float = DEFAULT_NETWORK[1]
    # Overrides of the framework profile's per-kernel launch gap and per-request frontend time
    # (simllm.config.framework); None, as in the shipped presets: the profile's.
    launch_overhead_us: float = None
    runtime_overhead_gib: float = 1.0  # CUDA context, NCCL buffers, CUDA graphs
    frontend_latency_ms: float = None
    # Shape-aware efficiency tables per serving framework, ((framework, KernelTables), ...), read
    # from the folder the YAML's ``kernel_tables`` names: a shipped set by name (configs/kernels/
    # NAME) or a folder path, relative to the YAML file; empty: the scalar factors above.
    kernel_tables: tuple = ()
    interconnect_given: bool = True
    source: str = "<dict>"

    @property
    def memory_size_gb(self):
        return self.memory_size_bytes / 1e9

    @property
    def memory_bandwidth_bytes_per_s(self):
        return self.memory_bandwidth_gbps * 1e9

    def peak_flops(self, dtype):
        """Dense peak FLOP/s of the tensor cores for GEMMs in ``dtype`` (0 if the GPU lacks it).
        MXFP4 weights run as W4A8 at the FP8 rate on GPUs with FP4 tensor cores (Blackwell's mixed
        E2M1 x E4M3 MMA: vLLM's FlashInfer MXFP4 x MXFP8 MoE kernels, TensorRT-LLM's
        W4A8_MXFP4_MXFP8); elsewhere they are weight-only (0 here)."""
        tflops = {
            "fp16": self.fp16_tflops,
            "bf16": self.bf16_tflops,
            "fp32": self.fp32_tflops,
            "fp8": self.fp8_tflops,
            "fp4": self.fp4_tflops,
            "int8": self.int8_tops,
            "mxfp4": self.fp8_tflops if self.fp4_tflops else 0.0,
        }.get(dtype, 0.0)
        return tflops * 1e12

    def with_overrides(self, **changes):
        return replace(self, **changes)

    def tables_for(self, framework):
        """The :class:`~simllm.config.kernels.KernelTables` measured with ``framework``'s kernels,
        or None (the scalar efficiencies then apply)."""
        for name, tables in self.kernel_tables:
            if name == framework:
                return tables
        return None


#: The most memory a GPU preset may give, in GB: a petabyte keeps the KV pool's block count well
#: inside int64.
MAX_MEMORY_GB = 1e6

def _kernel_tables(sec, source):
    if not sec.has("kernel_tables"):
        return ()
    value = sec.string("kernel_tables")
    folder = Path(value)
    shipped = presets.configs_dir() / "kernels" / value
    if "/" not in value and "\\" not in value and shipped.is_dir():
        folder = shipped  # a shipped table set by name (``kernel_tables: h100-sxm``)
    elif not folder.is_absolute():
        folder = Path(source).parent / folder
    if not folder.is_dir():
        names = sorted(d.name for d in (presets.configs_dir() / "kernels").iterdir() if d.is_dir())
        raise sec.error("kernel_tables", sec.raw("kernel_tables"),
                        "a shipped table set (" + ", ".join(names) + ") or an existing folder of <framework>.json tables")
    try:
        found = kernel_tables_mod.load_table_folder(folder, FRAMEWORKS)
    except ConfigError as exc:
        raise sec.error("kernel_tables", sec.raw("kernel_tables"), str(exc)) from None
    if not found:
        raise sec.error("kernel_tables", sec.raw("kernel_tables"),
                        "a folder holding <framework>.json tables (" + ", ".join(FRAMEWORKS) + ")")
    return found


def hardware_from_dict(data, source="<dict>", *, with_tables=True):
    """Validate a hardware mapping (``{"hardware": {...}}`` or the inner mapping).

    Raises
    ------
    ConfigError
        For a missing key, wrong type or out-of-range value.
    """
    top = Section(data, source)
    sec = top.section("hardware") if "hardware" in data else top
    if "frameworks" in sec.data:
        raise sec.error("frameworks", "{...}", "no frameworks: section; serving-framework costs live in framework "
                        "profiles (configs/frameworks/NAME.yaml, chosen with --framework NAME or a path)")
    sec.reject_unknown(_KEYS)
    positive = {"exclusive_minimum": 0}
    fp16 = sec.number("fp16_tflops", **positive)
    if sec.has("memory_size_gb") and sec.has("memory_size_gib"):
        raise sec.error("memory_size_gib", sec.raw("memory_size_gib"), "only one of memory_size_gb and memory_size_gib")
    if sec.has("memory_size_gib"):
        memory = sec.number("memory_size_gib", maximum=MAX_MEMORY_GB, **positive) * GIB
    else:
        memory = sec.number("memory_size_gb", maximum=MAX_MEMORY_GB, **positive) * 1e9
    given = sec.has("interconnect") or sec.has("interconnect_bandwidth_gbps")
    util = {"exclusive_minimum": 0, "maximum": 1}
    gpu = sec.string("gpu", Path(source).stem)
    return HardwareConfig(
        gpu=gpu,
        name=sec.string("name", gpu),
        fp16_tflops=fp16,
        bf16_tflops=sec.number("bf16_tflops", fp16, **positive),
        fp8_tflops=sec.number("fp8_tflops", 0.0, minimum=0),
        fp4_tflops=sec.number("fp4_tflops", 0.0, minimum=0),
        int8_tops=sec.number("int8_tops", 0.0, minimum=0),
        fp32_tflops=sec.number("fp32_tflops", 0.0, minimum=0),
        memory_bandwidth_gbps=sec.number("memory_bandwidth_gbps", **positive),
        memory_size_bytes=memory,
        bandwidth_utilization=sec.number("bandwidth_utilization", 0.8, **util),
        compute_utilization=sec.number("compute_utilization", 0.7, **util),
        interconnect=sec.choice("interconnect", _INTERCONNECTS, DEFAULT_INTERCONNECT[0], {"nvl": "nvlink", "xgmi": "infinity-fabric"}),
        interconnect_bandwidth_gbps=sec.number("interconnect_bandwidth_gbps", DEFAULT_INTERCONNECT[1], **positive),
        interconnect_latency_us=sec.number("interconnect_latency_us", DEFAULT_INTERCONNECT[2], minimum=0),
        interconnect_utilization=sec.number("interconnect_utilization", 0.8, **util),
        gpus_per_node=sec.positive_int("gpus_per_node", 8),
        network_bandwidth_gbps=sec.number("network_bandwidth_gbps", DEFAULT_NETWORK[0], **positive),
        network_latency_us=sec.number("network_latency_us", DEFAULT_NETWORK[1], minimum=0),
        launch_overhead_us=sec.number("launch_overhead_us", None, minimum=0),
        runtime_overhead_gib=sec.number("runtime_overhead_gib", 1.0, minimum=0),
        frontend_latency_ms=sec.number("frontend_latency_ms", None, minimum=0),
        kernel_tables=_kernel_tables(sec, source) if with_tables else (),
        interconnect_given=given,
        source=source,
    )

def load_hardware(name_or_path, *, with_tables=True):
    """Load and validate a hardware profile: a preset name (``"h100-sxm"``) or a YAML file.
    ``with_tables=False`` leaves its kernel tables unread (the importer that writes them).

    Raises
    ------
    ConfigError
        For an unknown preset (with the nearest names), a missing file, a YAML syntax error
        (with its line), or an invalid value.
    """
    path = presets.resolve("hardware", name_or_path, flag="--hardware")
    data = load_file(path)
    if data is None:
        raise ConfigError("a hardware profile, got an empty file", source=str(path))
    return hardware_from_dict(data, str(path), with_tables=with_tables)
