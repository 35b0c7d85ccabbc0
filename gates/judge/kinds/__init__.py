"""Every gate kind, one file each, found by the registry ``KINDS`` (YAML key -> rule class).

Importing this package imports each of its modules, so a kind registers itself by being a
file here (see kind.py): adding one touches that file, its test and docs/gates.md.
"""

from __future__ import annotations

import importlib
import pkgutil

from gates.judge.kinds.kind import KINDS, Facts, Kind, kind_of, unit

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "kind":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["KINDS", "Facts", "Kind", "kind_of", "unit"]
