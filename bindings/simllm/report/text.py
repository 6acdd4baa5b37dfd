"""Rendering results for people (aligned text tables) and machines (JSON)."""
import math

from simllm.calibration.fit import describe_bound_hit, describe_points
from simllm.config.catalog import figure_text
from simllm.sim.results import percentile_key
from simllm import text as text_mod
from simllm.text import fixed, format_number, table


def _step_table(step):
    rows = []
    for op in step.ops:
        share = op.seconds / step.seconds if step.seconds else 0.0
        rows.append([op.name, op.count, fixed(op.flops / 1e9, 3), fixed(op.bytes / 1e6, 2), fixed(op.seconds * 1e3, 4),
                     f"{share:6.1%}", op.bound])
    rows.append(["total", "", fixed(step.flops / 1e9, 3), fixed(step.memory_bytes / 1e6, 2), fixed(step.seconds * 1e3, 4),
                 "100.0%", ""])
    return table(["operator", "count", "GFLOP", "MB", "time ms", "share", "bound"], rows, "lrrrrrl")


def _speculative_lines(est):
    """The speculative-decoding section of :func:`format_estimate` (none without it)."""
    sp = est.speculative
    if sp is None:
        return []
    c, k = sp.config, sp.config.num_speculative_tokens
    rates = ", ".join(f"{a:g}" for a in c.acceptance_rates)
    plain = est.decode.seconds
    passes = 0 if c.method == "ngram" else k
    return [
        f"Speculative decoding: {c.method}{' (' + c.model + ')' if c.model else ''}, {k} draft token"
        f"{'s' if k > 1 else ''} a step, per-position acceptance {rates}: {sp.tokens_per_step:.3g} tokens a step. "
        f"Verification: {est.batch_size} x {1 + k} tokens at context {sp.verify.context_tokens} (per GPU)",
        _step_table(sp.verify),
        f"  drafter: {sp.draft_s * 1e3:.4f} ms ({passes} pass{'es' if passes != 1 else ''}); step "
        f"{sp.step_s * 1e3:.4f} ms / {sp.tokens_per_step:.3g} tokens = {sp.tpot_s * 1e3:.3f} ms per token at batch "
        f"{est.batch_size}, against {plain * 1e3:.3f} ms a decode step without ({plain / sp.tpot_s:.2f}x); one request "
        f"{sp.single_step_s / sp.tokens_per_step * 1e3:.3f} ms per token",
        "",
    ]


def format_estimate(est, capacity=None):
    """The human-readable report of :func:`simllm.estimate`, with the deployment's
    :class:`~simllm.analysis.capacity.Capacity` at the estimate's lengths when given."""
    m, hw, r, mem, s = est.model, est.hardware, est.resolved, est.memory, est.serving
    declared = f"; declared {m.declared_parameters / 1e9:.2f} B" if m.declared_parameters else ""
    active = f", {m.active_parameter_count() / 1e9:.2f} B active per token" if m.is_moe else ""
    out = [
        f"simllm estimate: {m.name} on {hw.name}",
        f"  model    {m.parameter_count() / 1e9:.2f} B parameters (derived from the dimensions{declared}){active}; "
        f"{m.layers} layers, hidden {m.hidden_size}, {m.num_attention_heads} heads / {m.num_key_value_heads} KV heads "
        f"x {m.head_dim}",
        f"  serving  TP={s.tensor_parallel_size}"
        + (f", PP={s.pipeline_parallel_size}" if s.pipeline_parallel_size > 1 else "")
        + (f", DP={s.data_parallel_size}" if s.data_parallel_size > 1 else "")
        + (f", EP={r.expert_parallel_size} (each expert over {r.moe_tensor_parallel_size} GPU"
           f"{'s' if r.moe_tensor_parallel_size > 1 else ''}"
           + (f"; {s.num_redundant_experts} redundant experts" if s.num_redundant_experts else "")
           + (f"; {s.expert_routing} routing"
              + (" (the busiest GPU at this decode batch: {:.2f}x the mean's assignments, {:.2f}x its experts hit)"
                 .format(*est.decode_expert_load) if s.expert_routing == "random" else ""))
           + (f"; expert-load imbalance {s.expert_load_imbalance:g}" if s.expert_load_imbalance != 1 else "")
           + ("; the DP ranks step in lockstep, each step here with every rank as loaded as this one"
              if s.data_parallel_size > 1 else "")
           + ")" if r.expert_parallel_size > 1 else "")
        + (f", MoE TP={r.moe_tensor_parallel_size} (the experts over every DP rank, which step in lockstep)"
           if r.expert_parallel_size == 1 and r.moe_tensor_parallel_size > s.tensor_parallel_size else "")
        + f", weights {r.weight_dtype}"
        + (f" (attention {r.attention_dtype})" if r.attention_dtype and r.attention_dtype != r.weight_dtype else "")
        + f", activations {r.activation_dtype}, "
        f"KV cache {r.kv_dtype}, max_model_len {r.max_model_len}",
        "",
        f"Prefill step: {est.batch_size} x {est.input_len} prompt tokens in one iteration (per GPU)",
        _step_table(est.prefill),
        "",
        f"Decode step: {est.batch_size} x 1 token at context {est.decode.context_tokens} (mid-generation, per GPU)"
        if m.kv_cache_enabled else
        f"Decode step without KV cache: {est.batch_size} x {est.decode.new_tokens} tokens recomputed (per GPU)",
        _step_table(est.decode),
        "",
        *_speculative_lines(est),
        f"Memory per GPU: {mem.total_bytes / 1e9:.2f} GB x gpu_memory_utilization {s.gpu_memory_utilization:g} = "
        f"{mem.usable_bytes / 1e9:.2f} GB usable",
    ]
    kv_line = (
        f"{mem.kv_capacity_tokens:,} tokens = {mem.num_blocks:,} blocks of {mem.block_size}"
        + (" (kv_cache.max_cache_size)" if mem.preallocated else "")
    )
    out.append(table(["", "GB", ""], [
        ["weights", fixed(mem.weight_bytes / 1e9), f"{r.weight_dtype}" + (
            f", the drafter's {est.speculative.draft_weight_bytes / 1e9:.2f} GB included" if est.speculative else "")],
        ["activations", fixed(mem.activation_bytes / 1e9), f"max_num_batched_tokens {r.max_num_batched_tokens}, max_num_seqs {s.max_num_seqs}"],
        ["runtime overhead", fixed(mem.runtime_overhead_bytes / 1e9), "CUDA context, graphs, NCCL"],
        ["KV cache pool", fixed(mem.kv_pool_bytes / 1e9), kv_line
         + (f"; up to {mem.fixed_blocks(r.max_model_len)} more per sequence for its "
            + ("windowed layers" if mem.window_blocks else "") + (" and " if mem.window_blocks and mem.state_blocks else "")
            + ("recurrent states" if mem.state_blocks else "") if mem.window_blocks or mem.state_blocks else "")],
        ["free", fixed(mem.free_bytes / 1e9), ""],
    ], "lrl"))
    kv_total = mem.kv_bytes_per_token * s.tensor_parallel_size / mem.stage_share
    bw = hw.memory_bandwidth_gbps
    out += [
        "",
        "Summary",
        table(["", "value"], [
            ["weights streamed per decode step", f"{est.streamed_weight_bytes / 1e9:.2f} GB per GPU"],
            ["decode lower bound per token", f"{est.decode_lower_bound_s * 1e3:.2f} ms "
             f"({est.streamed_weight_bytes / 1e9:.2f} GB / {bw:g} GB/s)"],
            ["KV cache per token", f"{kv_total:,.0f} bytes ({1000 * kv_total / 1e6:.1f} MB per 1000 tokens)"
             + (f" in the {m.full_layers} full-attention layers" if mem.window_blocks or mem.state_blocks else "")],
            *([["KV cache per sequence, windowed",
                 f"at most {mem.window_bytes_per_seq * s.tensor_parallel_size / mem.stage_share / 1e6:,.1f} MB in the {m.windowed_layers} "
                 f"{'sliding-window' if m.sliding_window else 'chunked-attention'} layers ({m.window_tokens:,}-token "
                 f"window: {mem.window_blocks} blocks each)"]] if mem.window_blocks else []),
            *([["recurrent state per sequence",
                f"{mem.state_bytes_per_seq * s.tensor_parallel_size / mem.stage_share / 1e6:,.1f} MB in the {m.linear_layers} "
                f"linear-attention layers, whatever the context"]] if mem.state_blocks else []),
            ["largest batch that fits", f"{est.max_batch_size:,} sequences of {est.input_len + est.output_len} tokens"],
            ["ideal TTFT (one request)", f"{est.ideal_ttft_s * 1e3:.2f} ms"],
            ["ideal TPOT (one request)", f"{est.ideal_tpot_s * 1e3:.2f} ms"],
            [f"TTFT / TPOT at batch {est.batch_size}", f"{est.batch_ttft_s * 1e3:.2f} ms / {est.batch_tpot_s * 1e3:.2f} ms"],
            [f"output throughput at batch {est.batch_size}",
             f"{est.batch_size / est.batch_tpot_s:,.0f} tokens/s" if est.batch_tpot_s else "-"],
            *([["capacity (simulated, saturated)", capacity.describe()],
               ["TPOT at capacity", f"{capacity.mean_tpot_ms:.2f} ms"]] if capacity else []),
        ], "ll"),
    ]
    if est.warnings:
        out += ["", "Warnings"] + [f"  - {w}" for w in est.warnings]
    return "\n".join(out)


def to_json(obj):
    """Strict JSON (NaN and infinities as null): :func:`simllm.text.to_json` without its newline."""
    return text_mod.to_json(obj).rstrip("\n")


def band_range(band):
    """``lo–hi`` of a :class:`simllm.calibration.bands.Band`, as table cells show numbers."""
    return f"{format_number(band.lo)}–{format_number(band.hi)}"


def domain_warning(reasons):
    """The one line that says a case lies outside the calibrated domain ("" when inside)."""
    if not reasons:
        return ""
    return "outside the calibrated domain, bands less reliable: " + "; ".join(reasons)


#: The headline figures of compare's and optimize's band tables, with their column headers.
BAND_COLUMNS = (("mean_ttft_ms", "TTFT mean (ms)"), ("p99_ttft_ms", "TTFT P99 (ms)"), ("mean_tpot_ms", "TPOT mean (ms)"),
                ("p99_tpot_ms", "TPOT P99 (ms)"), ("output_throughput", "output (tok/s)"))


def format_band_table(rows, first="configuration"):
    """The error bands of several configurations: ``rows`` of ``(label, {key: Band}, reasons)``
    (:func:`simllm.calibration.bands.summary_bands`), one table line each, then one line per set
    of reasons why configurations lie outside the calibrated domain ("all: ..." when every one
    shares them); "" when no row has a band."""
    coverage = next((b.coverage for _, bands, _ in rows for b in bands.values()), None)
    if coverage is None:
        return ""
    body = [[label] + [band_range(bands[key]) if key in bands else "-" for key, _ in BAND_COLUMNS]
            for label, bands, _ in rows if bands]
    out = [f"{coverage:.0%} error bands (where the measured value lay, relative to the prediction, for {coverage:.0%} "
           "of the nearest calibrated cases):",
           table([first] + [h for _, h in BAND_COLUMNS], body, "l" + "r" * len(BAND_COLUMNS))]
    groups = {}  # the same reasons are said once, for all the configurations they apply to
    for label, _, reasons in rows:
        if reasons:
            groups.setdefault(reasons, []).append(label)
    for reasons, labels in groups.items():
        who = "all" if len(labels) == len(rows) > 1 else ", ".join(labels)
        out.append(f"{who}: {domain_warning(reasons)}")
    return "\n".join(out)


def format_run(result, percentiles=(50, 90, 95, 99), title="Serving Benchmark Result", diagnosis=None, bands=None,
               calibration=()):
    """The human-readable report of a simulation, laid out as ``vllm bench serve`` prints it,
    followed by what simllm adds (utilisation, KV cache, errors) and ``diagnosis``, a section of
    text (``simllm.analysis.diagnose.format_run_section``), if given.

    ``bands`` ({summary key: Band}, :func:`simllm.calibration.bands.summary_bands`) puts each
    headline figure's error band beside it; ``calibration`` (the domain reasons) adds the line
    that says the run lies outside what was calibrated."""
    s = result.summary
    bands = bands or {}

    def _line(label, value, key=None):
        text = f"{label:<40} {value:<10}"
        band = bands.get(key)
        return f"{text} {band.coverage:.0%} band {band_range(band)}" if band else text

    out = [f"{' ' + title + ' ':=^50}"]
    out.append(_line("Successful requests:", s["completed"]))
    out.append(_line("Failed requests:", s["failed"]))
    if s.get("max_concurrency"):
        out.append(_line("Maximum request concurrency:", s["max_concurrency"]))
    out.append(_line("Benchmark duration (s):", f"{s['duration']:.2f}"))
    out.append(_line("Total input tokens:", s["total_input_tokens"]))
    out.append(_line("Total generated tokens:", s["total_output_tokens"]))
    out.append(_line("Request throughput (req/s):", f"{s['request_throughput']:.2f}", "request_throughput"))
    if "request_goodput" in s:
        out.append(_line("Request goodput (req/s):", f"{s['request_goodput']:.2f}"))
    out.append(_line("Output token throughput (tok/s):", f"{s['output_throughput']:.2f}", "output_throughput"))
    out.append(_line("Total Token throughput (tok/s):", f"{s['total_token_throughput']:.2f}", "total_token_throughput"))
    for name, header, label in (
        ("ttft", "Time to First Token", "TTFT"),
        ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
        ("itl", "Inter-token Latency", "ITL"),
        ("e2el", "End-to-end Latency", "E2EL"),
    ):
        out.append(f"{header:-^50}")
        out.append(_line(f"Mean {label} (ms):", f"{s[f'mean_{name}_ms']:.2f}", f"mean_{name}_ms"))
        out.append(_line(f"Median {label} (ms):", f"{s[f'median_{name}_ms']:.2f}", f"median_{name}_ms"))
        for p in percentiles:
            if p == 50:
                continue  # the median, printed above
            key = percentile_key(p)
            out.append(_line(f"P{key[1:]} {label} (ms):", f"{s[f'{key}_{name}_ms']:.2f}", f"{key}_{name}_ms"))
    out += _spec_decode_lines(s, _line)
    if bands:
        some = next(iter(bands.values()))
        out.append(f"{'Error bands':-^50}")
        out.append(f"{some.coverage:.0%} band: where the measured value lay, relative to the prediction, for "
                   f"{some.coverage:.0%} of the {some.points} nearest calibrated cases")
    if calibration:
        out.append(domain_warning(calibration))
    out.append(f"{'Simulated engine':-^50}")
    stages = (f"PP={s['pipeline_parallel_size']}, " if s.get("pipeline_parallel_size", 1) > 1 else "")
    out.append(_line("Model / hardware:", f"{s['model']} on {s['hardware']} (TP={s['tensor_parallel_size']}, "
                     + stages + f"DP={s['data_parallel_size']}" + _moe_parallel(s) + ")"))
    out.append(_line("Mean queueing time (ms):", f"{s['mean_queue_ms']:.2f}"))
    out.append(_line("Compute utilization (MFU):", f"{s['compute_utilization']:.1%}"))
    out.append(_line("Memory bandwidth utilization:", f"{s['bandwidth_utilization']:.1%}"))
    out.append(_line("GPU busy:", f"{s['gpu_busy_fraction']:.1%}"))
    if s["kv_cache_usage_peak"] is None:
        out.append(_line("KV cache usage mean / peak:", "no KV cache (kv_cache.enabled is false)"))
    else:
        out.append(_line("KV cache usage mean / peak:", f"{s['kv_cache_usage_mean']:.1%} / "
                         f"{s['kv_cache_usage_peak']:.1%} of {s['kv_cache_capacity_tokens']:,} tokens"))
    out.append(_line("Mean / max batch size:", f"{s['mean_batch_size']:.1f} / {s['max_batch_size']}"))
    out.append(_line("Preemptions:", s["num_preemptions"]))
    out.append(_line("Errors (rejected / timed out):", f"{s['num_rejected']} / {s['num_timed_out']} "
                     f"({s['error_rate']:.1%})"))
    compiled = s.get("compile_wall_s") or 0.0
    out.append(_line("Simulation wall time (s):", f"{s['simulation_wall_s']:.3f}"
                     + (f" (+ {compiled:.3f} compiling or loading the kernel)" if compiled >= 5e-4 else "")))
    out += _disagg_lines(s, _line)
    if diagnosis:
        out.append(diagnosis)
    out.append("=" * 50)
    if result.warnings:
        out += ["Warnings"] + [f"  - {w}" for w in result.warnings]
    return "\n".join(out)


def _spec_decode_lines(s, line):
    """``vllm bench serve``'s speculative decoding section (none without verified drafts)."""
    if "spec_decode_num_drafts" not in s:
        return []
    c = s.get("speculative_config") or {}
    out = [f"{'Speculative Decoding':-^50}"]
    if c:
        out.append(line("Method / draft tokens:", f"{c['method']}, k={c['num_speculative_tokens']}, stated "
                        f"acceptance {', '.join(f'{r:g}' for r in c['synthetic_acceptance_rates'])}"))
    out.append(line("Acceptance rate (%):", f"{s['spec_decode_acceptance_rate']:.2f}"))
    out.append(line("Acceptance length:", f"{s['spec_decode_acceptance_length']:.2f}"))
    out.append(line("Drafts:", s["spec_decode_num_drafts"]))
    out.append(line("Draft tokens:", s["spec_decode_draft_tokens"]))
    out.append(line("Accepted tokens:", s["spec_decode_accepted_tokens"]))
    if s.get("spec_decode_per_position_acceptance_rates"):
        out.append(line("Per-position acceptance (%):",
                        ", ".join(f"{100 * r:.2f}" for r in s["spec_decode_per_position_acceptance_rates"])))
    return out


def _moe_parallel(s):
    """", EP=8" or ", MoE TP=8" of a summary (or pool) whose MoE layers are not just tensor-parallel."""
    if "expert_parallel_size" in s:
        return f", EP={s['expert_parallel_size']}"
    return f", MoE TP={s['moe_tensor_parallel_size']}" if "moe_tensor_parallel_size" in s else ""


def _disagg_lines(s, line):
    """A disaggregated run's pools and KV transfers (none for an aggregated run)."""
    if "kv_transfer" not in s:
        return []
    out = [f"{'Disaggregated prefill / decode':-^50}"]
    for role in ("prefill", "decode"):
        pool = s[f"{role}_pool"]
        out.append(line(f"{role.capitalize()} pool:", f"{pool['instances']} x {pool['hardware']} (TP={pool['tensor_parallel_size']}, "
                        f"DP={pool['data_parallel_size']}" + _moe_parallel(pool) + f"), {pool['num_gpus']} GPUs"))
        out.append(line("  busy / MFU / KV cache peak:", f"{pool['gpu_busy_fraction']:.1%} / {pool['compute_utilization']:.1%} / "
                        f"{pool['kv_cache_usage_peak']:.1%}, mean batch {pool['mean_batch_size']:.1f}"))
    kv = s["kv_transfer"]
    out.append(line("KV transfer link:", f"{kv['link']}, {kv['bandwidth_gbps']:.0f} GB/s a prefill instance, "
                    f"{kv['latency_us']:.0f} us; first token from the {kv['first_token']} pool"))
    out.append(line("KV transfer mean / P99 (ms):", f"{kv['mean_transfer_ms']:.2f} / {kv['p99_transfer_ms']:.2f}, "
                    f"{kv['mean_bytes'] / 1e6:.1f} MB each, link {kv['link_utilization']:.1%} busy"))
    return out


def format_run_line(result):
    """One summary line (``--quiet``)."""
    s = result.summary
    return (f"{s['model']} on {s['hardware']}: {s['completed']}/{s['completed'] + s['failed']} ok in "
            f"{s['duration']:.2f} s, {s['request_throughput']:.2f} req/s, {s['output_throughput']:.1f} tok/s, "
            f"TTFT mean {s['mean_ttft_ms']:.1f} ms, TPOT mean {s['mean_tpot_ms']:.2f} ms, "
            f"ITL p99 {s.get('p99_itl_ms', float('nan')):.2f} ms")


def error_table(summary):
    """Per metric: points, median and mean absolute error, share within 10% and 20%."""
    return table(["metric", "points", "median |error|", "mean |error|", "within 10%", "within 20%"], [
        [k.upper(), v["points"], f"{v['median_abs_pct_error']:.1f}%", f"{v['mean_abs_pct_error']:.1f}%",
         f"{v['within_10pct']:.0%}", f"{v['within_20pct']:.0%}"] for k, v in summary.items()], "lrrrrr")


def format_calibration(fit, framework, path, framework_path=None):
    """The ``simllm calibrate`` report: fitted factors next to the base's (and the factors that
    ended at a bound of their documented range), fit and leave-one-out errors."""
    rows = [[k, f"{fit.initial[k]:.4g}", f"{v:.4g}"] for k, v in fit.factors.items()]
    hits = [f"  {describe_bound_hit(h)}" for h in fit.bound_hits]
    if hits:
        hits = ["", "At a bound (the data wants more than the documented range allows):", *hits]
    wrote = ([f"wrote {path}"] if path else []) + ([f"wrote {framework_path}"] if framework_path else [])
    return "\n".join([
        f"simllm calibrate: {fit.base.name}, framework {framework}; fitted on {describe_points(fit.points)}",
        f"  {fit.iterations} iteration(s), {fit.evaluations} simulation passes",
        "", table(["factor", "base", "fitted"], rows, "lrr"), *hits,
        "", "Fit error (in sample):", error_table(fit.fit_error),
        "", "Leave-one-out error (PRESS, linearised at the fit):", error_table(fit.loo_error),
        "", *wrote,
    ])


def format_validation(points, summary, groups=None):
    """The ``simllm validate`` table: each measured point against its prediction, then the error
    statistics per metric, and per group of each grouping in ``groups`` ({what: {name: summary}},
    e.g. by backend, by mode) that has several."""
    def pct(x):
        return "" if x is None or math.isnan(x) else f"{x * 100:+.1f}%"

    def ms(x):
        return "" if x is None or math.isnan(x) else f"{x:.2f}"

    rows = []
    skipped = {}  # reason -> the points it left out
    for p in points:
        m = p.measurement
        if p.predicted is None:
            skipped.setdefault(p.reason, []).append(m.where)
            continue
        load = m.concurrency or f"{m.request_rate:g}/s"
        rows.append([m.where.split("/")[-1], p.model, p.hardware, m.tp, m.input_len, m.output_len, load,
                     ms(m.ttft_ms), ms(p.predicted["ttft"]), pct(p.error("ttft")),
                     ms(m.tpot_ms), ms(p.predicted["tpot"]), pct(p.error("tpot"))])
    out = [table(["point", "model", "hardware", "tp", "isl", "osl", "load", "TTFT ms", "predicted", "error",
                  "TPOT ms", "predicted", "error"], rows, "llllrrrrrrrrr")]
    out += ["", error_table(summary)]
    for what, by in (groups or {}).items():
        if len(by) < 2:
            continue
        rows = [[name, *(f"{g[k]['median_abs_pct_error']:.1f}% ({g[k]['points']})" if k in g else "" for k in ("ttft", "tpot"))]
                for name, g in by.items()]
        out += ["", f"By {what} (median |error|, points):", table([what, "TTFT", "TPOT"], rows, "lrr")]
    below = max((v.get("below_bound", 0) for v in summary.values()), default=0)
    if below:
        out += ["", f"{below} point(s) left out of the statistics: a metric was measured faster than simllm "
                "predicts even at 100% of the datasheet peaks, so no efficiency factor reaches it (the run differed "
                "from its stated configuration -- lengths, parallelism, speculative decoding -- or from simllm's "
                "schedule for it, such as queueing under KV-cache pressure)."]
    if skipped:
        total = sum(len(w) for w in skipped.values())
        out += ["", f"Skipped {total} point(s), by reason (count, first point):"]
        for reason, where in sorted(skipped.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            out.append(f"  {len(where):5d}  {reason}  ({where[0]})")
    return "\n".join(out)


def format_presets(infos, names_only=False):
    """``simllm presets``: per kind, each preset's name and title, its key figures with each one's
    source (the YAML's comment on it, or the header paragraph that covers it), then the header's
    references and paragraphs that those sources cite. ``names_only``: one line per kind."""
    kinds = {}
    for info in infos:
        kinds.setdefault(info.kind, []).append(info)
    if names_only:
        return "\n".join(f"{kind}: {', '.join(i.name for i in items) if items else '(none)'}"
                         for kind, items in kinds.items())
    blocks = []
    for kind, items in kinds.items():
        blocks.append(f"{kind} ({len(items)})")
        for info in items:
            lines = [f"{info.name}: {info.title}" if info.title != info.name else info.name]
            rows = [(f.key, figure_text(f.value), f.source) for f in info.figures]
            width = [max((len(r[i]) for r in rows), default=0) for i in range(2)]
            lines += [f"  {k.ljust(width[0])}  {v.rjust(width[1])}  {s}".rstrip() for k, v, s in rows]
            lines += [f"  {label}{'' if label.startswith('[') else ':'} {body}" if label else f"  {body}"
                      for label, body in info.references]
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
