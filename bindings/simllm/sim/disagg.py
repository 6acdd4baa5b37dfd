"""``simllm.simulate_disagg``: disaggregated prefill/decode serving: a prefill pool and a decode
pool (each its own GPU, parallelism and engine settings) in one event loop
(``simcore.disagg.simulate_disagg_nb``), the prompts' KV caches moving between them over each
prefill instance's link; the result is a :class:`SimResult` whose summary adds ``prefill_pool``,
``decode_pool`` and ``kv_transfer``."""
import logging
import math
import time

import numpy as np

from simcore import codes
from simcore.disagg import simulate_disagg_nb
from simcore.layout import accepted_per_position, make_layout, split_accumulator
from simcore.params import Transfer
from simllm.config.disagg import POOL_FLAGS, DisaggConfig
from simllm.config.hardware import load_hardware
from simllm.config.serving import CLI, ServingConfig, moe_parallel_keys
from simllm.config.workload import Workload, generate
from simllm.errors import ConfigError
from simllm.sim import kernelmode
from simllm.sim.results import SimResult, engine_figures, stats_ms
from simllm.sim.simulate import (ITL_BINS, N_WINDOWS, compile_for, engine_inputs, pool_speculation, prepare_pool,
                                 run_reporting, work_of)

log = logging.getLogger("simllm")

# Pool-wide figures whose run-wide value is the pools' GPU-weighted mean.
_PER_GPU_KEYS = ("compute_utilization", "bandwidth_utilization", "gpu_busy_fraction")


def link_of(disagg, hardware_p, hardware_d, gpus_p, gpus_d):
    """One prefill instance's link to the decode pool: (bytes/s, latency s, kind). Unless
    ``disagg`` states it: NVLink (each GPU's, all the instance's GPUs sending at once) when both
    pools are the same GPU and fit one NVLink domain (``gpus_per_node``), else the GPUs' network
    NICs (``network_bandwidth_gbps`` each)."""
    nvlink = hardware_p.gpu == hardware_d.gpu and gpus_p + gpus_d <= hardware_p.gpus_per_node
    if nvlink:
        bw_gbps, lat_us, kind = gpus_p * hardware_p.interconnect_bandwidth_gbps, hardware_p.interconnect_latency_us, "nvlink"
    else:
        bw_gbps, lat_us, kind = gpus_p * hardware_p.network_bandwidth_gbps, hardware_p.network_latency_us, "network"
    if disagg.kv_transfer_bandwidth_gbps:
        bw_gbps, kind = disagg.kv_transfer_bandwidth_gbps, "stated"
    if disagg.kv_transfer_latency_us >= 0:
        lat_us = disagg.kv_transfer_latency_us
    return bw_gbps * 1e9, lat_us * 1e-6, kind


def _pool_hardware(name, hardware, role):
    """A pool's GPU: its own preset or YAML (an error names the pool's flag), else ``hardware``."""
    if not name:
        return hardware
    try:
        return load_hardware(name)
    except ConfigError as err:
        raise ConfigError(err.expected, source=CLI, key=f"{POOL_FLAGS[role]} gpu", value=name) from None


def _pool_gpus(serving, instances):
    return instances * serving.num_gpus


def simulate_disagg(model, hardware, serving=None, workload=None, disagg=None, *, requests=None, fast_forward=True,
                    percentiles=(50, 90, 95, 99), goodput=None, keep_requests=True, progress=None, framework=None):
    """Simulate ``workload`` on a prefill pool and a decode pool.

    Parameters
    ----------
    model : ModelConfig
    hardware : HardwareConfig
        Both pools' GPU unless ``disagg`` names another per pool.
    serving : ServingConfig, optional
        The base engine settings; ``disagg``'s per-pool overrides apply on top. Continuous batching.
    workload : Workload, optional
    disagg : DisaggConfig, optional
        Instances per pool, their overrides and the KV-transfer link (default: one of each).
    requests, fast_forward, percentiles, goodput, keep_requests, progress, framework
        As :func:`simllm.simulate`.

    Returns
    -------
    SimResult
        The decode pool's settings in the summary's configuration keys, ``num_gpus`` both pools',
        the utilisation keys both pools' GPU-weighted means, the KV-cache and batch keys the
        decode pool's; ``prefill_pool`` / ``decode_pool`` (each pool's figures) and
        ``kv_transfer`` (transfer times from the prefill's token to the cache's arrival, ms;
        bytes; link utilisation). Per request also ``prefill_done_s``, ``kv_transfer_start_s``,
        ``kv_transfer_done_s`` (NaN where never reached).
    """
    serving = serving or ServingConfig()
    workload = workload or Workload()
    disagg = disagg or DisaggConfig()
    hw = {role: _pool_hardware(getattr(disagg, f"{role}_gpu"), hardware, role) for role in ("prefill", "decode")}
    sv = {role: disagg.pool_serving(serving, role) for role in hw}
    for role in hw:
        if sv[role].batching != "continuous":
            raise ConfigError("continuous batching in a disaggregated pool", source=CLI, key="--batching",
                              value=sv[role].batching)
        if sv[role].pipeline_parallel_size > 1:
            raise ConfigError("1 in a disaggregated pool: simllm does not simulate pipelined P/D pools", source=CLI,
                              key="--pipeline-parallel-size", value=sv[role].pipeline_parallel_size)
    if sv["prefill"].block_size != sv["decode"].block_size:
        raise ConfigError(f"the prefill pool's block size ({sv['prefill'].block_size})", source=CLI,
                          key="--decode-config block_size", value=sv["decode"].block_size)
    if requests is None:
        requests = generate(workload)
    n = len(requests)
    work = work_of(requests, n)
    kernelmode.charge(work)  # before anything compiles: the work decides the kernels
    pools = {role: prepare_pool(model, hw[role], sv[role], framework) for role in hw}
    e_p, reqi, reqf = engine_inputs(model, pools["prefill"], sv["prefill"], workload, requests, fast_forward)
    e_d, _, _ = engine_inputs(model, pools["decode"], sv["decode"], workload, requests, fast_forward, arrays=False)
    # One clock for both pools' time series: the longer estimate's windows.
    window_s = max(e_p.window_s, e_d.window_s)
    e_p = e_p._replace(handoff=True, window_s=window_s)
    e_d = e_d._replace(window_s=window_s)
    inst_p, inst_d = disagg.prefill_instances, disagg.decode_instances
    gpus_p, gpus_d = _pool_gpus(sv["prefill"], inst_p), _pool_gpus(sv["decode"], inst_d)
    bandwidth, latency_s, link_kind = link_of(disagg, hw["prefill"], hw["decode"],
                                              gpus_p // inst_p, gpus_d)
    on_decode = disagg.first_token_on_decode(pools["decode"].framework.name)
    x = Transfer(bandwidth=bandwidth, latency_s=latency_s, prefill_group=e_p.n_replicas, decode_group=e_d.n_replicas,
                 first_token_on_decode=on_decode)
    bytes_per_token = model.kv_elements_per_token() * pools["prefill"].params.kv_bytes
    xfer = np.zeros((n, codes.N_XF))
    xfer[:, codes.XF_BYTES] = (reqi[:, codes.RI_INPUT] - reqi[:, codes.RI_CACHED]) * bytes_per_token
    lay = make_layout(max(sv["prefill"].max_num_seqs, sv["decode"].max_num_seqs), sv["decode"].block_size, n,
                      N_WINDOWS, ITL_BINS, spec_positions=max(e_p.num_speculative_tokens, e_d.num_speculative_tokens))
    acc_p = np.zeros((inst_p * e_p.n_replicas, lay.acc_len))
    acc_d = np.zeros((inst_d * e_d.n_replicas, lay.acc_len))
    glob = np.zeros(codes.N_GLOBALS + n, dtype=np.int64)
    params_p, params_d = pools["prefill"].params, pools["decode"].params
    sp_p, sp_d = (pool_speculation(pools[role], workload) for role in ("prefill", "decode"))

    args = (params_p, sp_p, e_p, params_d, sp_d, e_d, x, lay, reqi, reqf, xfer, glob, acc_p, acc_d)
    compile_s = compile_for(simulate_disagg_nb, *args)

    def kernel():
        simulate_disagg_nb(*args)

    log.info("simulating %d requests on %d prefill and %d decode instance(s)", n, inst_p, inst_d)
    start = time.perf_counter()
    deadline_s = kernelmode.deadline_s()
    if progress is None and deadline_s is None:
        kernel()
    else:
        run_reporting(kernel, glob, n, progress, deadline_s=deadline_s)
    elapsed = time.perf_counter() - start
    kernelmode.measured(work, elapsed)
    log.info("simulated %d requests in %.3f s (%.0f requests/s)", n, elapsed, n / elapsed if elapsed else math.inf)
    if e_p.frontend_s:
        reqf[:, codes.RF_ARRIVAL] -= e_p.frontend_s
    stats_p, batch_p, windows_p, itl_p = split_accumulator(lay, acc_p)
    stats_d, batch_d, windows_d, itl_d = split_accumulator(lay, acc_d)
    accepted_p, accepted_d = accepted_per_position(lay, acc_p), accepted_per_position(lay, acc_d)
    windows = windows_d.copy()  # the decode pool's engine series, the client-visible counts of both
    for col in (codes.WIN_OUTPUT_TOKENS, codes.WIN_ARRIVALS, codes.WIN_COMPLETED):
        windows[:, col] += windows_p[:, col]
    status = reqi[:, codes.RI_STATUS].astype(np.int8)
    out_tok = reqi[:, codes.RI_GENERATED].copy()
    ints = None
    if keep_requests:
        ints = {"cached_tokens": reqi[:, codes.RI_CACHED].copy(), "preemptions": reqi[:, codes.RI_PREEMPTIONS].copy(),
                "replica": reqi[:, codes.RI_REPLICA].copy()}
    result = SimResult.build(
        model=model, hardware=hw["decode"], serving=sv["decode"], resolved=pools["decode"].resolved,
        workload=workload, memory=pools["decode"].memory, params=params_d, engine=e_d, requests=requests,
        status=status, out_tok=out_tok, reqf=reqf, stats=np.vstack([stats_p, stats_d]), itl_hist=itl_p + itl_d,
        batch_hist=batch_d, windows=windows, percentiles=tuple(percentiles), goodput=goodput, wall_s=elapsed,
        compile_s=compile_s,
        per_request_ints=ints, series_replicas=acc_d.shape[0], accepted_per_pos=accepted_p + accepted_d)
    s = result.summary
    run_s = float(max(stats_p[:, codes.STAT_ENGINE_END_S].max(), stats_d[:, codes.STAT_ENGINE_END_S].max()))
    figures = {}
    for role, st, bh, e, params, gpus, inst, ac in (
            ("prefill", stats_p, batch_p, e_p, params_p, gpus_p, inst_p, accepted_p),
            ("decode", stats_d, batch_d, e_d, params_d, gpus_d, inst_d, accepted_d)):
        f = engine_figures(st, params, e, run_s, bh, ac)
        f.update({"instances": inst, "num_gpus": gpus, "hardware": hw[role].gpu,
                  "tensor_parallel_size": sv[role].tensor_parallel_size,
                  "data_parallel_size": sv[role].data_parallel_size,
                  **moe_parallel_keys(sv[role], pools[role].resolved),
                  "max_num_seqs": sv[role].max_num_seqs,
                  "max_num_batched_tokens": pools[role].resolved.max_num_batched_tokens,
                  "kv_cache_capacity_tokens": pools[role].memory.kv_capacity_tokens})
        figures[role] = f
    total_gpus = gpus_p + gpus_d
    for key in _PER_GPU_KEYS:
        s[key] = (figures["prefill"][key] * gpus_p + figures["decode"][key] * gpus_d) / total_gpus
    for key in ("iterations", "prefill_tokens_computed", "decode_tokens_computed", "num_preemptions"):
        s[key] = figures["prefill"][key] + figures["decode"][key]
    for key in ("kv_cache_usage_mean", "kv_cache_usage_peak", "mean_batch_size", "max_batch_size",
                "p50_batch_size", "p90_batch_size", "p99_batch_size"):
        s[key] = figures["decode"][key]
    s["data_parallel_size"] = sv["decode"].data_parallel_size
    s["num_gpus"] = total_gpus
    s["prefill_pool"] = figures["prefill"]
    s["decode_pool"] = figures["decode"]
    moved = xfer[:, codes.XF_DONE] >= 0
    transfer_s = xfer[moved, codes.XF_DONE] - xfer[moved, codes.XF_PREFILL_DONE]
    moved_bytes = float(xfer[moved, codes.XF_BYTES].sum())
    s["kv_transfer"] = {
        "link": link_kind,
        "bandwidth_gbps": bandwidth / 1e9,
        "latency_us": latency_s * 1e6,
        "first_token": "decode" if on_decode else "prefill",
        **({"kv_connector": disagg.kv_connector} if disagg.kv_connector else {}),
        "transfers": int(moved.sum()),
        "total_bytes": moved_bytes,
        "mean_bytes": moved_bytes / max(int(moved.sum()), 1),
        **stats_ms(transfer_s, percentiles, "transfer"),
        "link_utilization": moved_bytes / (bandwidth * run_s * inst_p) if run_s else 0.0,
    }
    if keep_requests:
        def column(col):
            v = xfer[:, col].copy()
            v[v < 0] = np.nan
            return v

        result.requests["prefill_done_s"] = column(codes.XF_PREFILL_DONE)
        result.requests["kv_transfer_start_s"] = column(codes.XF_START)
        result.requests["kv_transfer_done_s"] = column(codes.XF_DONE)
    return result
