"""Serving-engine settings, named as vLLM's engine arguments, and the checks that tie them to a
model and a GPU (tensor-parallel divisibility, dtypes)."""
from dataclasses import dataclass

from simllm.config import dtypes
from simllm.errors import ConfigError

CLI = "command line"
BATCHING = ("continuous", "static", "dynamic")
ROUTERS = ("round_robin", "least_outstanding")
FRAMEWORKS = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True)
class ServingConfig:
    """vLLM-style engine arguments (same names, same defaults where vLLM has one).

    ``dtype="auto"`` takes the model's dtype, except that fp32 models are served in fp16, as vLLM
    does; ``kv_cache_dtype="auto"`` follows the activation dtype.
    """

    tensor_parallel_size: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    max_model_len: int = 0  # 0 = the model's max_sequence_length
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 0  # 0 = vLLM's default: 8192 with chunked prefill, else max(max_model_len, 2048)
    kv_compression_ratio: float = 0.0  # 0 = the model's kv_cache.compression_ratio
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    batching: str = "continuous"  # continuous | static | dynamic
    pad_prompts: bool = False  # static/dynamic batching: pad prompts to the batch's longest
    batch_window_ms: float = 10.0  # dynamic batching: longest wait of a batch's first request
    batch_max: int = 0  # dynamic batching: batch size that starts a batch at once (0 = max_num_seqs)
    data_parallel_size: int = 1
    router: str = "round_robin"  # round_robin | least_outstanding
    # Serving framework whose calibrated factors the hardware profile applies, when it has them
    # (``frameworks`` in a calibrated preset); the scheduler simulated is vLLM's either way.
    framework: str = "vllm"

    def __post_init__(self):
        def bad(flag, value, expected):
            raise ConfigError(expected, source=CLI, key=flag, value=value)

        for flag, value in (
            ("--tensor-parallel-size", self.tensor_parallel_size),
            ("--block-size", self.block_size),
            ("--max-num-seqs", self.max_num_seqs),
            ("--data-parallel-size", self.data_parallel_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                bad(flag, value, "a positive integer")
        for flag, value in (("--max-model-len", self.max_model_len),
                            ("--max-num-batched-tokens", self.max_num_batched_tokens),
                            ("--batch-max", self.batch_max)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                bad(flag, value, "a positive integer")
        if self.batching not in BATCHING:
            bad("--batching", self.batching, "one of " + ", ".join(BATCHING))
        if self.router not in ROUTERS:
            bad("--router", self.router, "one of " + ", ".join(ROUTERS))
        if self.framework not in FRAMEWORKS:
            bad("--framework", self.framework, "one of " + ", ".join(FRAMEWORKS))
        if not self.batch_window_ms >= 0:
            bad("--batch-window-ms", self.batch_window_ms, "a number >= 0")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            bad("--gpu-memory-utilization", self.gpu_memory_utilization, "a fraction in (0, 1]")
        if self.kv_compression_ratio and self.kv_compression_ratio < 1.0:
            bad("--kv-compression-ratio", self.kv_compression_ratio, "a ratio >= 1")
        if self.dtype != "auto":
            object.__setattr__(self, "dtype", dtypes.normalize(self.dtype, dtypes.WEIGHT_DTYPES, source=CLI, key="--dtype"))
        if self.kv_cache_dtype != "auto":
            object.__setattr__(
                self, "kv_cache_dtype",
                dtypes.normalize(self.kv_cache_dtype, dtypes.KV_DTYPES, source=CLI, key="--kv-cache-dtype"),
            )


@dataclass(frozen=True)
class Resolved:
    """Dtypes and limits once a serving config meets a model."""

    weight_dtype: str
    activation_dtype: str
    kv_dtype: str
    kv_compression_ratio: float
    max_model_len: int
    max_num_batched_tokens: int
    kv_heads_per_gpu: int
    warnings: tuple


def resolve(model, hardware, serving):
    """Check ``serving`` against ``model`` and ``hardware`` and settle dtypes and limits.

    Raises
    ------
    ConfigError
        When the tensor-parallel size does not divide the attention heads, the KV heads (or is
        not a multiple of them), or the FFN width; or ``--max-model-len`` exceeds the model's.
    """
    tp = serving.tensor_parallel_size
    warnings = []
    heads, kv = model.num_attention_heads, model.num_key_value_heads
    if heads % tp:
        raise ConfigError(
            f"a divisor of {model.name}'s num_attention_heads ({heads})", source=CLI, key="--tensor-parallel-size", value=tp
        )
    if kv % tp and tp % kv:
        raise ConfigError(
            f"a divisor or a multiple of {model.name}'s num_key_value_heads ({kv})",
            source=CLI, key="--tensor-parallel-size", value=tp,
        )
    for what, width in (("intermediate_size", model.intermediate_size if model.dense_layers else 0),
                        ("moe_intermediate_size", model.moe_intermediate_size),
                        ("shared_expert_intermediate_size", model.shared_expert_intermediate_size)):
        if width % tp:
            raise ConfigError(
                f"a divisor of {model.name}'s {what} ({width})", source=CLI, key="--tensor-parallel-size", value=tp
            )
    if tp > 1 and not hardware.interconnect_given:
        warnings.append(
            f"{hardware.gpu} gives no interconnect: all-reduces are timed on PCIe Gen4 x16 "
            f"({hardware.interconnect_bandwidth_gbps:g} GB/s per direction)"
        )
    if tp > hardware.gpus_per_node:
        warnings.append(
            f"tensor parallel size {tp} exceeds {hardware.gpus_per_node} GPUs per node; "
            f"all-reduces are still timed on {hardware.interconnect}"
        )
    weight = model.dtype if serving.dtype == "auto" else serving.dtype
    if weight == "fp32" and serving.dtype == "auto":
        weight = "fp16"  # vLLM serves fp32 checkpoints in fp16 under --dtype auto
    if weight in dtypes.NATIVE_DTYPES:
        act = weight
    else:
        act = model.dtype if model.dtype in ("fp16", "bf16") else "fp16"  # quantised fp32 checkpoint
    kv_dtype = model.kv_cache_dtype if serving.kv_cache_dtype == "auto" else serving.kv_cache_dtype
    if kv_dtype == "auto":
        kv_dtype = act
    max_len = serving.max_model_len or model.max_sequence_length
    if max_len > model.max_sequence_length:
        raise ConfigError(
            f"at most {model.name}'s max_sequence_length ({model.max_sequence_length})",
            source=CLI, key="--max-model-len", value=max_len,
        )
    tokens = serving.max_num_batched_tokens
    if not tokens:
        tokens = 8192 if serving.enable_chunked_prefill else max(max_len, 2048)
    elif not serving.enable_chunked_prefill and serving.batching == "continuous" and tokens < max_len:
        raise ConfigError(
            f"at least max_model_len ({max_len}) without chunked prefill (a whole prompt must fit in one "
            f"iteration); lower --max-model-len or enable chunked prefill",
            source=CLI, key="--max-num-batched-tokens", value=tokens,
        )
    return Resolved(
        weight_dtype=weight,
        activation_dtype=act,
        kv_dtype=kv_dtype,
        kv_compression_ratio=serving.kv_compression_ratio or model.kv_compression_ratio,
        max_model_len=max_len,
        max_num_batched_tokens=tokens,
        kv_heads_per_gpu=max(1, kv // tp),
        warnings=tuple(warnings),
    )
