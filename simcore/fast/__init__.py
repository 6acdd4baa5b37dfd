"""The fast path of the engine: an optimisation that must give the same answers as the semantics.

The semantics are the explicit scheduler (simcore/scheduler.py) and engine loop (simcore/engine.py):
every request's state explicit, one iteration at a time. This subpackage only makes them cheaper:
:mod:`.cohort` keeps decoding requests in an aggregate cohort so an iteration costs O(1) in them,
:mod:`.decode_run` advances runs of identical decode iterations in closed form, and
:mod:`.spec_run` takes runs of decode-only speculative steps without the event loop. Whatever they
cannot decide they hand back to the explicit path; the rules both share (admission, retirement)
are in scheduler.py, speculative decoding's verification rule in speculative.py.
tests/test_engine.py checks both paths against a pure-Python reference.
"""
