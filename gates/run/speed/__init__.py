"""Speed gates: ABBA blocks of fresh ``engine bench --json`` processes, per-cell verdicts.

* ``schema``: reads the bench schema (docs/contract.md) by field name;
* ``stats``: Wilcoxon signed-rank tests of paired blocks, bootstrap intervals, Holm, verdicts;
* ``measure``: the ABBA runner that adds blocks while a cell is inconclusive;
* ``chart``: the receipt's table and mermaid sweep chart;
* ``calibrate``: false alarms and planted slowdowns (``python -m gates.speed_calibrate``).
"""
