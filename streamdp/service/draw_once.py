"""Each release's noise drawn once: what a worker draws is stored before anyone uses it, and reused after.

A batch's noised counts (``release="batch"``), a window's or a tree node's
(``window``, ``tree``) and a grown window's whole release are drawn by the
first worker that needs them and stored with ``SET NX`` under a key of their
own before they are merged; a worker that finds the key uses what is stored,
so a release's noise is drawn at most once however many workers race or die
(the SIGKILL chaos tests, tests/service/test_faults.py).

>>> import fakeredis
>>> r = fakeredis.FakeRedis()
>>> stored_once(r, "k", lambda: b"first", stats_key="s", reused="n")
(b'first', True)
>>> stored_once(r, "k", lambda: b"second", stats_key="s", reused="n")
(b'first', False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from streamdp import blob
from streamdp.forest.model import PrivateForest
from streamdp.service.published import _raw_counts, counts_dtype, counts_view

__all__ = ["PENDING_TTL_S", "drawn_once", "stored_once", "noise_from_bytes"]


#: What is stored before a release (a batch's or window's noise, a grown release) expires after if the release
#: never comes (a closer that died, a model deleted meanwhile, a duplicate batch whose twin merged first): far
#: beyond any close or commit; a draw that expires unreleased is only drawn again (nothing was released from
#: it). Released noise is dropped at its merge (``WorkerConfig.delta_ttl_s``).
PENDING_TTL_S = 3600


def drawn_once(
    r: Any,
    key: str,
    draw: Callable[[], np.ndarray],
    spec: PrivateForest,
    *,
    stats_key: str,
    reused: str,
    after_draw: Callable[[], None] = lambda: None,
    after_store: Callable[[], None] = lambda: None,
    ttl_s: int = 0,
) -> np.ndarray:
    """A release's noised counts, drawn at most once: the array stored under ``key``, else ``draw()`` stored
    with ``SET NX`` before anyone uses it (when two workers race, both use the first stored one).

    The one rule behind "each release's noise is drawn once" for batches, windows and tree nodes
    (:func:`stored_once` on the array's bytes); a stored array of the wrong shape raises ``ValueError``.
    """
    dtype = spec.counts.dtype.type
    drawn: list[np.ndarray] = []

    def draw_bytes() -> memoryview:
        drawn.append(np.asarray(draw()).astype(dtype, copy=False))
        return counts_view(drawn[0])  # stored as the array's own bytes: no counts-sized copy to send it

    stored, fresh = stored_once(
        r,
        key,
        draw_bytes,
        stats_key=stats_key,
        reused=reused,
        after_draw=after_draw,
        after_store=after_store,
        ttl_s=ttl_s,
    )
    if fresh:
        return drawn[0]  # the array itself: no second decode of what was just stored
    try:
        return noise_from_bytes(stored, spec)
    except ValueError as e:
        raise ValueError(f"stored noise {key}: {e}") from None


def noise_from_bytes(data: bytes, spec: PrivateForest) -> np.ndarray:
    """A stored noised release (:func:`drawn_once`: the counts' raw little-endian bytes, or the msgpack
    document older versions stored) as ``spec``'s counts; read-only where it views ``data``
    (callers add it, never change it). :class:`ValueError` if it does not fit.

    >>> from streamdp.records.datasets import load
    >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, seed=1)
    >>> noise_from_bytes(bytes(counts_view(f.counts + 3)), f)[0, 0].tolist()
    [3, 3]
    """
    arr = _raw_counts(data, spec)
    if arr is None:
        try:
            arr = blob.unpack_array(msgpack.unpackb(data, raw=False), "noise", counts_dtype(spec.mechanism), ndim=3)
        except Exception as e:
            raise ValueError(f"{len(data)} bytes are neither the model's counts nor a stored array ({e})") from None
        if arr.shape != spec.shape:
            raise ValueError(f"shape {arr.shape}, the model {spec.shape}")
    return arr.astype(spec.counts.dtype.type, copy=False)


def stored_once(
    r: Any,
    key: str,
    draw: Callable[[], bytes],
    *,
    stats_key: str,
    reused: str,
    after_draw: Callable[[], None] = lambda: None,
    after_store: Callable[[], None] = lambda: None,
    ttl_s: int = 0,
) -> tuple[bytes, bool]:
    """The bytes stored under ``key``, else ``draw()``'s, stored with ``SET NX`` before anyone uses them (of two
    racing workers both use the first stored), and whether they are this call's draw; a reuse bumps counter
    ``reused`` in ``stats_key``. A grown window's whole release (structure and counts) is stored this way.
    ``ttl_s`` (0: none): the stored bytes expire (a release's noise that expires unpublished is only redrawn:
    nothing was released from it)."""
    stored = r.get(key)
    if stored is None:
        data = draw()
        after_draw()
        if r.set(key, data, nx=True, ex=ttl_s or None):
            after_store()
            return data, True
        stored = r.get(key)  # another worker stored it first: use that one
    r.hincrby(stats_key, reused, 1)
    return stored, False
