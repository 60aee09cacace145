"""The bounds the private data layer enforces: records per person (a privacy id) and records per score.

:func:`ids_of` finds one privacy id per record (the layer then keeps at most ``K`` per id:
:func:`streamdp.privacy.contribution.bound_contributions`); :func:`enforced_sensitivity` is the sensitivity an
exponential mechanism uses under a record bound (``max_records``; the proof in
:mod:`streamdp.learners.private_data`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from streamdp.records.coding import is_frame
from streamdp.records.schema import Schema
from streamdp.validation import check_integer

__all__ = ["enforced_sensitivity", "ids_of", "unit_name"]


def unit_name(privacy_id: Any) -> str | None:
    """The name a ledger records as the unit of ``privacy_id``: a column's name, or ``NAME`` of ``{NAME: ids}``;
    None without one. :class:`ValueError` for bare ids: the ledger must tell spends over one kind of id (people)
    from another (devices), which it adds up only within one name.

    >>> unit_name("user"), unit_name({"device": [1, 2]}), unit_name(None)
    ('user', 'device', None)
    """
    if privacy_id is None or isinstance(privacy_id, str):
        return privacy_id
    if isinstance(privacy_id, Mapping) and len(privacy_id) == 1 and isinstance(name := next(iter(privacy_id)), str):
        return name
    raise ValueError(
        "privacy ids given as values need a name for the ledger's unit: privacy_id={NAME: ids}, NAME the kind of "
        "id they are (e.g. 'person', 'device'), as a column's name would be; spends are added up per name"
    )


def ids_of(schema: Schema, X: Any, privacy_id: Any) -> np.ndarray:
    """One privacy id per record: ``privacy_id`` itself (or the ids of ``{NAME: ids}``), or the column of ``X`` it
    names (never an attribute)."""
    if isinstance(privacy_id, Mapping) and len(privacy_id) == 1:
        privacy_id = next(iter(privacy_id.values()))
    if not isinstance(privacy_id, str):
        ids = np.empty(len(privacy_id), dtype=object)
        ids[:] = list(privacy_id)
        return ids
    if privacy_id in schema.names or privacy_id == schema.label.name:
        raise ValueError(
            f"privacy_id {privacy_id!r} is a schema attribute or the label: the id decides whose records are "
            "kept and must not be learned from; keep it out of the schema"
        )
    if is_frame(X):
        if privacy_id not in X.columns:
            raise ValueError(f"privacy_id {privacy_id!r} is not a column of X (its columns: {list(X.columns)})")
        return np.asarray(X[privacy_id], dtype=object)
    rows = X if isinstance(X, list) else None
    if rows is None or not all(isinstance(r, dict) for r in rows):
        raise ValueError(
            f"privacy_id={privacy_id!r} names a column: X must be records (dicts) or a data frame holding it; "
            "with an array, pass the ids themselves (privacy_id=[...])"
        )
    ids = np.empty(len(rows), dtype=object)
    ids[:] = [r.get(privacy_id) for r in rows]
    return ids


def enforced_sensitivity(sensitivity: float | Callable[[float], float], max_records: int | None) -> float:
    """The sensitivity an exponential mechanism uses: ``S`` without a record bound, ``2 S(max_records)`` with one
    (the one rule: a learner reports what this gives as its ``sensitivity_``).

    >>> enforced_sensitivity(2.0, None), enforced_sensitivity(lambda n: 1.0 + 1.0 / n, 4)
    (2.0, 2.5)
    """
    if max_records is not None:
        check_integer(max_records, "max_records")
    s = sensitivity(math.inf if max_records is None else max_records) if callable(sensitivity) else sensitivity
    if not (isinstance(s, (int, float)) and math.isfinite(s) and s > 0):
        raise ValueError(
            f"sensitivity must be a finite number > 0, got {s!r}"
            + ("; this score needs max_records (a record bound)" if max_records is None else "")
        )
    return float(s) * (1 if max_records is None else 2)
