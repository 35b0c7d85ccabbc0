"""The plan phase: a matrix file -> its axes, gate rules and the arms to run.

Phases run in order plan -> run -> judge -> report, and a module imports only its own phase
and earlier ones (tests/gates/test_phase_order.py)."""
