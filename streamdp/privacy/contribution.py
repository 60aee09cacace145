"""The unit of privacy: bound each person's records to at most ``K`` before any query (as PipelineDP does).

A *privacy id* names whose record a record is (a user, a customer, a device). Differential privacy per
record protects one record; a person with many records is protected only as a group. Declaring the id
and a bound ``K`` (``max_records_per_id``) makes the person the unit:

1. :func:`bound_contributions` keeps, for every id, a uniform random sample of at most ``K`` of its
   records (independent uniform priorities from the secure source; each id's ``K`` smallest kept), and
   drops the rest before anything is counted;
2. every query then runs with its noise calibrated to sensitivity ``K``: a mechanism charged ``epsilon``
   draws its noise at ``epsilon / K`` per record (:func:`per_record_epsilon`).

Proof sketch (``epsilon``-DP per person). Let ``D`` and ``D'`` differ in all the records of one person
``p``. Couple the samplings by giving every record of every other id the same priority in both: their
kept records are then identical, and the bounded datasets differ only in ``p``'s kept records, at most
``K`` of them. A fit whose every query is ``epsilon_i / K``-DP per record is ``(sum epsilon_i) / K``-DP per
record (the same composition, parallel and sequential, as without ids), hence ``sum epsilon_i``-DP for
any group of ``K`` records (group privacy of pure DP: ``K`` additions or removals, each costing
``epsilon / K``). The sampling is a mixture over priorities of such mechanisms, each ``epsilon``-DP on the
coupled pair, so the whole is ``epsilon``-DP per person. Calibrating to sensitivity ``K`` is the same thing
said per query: one person moves a count by at most ``K``, and geometric noise at ``epsilon / K`` is
geometric noise of scale ``K / epsilon``. This holds for pure DP only: an ``(epsilon, delta)`` mechanism
is not made per-person this way (its delta grows with ``K``), and is refused with an id.

The id column is never an attribute: it decides which records are kept and nothing else, and it is
never released, logged, or stored beside the model.

>>> import numpy as np
>>> from streamdp.privacy.secure_random import SecureRandom
>>> ids = np.array(["ann", "ann", "ann", "bob", "cy", "cy"])
>>> kept = bound_contributions(ids, 2, SecureRandom())
>>> sorted(np.unique(ids[kept], return_counts=True)[1].tolist())
[1, 2, 2]
>>> per_record_epsilon(1.0, 4)
0.25
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamdp.privacy.secure_random import SecureRandom
from streamdp.validation import check_integer

__all__ = ["MAX_RECORDS_PER_ID", "bound_contributions", "check_unit", "id_codes", "per_record_epsilon"]

#: The largest ``max_records_per_id`` accepted: the noise grows with ``K`` (at ``K`` = 10**6 a count's noise
#: has scale 10**6 / epsilon), so a larger bound releases nothing useful.
MAX_RECORDS_PER_ID = 10**6


def check_unit(privacy_id: Any, max_records_per_id: Any) -> int:
    """The records per unit, ``K`` (1 without a privacy id); :class:`ValueError` when only one is given or K is
    not a whole number in ``[1, MAX_RECORDS_PER_ID]``.

    >>> check_unit(None, None), check_unit("user", 5)
    (1, 5)
    """
    if privacy_id is None and max_records_per_id is None:
        return 1
    if privacy_id is None:
        raise ValueError("max_records_per_id needs privacy_id (which column, or ids, names each record's person)")
    if max_records_per_id is None:
        raise ValueError(
            "privacy_id needs max_records_per_id (K: at most K records of one person are used; the noise is "
            "scaled to K)"
        )
    return check_integer(max_records_per_id, "max_records_per_id", low=1, high=MAX_RECORDS_PER_ID)


def id_codes(ids: Any, n: int | None = None) -> np.ndarray:
    """Dense integer codes of privacy ids (equal ids, equal codes); :class:`ValueError` naming the first record
    without an id (None or NaN) or when there are not ``n`` ids.

    Any hashable values serve as ids (strings, bytes, numbers); they are compared, never decoded or printed.
    """
    import pandas as pd

    arr = (
        ids
        if isinstance(ids, np.ndarray)
        else np.asarray(list(ids) if not hasattr(ids, "__len__") else ids, dtype=object)
    )
    if arr.ndim != 1:
        raise ValueError(f"privacy ids must be one per record (1-D), got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"privacy_id has {arr.shape[0]} ids for {n} records")
    try:
        codes, _ = pd.factorize(arr, use_na_sentinel=True)
    except TypeError as e:
        raise ValueError(f"privacy ids must be hashable values (strings, bytes, numbers): {type(e).__name__}") from None
    missing = np.flatnonzero(codes < 0)
    if missing.size:
        raise ValueError(f"record {int(missing[0])} (0-based) has no privacy id (None or NaN): every record needs one")
    return np.asarray(codes, dtype=np.int64)


def bound_contributions(ids: Any, max_records_per_id: int, rng: SecureRandom) -> np.ndarray:
    """Positions (ascending) of a uniform random sample of at most ``max_records_per_id`` records per id.

    Each record draws an independent uniform priority from ``rng`` (the secure source); each id keeps its
    ``K`` records of smallest priority. Raises as :func:`id_codes`.
    """
    k = check_integer(max_records_per_id, "max_records_per_id", low=1, high=MAX_RECORDS_PER_ID)
    codes = id_codes(ids)
    n = codes.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((rng.uniform(n), codes))
    grouped = codes[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.sort(order[rank < k])


def per_record_epsilon(epsilon: float, records_per_unit: int) -> float:
    """The epsilon a query's noise is drawn at so that it costs ``epsilon`` per unit of ``records_per_unit``
    records (the module docstring's proof)."""
    return float(epsilon) / records_per_unit
