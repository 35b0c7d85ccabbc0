"""The receipt manifest's JSON schema, versioned: ``receipt-<N>.json``, and ``SCHEMA`` the
id every manifest carries in its ``schema`` field. A change that removes or retypes a field
is a new version (a new file); adding a field is not. ``jsonschema`` (a dev dependency) is
needed only to check a manifest, never to write one."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from gates.jsontypes import JsonObject

VERSION = 1
SCHEMA = f"exact-gates/receipt/{VERSION}"


@cache
def schema(version: int = VERSION) -> JsonObject:
    return json.loads((Path(__file__).parent / f"receipt-{version}.json").read_text())


def problems(man: JsonObject) -> list[str]:
    """Where ``man`` breaks its schema: one line per problem, with the JSON path."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    out = []
    for e in sorted(validator.iter_errors(man), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        out.append(f"{where}: {e.message[:200]}")
    return out
