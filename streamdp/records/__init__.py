"""Records: the declared schema, value coding, the bundled datasets and record sources (CSV, DataFrames)."""

from streamdp.records.schema import Schema, SchemaError

__all__ = ["Schema", "SchemaError"]
