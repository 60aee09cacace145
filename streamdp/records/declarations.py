"""What the schema declares for a refused value: the words a user needs to correct a record, never the value.

:meth:`Schema.encode <streamdp.records.schema.Schema.encode>` adds the declaration to its error with
``on_invalid="raise"``; the reasons of rows dropped with ``on_invalid="drop"`` (what a producer pushes, and what
its dead letters store) carry none. :func:`with_declaration` adds it where a reason is shown to the user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamdp.records.domains import Numeric
from streamdp.records.read_errors import NOT_NUMBER_WORDS, UNDECLARED_CLASS_WORDS, UNDECLARED_WORDS

if TYPE_CHECKING:
    from streamdp.records.schema import Schema

__all__ = ["with_declaration"]


def with_declaration(schema: Schema, reason: str) -> str:
    """``reason`` (a refused row's, as the encoders word it) with the schema's declaration of the attribute or
    label it names, as ``on_invalid="raise"`` words it: the declared values, or a numeric attribute's range.
    Public: from the schema alone, never the value. ``reason`` is returned unchanged when it holds a declaration
    already or names no undeclared value (a missing value, an unknown column).

    Why: a user told that every record was refused needs the declared values to check the spelling against.

    >>> from streamdp.records.schema import Schema
    >>> s = Schema.from_dict({"attributes": [{"name": "c", "type": "categorical", "values": ["a", "b"]}],
    ...                       "label": {"name": "y", "values": [0, 1]}})
    >>> with_declaration(s, "record 3 (0-based): attribute 'c' has a value not declared in the schema")
    "record 3 (0-based): attribute 'c' has a value not declared in the schema (declared: ['a', 'b'])"
    >>> with_declaration(s, "label 'y' has a class not declared in the schema")
    "label 'y' has a class not declared in the schema (declared: [0, 1])"
    >>> with_declaration(s, "attribute 'c' is missing")
    "attribute 'c' is missing"
    """
    if "(declared:" in reason:
        return reason
    for attr in schema.attributes:
        if isinstance(attr, Numeric):
            if reason.endswith(f"attribute {attr.name!r} {NOT_NUMBER_WORDS}"):
                return f"{reason} (declared: a number in [{attr.min:g}, {attr.max:g}])"
        elif reason.endswith(f"attribute {attr.name!r} {UNDECLARED_WORDS}"):
            return f"{reason} (declared: {list(attr.values)})"
    if reason.endswith(f"label {schema.label.name!r} {UNDECLARED_CLASS_WORDS}"):
        return f"{reason} (declared: {list(schema.label.values)})"
    return reason
