"""``simllm profile``'s timing: running GEMMs, attention, copies, kernel launches and all-reduce
on the local device with PyTorch, one row per measurement
(:func:`~simllm.calibration.profile_fit.measurement_row`).

Every timing is the median over ``repeats`` after warm-up: CUDA events around each call on a GPU
(with the L2 cache overwritten before each call, as weights and KV caches of a served model do not
stay in it), ``time.perf_counter`` on the CPU. What each measurement runs is listed in
:mod:`simllm.calibration.profile`.

Everything here needs PyTorch, an optional dependency (``pip install "simllm[profile]"``): it is
imported only when a profile runs (:func:`import_torch`), never when this module is.
"""
import contextlib
import platform
import statistics
import time
from pathlib import Path

from simllm.calibration.profile_fit import MIB, measurement_row, skipped_row
from simllm.errors import ConfigError, optional_import


def import_torch():
    """PyTorch, or the one-line ConfigError saying how to install it."""
    return optional_import("torch", "simllm profile", package="PyTorch", install='"simllm[profile]"')


def resolve_device(torch, device):
    """The torch device ``device`` names (``cuda``, ``cuda:N``, ``cpu``), checked to exist."""
    text = str(device).strip().lower()
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise ConfigError("'cuda', 'cuda:N' or 'cpu'", key="device", value=device) from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ConfigError("'cuda', 'cuda:N' or 'cpu'", key="device", value=device)
    if not torch.cuda.is_available():
        raise ConfigError(f"a CUDA GPU, but torch {torch.__version__} sees none (torch.cuda.is_available() is "
                          "False); pass device='cpu' (--device cpu) to profile the CPU", key="device", value=device)
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < count:
        raise ConfigError(f"a visible GPU index (0..{count - 1})", key="device", value=device)
    return torch.device("cuda", index)


def device_name(torch, dev):
    """The GPU's name, or the CPU's model name."""
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    name = platform.processor()
    if not name or name == platform.machine():
        with contextlib.suppress(OSError):
            for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    return f"CPU {name or platform.machine() or 'unknown'}"


class Timer:
    """Median seconds of a callable: CUDA events on a GPU, ``time.perf_counter`` on the CPU.

    ``grid`` gives ``warmup`` (untimed calls first) and ``flush_bytes`` (the L2 flush buffer on a
    GPU, 0 for none)."""

    def __init__(self, torch, dev, grid, repeats):
        self.torch = torch
        self.dev = dev
        self.cuda = dev.type == "cuda"
        self.repeats = repeats
        self.warmup = grid.warmup
        self.flush = None
        if self.cuda and grid.flush_bytes:
            self.flush = torch.empty(grid.flush_bytes, dtype=torch.int8, device=dev)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.dev)

    def seconds(self, fn, flush=True):
        """Median seconds of one call of ``fn`` (the L2 cache overwritten before each, on a GPU)."""
        for _ in range(self.warmup):
            fn()
        self.sync()
        times = []
        if self.cuda:
            event = self.torch.cuda.Event
            pairs = []
            for _ in range(self.repeats):
                if flush and self.flush is not None:
                    self.flush.zero_()
                start, end = event(enable_timing=True), event(enable_timing=True)
                start.record()
                fn()
                end.record()
                pairs.append((start, end))
            self.sync()
            times = [start.elapsed_time(end) * 1e-3 for start, end in pairs]
        else:
            for _ in range(self.repeats):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return max(statistics.median(times), 1e-9)

    def host_seconds(self, fn):
        """Median host wall seconds of ``fn`` including a synchronize (loops of launches)."""
        for _ in range(self.warmup):
            fn()
        self.sync()
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        return max(statistics.median(times), 1e-9)


def _torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}[name]


def _scaled_mm(torch, a, b, scale):
    out = torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    return out[0] if isinstance(out, tuple) else out  # torch < 2.4 returned (out, amax)


def fp8_gemm_available(torch, dev):
    """Whether ``torch._scaled_mm`` runs an FP8 (e4m3) GEMM on ``dev``.

    Returns
    -------
    (bool, str)
        Availability and, when unavailable, why.
    """
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return False, f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
    try:
        a = torch.randn(16, 32, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(32, 32, device=dev).to(torch.float8_e4m3fn).t()
        _scaled_mm(torch, a, b, torch.ones((), device=dev, dtype=torch.float32))
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    except Exception as exc:  # noqa: BLE001 - any failure means "not on this device"
        return False, f"torch._scaled_mm fails on {dev}: {_first_line(exc)}"
    return True, ""


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _timed(torch, timer, kind, shape, build, peak_flops, bw, catch=()):
    """Build a shape (``build() -> (fn, flops, bytes)``), time ``fn`` and return its record; a shape
    that runs out of device memory (or raises one of ``catch``) is recorded as skipped."""
    errors = (torch.OutOfMemoryError if hasattr(torch, "OutOfMemoryError") else torch.cuda.OutOfMemoryError,
              *catch)
    fn = None
    try:
        fn, flops, nbytes = build()
        seconds = timer.seconds(fn)
    except errors as exc:
        reason = _first_line(exc)
    else:
        return measurement_row(kind, shape, seconds, flops, nbytes, peak_flops, bw)
    fn = None  # drop the shape's tensors before handing the memory back
    if timer.cuda:
        torch.cuda.empty_cache()
    return skipped_row(kind, reason, **shape)


def _gemm_row(torch, dev, timer, m, n, k, gemm_dtype, peak_flops, bw):
    """One GEMM of ``x (M, K) @ W.T`` with ``W (N, K)`` row-major (``nn.Linear``'s layout), timed."""
    def build():
        if gemm_dtype == "fp8":
            a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
            w = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn)
            scale = torch.ones((), device=dev, dtype=torch.float32)
            nbytes = (m * k + k * n) * 1 + m * n * 2  # fp8 in, bf16 out
            return (lambda: _scaled_mm(torch, a, w.t(), scale)), 2.0 * m * n * k, nbytes
        tdt = _torch_dtype(torch, gemm_dtype)
        a = torch.randn(m, k, device=dev, dtype=tdt)
        w = torch.randn(n, k, device=dev, dtype=tdt)
        out = torch.empty(m, n, device=dev, dtype=tdt)
        return (lambda: torch.mm(a, w.t(), out=out)), 2.0 * m * n * k, (m * k + k * n + m * n) * 2
    shape = {"m": m, "n": n, "k": k, "dtype": gemm_dtype}
    # An FP8 shape the kernels refuse (alignment) is skipped, not fatal.
    return _timed(torch, timer, "gemm", shape, build, peak_flops, bw,
                  catch=(RuntimeError,) if gemm_dtype == "fp8" else ())


def _measure_gemms(torch, dev, grid, timer, gemm_dtype, peak_flops, bw, say):
    rows = []
    for m in grid.gemm_m:
        for n, k in grid.gemm_nk:
            row = _gemm_row(torch, dev, timer, m, n, k, gemm_dtype, peak_flops, bw)
            rows.append(row)
            if row["skipped"]:
                say(f"gemm M={m} N={n} K={k}: skipped ({row['reason']})")
            else:
                say(f"gemm M={m} N={n} K={k}: {row['achieved_tflops']:.3g} TFLOP/s "
                    f"({row['compute_fraction']:.3g} of peak)")
    return rows


def _prefill_row(torch, dev, timer, b, s, h, d, act_dtype, peak_flops, bw):
    """Causal multi-head prefill attention of ``b`` sequences of ``s`` tokens, ``h`` heads of ``d``."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    tdt = _torch_dtype(torch, act_dtype)

    def build():
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=tdt) for _ in range(3))
        # Causal: s (s + 1) / 2 query-key pairs per sequence, 4 d FLOPs per pair and head (QK^T
        # and PV), as simcore.cost counts them; Q, K, V read and O written once.
        flops = 4.0 * d * h * b * s * (s + 1) / 2.0
        return (lambda: sdpa(q, k, v, is_causal=True)), flops, 4.0 * b * h * s * d * 2
    shape = {"batch": b, "context": s, "heads": h, "kv_heads": h, "head_dim": d, "dtype": act_dtype}
    return _timed(torch, timer, "attention_prefill", shape, build, peak_flops, bw)


def _decode_row(torch, dev, timer, b, c, h, kvh, d, act_dtype, peak_flops, bw):
    """One-token decode attention of ``b`` sequences against ``c`` cached tokens, GQA ``h`` / ``kvh``."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    tdt = _torch_dtype(torch, act_dtype)
    group = h // kvh

    def build():
        # GQA decode: the `group` query heads sharing a KV head are the rows of one query block,
        # so each KV head's cache is read once (as FlashDecoding-style kernels do).
        q = torch.randn(b, kvh, group, d, device=dev, dtype=tdt)
        k, v = (torch.randn(b, kvh, c, d, device=dev, dtype=tdt) for _ in range(2))
        nbytes = 2.0 * b * kvh * c * d * 2 + 2.0 * b * h * d * 2
        return (lambda: sdpa(q, k, v)), 4.0 * d * h * b * c, nbytes
    shape = {"batch": b, "context": c, "heads": h, "kv_heads": kvh, "head_dim": d, "dtype": act_dtype}
    return _timed(torch, timer, "attention_decode", shape, build, peak_flops, bw)


def _measure_attention(torch, dev, grid, timer, act_dtype, peak_flops, bw, say):
    h, kvh, d = grid.heads, grid.kv_heads, grid.head_dim
    rows = []
    for b, s in grid.prefill:
        row = _prefill_row(torch, dev, timer, b, s, h, d, act_dtype, peak_flops, bw)
        rows.append(row)
        say(f"attention prefill batch={b} context={s}: "
            + (f"skipped ({row['reason']})" if row["skipped"] else f"{row['achieved_tflops']:.3g} TFLOP/s"))
    for b, c in grid.decode:
        row = _decode_row(torch, dev, timer, b, c, h, kvh, d, act_dtype, peak_flops, bw)
        rows.append(row)
        say(f"attention decode batch={b} context={c}: "
            + (f"skipped ({row['reason']})" if row["skipped"] else f"{row['achieved_gbps']:.4g} GB/s"))
    return rows


def _measure_copy(torch, dev, grid, timer, peak_flops, bw, say):
    src = torch.ones(grid.copy_bytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    seconds = timer.seconds(lambda: dst.copy_(src), flush=False)
    row = measurement_row("copy", {"buffer_bytes": grid.copy_bytes}, seconds, 0.0, 2.0 * grid.copy_bytes, peak_flops,
                          bw)
    say(f"copy {grid.copy_bytes / MIB:g} MiB: {row['achieved_gbps']:.4g} GB/s (read + written)")
    return [row]


def _measure_launch(torch, dev, grid, timer, act_dtype, peak_flops, bw, say, notes):
    n = grid.launch_kernels
    tdt = _torch_dtype(torch, act_dtype)
    x = torch.zeros(1, device=dev, dtype=torch.float32)
    a = torch.randn(16, 16, device=dev, dtype=tdt)
    b = torch.randn(16, 16, device=dev, dtype=tdt)
    o = torch.empty(16, 16, device=dev, dtype=tdt)
    ops = {
        "elementwise": (lambda: x.add_(1.0), 1.0, 8.0),
        "matmul": (lambda: torch.mm(a, b, out=o), 2.0 * 16**3, 3.0 * 16 * 16 * 2),
    }
    rows = []
    for name, (op, flops, nbytes) in ops.items():
        def loop(op=op):
            for _ in range(n):
                op()
        modes = {"eager": lambda loop=loop: timer.host_seconds(loop) / n}
        if dev.type == "cuda":
            modes = {"graph": lambda loop=loop: _graph_seconds(torch, timer, loop) / n, **modes}
        for mode, measure in modes.items():
            shape = {"op": name, "mode": mode, "kernels": n}
            try:
                seconds = measure()
            except Exception as exc:  # noqa: BLE001 - CUDA graph capture is best effort
                rows.append(skipped_row("launch", f"{mode}: {_first_line(exc)}", **shape))
                notes.append(f"launch {name} {mode}: {_first_line(exc)}")
                continue
            rows.append(measurement_row("launch", shape, seconds, flops, nbytes, peak_flops, bw, bound="launch"))
            say(f"launch {name} ({mode}): {seconds * 1e6:.3g} us per kernel")
    return rows


def _graph_seconds(torch, timer, body):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return timer.seconds(graph.replay, flush=False)


def _allreduce_gpus(torch, dev, base):
    """(GPUs an all-reduce can span, None), or (0, why none can run)."""
    if dev.type != "cuda":
        return 0, "profiled on the CPU; all-reduce needs two or more CUDA GPUs"
    visible = torch.cuda.device_count()
    if visible < 2:
        return 0, f"{visible} CUDA GPU visible; all-reduce needs two or more"
    return min(visible, base.gpus_per_node), None


def _allreduce_rows(torch, base, sizes, gpu_counts, timer, say):
    """In-process NCCL all-reduce (``torch.cuda.nccl``) of BF16 messages of ``sizes`` bytes on GPUs
    ``0 .. n - 1`` for each ``n`` of ``gpu_counts``; one skipped row, with why, if NCCL fails."""
    gpus = max(gpu_counts)
    try:
        from torch.cuda import nccl

        elems = max(sizes) // 2
        buffers = [torch.zeros(elems, dtype=torch.bfloat16, device=torch.device("cuda", i)) for i in range(gpus)]
        if not nccl.is_available(buffers):
            return [skipped_row("allreduce", f"NCCL is not available to torch {torch.__version__}", gpus=gpus)]
        rows = []
        link = base.interconnect_bandwidth_gbps * 1e9
        for n in gpu_counts:
            for size in sizes:
                views = [t[: size // 2] for t in buffers[:n]]
                seconds = _allreduce_seconds(torch, nccl, views, timer)
                bus_bytes = 2.0 * (n - 1) / n * size
                shape = {"message_bytes": size, "gpus": n}
                row = measurement_row("allreduce", shape, seconds, 0.0, bus_bytes, 1.0, link, bound="link")
                rows.append(row)
                say(f"all-reduce {size} B on {n} GPUs: {seconds * 1e6:.4g} us, bus {row['achieved_gbps']:.4g} GB/s")
        return rows
    except Exception as exc:  # noqa: BLE001 - record why and go on: the rest of the profile stands
        return [skipped_row("allreduce", f"in-process NCCL all-reduce failed: {_first_line(exc)}", gpus=gpus)]


def _measure_allreduce(torch, dev, base, grid, timer, say):
    gpus, why = _allreduce_gpus(torch, dev, base)
    if why:
        return [skipped_row("allreduce", why)]
    return _allreduce_rows(torch, base, grid.allreduce_bytes, (gpus,), timer, say)


def _allreduce_seconds(torch, nccl, views, timer):
    devices = [v.device for v in views]

    def sync_all():
        for d in devices:
            torch.cuda.synchronize(d)
    for _ in range(max(timer.warmup, 2)):
        nccl.all_reduce(views)
    sync_all()
    stream = torch.cuda.current_stream(devices[0])
    times = []
    for _ in range(timer.repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        nccl.all_reduce(views)
        end.record(stream)
        sync_all()
        times.append(start.elapsed_time(end) * 1e-3)
    return max(statistics.median(times), 1e-9)


def measure_all(torch, dev, base, grid, gemm_dtype, act_dtype, repeats, say, notes):
    """Every measurement of ``grid`` on ``dev``, as rows of
    :func:`~simllm.calibration.profile_fit.measurement_row` (skipped ones with their reason).

    ``grid`` (a profile size's shapes, see :mod:`simllm.calibration.profile`): ``gemm_m``,
    ``gemm_nk``, ``prefill``, ``decode``, ``heads``, ``kv_heads``, ``head_dim``, ``copy_bytes``,
    ``launch_kernels``, ``allreduce_bytes``, ``repeats``, ``warmup``, ``flush_bytes``. GEMMs run in
    ``gemm_dtype``, attention and launches in ``act_dtype``; fractions are against the peaks of
    ``base``. ``say`` gets one line per measurement; fallbacks are appended to ``notes``.
    """
    peak_flops = base.peak_flops(gemm_dtype)
    attn_peak = base.peak_flops(act_dtype)
    bw = base.memory_bandwidth_bytes_per_s
    context = torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
    with context, torch.no_grad():
        timer = Timer(torch, dev, grid, repeats or grid.repeats)
        rows = _measure_gemms(torch, dev, grid, timer, gemm_dtype, peak_flops, bw, say)
        rows += _measure_attention(torch, dev, grid, timer, act_dtype, attn_peak, bw, say)
        rows += _measure_copy(torch, dev, grid, timer, attn_peak, bw, say)
        rows += _measure_launch(torch, dev, grid, timer, act_dtype, attn_peak, bw, say, notes)
        rows += _measure_allreduce(torch, dev, base, grid, timer, say)
        timer.flush = None
    return rows


def measure_table_rows(torch, dev, base, tgrid, gemm_dtype, act_dtype, repeats, say):
    """The measurements kernel tables are fitted from (:func:`simllm.calibration.kernels.tables_from_rows`),
    as rows of :func:`~simllm.calibration.profile_fit.measurement_row` (skipped ones with their reason).

    ``tgrid`` (see :mod:`simllm.calibration.profile`): GEMMs ``(m, n, k)`` in ``gemms`` (power-of-two
    N and K: fitted) and ``gemms_held`` (another N or K: the held-out check), in ``act_dtype`` and,
    when ``gemm_dtype`` is fp8, in FP8 too; prefill ``(batch, context)`` and decode ``(batch,
    context)`` shapes at ``heads`` / ``kv_heads`` (fitted) and at ``held_heads`` / ``held_kv_heads``
    (held out), ``head_dim`` wide; all-reduce of ``allreduce_bytes`` on every power of two GPUs up
    to those visible (and all of them) when two or more are, else one skipped row saying why.
    Timed as :func:`measure_all` times (``repeats``, ``warmup``, ``flush_bytes`` of ``tgrid``).
    ``say`` gets one line per kind of table.
    """
    bw = base.memory_bandwidth_bytes_per_s
    attn_peak = base.peak_flops(act_dtype)
    context = torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
    rows = []

    def report(what, got):
        skipped = sum(r["skipped"] for r in got)
        say(f"kernel tables: {what}: {len(got) - skipped} timed" + (f", {skipped} skipped" if skipped else ""))
        rows.extend(got)
    with context, torch.no_grad():
        timer = Timer(torch, dev, tgrid, repeats or tgrid.repeats)
        for dtype in (act_dtype, "fp8") if gemm_dtype == "fp8" else (act_dtype,):
            peak = base.peak_flops(dtype)
            report(f"{dtype} GEMMs", [_gemm_row(torch, dev, timer, m, n, k, dtype, peak, bw)
                                      for m, n, k in tgrid.gemms + tgrid.gemms_held])
        d = tgrid.head_dim
        report("prefill attention",
               [_prefill_row(torch, dev, timer, b, s, tgrid.heads, d, act_dtype, attn_peak, bw)
                for b, s in tgrid.prefill]
               + [_prefill_row(torch, dev, timer, b, s, tgrid.held_heads, d, act_dtype, attn_peak, bw)
                  for b, s in tgrid.prefill_held])
        report("decode attention",
               [_decode_row(torch, dev, timer, b, c, tgrid.heads, tgrid.kv_heads, d, act_dtype, attn_peak, bw)
                for b, c in tgrid.decode]
               + [_decode_row(torch, dev, timer, b, c, tgrid.held_heads, tgrid.held_kv_heads, d, act_dtype, attn_peak,
                              bw) for b, c in tgrid.decode_held])
        gpus, why = _allreduce_gpus(torch, dev, base)
        if why:
            rows.append(skipped_row("allreduce", why))
        else:
            counts = sorted({2**i for i in range(1, gpus.bit_length()) if 2**i <= gpus} | {gpus})
            report("all-reduce", _allreduce_rows(torch, base, tgrid.allreduce_bytes, tuple(counts), timer,
                                                 lambda _line: None))
        timer.flush = None
    return rows
