"""Data types: names users write, and bytes per element.

int4 is weight-only quantisation with one fp16 scale per group of 128 weights (GPTQ/AWQ-style),
so 0.5 + 2/128 bytes per weight. fp4 is NVFP4: 4-bit E2M1 values with one FP8 (E4M3) scale per
16 (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", 2025; the
per-tensor FP32 scale is negligible), 0.5 + 1/16 bytes, run on FP4 tensor cores where the GPU has
them (Blackwell). mxfp4 is the OCP Microscaling format's MXFP4 (OCP MX specification v1.0: E2M1
values, one E8M0 scale per 32), 0.5 + 1/32 bytes, weight-only (gpt-oss's experts): the GEMMs run
in the activation dtype, except on GPUs with FP4 tensor cores, where they run as W4A8 at the FP8
rate (``HardwareConfig.peak_flops``).
"""
from simllm.errors import ConfigError

BYTES = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 2.0 / 128.0,
    "fp4": 0.5 + 1.0 / 16.0,
    "mxfp4": 0.5 + 1.0 / 32.0,
}

_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_e4m3fn": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "w8a8": "int8",
    "w4a16": "int4",
    "awq": "int4",
    "gptq": "int4",
    "nvfp4": "fp4",
    "float4_e2m1": "fp4",
    "w4a16_mxfp4": "mxfp4",
}

WEIGHT_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "fp4", "mxfp4")
KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
NATIVE_DTYPES = ("fp32", "fp16", "bf16")
# Weight-only formats by definition: their GEMMs run at the activation dtype's peak on any GPU.
WEIGHT_ONLY_DTYPES = ("int4", "mxfp4")


def normalize(value, allowed, *, source=None, key=None, line=None):
    """Canonical dtype name for ``value`` (``"bfloat16"`` -> ``"bf16"``), checked against
    ``allowed``; raises :class:`ConfigError` otherwise."""
    if isinstance(value, str):
        name = value.strip().lower()
        name = _ALIASES.get(name, name)
        if name in allowed:
            return name
    raise ConfigError("one of " + ", ".join(allowed), source=source, key=key, value=value, line=line)
