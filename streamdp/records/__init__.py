"""Records: the declared schema, value coding, the bundled datasets and record sources (CSV, DataFrames)."""

from streamdp.records.domains import SchemaError
from streamdp.records.schema import Schema

__all__ = ["Schema", "SchemaError"]
