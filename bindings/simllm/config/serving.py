"""Serving-engine settings, named as vLLM's engine arguments, and the checks that tie them to a
model and a GPU (tensor-parallel divisibility, dtypes)."""
from dataclasses import dataclass, field, fields

from simllm.config import dtypes, presets
from simllm.config.model import MAX_CONTEXT_TOKENS
from simllm.config.speculative import speculative_config
from simllm.errors import CLI, ConfigError

BATCHING = ("continuous", "static", "dynamic")
ROUTERS = ("round_robin", "least_outstanding")
EXPERT_ROUTINGS = ("balanced", "random")
FRAMEWORKS = ("vllm", "sglang", "trtllm")


#: Upper bounds of the integer settings: GPUs in one parallel dimension, sequences in one batch,
#: tokens (a KV block's, a step's, a context's: the engine counts tokens in int32).
MAX_GPUS = 65536
MAX_SEQS = 2**20
MAX_TOKENS = MAX_CONTEXT_TOKENS
#: vLLM's max_num_batched_tokens when none is given: this with chunked prefill, else
#: max(max_model_len, UNCHUNKED_MIN_BATCHED_TOKENS).
CHUNKED_BATCHED_TOKENS = 8192
UNCHUNKED_MIN_BATCHED_TOKENS = 2048


def _count(minimum, maximum=MAX_TOKENS):
    """An integer in [``minimum``, ``maximum``] (bools refused)."""
    return lambda v: not isinstance(v, bool) and isinstance(v, int) and minimum <= v <= maximum


def _one_of(choices):
    return lambda v: v in choices


def _framework_name(value):
    """A shipped framework profile's name (a backend's current release, or an older one such as
    nim-trtllm) or a path to a profile YAML."""
    return isinstance(value, str) and (value in FRAMEWORKS or value.endswith((".yaml", ".yml"))
                                       or value in presets.preset_names("frameworks"))


def _dtype(allowed):
    """A dtype name, normalised (``auto`` kept)."""
    def normalize(value, flag):
        return value if value == "auto" else dtypes.normalize(value, allowed, source=CLI, key=flag)
    return normalize


def setting(default, flag, check=None, expected="", normalize=None):
    """A :class:`ServingConfig` field with its command-line flag and its check declared together:
    ``check(value) -> bool`` (message ``expected``) or ``normalize(value, flag) -> value``."""
    return field(default=default, metadata={"flag": flag, "check": check, "expected": expected,
                                            "normalize": normalize})


@dataclass(frozen=True)
class ServingConfig:
    """vLLM-style engine arguments (same names, same defaults where vLLM has one).

    ``dtype="auto"`` takes the model's dtype, except that fp32 models are served in fp16, as vLLM
    does; ``kv_cache_dtype="auto"`` follows the activation dtype. Each field declares its flag
    and its check (:func:`setting`); a bad value raises a one-line :class:`ConfigError` naming
    the flag.
    """

    tensor_parallel_size: int = setting(1, "--tensor-parallel-size", _count(1, MAX_GPUS), f"an integer in [1, {MAX_GPUS}]")
    dtype: str = setting("auto", "--dtype", normalize=_dtype(dtypes.WEIGHT_DTYPES))
    kv_cache_dtype: str = setting("auto", "--kv-cache-dtype", normalize=_dtype(dtypes.KV_DTYPES))
    gpu_memory_utilization: float = setting(0.9, "--gpu-memory-utilization", lambda v: 0.0 < v <= 1.0,
                                            "a fraction in (0, 1]")
    block_size: int = setting(16, "--block-size", _count(1, 2**16), "an integer in [1, 65536]")
    max_model_len: int = setting(0, "--max-model-len", _count(0), f"an integer in [1, {MAX_TOKENS}]")  # 0 = the model's
    max_num_seqs: int = setting(256, "--max-num-seqs", _count(1, MAX_SEQS), f"an integer in [1, {MAX_SEQS}]")
    # 0 = vLLM's default: 8192 with chunked prefill, else max(max_model_len, 2048)
    max_num_batched_tokens: int = setting(0, "--max-num-batched-tokens", _count(0), f"an integer in [1, {MAX_TOKENS}]")
    # 0 = the model's kv_cache.compression_ratio
    kv_compression_ratio: float = setting(0.0, "--kv-compression-ratio", lambda v: not v or 1.0 <= v <= 1e6, "a ratio in [1, 1e6]")
    enable_chunked_prefill: bool = setting(True, "--enable-chunked-prefill")
    enable_prefix_caching: bool = setting(False, "--enable-prefix-caching")
    batching: str = setting("continuous", "--batching", _one_of(BATCHING), "one of " + ", ".join(BATCHING))
    # static/dynamic batching: pad prompts to the batch's longest
    pad_prompts: bool = setting(False, "--pad-prompts")
    # dynamic batching: longest wait of a batch's first request
    batch_window_ms: float = setting(10.0, "--batch-window-ms", lambda v: 0 <= v <= 1e9, "a number of milliseconds in [0, 1e9]")
    # dynamic batching: batch size that starts a batch at once (0 = max_num_seqs)
    batch_max: int = setting(0, "--batch-max", _count(0, MAX_SEQS), f"an integer in [1, {MAX_SEQS}]")
    data_parallel_size: int = setting(1, "--data-parallel-size", _count(1, MAX_GPUS), f"an integer in [1, {MAX_GPUS}]")
    # Pipeline parallelism: the layers split over this many stages of tensor-parallel GPUs, batches
    # in flight through them at once (vLLM's batch queue; simcore.pipeline)
    pipeline_parallel_size: int = setting(1, "--pipeline-parallel-size", _count(1, MAX_GPUS), f"an integer in [1, {MAX_GPUS}]")
    # With pipeline parallelism, the most sequences one batch takes (SGLang's
    # --pp-max-micro-batch-size); 0 = vLLM's scheduler: a batch takes every request it can
    pp_max_micro_batch_size: int = setting(0, "--pp-max-micro-batch-size", _count(0, MAX_SEQS), f"an integer in [0, {MAX_SEQS}]")
    # Expert parallelism of MoE layers: their experts spread over this many GPU groups (SGLang's
    # --ep-size, TensorRT-LLM's moe_expert_parallel_size); 1 = experts sharded by TP only. With
    # data parallelism it couples the replicas (attention data parallelism): every rank's tokens
    # meet in each MoE layer. The GPUs, tensor x data parallel, are expert x MoE-tensor parallel.
    expert_parallel_size: int = setting(1, "--expert-parallel-size", _count(1, MAX_GPUS), f"an integer in [1, {MAX_GPUS}]")
    # Each expert's tensor-parallel split (TensorRT-LLM's moe_tensor_parallel_size); 0 = the
    # GPUs over EP when expert parallelism is on, else the tensor-parallel size. With attention
    # data parallelism and no expert parallelism, tensor x data parallel makes the MoE layers
    # tensor-parallel over every rank (SGLang's --enable-dp-attention without --ep-size): every
    # rank's tokens are gathered into each MoE layer, and the ranks step together.
    moe_tensor_parallel_size: int = setting(0, "--moe-tensor-parallel-size", _count(0, MAX_GPUS), f"an integer in [0, {MAX_GPUS}]")
    # vLLM's --enable-expert-parallel: expert parallelism over every GPU (tensor x data parallel)
    enable_expert_parallel: bool = setting(False, "--enable-expert-parallel")
    # With expert parallelism, the most loaded GPU's routed tokens over the mean (1 = uniform
    # routing): the step waits for that GPU (skewed routing; what EPLB's redundant experts reduce)
    expert_load_imbalance: float = setting(1.0, "--expert-load-imbalance", lambda v: 1.0 <= v <= 1e3,
                                           "a ratio from 1 (uniform routing) to 1000")
    # With expert parallelism, how tokens spread over the experts' GPUs before that skew: balanced
    # (each GPU its mean share) or random (each token's experts drawn uniformly: at small batches
    # the busiest GPU holds well over the mean, simllm.sim.routing)
    expert_routing: str = setting("random", "--expert-routing", _one_of(EXPERT_ROUTINGS),
                                  "one of " + ", ".join(EXPERT_ROUTINGS))
    # With expert parallelism, extra expert replicas spread over the EP GPUs (EPLB: vLLM's
    # --eplb-config num_redundant_experts, SGLang's --ep-num-redundant-experts): each GPU holds
    # (experts + N) / EP of them, more weights for a routing the balancer evens out (that balance
    # is --expert-load-imbalance's to state)
    num_redundant_experts: int = setting(0, "--num-redundant-experts", _count(0, MAX_SEQS), f"an integer in [0, {MAX_SEQS}]")
    router: str = setting("round_robin", "--router", _one_of(ROUTERS), "one of " + ", ".join(ROUTERS))
    # Serving framework whose profile (configs/frameworks/NAME.yaml, or a path to a profile YAML)
    # gives the per-request frontend time, per-step and per-sequence CPU overhead, the per-kernel
    # launch gap and the decode-attention floor; the scheduler simulated is vLLM's either way.
    framework: str = setting("vllm", "--framework", _framework_name,
                             "one of " + ", ".join(presets.preset_names("frameworks"))
                             + " (shipped profiles), or a path to a framework profile YAML")
    # vLLM's --speculative-config: a SpeculativeConfig, or its JSON object / mapping (None: off)
    speculative_config: object = setting(None, "--speculative-config", normalize=speculative_config)

    @property
    def num_gpus(self):
        """GPUs these settings take: tensor x pipeline x data parallel."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    def __post_init__(self):
        for f in fields(self):
            meta = f.metadata
            value = getattr(self, f.name)
            if meta["check"] is not None and not meta["check"](value):
                raise ConfigError(meta["expected"], source=CLI, key=meta["flag"], value=value)
            if meta["normalize"] is not None:
                object.__setattr__(self, f.name, meta["normalize"](value, meta["flag"]))


#: Field name -> command-line flag, from the declarations above.
SERVING_FLAGS = {f.name: f.metadata["flag"] for f in fields(ServingConfig)}


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
    attention_dtype: str = ""  # the attention projections' weights ("" = weight_dtype)
    expert_parallel_size: int = 1  # the MoE layers' expert-parallel degree
    moe_tensor_parallel_size: int = 1  # each expert's tensor-parallel split (tensor x data parallel / EP)


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
    if model.linear_layers and (model.linear_num_key_heads % tp or model.linear_num_value_heads % tp):
        raise ConfigError(
            f"a divisor of {model.name}'s linear-attention heads ({model.linear_num_key_heads} key, "
            f"{model.linear_num_value_heads} value)", source=CLI, key="--tensor-parallel-size", value=tp)
    ep, moe_tp = expert_parallel(model, serving)
    for what, width, split in (("intermediate_size", model.intermediate_size if model.dense_layers else 0, tp),
                               ("moe_intermediate_size", model.moe_intermediate_size, moe_tp),
                               ("shared_expert_intermediate_size", model.shared_expert_intermediate_size, tp)):
        if width % split:
            if split != tp:
                raise ConfigError(
                    f"an expert-parallel size that leaves each expert split evenly: {model.name}'s "
                    f"{what} ({width}) over tensor x data parallel / EP = {moe_tp} GPUs",
                    source=CLI, key="--expert-parallel-size", value=ep)
            raise ConfigError(
                f"a divisor of {model.name}'s {what} ({width})", source=CLI, key="--tensor-parallel-size", value=tp
            )
    if tp > 1 and not hardware.interconnect_given:
        warnings.append(
            f"{hardware.gpu} gives no interconnect: all-reduces are timed on PCIe Gen4 x16 "
            f"({hardware.interconnect_bandwidth_gbps:g} GB/s per direction)"
        )
    if serving.expert_load_imbalance != 1.0 and ep == 1:
        warnings.append(f"--expert-load-imbalance {serving.expert_load_imbalance:g} is ignored without expert "
                        f"parallelism (every GPU holds a slice of every expert)")
    if ep > 1 and tp * serving.data_parallel_size > hardware.gpus_per_node:
        warnings.append(
            f"expert parallelism over {tp * serving.data_parallel_size} GPUs spans nodes of {hardware.gpus_per_node}: "
            f"its all-to-all sends part of its bytes over the network ({hardware.network_bandwidth_gbps:g} GB/s per GPU)"
        )
    pipeline_checks(model, hardware, serving, warnings)
    if tp > hardware.gpus_per_node:
        warnings.append(
            f"tensor parallel size {tp} spans nodes of {hardware.gpus_per_node} GPUs: all-reduces are timed on the "
            f"network ({hardware.network_bandwidth_gbps:g} GB/s per GPU, {hardware.network_latency_us:g} us)"
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
        tokens = CHUNKED_BATCHED_TOKENS if serving.enable_chunked_prefill else max(max_len, UNCHUNKED_MIN_BATCHED_TOKENS)
    elif not serving.enable_chunked_prefill and serving.batching == "continuous" and tokens < max_len:
        raise ConfigError(
            f"at least max_model_len ({max_len}) without chunked prefill (a whole prompt must fit in one "
            f"iteration); lower --max-model-len or enable chunked prefill",
            source=CLI, key="--max-num-batched-tokens", value=tokens,
        )
    # --dtype / --quantization quantise every projection; the checkpoint's own split otherwise
    attention = (model.attention_dtype or weight) if serving.dtype == "auto" else weight
    return Resolved(
        weight_dtype=weight,
        attention_dtype=attention,
        activation_dtype=act,
        kv_dtype=kv_dtype,
        kv_compression_ratio=serving.kv_compression_ratio or model.kv_compression_ratio,
        max_model_len=max_len,
        max_num_batched_tokens=tokens,
        kv_heads_per_gpu=max(1, kv // tp),
        warnings=tuple(warnings),
        expert_parallel_size=ep,
        moe_tensor_parallel_size=moe_tp,
    )


def pipeline_checks(model, hardware, serving, warnings):
    """Raise :class:`ConfigError` unless ``serving``'s pipeline parallelism can run: at most one
    stage per layer, continuous batching (vLLM's batch queue), no speculative decoding (not simulated
    with pipelining; vLLM's model runner v2 rejects EAGLE with it) and no attention data-parallel
    ranks stepping together. Appends to ``warnings`` what is ignored or crosses nodes."""
    pp = serving.pipeline_parallel_size
    if pp == 1:
        if serving.pp_max_micro_batch_size:
            warnings.append("--pp-max-micro-batch-size is ignored without pipeline parallelism "
                            "(--pipeline-parallel-size)")
        return
    if pp > model.layers:
        raise ConfigError(f"at most {model.name}'s {model.layers} layers (one stage a layer at least)",
                          source=CLI, key="--pipeline-parallel-size", value=pp)
    if serving.batching != "continuous":
        raise ConfigError("1 with static or dynamic batching: batches in flight through the stages are vLLM's "
                          "continuous batching", source=CLI, key="--pipeline-parallel-size", value=pp)
    if serving.speculative_config is not None:
        raise ConfigError("1 with speculative decoding: simllm does not simulate drafts under pipeline parallelism",
                          source=CLI, key="--pipeline-parallel-size", value=pp)
    if serving.data_parallel_size > 1 and (expert_parallel(model, serving)[0] > 1
                                           or serving.moe_tensor_parallel_size > serving.tensor_parallel_size):
        raise ConfigError("1 with attention data parallelism (-dp with expert parallelism): its ranks step together, "
                          "which simllm does not simulate pipelined", source=CLI, key="--pipeline-parallel-size",
                          value=pp)
    tp, g = serving.tensor_parallel_size, hardware.gpus_per_node
    if tp * pp > g:
        warnings.append(f"pipeline of {pp} stages x TP {tp} spans nodes of {g} GPUs: the activations between "
                        f"stages on different nodes go over the network ({hardware.network_bandwidth_gbps:g} GB/s "
                        f"per GPU, {hardware.network_latency_us:g} us)")


def expert_parallel(model, serving):
    """``(ep, moe_tp)``: the MoE layers' expert-parallel degree and each expert's tensor-parallel
    split, ``ep x moe_tp = tensor x data parallel`` GPUs when expert parallelism is on (vLLM's
    ``--enable-expert-parallel`` spreads experts over all of them), else ``(1, tp)``, or
    ``(1, tp x dp)`` with ``--moe-tensor-parallel-size`` tp x dp.

    Raises
    ------
    ConfigError
        For expert parallelism on a dense model, an EP size that does not divide the experts or
        the GPUs, a conflicting ``--expert-parallel-size`` and ``--enable-expert-parallel``, or a
        ``--moe-tensor-parallel-size`` other than these.
    """
    tp, dp = serving.tensor_parallel_size, serving.data_parallel_size
    gpus = tp * dp
    ep = serving.expert_parallel_size
    if serving.enable_expert_parallel:
        if ep not in (1, gpus):
            raise ConfigError(f"{gpus} (tensor x data parallel) with --enable-expert-parallel, or leave it out",
                              source=CLI, key="--expert-parallel-size", value=ep)
        ep = gpus
    extra = serving.num_redundant_experts
    moe_tp = serving.moe_tensor_parallel_size
    if ep == 1:
        if extra:
            raise ConfigError("0 without expert parallelism (-ep / --enable-expert-parallel): redundant experts are "
                              "replicas spread over the EP GPUs", source=CLI, key="--num-redundant-experts", value=extra)
        if moe_tp in (0, tp):
            return 1, tp
        if not model.is_moe:
            raise ConfigError(f"0: {model.name} has no experts to split", source=CLI,
                              key="--moe-tensor-parallel-size", value=moe_tp)
        if moe_tp != gpus:
            over_ranks = f" or {gpus} (tensor x data parallel: the MoE layers over every rank)" if dp > 1 else ""
            raise ConfigError(f"0 or {tp} (the tensor-parallel size){over_ranks}", source=CLI,
                              key="--moe-tensor-parallel-size", value=moe_tp)
        return 1, gpus
    if not model.is_moe:
        raise ConfigError(f"1: {model.name} has no experts to spread", source=CLI, key="--expert-parallel-size", value=ep)
    if (model.num_experts + extra) % ep:
        if extra:
            raise ConfigError(f"a count that makes {model.name}'s {model.num_experts} experts plus the redundant ones "
                              f"a multiple of EP {ep}", source=CLI, key="--num-redundant-experts", value=extra)
        raise ConfigError(f"a divisor of {model.name}'s {model.num_experts} experts", source=CLI,
                          key="--expert-parallel-size", value=ep)
    if gpus % ep:
        raise ConfigError(f"a divisor of the {gpus} GPUs (tensor x data parallel)", source=CLI,
                          key="--expert-parallel-size", value=ep)
    if moe_tp not in (0, gpus // ep):
        raise ConfigError(f"{gpus // ep} (tensor x data parallel / EP {ep}) or 0", source=CLI,
                          key="--moe-tensor-parallel-size", value=moe_tp)
    return ep, gpus // ep


def moe_parallel_keys(serving, resolved):
    """The summary keys of the MoE layers' parallelism where it is not the tensor-parallel one:
    ``expert_parallel_size`` (> 1), or ``moe_tensor_parallel_size`` (over the ranks)."""
    if resolved.expert_parallel_size > 1:
        return {"expert_parallel_size": resolved.expert_parallel_size}
    if moe_spans_ranks(serving, resolved):
        return {"moe_tensor_parallel_size": resolved.moe_tensor_parallel_size}
    return {}


def moe_spans_ranks(serving, resolved):
    """Whether the MoE layers gather every attention data-parallel rank's tokens (expert
    parallelism, or the experts tensor-parallel over more GPUs than a rank's): the ranks then
    step together."""
    return resolved.expert_parallel_size > 1 or resolved.moe_tensor_parallel_size > serving.tensor_parallel_size
