"""simllm.config: everything a user writes, read and checked before anything runs.

Owns YAML/JSON reading with line numbers (:mod:`.yamlio`), typed section reads that name the
file, line, key, value and the allowed range (:mod:`.sections`), preset lookup (:mod:`.presets`),
dtypes (:mod:`.dtypes`), and the frozen configuration dataclasses: :mod:`.model` (also read from
HuggingFace ``config.json``), :mod:`.hardware` (GPU physics), :mod:`.framework` (the serving
framework's costs), :mod:`.serving` (vLLM's engine arguments), :mod:`.speculative` (vLLM's
``--speculative-config`` and its acceptance model) and :mod:`.workload` (arrivals, length
distributions, traces).

May import: :mod:`simllm.errors`, :mod:`simllm.fileio`, :mod:`simllm.text`. Nothing above it.
"""
