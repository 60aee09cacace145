"""The published model format: the one owner of how counts travel as bytes.

A model's noisy counts are stored (``priv:state``) and published
(``pub:model`` field ``counts``) as raw little-endian arrays: ``<i8`` for the
integer mechanisms, ``<f8`` for ``laplace``. Consumers that already hold a
model's validated structure rebuild a forest from those bytes and the
published ``version``/``releases`` (:meth:`PrivateForest.with_counts`).

A new model's counts are all zero: ``model create`` stores them (in ``priv:state`` and ``pub:model``) as
:data:`ZERO_COUNTS`, no bytes, which every reader takes for zeros of the forest's shape: no counts-sized
array of zeros in either key.

>>> import numpy as np
>>> counts_dtype("geometric"), counts_dtype("laplace")
('<i8', '<f8')
>>> counts_to_bytes(np.array([1, 2], dtype=np.int64))
b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\x00\\x00\\x00\\x00\\x00\\x00'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamdp import blob
from streamdp.forest.model import PrivateForest

__all__ = [
    "KEEP_BYTES",
    "ZERO_COUNTS",
    "versions_kept",
    "counts_dtype",
    "counts_to_bytes",
    "counts_view",
    "counts_from_bytes",
    "forest_from_counts",
    "published_fields",
    "RELEASE_FORMAT",
    "release_record",
    "release_record_parts",
    "release_record_around_counts",
    "forest_from_record",
    "forest_from_doc",
    "is_release_record",
]

#: The stored counts of a forest whose counts are all zero (a new model's version 0): no bytes.
ZERO_COUNTS = b""

#: A retained version under the batch, window and tree policies (``pub:v:<N>``, N >= 1): the release's counts and
#: numbers without the structure, which the model's spec carries.
RELEASE_FORMAT = "streamdp.release"


#: Bytes the retained versions of one model (``pub:v:<N>``) may take together, by default
#: (``WorkerConfig.keep_bytes``): a bound in bytes, not versions, since one version of a large model is
#: tens of MiB of counts.
KEEP_BYTES = 256 << 20


def versions_kept(keep_versions: int, version_bytes: int, keep_bytes: int = KEEP_BYTES) -> int:
    """How many published versions a model retains: ``keep_versions`` (0: every one), but no more than fit in
    ``keep_bytes`` (0: no bound) at ``version_bytes`` each, and at least one. Public: the model's shape decides,
    never its data.

    >>> versions_kept(20, 1 << 20), versions_kept(20, 84 << 20), versions_kept(0, 84 << 20), versions_kept(5, 1 << 40)
    (20, 3, 3, 1)
    """
    if keep_bytes <= 0:
        return keep_versions
    most = max(1, keep_bytes // max(1, version_bytes))
    return most if keep_versions == 0 else min(keep_versions, most)


def counts_dtype(mechanism: str) -> str:
    """The stored dtype of a forest's counts (little-endian)."""
    return "<f8" if mechanism == "laplace" else "<i8"


def counts_to_bytes(counts: np.ndarray) -> bytes:
    """Counts as little-endian bytes (whatever the machine's byte order)."""
    return np.ascontiguousarray(counts, dtype=counts.dtype.newbyteorder("<")).tobytes()


def counts_view(counts: np.ndarray) -> memoryview:
    """The bytes :func:`counts_to_bytes` gives, as a view of ``counts``'s memory where it already is
    little-endian and contiguous (no counts-sized copy; redis-py sends a memoryview as it is).
    Use it right away, while ``counts`` is unchanged.

    >>> import numpy as np
    >>> a = np.array([1, 2], dtype=np.int64)
    >>> bytes(counts_view(a)) == counts_to_bytes(a)
    True
    """
    a = np.ascontiguousarray(counts, dtype=counts.dtype.newbyteorder("<"))
    return memoryview(a.reshape(-1).view(np.uint8))


def counts_from_bytes(data: bytes, forest: PrivateForest, *, finite: bool = False, copy: bool = True) -> np.ndarray:
    """Stored bytes back to ``forest``'s counts (native byte order); :class:`ValueError` if they do not fit.

    ``finite``: also refuse NaN or infinite cells (counts from an untrusted reader's point of view).
    ``copy=False``: a read-only view of ``data`` where its byte order is the machine's (no counts-sized copy;
    :meth:`PrivateForest.merge` copies such counts before it adds to them).
    :data:`ZERO_COUNTS` gives zeros of the forest's shape.

    >>> from streamdp.records.datasets import load
    >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, seed=1)
    >>> counts_from_bytes(ZERO_COUNTS, f).shape == f.shape, bool(counts_from_bytes(ZERO_COUNTS, f).any())
    (True, False)
    """
    if not len(data):
        return np.zeros(forest.shape, np.dtype(counts_dtype(forest.mechanism)).newbyteorder("="))
    arr = _raw_counts(data, forest)
    if arr is None:
        need = np.dtype(counts_dtype(forest.mechanism)).itemsize * int(np.prod(forest.shape))
        raise ValueError(f"stored counts have {len(data)} bytes, the forest {forest.shape} needs {need}")
    dt = arr.dtype
    if finite and dt.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError("stored counts contain NaN or infinite values")
    return arr if not copy and dt.isnative else arr.astype(dt.newbyteorder("="))


def _raw_counts(data: bytes, forest: PrivateForest) -> np.ndarray | None:
    """``data`` as ``forest``'s counts in their stored dtype (a read-only view), None if the length does not fit."""
    dt = np.dtype(counts_dtype(forest.mechanism))
    if len(data) != dt.itemsize * int(np.prod(forest.shape)):
        return None
    return np.frombuffer(data, dtype=dt).reshape(forest.shape)


def forest_from_counts(
    spec: PrivateForest, data: bytes, version: Any, releases: Any, noise_variance: Any = None
) -> PrivateForest:
    """The forest of ``spec`` holding published counts bytes at ``version`` (validated; :class:`ValueError`).
    Its counts view ``data`` (read-only; no copy on a little-endian machine).

    ``noise_variance``: the published ``noise_variance`` field (a number as bytes or str), when the release
    policy's variance is not ``releases`` times one release's (the binary tree mechanism).
    """
    variance = None if noise_variance is None else float(noise_variance)
    if not len(data) and int(version) != 0:  # (only a new model's version 0 stores its zero counts as no bytes)
        raise ValueError(f"published version {int(version)} has no counts: only version 0 may store none")
    return spec.with_counts(
        counts_from_bytes(data, spec, finite=True, copy=False),
        version=int(version),
        n_releases=int(releases),
        noise_variance=variance,
    )


def published_fields(
    forest: PrivateForest,
    *,
    grown: bytes | None = None,
    noise_variance: float | None = None,
    view: bool = False,
    zero: bool = False,
) -> dict[str, Any]:
    """The ``pub:model`` fields of a stream model's release: version, releases and counts bytes.

    No model blob: a stream model's structure is its spec's (``spec`` key, written once at creation),
    so a consumer rebuilds the forest from the spec and these counts (:func:`forest_from_counts`).
    Why: re-sending the structure with every release would cost memory and time on every release
    (``benchmarks/results/worker_memory.md``); a ``grow`` release, whose structure changes, publishes its blob instead
    (``grown``: field ``blob``, no ``counts``), as batch jobs do. ``noise_variance``: a window release's
    (field ``noise_variance``); ``view``: the counts as a view of the forest's array, no copy
    (:func:`counts_view`: send it right away); ``zero``: the caller knows the counts are all zero (a new
    model's), stored as :data:`ZERO_COUNTS`. The batch commit script writes the same fields
    (:data:`.commit.COMMIT_LUA`, the counts once for the state and ``pub:model``).

    >>> from streamdp.records.datasets import load
    >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, seed=1)
    >>> sorted(published_fields(f)), sorted(published_fields(f, grown=b"...", noise_variance=2.0))
    (['counts', 'releases', 'version'], ['blob', 'noise_variance', 'releases', 'version'])
    >>> published_fields(f, zero=True)["counts"]
    b''
    """
    fields: dict[str, Any] = {"version": forest.version, "releases": forest.n_releases}
    if grown is not None:
        fields["blob"] = grown
    else:
        counts = forest.counts
        fields["counts"] = ZERO_COUNTS if zero else counts_view(counts) if view else counts_to_bytes(counts)
    if noise_variance is not None:
        fields["noise_variance"] = repr(float(noise_variance))
    return fields


def release_record(forest: PrivateForest, fill_ok: bool = False) -> bytes:
    """A retained version's bytes: version, releases, noise variance and counts (no schema, no structure).

    >>> from streamdp.records.datasets import load
    >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, seed=1)
    >>> g = forest_from_record(f, release_record(f.with_counts(f.counts + f.real_cells, version=3, n_releases=2)))
    >>> (g.version, g.n_releases, int(g.counts[0, 0, 0]))
    (3, 2, 1)

    ``fill_ok``: constant counts (a new model's zeros, its version 0) as their shape and value alone
    (:func:`.blob.pack_array`).
    """
    return b"".join(release_record_parts(forest, fill_ok))


def release_record_parts(forest: PrivateForest, fill_ok: bool = False) -> list:
    """:func:`release_record`'s bytes in pieces (:func:`.blob.packb_parts`): the counts' piece views the
    forest's array, so a writer that stores them one after the other (SET, then APPEND) copies no counts.

    >>> from streamdp.records.datasets import load
    >>> f = PrivateForest.create(load("congressional-voting").schema, n_trees=2, height=2, seed=1)
    >>> b"".join(release_record_parts(f)) == release_record(f)
    True
    """
    nv = forest.noise_variance
    return blob.packb_parts(
        {
            "format": RELEASE_FORMAT,
            "format_version": 1,
            "version": forest.version,
            "n_releases": forest.n_releases,
            "noise_variance": [float(v) for v in nv],
            "counts": blob.pack_array(forest.counts, fill_ok=fill_ok),
        }
    )


def release_record_around_counts(forest: PrivateForest) -> tuple[bytes, bytes] | None:
    """The :func:`release_record` bytes before and after its counts, whose bytes are :func:`counts_view`'s:
    ``head + counts + tail`` is the record, so a writer holding the counts already (the batch commit's
    script) stores it without a second copy of them. None for counts too small to be a piece of their own.

    >>> from streamdp.records.datasets import load
    >>> f = PrivateForest.create(load("adult").schema, n_trees=10, height=4, seed=1)
    >>> head, tail = release_record_around_counts(f)
    >>> head + bytes(counts_view(f.counts)) + tail == release_record(f)
    True
    """
    parts = release_record_parts(forest)  # head, the counts' bin32 header, the counts (a view), tail
    if len(parts) != 4 or memoryview(parts[2]).nbytes != forest.counts.nbytes:  # the counts: the one big array
        return None
    return bytes(parts[0]) + bytes(parts[1]), bytes(parts[3])


def forest_from_record(spec: PrivateForest, data: bytes) -> PrivateForest:
    """The forest of ``spec`` holding a :func:`release_record` (validated; :class:`ValueError`)."""
    return forest_from_doc(spec, blob.loads(data, RELEASE_FORMAT, 1), RELEASE_FORMAT)


def forest_from_doc(spec: PrivateForest, doc: dict, fmt: str) -> PrivateForest:
    """The forest of ``spec`` holding a decoded document's counts, version, releases and noise variance
    (a model blob of the same structure, or a :func:`release_record`); :class:`ValueError` if they do not fit."""
    counts = blob.unpack_array(doc.get("counts"), "counts", counts_dtype(spec.mechanism), ndim=3, fill_shape=spec.shape)
    node_var = doc.get("node_variance")  # a grown model's blob (streamdp.forest.growth)
    return spec.with_counts(
        counts.copy(),
        version=blob.field(doc, "version", int, fmt),
        n_releases=blob.field(doc, "n_releases", int, fmt),
        noise_variance=doc.get("noise_variance"),
        node_variance=None if node_var is None else blob.unpack_array(node_var, "node_variance", "<f8", ndim=2),
    )


def is_release_record(data: bytes) -> bool:
    """Whether stored bytes are a :func:`release_record` (its format tag leads the msgpack map), not a model blob."""
    return RELEASE_FORMAT.encode() in bytes(data[:48])
