"""Capacity: the request rate and token throughput a deployment sustains for a workload.

A serving engine under an open loop keeps its queue bounded only while requests arrive slower than
it completes them when saturated; past that rate the queue, and TTFT with it, grows without bound
(a load test's knee sits just below it). :func:`capacity` measures that saturation rate the way a
benchmark finds a server's maximum throughput: a closed loop with more clients than the engine
runs at once (``2 x max_num_seqs x data_parallel_size``), so that a request is always waiting
when a slot frees, ``requests_per_client`` requests each; the first and
the last ``clients`` completions (the ramp-up and the drain) are left out, and the rate is the
completions in between over their span. Everything the engine does at saturation is in it: the
batch each step runs, chunked prefill beside the decodes, KV-cache admission and preemption.

What limits it is reported too: the requests in the engine (time-averaged over the window,
running, prefilling or preempted) against ``max_num_seqs`` per replica: at it, the sequence limit;
below it with the KV cache full (or preempting, or static batching's slots, each of which reserves
``max_model_len`` tokens), the KV cache; else the prefill budget (``max_num_batched_tokens``) that
admits them.
"""
import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from simcore import codes
from simllm.config.serving import CLI, ServingConfig
from simllm.config.workload import Workload
from simllm.errors import ConfigError
from simllm.sim.simulate import simulate

#: Requests each client of the saturating closed loop sends: its first and last wave are the
#: ramp-up and the drain, the rest the measured window.
DEFAULT_REQUESTS_PER_CLIENT = 6
#: In-flight requests per replica at or above this share of ``max_num_seqs`` count as limited by it.
AT_LIMIT = 0.95
#: KV-cache usage (peak) at or above which a saturated engine below its sequence limit is
#: limited by the KV cache.
KV_FULL = 0.9
LIMITS = ("max_num_seqs", "kv_cache", "max_num_batched_tokens")


@dataclass(frozen=True)
class Capacity:
    """Result of :func:`capacity`: what the deployment sustains, saturated.

    Attributes
    ----------
    request_throughput_rps : float
        Completions per second at saturation: the open-loop request rate beyond which the queue
        grows without bound.
    output_throughput_tok_s, total_token_throughput_tok_s : float
        Output tokens, and prompt plus output tokens, per second at saturation.
    mean_tpot_ms : float
        TPOT of the measured requests: the decode pace at saturation. (Their TTFT is the closed
        loop's queue, not the deployment's.)
    concurrency : float
        Requests in the engine (admitted and not finished), time-averaged over the window, all
        replicas together.
    max_num_seqs : int
        Sequences a replica may run at once (``ServingConfig.max_num_seqs``).
    replicas : int
        Engine replicas (data parallel ranks), each with its own ``max_num_seqs``.
    limited_by : str
        One of :data:`LIMITS`.
    clients, num_requests : int
        The closed loop that measured it.
    """

    request_throughput_rps: float
    output_throughput_tok_s: float
    total_token_throughput_tok_s: float
    mean_tpot_ms: float
    concurrency: float
    max_num_seqs: int
    replicas: int
    limited_by: str
    clients: int
    num_requests: int

    def to_dict(self):
        """The fields with vLLM's ``bench serve`` names where it has one (``request_throughput``,
        ``output_throughput``, ``total_token_throughput``), for JSON."""
        d = asdict(self)
        return {
            "request_throughput": d.pop("request_throughput_rps"),
            "output_throughput": d.pop("output_throughput_tok_s"),
            "total_token_throughput": d.pop("total_token_throughput_tok_s"),
            **d,
        }

    def describe(self):
        """One line for people."""
        return (f"{self.request_throughput_rps:,.3g} req/s, {self.output_throughput_tok_s:,.0f} output tok/s, "
                f"{self.total_token_throughput_tok_s:,.0f} total tok/s with {self.concurrency:,.0f} requests in "
                f"flight (limited by {self.limited_by})")


def saturating_workload(workload, serving, requests_per_client=DEFAULT_REQUESTS_PER_CLIENT, clients=0):
    """``workload``'s lengths, seed and client as the saturating closed loop of :func:`capacity`:
    ``clients`` (default twice the sequences the engine runs at once) sending
    ``requests_per_client`` requests each, no warm-up, no timeout."""
    if workload.trace:
        raise ConfigError("a sampled workload: capacity draws its own requests from the workload's lengths",
                          source=workload.source, key="trace", value=workload.trace)
    if isinstance(requests_per_client, bool) or not isinstance(requests_per_client, int) or requests_per_client < 3:
        raise ConfigError("an integer >= 3 (the first and last waves are left out)", source=CLI,
                          key="requests_per_client", value=requests_per_client)
    clients = clients or 2 * serving.max_num_seqs * serving.data_parallel_size
    return replace(workload, num_prompts=clients * requests_per_client, max_concurrency=clients,
                   request_rate=math.inf, warmup_requests=0, timeout_s=0.0, ramp_up_strategy="",
                   ramp_up_start_rps=0.0, ramp_up_end_rps=0.0)


def capacity(model, hardware, serving=None, workload=None, *, framework=None,
             requests_per_client=DEFAULT_REQUESTS_PER_CLIENT, clients=0):
    """The request rate and token throughput ``model`` on ``hardware`` sustains for ``workload``'s
    requests, by simulating the engine saturated (module docstring).

    Parameters
    ----------
    model : ModelConfig
    hardware : HardwareConfig
    serving : ServingConfig, optional
        The engine (default vLLM's); continuous or static batching, data and pipeline parallel.
    workload : Workload, optional
        Its lengths, seed and client jitter are used; its load (rate, concurrency, count) is
        replaced by the saturating closed loop (:func:`saturating_workload`). Not a trace.
    framework : FrameworkProfile or str, optional
        As :func:`simllm.simulate`.
    requests_per_client : int
        At least 3: the first and last ``clients`` completions are left out.
    clients : int
        Clients of the closed loop (default twice the sequences the engine runs at once).

    Returns
    -------
    Capacity

    Raises
    ------
    ConfigError
        A trace workload or bad settings; :class:`SimulatedOOM` when the model does not fit;
        when too few requests complete to measure a window (requests the KV cache cannot hold).
    """
    serving = serving or ServingConfig()
    workload = workload or Workload()
    w = saturating_workload(workload, serving, requests_per_client, clients)
    res = simulate(model, hardware, serving, w, framework=framework, percentiles=(50,))
    return capacity_of(res, serving, w.max_concurrency)


def capacity_of(result, serving, clients):
    """:class:`Capacity` from a saturating closed loop's :class:`~simllm.sim.results.SimResult`
    (per-request rows kept) of ``clients`` clients."""
    r = result.requests
    done = r["status"] == codes.STATUS_DONE
    finish = r["finish_s"][done]
    order = np.argsort(finish, kind="stable")
    n = len(order)
    if n < 2 * clients + 2:
        raise ConfigError(f"at least {2 * clients + 2} completed requests to measure a window; {n} of "
                          f"{len(done)} completed (requests the KV cache cannot hold are rejected)",
                          source=CLI, key="workload", value=f"{clients} clients")
    first, last = order[clients - 1], order[n - clients - 1]
    t_a, t_b = float(finish[first]), float(finish[last])
    span = t_b - t_a
    if not span > 0.0:
        raise ConfigError("requests that finish at different times to measure a window", source=CLI,
                          key="workload", value=f"{clients} clients")
    window = order[clients:n - clients]  # completions after t_a up to t_b
    out_tok = r["output_tokens"][done][window].astype(np.float64)
    in_tok = r["input_tokens"][done][window].astype(np.float64)
    rate = len(window) / span
    # time-averaged requests in the engine over [t_a, t_b]: each one's admitted span's overlap
    sched = r["first_scheduled_s"]
    began = np.where(sched >= 0.0, sched, np.inf)
    ended = np.where(done, r["finish_s"], np.inf)
    overlap = np.clip(np.minimum(ended, t_b) - np.maximum(began, t_a), 0.0, None)
    in_flight = float(overlap.sum()) / span
    replicas = serving.data_parallel_size
    tpot = r["tpot_s"][done][window]
    tpot = tpot[np.isfinite(tpot)]
    s = result.summary
    per_replica = in_flight / replicas
    if per_replica >= AT_LIMIT * serving.max_num_seqs:
        limited = "max_num_seqs"
    elif (serving.batching == "static"  # its slots each reserve max_model_len tokens of KV cache
          or s.get("kv_cache_usage_peak", 0.0) >= KV_FULL or s.get("num_preemptions", 0) > 0):
        limited = "kv_cache"
    else:
        limited = "max_num_batched_tokens"
    return Capacity(
        request_throughput_rps=rate,
        output_throughput_tok_s=float(out_tok.sum()) / span,
        total_token_throughput_tok_s=float(out_tok.sum() + in_tok.sum()) / span,
        mean_tpot_ms=float(tpot.mean()) * 1e3 if len(tpot) else 0.0,
        concurrency=in_flight,
        max_num_seqs=int(serving.max_num_seqs),
        replicas=int(replicas),
        limited_by=limited,
        clients=int(clients),
        num_requests=int(len(done)),
    )
