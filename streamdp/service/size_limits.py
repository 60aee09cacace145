"""How large a model's values in Redis may grow: the server's largest value, and the count cells and blob
sizes a model may have within it.

A model is refused at creation when its spec or any release it will publish could exceed what the server
accepts, so that no release fails later for its size.
"""

from __future__ import annotations

from typing import Any

import redis

from streamdp.forest.model import PrivateForest
from streamdp.records.schema import Schema

__all__ = ["DEFAULT_BULK_LIMIT", "server_value_limit", "blob_max_cells", "grown_blob_bound"]

#: Redis's default ``proto-max-bulk-len``: the largest value (one argument) the server accepts.
DEFAULT_BULK_LIMIT = 512 << 20
#: Bytes of a model blob per node of a tree's structure (feature <i4, threshold <f8, child <i4, leaf <i4).
_NODE_BYTES = 20
#: Bytes a grown release (``release="grow"``) adds per node: its noise variance (<f8, ``node_variance``).
_GROWN_NODE_BYTES = 8


def server_value_limit(r: Any) -> int:
    """The largest value the server accepts: ``proto-max-bulk-len`` by CONFIG GET where permitted, else 512 MiB."""
    try:
        got = r.config_get("proto-max-bulk-len")
        v = got.get("proto-max-bulk-len", got.get(b"proto-max-bulk-len")) if isinstance(got, dict) else None
        return int(v) if v is not None and int(v) > 0 else DEFAULT_BULK_LIMIT
    except (redis.RedisError, ValueError, TypeError):  # CONFIG refused by the ACL, or not a number
        return DEFAULT_BULK_LIMIT


def blob_max_cells(
    schema: Schema, n_trees: int, limit: int, grows: bool = False, prior_trees: int = 1, count_copies: int = 1
) -> int:
    """Most count cells (trees x leaves x classes) a model may have so that every value it stores in Redis
    stays within ``limit`` bytes.

    Its spec holds the structure (a fresh model's zero counts travel as their shape alone), each release
    its counts; a grown release (``grows``) holds both and a noise variance per node. A tree of L leaves
    has at most 2L - 1 nodes, and every row of these arrays (the ``n_trees`` trees and the
    ``prior_trees`` stumps, each padded to the widest tree) takes as much, so per leaf and row the
    largest value takes ``max(2 * 20, 8 * classes * count_copies)`` bytes (``8 * classes + 2 * (20 +
    8)`` grown; ``count_copies``: counts-sized arrays in one value, ``TREE_STATE_COPIES`` for ``release="tree"``,
    whose state holds its open sums, its estimates and its carry), plus the schema (bounded here by its
    JSON size and 64 KiB of slack). The structure drawer refuses,
    level by level, a tree with more leaves than ``max_cells / (n_trees * classes)`` before building
    that level.

    >>> from streamdp.records.datasets import load_schema
    >>> adult = load_schema("adult")
    >>> blob_max_cells(adult, 10, 512 << 20), blob_max_cells(adult, 10, 512 << 20, grows=True)
    (24400120, 13555620)
    """
    c = schema.n_classes
    room = limit - len(schema.to_json()) - (64 << 10)
    per_leaf = 8 * c + 2 * (_NODE_BYTES + _GROWN_NODE_BYTES) if grows else max(8 * c * count_copies, 2 * _NODE_BYTES)
    leaves = max(0, room // ((n_trees + prior_trees) * per_leaf))
    return int(leaves * n_trees * c)


def grown_blob_bound(forest: PrivateForest, spec_bytes: int) -> int:
    """The largest blob a ``release="grow"`` model publishes, from its drawn forest's blob size.

    A grown release's trees are prunings of the drawn ones (never past their leaves), so its
    structure takes at most the drawn blob's bytes, and its counts at most the drawn counts' (which
    the drawn blob, all zeros, holds as their shape alone: ``blob.pack_array(fill_ok=True)``); it
    adds a noise variance per node (:attr:`PrivateForest.node_variance`, ``(trees, max nodes)``
    float64), one per tree (a msgpack list: 9 bytes a float) and version numbers, with 4 KiB of
    slack for the rest (a test grows forests fully, every level, and checks it).
    """
    s = forest.structure
    return spec_bytes + forest.counts.nbytes + _GROWN_NODE_BYTES * s.feature.size + 9 * s.n_trees + (4 << 10)
