"""Simulation results: per-request arrays, the summary with ``vllm bench serve``'s keys (plus
utilisation and memory), the ITL and batch-size distributions, and the time series."""
import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from simcore import codes
from simllm.config.serving import moe_parallel_keys
from simllm.errors import ConfigError
from simllm.fileio import TableWriter, write_table
from simllm.sim.stats import StreamingStats, hist_percentiles, hist_quantile, log_bin_edges, percentiles_inplace


#: Summary keys that time this machine, not the simulated system: left out of sweep tables and of
#: any comparison of two runs.
TIMING_KEYS = ("simulation_wall_s", "compile_wall_s", "simulated_requests_per_s")


def summary_gpus(summary):
    """GPUs a run used: its ``num_gpus`` (a disaggregated run's pools together), else
    ``tensor_parallel_size`` x ``pipeline_parallel_size`` x ``data_parallel_size`` of its summary (1
    each when absent). The one place per-GPU figures get their divisor."""
    if summary.get("num_gpus"):
        return summary["num_gpus"]
    return ((summary.get("tensor_parallel_size") or 1) * (summary.get("pipeline_parallel_size") or 1)
            * (summary.get("data_parallel_size") or 1))


def output_throughput_per_gpu(summary):
    """``output_throughput`` / :func:`summary_gpus` (None when the summary has no throughput)."""
    value = summary.get("output_throughput")
    return None if value is None else value / summary_gpus(summary)



def _blank_nan(v):
    """A CSV cell: NaN as an empty cell, anything else as it is."""
    return "" if isinstance(v, float) and math.isnan(v) else v


def percentile_key(p):
    """vLLM's naming: ``p99``, ``p99.9``."""
    return f"p{int(p)}" if float(p) == int(p) else f"p{p}"


def stats_ms(values_s, percentiles, name):
    out = {}
    if values_s.size:
        ms = values_s  # scaled in place: the caller's array is a temporary
        ms *= 1e3
        out[f"mean_{name}_ms"] = float(np.mean(ms))
        out[f"std_{name}_ms"] = float(np.std(ms))
        qs = percentiles_inplace(ms, (50.0, *percentiles))
        out[f"median_{name}_ms"] = float(qs[0])
        for p, v in zip(percentiles, qs[1:]):
            out[f"{percentile_key(p)}_{name}_ms"] = float(v)
    else:
        out[f"mean_{name}_ms"] = out[f"median_{name}_ms"] = out[f"std_{name}_ms"] = 0.0
        for p in percentiles:
            out[f"{percentile_key(p)}_{name}_ms"] = 0.0
    return out


def clamp_rounding(delay_s, at_s, offset_s=0.0, ulps=8):
    """Set to 0 the entries of ``delay_s`` (in place) that are below 0 by rounding alone: within
    ``ulps`` units in the last place of the times they came from (``at_s``, plus ``offset_s``).
    A delay the engine orders (scheduled at or after arrival) is >= 0 exactly; recomputed from
    shifted times it can come out at -1e-13. Anything further below 0 is left for the invariant
    tests to catch."""
    neg = delay_s < 0.0
    if neg.any():
        tol = ulps * np.finfo(np.float64).eps * (np.abs(at_s) + abs(offset_s))
        delay_s[neg & (delay_s >= -tol)] = 0.0
    return delay_s


def engine_figures(stats, params, engine, duration, batch_hist, accepted_per_pos=None):
    """What an engine's replicas did over ``duration`` seconds, from their ``stats`` (shape
    (replicas, N_STATS)) and batch-size histogram: preemptions, utilisation of one GPU's peaks
    (``params``), busy fraction, KV-cache usage of ``engine.num_blocks``, batch sizes, iterations and
    tokens computed, and speculative decoding's figures (``accepted_per_pos``: drafts accepted at
    each position, ``simcore.layout.accepted_per_position``)."""
    total = stats.sum(axis=0)
    gpu_s = duration * stats.shape[0]
    blocks = max(engine.num_blocks, 1)
    busy = total[codes.STAT_BUSY_S]
    return {
        "num_preemptions": int(total[codes.STAT_PREEMPTIONS]),
        "compute_utilization": total[codes.STAT_FLOPS] / (gpu_s * params.gemm_flops) if gpu_s else 0.0,
        "bandwidth_utilization": total[codes.STAT_MEM_BYTES] / (gpu_s * params.mem_bw) if gpu_s else 0.0,
        "gpu_busy_fraction": busy / gpu_s if gpu_s else 0.0,
        # Without a KV cache (kv_cache.enabled false) there is no pool to fill: null, not a fraction
        # of zero blocks.
        "kv_cache_usage_mean": (total[codes.STAT_KV_BLOCK_SECONDS] / (gpu_s * blocks) if gpu_s else 0.0)
        if engine.num_blocks else None,
        "kv_cache_usage_peak": float(stats[:, codes.STAT_PEAK_BLOCKS].max()) / blocks if engine.num_blocks else None,
        "mean_batch_size": total[codes.STAT_SEQ_SECONDS] / busy if busy else 0.0,
        "max_batch_size": int(np.nonzero(batch_hist)[0].max()) if batch_hist.any() else 0,
        **{f"{percentile_key(q)}_batch_size": hist_quantile(batch_hist, q) for q in (50, 90, 99)},
        "iterations": int(total[codes.STAT_ITERATIONS]),
        "prefill_tokens_computed": int(total[codes.STAT_PREFILL_TOKENS]),
        "decode_tokens_computed": int(total[codes.STAT_DECODE_TOKENS]),
        **spec_decode_figures(total, accepted_per_pos),
    }


def spec_decode_figures(total, accepted_per_pos=None):
    """Speculative decoding's counts under ``vllm bench serve``'s keys, from summed ``STAT_*``
    totals (none when no drafts were verified): verification steps (``spec_decode_num_drafts``),
    drafts verified and accepted, the acceptance rate in percent, the mean acceptance length
    (``1 + accepted / drafts``: tokens a request emits per step) and, given the drafts accepted at
    each position, the per-position acceptance (position ``i``'s accepted drafts / verification
    steps, as vLLM's ``num_accepted_tokens_per_pos`` counter over ``num_drafts``)."""
    drafts = int(total[codes.STAT_SPEC_DRAFTS])
    if drafts == 0:
        return {}
    draft_tokens = int(total[codes.STAT_SPEC_DRAFT_TOKENS])
    accepted = int(total[codes.STAT_SPEC_ACCEPTED])
    out = {"spec_decode_acceptance_rate": 100.0 * accepted / draft_tokens,
           "spec_decode_acceptance_length": 1.0 + accepted / drafts,
           "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": draft_tokens,
           "spec_decode_accepted_tokens": accepted}
    if accepted_per_pos is not None and len(accepted_per_pos):
        out["spec_decode_per_position_acceptance_rates"] = [float(c) / drafts for c in accepted_per_pos]
    return out


@lru_cache(maxsize=8)
def itl_bin_edges(n_bins, min_exp, sub_bits):
    """Lower edges (seconds) of the ITL histogram bins (see ``simcore.metrics.itl_bin_nb``); one
    read-only array per layout, shared by every result (a sweep builds thousands)."""
    edges = log_bin_edges(n_bins, min_exp, sub_bits)
    edges.flags.writeable = False
    return edges


def _request_figures(workload, engine, requests, status, out_tok, reqf, percentiles, goodput, per_request_ints):
    """The summary's per-request figures from the per-request arrays, exactly (percentiles as
    numpy's), and the per-request table when ``per_request_ints`` is given: ``(figures, table)``,
    the figures as :meth:`RequestTally.figures`'s."""
    n = len(status)
    warm = min(workload.warmup_requests, n)
    done = status == codes.STATUS_DONE  # the per-request table's, warm-up included
    ok = done  # the summary's: measured requests only
    if warm:
        ok = done.copy()
        ok[:warm] = False
    arrival = reqf[:, codes.RF_ARRIVAL]
    first_sched = reqf[:, codes.RF_FIRST_SCHED]
    first_token = reqf[:, codes.RF_FIRST_TOKEN]
    finish = reqf[:, codes.RF_FINISH]
    multi = ok & (out_tok > 1)
    buf = np.empty(len(status))

    def metric(name, where=ok):
        """Seconds of ``name`` for the requests selected by ``where``, computed in ``buf``
        (one metric at a time keeps a summary-only run lean)."""
        if name == "ttft":
            np.subtract(first_token, arrival, out=buf)
        elif name == "e2el":
            np.subtract(finish, arrival, out=buf)
        elif name == "queue":  # in the engine's queue: from its arrival there, after the frontend
            np.subtract(first_sched, arrival, out=buf)
            np.subtract(buf, engine.frontend_s, out=buf)
            clamp_rounding(buf, first_sched, engine.frontend_s)
        else:  # tpot: (e2el - ttft) / (output - 1), as vLLM
            np.subtract(finish, first_token, out=buf)
            vals = buf[where]
            vals /= out_tok[where] - 1.0 if not isinstance(where, slice) else np.maximum(out_tok, 2) - 1.0
            return vals
        return buf[where]

    per_request = None
    if per_request_ints is not None:
        per_request = request_columns(0, warm, engine.frontend_s, status, out_tok, requests.input_len,
                                      per_request_ints["cached_tokens"], per_request_ints["preemptions"],
                                      per_request_ints["replica"], reqf)
    counted = status[warm:]
    fig = {
        "warmup": warm,
        "n": len(counted),
        # the measured requests' span with a warm-up: from the first one's send to the last one's end
        "duration": float(finish[warm:].max() - arrival[warm:].min()) if warm else None,
        "completed": int(ok.sum()),
        "input_tokens": int(requests.input_len[ok].sum()),
        "output_tokens": int(out_tok[ok].sum()),
        "rejected": int((counted == codes.STATUS_REJECTED).sum()),
        "timed_out": int((counted == codes.STATUS_TIMED_OUT).sum()),
    }
    if goodput:
        good = ok.copy()
        for key in ("ttft", "tpot", "e2el"):
            if key in goodput:
                met = metric(key, slice(None)) * 1e3 <= goodput[key]
                good &= met | ~multi if key == "tpot" else met
        fig["good"] = int(good.sum())
    fig["ttft"] = stats_ms(metric("ttft"), percentiles, "ttft")
    fig["tpot"] = stats_ms(metric("tpot", multi), percentiles, "tpot")
    fig["e2el"] = stats_ms(metric("e2el"), percentiles, "e2el")
    fig["queue"] = stats_ms(metric("queue"), percentiles, "queue")
    return fig, per_request


def request_columns(first, warm, frontend_s, status, out_tok, input_len, cached, preemptions, replica, reqf):
    """The per-request table's columns (``SimResult.requests``) of requests ``first, first + 1, ...``
    (``warm``: the warm-up's size) from their arrays: ``status`` (codes), output, input and cached
    tokens, preemptions, replica and ``reqf`` (``RF_*``, the arrival from the client's send).
    Latencies are NaN where they do not exist: TTFT and E2E for requests not done, TPOT for those
    with one output token, the queue time for those never scheduled."""
    arrival = reqf[:, codes.RF_ARRIVAL]
    first_sched = reqf[:, codes.RF_FIRST_SCHED]
    first_token = reqf[:, codes.RF_FIRST_TOKEN]
    finish = reqf[:, codes.RF_FINISH]
    done = status == codes.STATUS_DONE

    def where(mask, values):
        out = np.full(len(status), np.nan)
        out[mask] = values[mask]
        return out

    queue = first_sched - arrival
    queue -= frontend_s
    clamp_rounding(queue, first_sched, frontend_s)
    return {
        "arrival_s": arrival,
        "first_scheduled_s": first_sched,
        "first_token_s": first_token,
        "finish_s": finish,
        "input_tokens": input_len,
        "output_tokens": out_tok,
        "cached_tokens": cached,
        "ttft_s": where(done, first_token - arrival),
        "tpot_s": where(done & (out_tok > 1), (finish - first_token) / (np.maximum(out_tok, 2) - 1.0)),
        "e2el_s": where(done, finish - arrival),
        "queue_s": where(first_sched >= 0, queue),
        "preemptions": preemptions,
        "replica": replica,
        "status": status,
        "warmup": np.arange(first, first + len(status)) < warm,
    }


def detailed_columns(first, requests):
    """:func:`request_columns`' table as :meth:`SimResult.save_detailed` writes it: the request's
    index first (from ``first``), the status by name."""
    names = np.asarray(codes.STATUS_NAMES)
    return {"request": np.arange(first, first + len(requests["status"])),
            **{c: names[a.astype(np.intp)] if c == "status" else a for c, a in requests.items()}}


class DetailedRows:
    """A streamed run's per-request rows, written to ``path`` (``.csv`` or ``.parquet``) as the
    requests end, in send order: the rows and format of :meth:`SimResult.save_detailed`. Use as a
    context manager around the run (the file appears when it ends without an error)."""

    def __init__(self, path, warm, frontend_s):
        self.warm, self.frontend_s = warm, frontend_s
        self.writer = TableWriter(path, ["request", *DETAILED_COLUMNS], cell=_blank_nan, lineterminator="\r\n")

    def __enter__(self):
        self.writer.__enter__()
        return self

    def __exit__(self, *exc):
        return self.writer.__exit__(*exc)

    def add(self, reqi, reqf, first):
        """Rows ``reqi``/``reqf`` of the ended requests ``first, first + 1, ...`` (arrival as the
        engine saw it)."""
        reqf = reqf.copy()
        reqf[:, codes.RF_ARRIVAL] -= self.frontend_s
        cols = request_columns(first, self.warm, self.frontend_s, reqi[:, codes.RI_STATUS].astype(np.int8),
                               reqi[:, codes.RI_GENERATED], reqi[:, codes.RI_INPUT].astype(np.int64),
                               reqi[:, codes.RI_CACHED], reqi[:, codes.RI_PREEMPTIONS], reqi[:, codes.RI_REPLICA], reqf)
        self.writer.add(detailed_columns(first, cols))


#: The per-request table's columns, in order (after ``request``).
DETAILED_COLUMNS = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "input_tokens", "output_tokens",
                    "cached_tokens", "ttft_s", "tpot_s", "e2el_s", "queue_s", "preemptions", "replica", "status",
                    "warmup")


#: A streamed summary's latency histograms (:class:`RequestTally`), in milliseconds: 512 bins per
#: octave (each 0.2% of its values or less) from 2**-11 ms (0.5 us) to 2**41 ms (70 years).
TALLY_MIN_EXP = -10
TALLY_SUB_BITS = 9
TALLY_BINS = 52 << TALLY_SUB_BITS


class RequestTally:
    """The summary's per-request figures of a streamed run, gathered as its requests end (in send
    order, a batch of rows at a time) in memory that does not grow with them: exact counts, token
    sums, means, standard deviations and extremes; percentiles from :class:`StreamingStats`
    histograms, within one bin (0.2%) of the exact ones. Warm-up, goodput and the queue time follow
    :func:`_request_figures`' rules."""

    def __init__(self, n, warmup, frontend_s, goodput):
        self.warm = min(warmup, n)
        self.frontend_s = frontend_s
        self.goodput = goodput or {}
        self.n = self.completed = self.input_tokens = self.output_tokens = 0
        self.rejected = self.timed_out = self.good = 0
        self.first_send = math.inf
        self.last_end = -math.inf
        self.stats = {k: StreamingStats(TALLY_BINS, TALLY_MIN_EXP, TALLY_SUB_BITS)
                      for k in ("ttft", "tpot", "e2el", "queue")}

    def add(self, reqi, reqf, first):
        """Rows ``reqi``/``reqf`` (``simcore.codes.RI_*``/``RF_*``, arrival as the engine saw it) of the
        ended requests ``first, first + 1, ...``."""
        skip = min(max(self.warm - first, 0), len(reqi))
        reqi, reqf = reqi[skip:], reqf[skip:]
        if not len(reqi):
            return
        reqf = reqf.copy()
        reqf[:, codes.RF_ARRIVAL] -= self.frontend_s  # latencies count from the client's send
        status = reqi[:, codes.RI_STATUS]
        out_tok = reqi[:, codes.RI_GENERATED]
        cols = request_columns(first + skip, self.warm, self.frontend_s, status, out_tok, reqi[:, codes.RI_INPUT],
                               None, None, None, reqf)
        ok = status == codes.STATUS_DONE
        multi = ok & (out_tok > 1)
        self.n += len(status)
        self.completed += int(ok.sum())
        self.rejected += int((status == codes.STATUS_REJECTED).sum())
        self.timed_out += int((status == codes.STATUS_TIMED_OUT).sum())
        self.input_tokens += int(reqi[ok, codes.RI_INPUT].sum(dtype=np.int64))
        self.output_tokens += int(out_tok[ok].sum(dtype=np.int64))
        self.first_send = min(self.first_send, float(cols["arrival_s"].min()))
        self.last_end = max(self.last_end, float(cols["finish_s"].max()))
        ms = {name: cols[f"{name}_s"] * 1e3 for name in ("ttft", "tpot", "e2el", "queue")}
        if self.goodput:
            good = ok.copy()
            for key in ("ttft", "tpot", "e2el"):
                if key in self.goodput:
                    met = ms[key] <= self.goodput[key]
                    good &= met | ~multi if key == "tpot" else met
            self.good += int(good.sum())
        for name, values in ms.items():
            self.stats[name].add(values[multi if name == "tpot" else ok])

    def figures(self, percentiles):
        """The figures :meth:`SimResult.build` takes (as :func:`_request_figures`')."""
        fig = {"warmup": self.warm, "n": self.n,
               "duration": self.last_end - self.first_send if self.warm and self.n else None,
               "completed": self.completed, "input_tokens": self.input_tokens,
               "output_tokens": self.output_tokens, "rejected": self.rejected, "timed_out": self.timed_out,
               "good": self.good}
        for name, st in self.stats.items():
            out = {f"mean_{name}_ms": st.mean, f"std_{name}_ms": st.std}
            qs = st.percentiles((50.0, *percentiles))
            out[f"median_{name}_ms"] = qs[0]
            for p, v in zip(percentiles, qs[1:]):
                out[f"{percentile_key(p)}_{name}_ms"] = v
            fig[name] = out
        return fig


@dataclass
class SimResult:
    """What a simulation produced.

    Attributes
    ----------
    summary : dict
        ``vllm bench serve`` keys (``duration``, ``completed``, ``failed``, ``request_throughput``,
        ``output_throughput``, ``mean_ttft_ms``, ``p99_itl_ms``, ...) plus simllm's
        (utilisation, KV cache, memory, configuration).
    requests : dict of ndarray or None
        None for a summary-only run (``keep_requests=False``). Per request, in send order:
        ``arrival_s`` (the client's send), ``first_scheduled_s``, ``first_token_s``, ``finish_s``,
        ``input_tokens``, ``output_tokens``, ``ttft_s``, ``tpot_s``, ``e2el_s`` (from the send),
        ``queue_s`` (in the engine's queue, after the hardware's ``frontend_latency_ms``),
        ``preemptions``, ``status`` (``simcore.codes.STATUS_NAMES``).
    itl_histogram : ndarray
        Inter-token latency counts per bin (``itl_bin_edges_s`` gives the edges).
    batch_size_histogram : ndarray
        Iterations by number of sequences in the batch.
    timeseries : dict of ndarray
        Per window of ``window_s``: ``t_s`` (window start), ``output_throughput``,
        ``request_throughput``, ``arrival_rate``, ``gpu_busy``, ``mean_batch_size``,
        ``kv_cache_usage``.
    """

    summary: dict
    requests: dict
    itl_histogram: np.ndarray
    itl_bin_edges_s: np.ndarray
    batch_size_histogram: np.ndarray
    timeseries: dict
    warnings: tuple = field(default=())

    @classmethod
    def build(cls, *, model, hardware, serving, resolved, workload, memory, params, engine, requests, status,
              out_tok, reqf, stats, itl_hist, batch_hist, windows, percentiles, goodput, wall_s, compile_s=0.0,
              per_request_ints=None,
              series_replicas=None, accepted_per_pos=None, tally=None):
        """Summarise a simulation. ``status`` (int8) and ``out_tok`` are per request;
        ``per_request_ints`` (cached tokens, preemptions, replica), when given, keeps the
        per-request table; ``series_replicas`` (default: the rows of ``stats``) divides the time
        series' busy and KV-cache columns. A streamed run gives its :class:`RequestTally` instead
        of the per-request arrays (``requests``, ``status``, ``out_tok``, ``reqf``: None).

        The first ``workload.warmup_requests`` requests sent (rows 0..N-1: rows are in send
        order) are a warm-up: the per-request table marks them (``warmup``) and the summary's
        request counts, tokens, latencies (the kernel already left their ITLs out) and
        throughputs leave them out, its duration being the measured requests' span (first send
        to last end). Engine-wide figures (utilisation, KV cache, batch sizes, iterations,
        preemptions) and the time series cover the whole run."""
        total = stats.sum(axis=0)
        replicas = stats.shape[0]
        # Engine figures: over the whole run, to the end of the last iteration (a static batch runs
        # on after its clients gave up).
        run_s = float(stats[:, codes.STAT_ENGINE_END_S].max())
        if tally is None:
            fig, per_request = _request_figures(workload, engine, requests, status, out_tok, reqf, percentiles,
                                                goodput, per_request_ints)
        else:
            fig, per_request = tally.figures(percentiles), None
        duration = fig["duration"] if fig["duration"] is not None else float(stats[:, codes.STAT_END_S].max())
        n, completed = fig["n"], fig["completed"]
        in_tok, out_sum = fig["input_tokens"], fig["output_tokens"]
        edges = itl_bin_edges(len(itl_hist), engine.itl_min_exp, engine.itl_sub_bits)
        s = {
            "duration": duration,
            "completed": completed,
            "failed": n - completed,
            "total_input_tokens": in_tok,
            "total_output_tokens": out_sum,
            "request_throughput": completed / duration if duration else 0.0,
            "output_throughput": out_sum / duration if duration else 0.0,
            "total_token_throughput": (in_tok + out_sum) / duration if duration else 0.0,
            "max_concurrency": workload.max_concurrency or None,
            "request_rate": workload.request_rate if math.isfinite(workload.request_rate) else "inf",
            "burstiness": workload.burstiness,
        }
        if goodput:
            s["request_goodput"] = float(fig["good"]) / duration if duration else 0.0
        s.update(fig["ttft"])
        s.update(fig["tpot"])
        itl_n = total[codes.STAT_ITL_COUNT]
        itl_mean = total[codes.STAT_ITL_SUM] / itl_n if itl_n else 0.0
        itl_var = max(total[codes.STAT_ITL_SQSUM] / itl_n - itl_mean**2, 0.0) if itl_n else 0.0
        s["mean_itl_ms"] = itl_mean * 1e3
        s["median_itl_ms"] = hist_percentiles(itl_hist, edges, [50])[0] * 1e3
        s["std_itl_ms"] = math.sqrt(itl_var) * 1e3
        for p, v in zip(percentiles, hist_percentiles(itl_hist, edges, percentiles)):
            s[f"{percentile_key(p)}_itl_ms"] = v * 1e3
        s.update(fig["e2el"])
        s.update(fig["queue"])
        rejected, timed_out = fig["rejected"], fig["timed_out"]
        warm = fig["warmup"]
        blocks = max(engine.num_blocks, 1)
        s.update({
            "error_rate": (n - completed) / n if n else 0.0,
            "num_rejected": rejected,
            "num_timed_out": timed_out,
            **engine_figures(stats, params, engine, run_s, batch_hist, accepted_per_pos),
            "num_requests": n,
            **({"warmup_requests": warm} if warm else {}),
            "model": model.name,
            "hardware": hardware.gpu,
            "tensor_parallel_size": serving.tensor_parallel_size,
            "data_parallel_size": replicas,
            **({"pipeline_parallel_size": serving.pipeline_parallel_size,
                "pp_max_micro_batch_size": serving.pp_max_micro_batch_size}
               if serving.pipeline_parallel_size > 1 else {}),
            **moe_parallel_keys(serving, resolved),
            "dtype": resolved.weight_dtype,
            "kv_cache_dtype": resolved.kv_dtype,
            "max_num_seqs": serving.max_num_seqs,
            "max_num_batched_tokens": resolved.max_num_batched_tokens,
            "enable_chunked_prefill": serving.enable_chunked_prefill,
            "enable_prefix_caching": serving.enable_prefix_caching,
            "batching": serving.batching,
            **({"speculative_config": serving.speculative_config.to_dict()} if serving.speculative_config else {}),
            "kv_cache_capacity_tokens": memory.kv_capacity_tokens,
            "memory": {k: float(v) if isinstance(v, float) else v for k, v in memory.to_dict().items()},
            "simulation_wall_s": wall_s,  # the kernel's run; compiling it (or loading it) is apart:
            "compile_wall_s": compile_s,
            "simulated_requests_per_s": n / wall_s if wall_s else None,
        })
        w = windows
        ws = engine.window_s
        replicas = series_replicas or replicas
        used = w[:, codes.WIN_BUSY_S] > 0
        last = int(np.nonzero(used | (w[:, codes.WIN_ARRIVALS] > 0))[0].max()) + 1 if (used.any() or w[:, codes.WIN_ARRIVALS].any()) else 0
        w = w[:last]
        with np.errstate(invalid="ignore", divide="ignore"):
            series = {
                "t_s": np.arange(last) * ws,
                "window_s": ws,
                "output_throughput": w[:, codes.WIN_OUTPUT_TOKENS] / ws,
                "request_throughput": w[:, codes.WIN_COMPLETED] / ws,
                "arrival_rate": w[:, codes.WIN_ARRIVALS] / ws,
                "gpu_busy": w[:, codes.WIN_BUSY_S] / (ws * replicas),
                "mean_batch_size": np.where(w[:, codes.WIN_BUSY_S] > 0, w[:, codes.WIN_SEQ_SECONDS] / w[:, codes.WIN_BUSY_S], 0.0),
                "kv_cache_usage": w[:, codes.WIN_KV_BLOCK_SECONDS] / (ws * replicas * blocks)
                if engine.num_blocks else np.full(last, np.nan),
            }
        warnings = tuple(model.warnings) + tuple(resolved.warnings)
        return cls(s, per_request, itl_hist, edges, batch_hist, series, warnings)

    def to_dict(self):
        """The summary plus the time series and batch-size distribution (JSON-ready)."""
        out = dict(self.summary)
        out["timeseries"] = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.timeseries.items()}
        out["batch_size_histogram"] = self.batch_size_histogram.astype(int).tolist()
        return out

    def _require_requests(self):
        if self.requests is None:
            raise ValueError("this result was simulated with keep_requests=False: no per-request rows")

    def to_pandas(self):
        """Per-request rows as a pandas DataFrame (requires pandas)."""
        self._require_requests()
        try:
            import pandas as pd  # noqa: PLC0415 - optional dependency
        except ImportError:
            raise ImportError("SimResult.to_pandas() needs pandas: pip install pandas") from None
        df = pd.DataFrame(self.requests)
        df["status"] = pd.Categorical.from_codes(df["status"].astype(int), codes.STATUS_NAMES)
        return df

    def save_detailed(self, path):
        """Write per-request rows to ``path``: ``.csv`` (no extra dependency; atomically, through
        :func:`simllm.fileio.write_table`) or ``.parquet`` (needs pandas and pyarrow)."""
        self._require_requests()
        path = str(path)
        if path.endswith(".parquet"):
            try:
                self.to_pandas().to_parquet(path, index=False)
            except ImportError as exc:
                raise ConfigError(f"pandas and pyarrow for .parquet ({exc})", source="command line",
                                  key="--save-detailed", value=path) from None
            return
        if not path.endswith(".csv"):
            raise ConfigError("a .csv or .parquet file name", source="command line", key="--save-detailed", value=path)
        # The csv module's default line ending (\r\n), as this file has always been written.
        write_table(path, detailed_columns(0, self.requests), cell=_blank_nan, lineterminator="\r\n")
