"""A stand-in engine for the gate runner's host tests (not the real engine).

It follows docs/contract.md with a hash "model": the next token is a hash of the whole fed
history, so it is exact by construction. engine/knobs.py plants bugs for the tests.
"""
