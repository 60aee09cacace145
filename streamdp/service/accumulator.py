"""A release window's secret accumulator: the exact tallies workers add to the open window (worker-only).

The add script (:data:`.commit.WINDOW_ADD_LUA`) stores each add's tally whole, as one field of the window's
hash ``priv:acc:<w>`` (:func:`joined_cells`); the closer reads them back into counts (:func:`acc_counts`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ADD_FIELD", "joined_cells", "acc_counts"]

#: Field prefix of one add's tally in a window accumulator (the rest of the name: the add's first batch id).
ADD_FIELD = b"b:"


def joined_cells(parts: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    """Several tallies' nonzero cells (``(flat indices, counts)`` pairs,
    :meth:`streamdp.forest.PrivateForest.sparse_tally_encoded`) as one bytes value of their sum: the flat
    indices, then their counts, little-endian int64 each (a cell may repeat: the accumulator adds every pair,
    :func:`acc_counts`); no counts-sized array is built. The add script stores it whole as one field of the
    window's accumulator (one HSET per add, not one HINCRBY per cell).

    >>> a, b = (np.array([1, 2]), np.array([2, 1])), (np.array([0, 1]), np.array([1, 2]))
    >>> acc_counts({b"b:x": joined_cells([a, b])}, (3,)).tolist()
    [1, 4, 1]
    """
    idx = [p[0] for p in parts]
    val = [p[1] for p in parts]
    n = sum(len(i) for i in idx)
    out = np.empty(2 * n, dtype="<i8")
    if n:
        out[:n], out[n:] = np.concatenate(idx), np.concatenate(val)
    return out.tobytes()


def acc_counts(raw: dict, shape: tuple) -> np.ndarray | None:
    """A window accumulator hash back to exact int64 counts; ``None`` when no entry arrived.

    Fields ``b:<batch id>`` hold one add's :func:`joined_cells`; a field that is a bare cell
    index holding a count (what earlier workers added with HINCRBY) is read too.

    >>> acc_counts({b"b:x": joined_cells([(np.array([1, 2]), np.array([2, 1]))]), b"1": b"5"}, (3,)).tolist()
    [0, 7, 1]
    """
    if not raw:
        return None
    size = int(np.prod(shape))
    out = np.zeros(size, dtype=np.int64)
    cells = [(k, v) for k, v in raw.items() if not bytes(k).startswith(ADD_FIELD)]
    for k, v in raw.items():
        if bytes(k).startswith(ADD_FIELD):
            if len(v) % 16:
                raise ValueError("window accumulator holds a malformed tally")
            a = np.frombuffer(v, dtype="<i8")
            idx, val = a[: len(a) // 2], a[len(a) // 2 :]
            if idx.size and (idx.min() < 0 or idx.max() >= size):
                raise ValueError("window accumulator holds a cell index outside the forest")
            np.add.at(out, idx, val)
    if cells:
        idx = np.fromiter((int(k) for k, _ in cells), dtype=np.int64, count=len(cells))
        val = np.fromiter((int(v) for _, v in cells), dtype=np.int64, count=len(cells))
        if idx.min() < 0 or idx.max() >= out.size:
            raise ValueError("window accumulator holds a cell index outside the forest")
        np.add.at(out, idx, val)
    return out.reshape(shape)
