"""``simllm estimate``: the cost of one prefill step and one decode step operator by operator,
the memory plan, the decode lower bound and the ideal TTFT/TPOT of one request."""
from dataclasses import dataclass

import numpy as np

from simcore import (
    codes,
    decode_run_time_nb,
    iteration_costs_nb,
    iteration_seconds,
    iteration_time_nb,
    new_cost_arrays,
    op_count_nb,
    routing_factors_nb,
    streamed_weight_bytes_nb,
)
from simllm.config import dtypes
from simllm.config import serving as serving_mod
from simllm.config.serving import ServingConfig
from simllm.errors import ConfigError
from simllm.sim.memory import plan_memory
from simllm.sim.speculative import check_speculative, draft_seconds, pack_drafter
from simllm.sim.pack import pack_cost_params, pipeline_sends_s, pipeline_settings


@dataclass(frozen=True)
class OpCost:
    """One operator's totals over the layers it runs in, for one iteration."""

    name: str
    count: int  # instances in the iteration (layers)
    flops: float
    bytes: float  # memory bytes, or interconnect bytes for a collective
    seconds: float
    bound: str  # "compute", "memory" or "interconnect"


@dataclass(frozen=True)
class StepCost:
    """One engine iteration: ``batch_size`` sequences each processing ``new_tokens`` tokens after
    ``context_tokens`` cached ones."""

    phase: str
    batch_size: int
    new_tokens: int
    context_tokens: int
    ops: tuple
    seconds: float

    @property
    def flops(self):
        return sum(op.flops for op in self.ops)

    @property
    def memory_bytes(self):
        return sum(op.bytes for op in self.ops if op.bound != "interconnect")

    def to_dict(self):
        return {
            "phase": self.phase,
            "batch_size": self.batch_size,
            "new_tokens_per_seq": self.new_tokens,
            "context_tokens_per_seq": self.context_tokens,
            "time_ms": self.seconds * 1e3,
            "flops": self.flops,
            "memory_bytes": self.memory_bytes,
            "operators": [
                {"name": o.name, "count": o.count, "flops": o.flops, "bytes": o.bytes, "time_ms": o.seconds * 1e3,
                 "bound": o.bound}
                for o in self.ops
            ],
        }


def _step(params, phase, batch, new, context, emit=True, logits_per_seq=1):
    q, c = float(new), float(context)
    n_tokens = batch * q
    pairs = batch * (q * c + q * (q + 1.0) / 2.0)
    kv_read = batch * (c + q)
    flops, nbytes, seconds, bound = new_cost_arrays()
    rows = float(batch * logits_per_seq) if emit else 0.0
    total = iteration_costs_nb(params, n_tokens, pairs, kv_read, rows, flops, nbytes, seconds, bound)
    ops = tuple(
        OpCost(codes.OP_NAMES[i], int(op_count_nb(params, i)), float(flops[i]), float(nbytes[i]), float(seconds[i]),
               codes.BOUND_NAMES[bound[i]])
        for i in range(codes.N_OPS)
        if bound[i] != codes.BOUND_NONE
    )
    return StepCost(phase, int(batch), int(new), int(context), ops, float(total))


@dataclass(frozen=True)
class SpeculativeEstimate:
    """Speculative decoding at the estimate's decode step (``simllm.sim.speculative``): the
    target's verification forward over ``1 + k`` tokens a request, the drafter's ``k`` passes, and
    what the stated acceptance makes of them."""

    config: object  # SpeculativeConfig
    verify: StepCost  # the target over batch x (1 + k) tokens, logits at each
    draft_s: float  # the drafter's k passes in that step
    single_step_s: float  # verification + draft at batch 1
    draft_weight_bytes: float  # the drafter's own weights on one GPU (in the memory plan)

    @property
    def step_s(self):
        return self.verify.seconds + self.draft_s

    @property
    def tokens_per_step(self):
        return self.config.tokens_per_step

    @property
    def tpot_s(self):
        """Seconds per output token at the estimate's batch: a step over its expected tokens."""
        return self.step_s / self.tokens_per_step

    def to_dict(self, plain_step_s):
        return {**self.config.to_dict(),
                "verify": self.verify.to_dict(),
                "draft_time_ms": self.draft_s * 1e3,
                "step_time_ms": self.step_s * 1e3,
                "tokens_per_step": self.tokens_per_step,
                "tpot_ms": self.tpot_s * 1e3,
                "ideal_tpot_ms": self.single_step_s / self.tokens_per_step * 1e3,
                "decode_step_time_ms": plain_step_s * 1e3,
                "speedup": plain_step_s / self.tpot_s,
                "draft_weight_bytes": self.draft_weight_bytes}


@dataclass(frozen=True)
class Estimate:
    """Result of :func:`estimate`. Times in seconds, sizes in bytes; :meth:`to_dict` converts
    times to milliseconds with ``_ms`` keys."""

    model: object
    hardware: object
    serving: object
    resolved: object
    memory: object
    batch_size: int
    input_len: int
    output_len: int
    prefill: StepCost
    decode: StepCost
    streamed_weight_bytes: float
    decode_lower_bound_s: float
    ideal_ttft_s: float
    ideal_tpot_s: float
    batch_ttft_s: float
    batch_tpot_s: float
    max_batch_size: int
    warnings: tuple
    # with expert parallelism: the GPU the decode step's MoE layers wait for, its token-expert
    # assignments and hit experts over the mean GPU's (random routing; (1, 1) balanced)
    decode_expert_load: tuple = (1.0, 1.0)
    speculative: SpeculativeEstimate = None  # with a --speculative-config

    def to_dict(self):
        m, hw, r, mem = self.model, self.hardware, self.resolved, self.memory
        whole = self.serving.tensor_parallel_size / mem.stage_share  # a GPU's share -> the whole model's
        return {
            "model": {
                "name": m.name,
                "source": m.source,
                "parameters": m.parameter_count(),
                "active_parameters": m.active_parameter_count(),
                "declared_parameters": m.declared_parameters or None,
                "layers": m.layers,
                "hidden_size": m.hidden_size,
                "num_attention_heads": m.num_attention_heads,
                "num_key_value_heads": m.num_key_value_heads,
                "head_dim": m.head_dim,
                "max_sequence_length": m.max_sequence_length,
            },
            "hardware": {
                "gpu": hw.gpu,
                "name": hw.name,
                "source": hw.source,
                "memory_bytes": hw.memory_size_bytes,
                "memory_bandwidth_gbps": hw.memory_bandwidth_gbps,
                "fp16_tflops": hw.fp16_tflops,
            },
            "serving": {
                "tensor_parallel_size": self.serving.tensor_parallel_size,
                **({"pipeline_parallel_size": self.serving.pipeline_parallel_size}
                   if self.serving.pipeline_parallel_size > 1 else {}),
                "dtype": r.weight_dtype,
                "activation_dtype": r.activation_dtype,
                "kv_cache_dtype": r.kv_dtype,
                "kv_compression_ratio": r.kv_compression_ratio,
                "gpu_memory_utilization": self.serving.gpu_memory_utilization,
                "block_size": self.serving.block_size,
                "max_model_len": r.max_model_len,
                "max_num_seqs": self.serving.max_num_seqs,
                "max_num_batched_tokens": r.max_num_batched_tokens,
                "data_parallel_size": self.serving.data_parallel_size,
                "expert_parallel_size": r.expert_parallel_size,
                "moe_tensor_parallel_size": r.moe_tensor_parallel_size,
                "expert_load_imbalance": self.serving.expert_load_imbalance,
                "expert_routing": self.serving.expert_routing,
                "decode_busiest_gpu_over_mean": {"assignments": self.decode_expert_load[0],
                                                 "hit_experts": self.decode_expert_load[1]},
                "num_redundant_experts": self.serving.num_redundant_experts,
            },
            "batch_size": self.batch_size,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
            "memory": mem.to_dict(),
            "summary": {
                "weights_streamed_per_step_bytes": self.streamed_weight_bytes,
                "decode_lower_bound_ms": self.decode_lower_bound_s * 1e3,
                "kv_cache_bytes_per_token": mem.kv_bytes_per_token * whole,
                "kv_cache_bytes_per_token_per_gpu": mem.kv_bytes_per_token,
                "kv_cache_window_bytes_per_seq": mem.window_bytes_per_seq * whole,
                "recurrent_state_bytes_per_seq": mem.state_bytes_per_seq * whole,
                "kv_capacity_tokens": mem.kv_capacity_tokens,
                "max_batch_size": self.max_batch_size,
                "ideal_ttft_ms": self.ideal_ttft_s * 1e3,
                "ideal_tpot_ms": self.ideal_tpot_s * 1e3,
                "ideal_e2e_latency_ms": (self.ideal_ttft_s + self.ideal_tpot_s * (self.output_len - 1)) * 1e3,
                "batch_ttft_ms": self.batch_ttft_s * 1e3,
                "batch_tpot_ms": self.batch_tpot_s * 1e3,
                "batch_output_throughput_tok_s": self.batch_size / self.batch_tpot_s if self.batch_tpot_s else None,
            },
            "speculative": self.speculative.to_dict(self.decode.seconds) if self.speculative else None,
            "warnings": list(self.warnings),
        }


def _tpot(params, model, batch, input_len, output_len):
    """Mean seconds per output token after the first (the decode steps of ``output_len - 1`` tokens)."""
    steps = output_len - 1
    if steps <= 0:
        return 0.0
    if model.kv_cache_enabled:
        return decode_run_time_nb(params, float(batch), float(batch * input_len), steps) / steps
    total = 0.0  # no KV cache: each step recomputes the whole context
    for i in range(steps):
        n = float(input_len + i + 1)
        total += iteration_time_nb(params, batch * n, batch * n * (n + 1.0) / 2.0, batch * n, float(batch))
    return total / steps


def estimate(model, hardware, serving=None, *, batch_size=1, input_len=1024, output_len=128, speculative=None,
             framework=None):
    """Cost one prefill step and one decode step of ``model`` on ``hardware``.

    Parameters
    ----------
    model : ModelConfig
    hardware : HardwareConfig
    serving : ServingConfig, optional
        Engine arguments (tensor parallelism, dtypes, memory); defaults to vLLM's.
    batch_size : int
        Sequences in the prefill step (each with ``input_len`` prompt tokens) and in the decode
        step (each at the mid-generation context ``input_len + output_len // 2``).
    input_len, output_len : int
        Prompt and output tokens per request.
    speculative : SpeculativeConfig, optional
        Speculative decoding (``simllm.config.speculative``; default ``serving.speculative_config``):
        the result's ``speculative`` then
        prices its step at the decode step's batch and context, and the memory plan holds the
        drafter's weights and KV.
    framework : FrameworkProfile or str, optional
        The framework profile (default ``serving.framework``'s).

    Returns
    -------
    Estimate

    Raises
    ------
    ConfigError
        For invalid sizes or parallel layout; :class:`SimulatedOOM` when it does not fit.
    """
    serving = serving or ServingConfig()
    for flag, value in (("--batch-size", batch_size), ("--input-len", input_len), ("--output-len", output_len)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError("a positive integer", source=serving_mod.CLI, key=flag, value=value)
    resolved = serving_mod.resolve(model, hardware, serving)
    if input_len + output_len > resolved.max_model_len:
        raise ConfigError(
            f"input_len + output_len <= max_model_len ({resolved.max_model_len}); got {input_len} + {output_len}",
            source=serving_mod.CLI, key="--input-len", value=input_len,
        )
    params = pack_cost_params(model, hardware, serving, resolved, framework)
    if speculative is None:
        speculative = serving.speculative_config
    if speculative is not None:
        check_speculative(model, serving)
    drafter = pack_drafter(model, hardware, serving, speculative, framework) if speculative else None
    memory = plan_memory(params, model, hardware, serving, resolved,
                         draft_weight_bytes=drafter.weight_bytes if drafter else 0.0,
                         draft_kv_bytes_per_token=drafter.kv_bytes_per_token if drafter else 0.0)
    warnings = list(model.warnings) + list(resolved.warnings)

    prefill = _step(params, "prefill", batch_size, input_len, 0)
    mid = input_len + output_len // 2
    if model.kv_cache_enabled:
        decode = _step(params, "decode", batch_size, 1, mid)
    else:
        decode = _step(params, "decode", batch_size, mid + 1, 0)
    streamed = streamed_weight_bytes_nb(params, 1.0)
    max_batch = memory.max_concurrent_sequences(input_len + output_len) if model.kv_cache_enabled else serving.max_num_seqs
    if model.kv_cache_enabled and batch_size > max_batch:
        warnings.append(
            f"batch of {batch_size} x {input_len + output_len} tokens needs more KV cache than the pool holds "
            f"({memory.kv_capacity_tokens} tokens, {max_batch} such sequences); the engine would queue or preempt"
        )
    if batch_size * input_len > resolved.max_num_batched_tokens:
        warnings.append(
            f"the prefill step of {batch_size} x {input_len} tokens exceeds max_num_batched_tokens "
            f"({resolved.max_num_batched_tokens}); the engine would split it into chunks over several iterations"
        )
    lower_bound = streamed / hardware.memory_bandwidth_bytes_per_s
    if model.declared_parameters and any("declared_parameters" in w for w in model.warnings):
        declared_bytes = model.declared_parameters * dtypes.BYTES[resolved.weight_dtype] / serving.tensor_parallel_size
        warnings.append(
            f"the declared {model.declared_parameters / 1e9:.2f}B parameters ({declared_bytes / 1e9:.1f} GB per GPU) "
            f"would give a decode lower bound of {declared_bytes / hardware.memory_bandwidth_bytes_per_s * 1e3:.1f} ms "
            f"at {hardware.memory_bandwidth_gbps:g} GB/s; the dimensions give {lower_bound * 1e3:.2f} ms, reported here"
        )
    ideal_ttft = _step(params, "prefill", 1, input_len, 0).seconds
    ideal_tpot = _tpot(params, model, 1, input_len, output_len)
    pipeline = pipeline_settings(params, hardware, serving)
    if pipeline:  # a lone request waits for every stage and every send between them
        ideal_ttft += pipeline_sends_s(pipeline, float(input_len))
        ideal_tpot += pipeline_sends_s(pipeline, 1.0) if output_len > 1 else 0.0
        warnings.append(
            f"pipeline parallelism: the steps are the whole model's, the sum of its "
            f"{serving.pipeline_parallel_size} stages (each GPU computes its share); a lone request adds the sends "
            f"between stages ({pipeline_sends_s(pipeline, 1.0) * 1e3:.3f} ms a decode step); `simllm run` simulates "
            f"the batches in flight")
    spec = None
    if speculative is not None:
        k = speculative.num_speculative_tokens
        verify = _step(params, "verify", batch_size, 1 + k, mid, logits_per_seq=1 + k)
        single = _step(params, "verify", 1, 1 + k, mid, logits_per_seq=1 + k).seconds + draft_seconds(drafter, k, 1, mid)
        spec = SpeculativeEstimate(speculative, verify, draft_seconds(drafter, k, batch_size, mid), single,
                                   drafter.weight_bytes)
    return Estimate(
        model=model,
        hardware=hardware,
        serving=serving,
        resolved=resolved,
        memory=memory,
        batch_size=int(batch_size),
        input_len=int(input_len),
        output_len=int(output_len),
        prefill=prefill,
        decode=decode,
        streamed_weight_bytes=float(streamed),
        decode_lower_bound_s=float(lower_bound),
        ideal_ttft_s=ideal_ttft,
        ideal_tpot_s=ideal_tpot,
        batch_ttft_s=prefill.seconds,
        batch_tpot_s=_tpot(params, model, batch_size, input_len, output_len),
        max_batch_size=int(max_batch),
        warnings=tuple(warnings),
        decode_expert_load=tuple(float(f) for f in routing_factors_nb(params, float(batch_size))),
        speculative=spec,
    )


def estimate_request_s(params, workload, requests):
    """Rough seconds one average request takes alone (prefill + decode at mid context); sizes
    the simulation's time-series windows."""
    mean_in = float(requests.input_len.mean())
    mean_out = float(requests.output_len.mean())
    t_prefill = iteration_seconds(params, mean_in, mean_in * (mean_in + 1.0) / 2.0, mean_in, 1.0)
    ctx = mean_in + mean_out / 2.0 + 1.0
    return t_prefill + max(mean_out - 1.0, 0.0) * iteration_seconds(params, 1.0, ctx, ctx, 1.0)
