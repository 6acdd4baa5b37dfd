"""A small pure-Python reference of the serving engine: plain objects, lists and a deque, one
iteration and one token at a time, no fast path. The numba engine must reproduce its per-request
times. Iteration times come from the cost kernel (tested on its own against tests/reference.py).
"""
import math
from collections import deque

from simcore import codes, iteration_time_nb


class Req:
    def __init__(self, idx, arrival, ready, prompt, output, cached):
        self.idx = idx
        self.arrival = arrival
        self.ready = ready
        self.prompt = prompt
        self.output = output
        self.cached = cached
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        self.preemptions = 0
        self.status = codes.STATUS_PENDING
        self.first_sched = -1.0
        self.first_token = -1.0
        self.finish = -1.0
        self.last_emit = -1.0
        self.itls = []

    @property
    def tokens_so_far(self):
        return self.prompt + self.generated


def _blocks(tokens, cached, bs):
    return math.ceil(tokens / bs) - cached // bs


def reference_simulate(p, e, arrival, ready, prompt, output, cached):
    """Simulate with the engine's rules; returns the list of :class:`Req` (index order)."""
    n = len(prompt)
    reqs = [Req(i, arrival[i], ready[i], int(prompt[i]), int(output[i]), int(cached[i])) for i in range(n)]
    bs = e.block_size
    free = e.num_blocks - e.prefix_blocks
    waiting = deque()
    running = []
    next_client = min(e.n_clients, n) if e.n_clients else n
    arrived = 0
    now = 0.0
    done = 0
    static_blocks = math.ceil(e.max_model_len / bs)

    def end(r, t, status):
        nonlocal done, next_client
        r.status = status
        r.finish = t
        done += 1
        if e.n_clients and next_client < n:
            nxt = reqs[next_client]
            nxt.arrival = max(t, nxt.ready) + e.frontend_s
            next_client += 1

    def preempt_last():
        nonlocal free
        v = running.pop()
        free += v.blocks
        v.blocks = 0
        v.preemptions += 1
        v.status = codes.STATUS_WAITING
        v.computed = v.cached
        waiting.appendleft(v)
        return v

    def admit(r):
        waiting.popleft()
        r.status = codes.STATUS_RUNNING
        running.append(r)
        if r.first_sched < 0:
            r.first_sched = now

    while done < n:
        while arrived < n and reqs[arrived].arrival <= now:
            r = reqs[arrived]
            arrived += 1
            never_fits = _blocks(r.prompt + r.output - 1, r.cached, bs) > e.num_blocks - e.prefix_blocks
            if r.prompt + r.output > e.max_model_len or (e.policy == codes.POLICY_CONTINUOUS and never_fits):
                end(r, r.arrival, codes.STATUS_REJECTED)
                continue
            r.status = codes.STATUS_WAITING
            r.computed = r.cached
            waiting.append(r)
        if e.timeout_s > 0:
            late = [r for r in running + list(waiting)
                    if r.arrival + e.timeout_s <= now and r.status in (codes.STATUS_RUNNING, codes.STATUS_WAITING)]
            if late:
                for r in late:
                    if r in running:
                        running.remove(r)
                        free += r.blocks
                        r.blocks = 0
                    else:
                        waiting.remove(r)
                    end(r, now, codes.STATUS_TIMED_OUT)
                continue
        if not running and not waiting:
            if arrived < n and reqs[arrived].arrival < math.inf:
                now = max(now, reqs[arrived].arrival)
                continue
            break

        batch = []  # (request, new tokens)
        pad_to = 0
        static = e.policy != codes.POLICY_CONTINUOUS
        if not static:
            preempted = False
            budget = e.max_num_batched_tokens
            if e.chunked_prefill:
                i = 0
                while i < len(running) and budget > 0:
                    r = running[i]
                    new = min(r.tokens_so_far - r.computed, budget)
                    while _blocks(r.computed + new, r.cached, bs) - r.blocks > free:
                        preempted = True
                        if preempt_last() is r:
                            break
                    if r.status != codes.STATUS_RUNNING:
                        break
                    extra = _blocks(r.computed + new, r.cached, bs) - r.blocks
                    free -= extra
                    r.blocks += extra
                    batch.append((r, new))
                    budget -= new
                    i += 1
                if not preempted:
                    while waiting and len(running) < e.max_num_seqs and budget > 0:
                        r = waiting[0]
                        new = min(r.tokens_so_far - r.computed, budget)
                        extra = _blocks(r.computed + new, r.cached, bs) - r.blocks
                        if extra > free:
                            break
                        admit(r)
                        free -= extra
                        r.blocks += extra
                        batch.append((r, new))
                        budget -= new
            else:
                while waiting and len(running) < e.max_num_seqs:
                    r = waiting[0]
                    need = r.tokens_so_far - r.computed
                    extra = _blocks(r.computed + need, r.cached, bs) - r.blocks
                    if need > budget or extra > free:
                        break
                    admit(r)
                    free -= extra
                    r.blocks += extra
                    batch.append((r, need))
                    budget -= need
                if not batch:
                    i = 0
                    while i < len(running):
                        r = running[i]
                        while _blocks(r.computed + 1, r.cached, bs) - r.blocks > free:
                            preempted = True
                            if preempt_last() is r:
                                break
                        if r.status != codes.STATUS_RUNNING:
                            break
                        extra = _blocks(r.computed + 1, r.cached, bs) - r.blocks
                        free -= extra
                        r.blocks += extra
                        batch.append((r, 1))
                        i += 1
            if not batch:
                if not preempted and not running:
                    r = waiting.popleft()
                    end(r, now, codes.STATUS_REJECTED)
                continue
            used = e.num_blocks - free
        else:
            if not running:
                if e.policy == codes.POLICY_DYNAMIC and len(waiting) < e.batch_max:
                    start = waiting[0].arrival + e.batch_window_s
                    if now < start:
                        later = reqs[arrived].arrival if arrived < n else math.inf
                        now = min(start, later)
                        continue
                cap = min(e.max_num_seqs, e.static_slots)
                if e.batch_max > 0:
                    cap = min(cap, e.batch_max)
                while waiting and len(batch) < cap:
                    r = waiting[0]
                    admit(r)
                    batch.append((r, r.prompt - r.computed))
                if e.pad_prompts:
                    pad_to = max(new for _, new in batch)
            else:
                batch = [(r, 1) for r in running]
            used = len(running) * static_blocks

        n_tokens = pairs = kv_read = n_emit = 0.0
        for r, new in batch:
            q = float(pad_to or new)
            n_tokens += q
            pairs += q * r.computed + q * (q + 1) / 2
            kv_read += r.computed + q
            if static or r.computed + new == r.tokens_so_far:
                n_emit += 1
        dt = iteration_time_nb(p, n_tokens, pairs, kv_read, n_emit)
        t_end = now + dt
        assert used <= e.num_blocks
        for r, new in batch:
            r.computed += new
            if r.status != codes.STATUS_RUNNING:
                continue
            if r.computed == r.tokens_so_far or (static and r.computed > r.tokens_so_far):
                if r.generated == 0:
                    r.first_token = t_end
                else:
                    r.itls.append(t_end - r.last_emit)
                r.last_emit = t_end
                r.generated += 1
                if r.generated == r.output:
                    if not static:
                        free += r.blocks
                        r.blocks = 0
                    late = e.timeout_s > 0 and t_end - r.arrival > e.timeout_s  # the client gave up first
                    end(r, t_end, codes.STATUS_TIMED_OUT if late else codes.STATUS_DONE)
        if not static:
            running = [r for r in running if r.status == codes.STATUS_RUNNING]
        elif all(r.status != codes.STATUS_RUNNING for r in running):
            running = []
        now = t_end
    return reqs
