"""What JSON is, as a type: the one shape the gate runner gives data it reads from or writes
to a file, a process or an HTTP answer, at the edge where it does so (`to_json`, `from_json`,
`load`, `dump`). Inside, data travels as the typed objects those edges build; a JSON object
is never handed on as a `dict[str, Any]` (tests/gates/test_typed_results.py). One level is
spelled out (a value is a JSON scalar, array or object); what nests deeper is not checked.
"""

from __future__ import annotations

from typing import Any, TypeAlias, Union

JsonValue: TypeAlias = Union[None, bool, int, float, str, list[Any], dict[str, Any]]  # noqa: UP007
JsonObject: TypeAlias = dict[str, JsonValue]
