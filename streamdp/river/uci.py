"""The shared UCI datasets as river streams, with their declared schemas (``streamdp/data/schemas``).

>>> schema, pairs = uci_stream("tic-tac-toe", shuffle_seed=1)
>>> len(pairs), schema.n_classes, sorted(pairs[0][0]) == sorted(schema.names)
(958, 2, True)
"""

from __future__ import annotations

import numpy as np

from streamdp.records.schema import Schema

__all__ = ["uci_schema", "uci_stream"]


def uci_schema(name: str) -> Schema:
    """Declared schema of a UCI dataset (``nursery``, ``mushroom``, ``congressional-voting``, ``tic-tac-toe``, ``adult``)."""
    from streamdp.records.datasets import load_schema

    return load_schema(name)


def uci_stream(name: str, *, shuffle_seed: int | None = 0, drop_missing: bool = False):
    """A UCI dataset as a river stream of ``(x, y)`` in random order (``shuffle_seed`` picks the order).

    The order is not a privacy matter (it only reorders the records), so a fixed
    seed is fine here. Returns ``(schema, list_of_pairs)``.
    """
    from streamdp.records.datasets import load

    ds = load(name, drop_missing=drop_missing)
    idx = np.arange(len(ds.y))
    if shuffle_seed is not None:
        idx = np.random.default_rng(shuffle_seed).permutation(len(ds.y))
    names = ds.schema.names
    pairs = []
    for i in idx:
        row = ds.X[i]
        pairs.append(({n: (v.item() if isinstance(v, np.generic) else v) for n, v in zip(names, row)}, ds.y[i]))
    return ds.schema, pairs
