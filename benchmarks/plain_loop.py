"""Issue 17's yardstick: a deliberately plain numba serving loop to time simllm's kernel against.

It does what the issue names: every iteration it touches every running request, and it prices the
iteration with one roofline term. Requests are admitted in arrival order while a sequence slot and
their whole KV footprint (prompt + output tokens) are free, so nothing is ever preempted; prompts
are prefilled in chunks from what is left of the token budget at their turn; every request that has its prompt emits a token
per iteration. An iteration of ``n`` tokens whose attention reads ``c`` cached tokens takes
``max(n * flops_per_token / peak_flops, (weight_bytes + c * kv_bytes_per_token) / mem_bw)``.

No memo, no cohort, no fast path: the work is one pass over the running requests per iteration,
the floor an engine simulator built on per-request loops pays. simllm's kernel target (issue 17)
is at most half this loop's time on the same requests in the same run (asv
``PlainLoop.track_kernel_time_over_plain_loop``)."""
import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def plain_loop_nb(arrival_s, input_len, output_len, max_num_seqs, max_num_batched_tokens, kv_capacity_tokens,
                  flops_per_token, weight_bytes, kv_bytes_per_token, peak_flops, mem_bw):
    """Simulate requests (``arrival_s`` sorted, shape (n,), seconds; lengths in tokens).

    Returns
    -------
    first_token_s, finish_s : ndarray, shape (n,)
        Each request's first-token and last-token times (seconds).
    iterations : int
    """
    n = arrival_s.shape[0]
    first_token_s = np.zeros(n)
    finish_s = np.zeros(n)
    computed = np.zeros(n, np.int64)  # prompt tokens prefilled
    generated = np.zeros(n, np.int64)
    running = np.empty(max_num_seqs, np.int64)
    n_running = 0
    head = 0
    kv_used = 0
    finished = 0
    iterations = 0
    now = 0.0
    while finished < n:
        if n_running == 0 and arrival_s[head] > now:
            now = arrival_s[head]
        while (head < n and arrival_s[head] <= now and n_running < max_num_seqs
               and kv_used + input_len[head] + output_len[head] <= kv_capacity_tokens):
            running[n_running] = head
            n_running += 1
            kv_used += input_len[head] + output_len[head]
            head += 1
        if n_running == 0:
            raise ValueError("a request's prompt and output exceed the KV capacity")
        # One pass: each decoding request takes one token; a prefilling one takes what is left of the
        # budget at its turn.
        tokens = 0
        context = 0
        for i in range(n_running):
            r = running[i]
            if computed[r] < input_len[r]:
                chunk = min(input_len[r] - computed[r], max_num_batched_tokens - tokens)
                if chunk > 0:
                    tokens += chunk
                    context += computed[r] + chunk
                    computed[r] += chunk
            else:
                tokens += 1
                context += input_len[r] + generated[r]
        dt = max(tokens * flops_per_token / peak_flops, (weight_bytes + context * kv_bytes_per_token) / mem_bw)
        now += dt
        iterations += 1
        # Emit: a request whose prompt is done emits a token; one whose output is complete leaves.
        i = 0
        while i < n_running:
            r = running[i]
            if computed[r] == input_len[r]:
                if generated[r] == 0:
                    first_token_s[r] = now
                generated[r] += 1
                if generated[r] == output_len[r]:
                    finish_s[r] = now
                    finished += 1
                    kv_used -= input_len[r] + output_len[r]
                    n_running -= 1
                    running[i] = running[n_running]
                    continue
            i += 1
    return first_token_s, finish_s, iterations


def plain_loop(model, hardware, serving, requests):
    """:func:`plain_loop_nb` for simllm configurations: the model's weights and KV bytes at 2 bytes
    per element (bf16), the GPU's bf16 peak and memory bandwidth at its stated utilisations, and
    the KV capacity left by the weights in ``gpu_memory_utilization`` of its memory."""
    weight_bytes = 2.0 * model.parameter_count()
    kv_bytes_per_token = 2.0 * model.kv_elements_per_token()
    budget = serving.max_num_batched_tokens or 8192
    kv_capacity = int((hardware.memory_size_bytes * serving.gpu_memory_utilization - weight_bytes) / kv_bytes_per_token)
    return plain_loop_nb(
        np.ascontiguousarray(requests.arrival_s, np.float64), np.ascontiguousarray(requests.input_len, np.int64),
        np.ascontiguousarray(requests.output_len, np.int64), serving.max_num_seqs, budget, kv_capacity,
        2.0 * model.active_parameter_count(), weight_bytes, kv_bytes_per_token,
        hardware.bf16_tflops * 1e12 * hardware.compute_utilization,
        hardware.memory_bandwidth_gbps * 1e9 * hardware.bandwidth_utilization)
