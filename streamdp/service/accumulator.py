"""A release window's secret accumulator: the exact tallies workers add to the open window (worker-only).

The add script (:data:`.commit.WINDOW_ADD_LUA`) stores each add's tally whole, as one field of the window's
hash ``priv:acc:<w>`` (:func:`joined_cells`); the closer reads them back into counts (:func:`acc_counts`), a
few fields at a time (:func:`read_acc_counts`), so a busy window's adds never sit in memory beside its counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ADD_FIELD", "READ_BYTES", "AccumulatorGone", "joined_cells", "acc_counts", "read_acc_counts"]

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
    out = np.zeros(int(np.prod(shape)), dtype=np.int64)
    for k, v in raw.items():
        _add_field(out, k, v)
    return out.reshape(shape)


#: The most bytes of adds :func:`read_acc_counts` asks Redis for at once (a single larger add is read alone).
READ_BYTES = 1 << 20


class AccumulatorGone(LookupError):
    """A field of the accumulator vanished while it was read: another closer released the window meanwhile."""


def read_acc_counts(
    r: Any, key: str, fields: list[bytes], shape: tuple, read_bytes: int = READ_BYTES
) -> np.ndarray | None:
    """The exact int64 counts of sealed accumulator ``key`` holding ``fields`` (its HKEYS, read with the state
    that says it is sealed), read in groups of at most ``read_bytes`` (HSTRLEN first, then one HMGET per
    group); ``None`` when it holds no field. Folding each group into the counts as it arrives keeps the
    closer's memory at the counts plus one group, where reading the whole hash held every add besides.

    A sealed accumulator no longer changes (adds go to the open window): a field that is gone was deleted by
    another closer's release of the window, and :class:`AccumulatorGone` says so (the caller looks again).

    >>> import fakeredis
    >>> r = fakeredis.FakeRedis()
    >>> _ = r.hset("acc", mapping={b"b:x": joined_cells([(np.array([1, 2]), np.array([2, 1]))]), b"1": b"5"})
    >>> read_acc_counts(r, "acc", r.hkeys("acc"), (3,)).tolist()
    [0, 7, 1]
    """
    if not fields:
        return None
    p = r.pipeline(transaction=False)
    for f in fields:
        p.hstrlen(key, f)
    sizes = p.execute()
    out = np.zeros(int(np.prod(shape)), dtype=np.int64)
    groups: list[list[bytes]] = [[]]
    held = 0
    for f, n in zip(fields, sizes):
        if groups[-1] and held + int(n) > read_bytes:
            groups.append([])
            held = 0
        groups[-1].append(f)
        held += int(n)
    for group in groups:
        values = r.hmget(key, group)
        if any(v is None for v in values):
            raise AccumulatorGone(key)
        for f, v in zip(group, values):
            _add_field(out, f, v)
        del values
    return out.reshape(shape)


def _add_field(out: np.ndarray, k: bytes, v: bytes) -> None:
    """Add accumulator field ``k`` into the flat counts ``out``: one add's :func:`joined_cells` (checked: whole
    pairs, cells in range), or a bare cell index holding a count (what earlier workers added with HINCRBY)."""
    if not bytes(k).startswith(ADD_FIELD):
        i = int(k)
        if not 0 <= i < out.size:
            raise ValueError("window accumulator holds a cell index outside the forest")
        out[i] += int(v)
        return
    if len(v) % 16:
        raise ValueError("window accumulator holds a malformed tally")
    a = np.frombuffer(v, dtype="<i8")
    idx, val = a[: len(a) // 2], a[len(a) // 2 :]
    if idx.size and (idx.min() < 0 or idx.max() >= out.size):
        raise ValueError("window accumulator holds a cell index outside the forest")
    np.add.at(out, idx, val)
