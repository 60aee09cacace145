"""The bundled datasets as CSV files: what `streamdp push` reads back, record for record."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.records.datasets import load
from streamdp.records.sources import read_csv_chunks


@pytest.mark.parametrize("name", ["congressional-voting", "tic-tac-toe"])
def test_to_csv_reads_back_as_the_same_records(name, tmp_path):
    ds = load(name)
    path = ds.to_csv(tmp_path / f"{name}.csv")
    chunks = list(read_csv_chunks(path, ds.schema, label=ds.schema.label.name))
    assert sum(c.n_in for c in chunks) == len(ds.y) and not any(len(c.dropped) for c in chunks)
    enc = ds.schema.encode(ds.X, ds.y)
    assert np.array_equal(np.concatenate([c.X for c in chunks]), enc.X)
    assert np.array_equal(np.concatenate([c.y for c in chunks]), enc.y)
