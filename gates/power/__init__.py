"""``python -m gates selftest --power``: plant known bug classes into a clone of the engine
and count how many of them the gate matrix catches (and how many no-op changes it flags)."""
