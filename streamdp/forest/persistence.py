"""A forest's blob: the self-describing msgpack document :meth:`PrivateForest.to_bytes` writes and
:meth:`PrivateForest.from_bytes` reads.

The blob holds the schema, the parameters, the privacy facts, the structure, the released counts and
their noise variances: everything a reader needs and nothing the noise could be rebuilt from (no seed).
Reading it refuses anything malformed with :class:`streamdp.blob.BlobError`.

Format version 2 stores the structure compactly (:func:`compact_structure`): each tree's nodes without the
padding to the largest tree, every integer array in the narrowest dtype that holds it exactly, and thresholds
only where a node splits on a numeric attribute. Version 3 adds the breadth-first layout
(:mod:`streamdp.forest.layout`): where the nodes are in the canonical order every structure is built in, only
what each node tests and the numeric split points are stored (first children and leaf numbers follow from
them), and the reader checks the whole forest in a few array passes instead of a walk per tree. A structure
in another order keeps the compact layout. Version 1 and 2 blobs are still read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from streamdp import blob
from streamdp.forest.first_release import released_variance
from streamdp.forest.layout import bfs_fields
from streamdp.forest.layout import structure_arrays as bfs_arrays
from streamdp.forest.structure import ForestStructure
from streamdp.records.schema import Schema

__all__ = ["FORMAT", "FORMAT_VERSION", "READ_VERSIONS", "loads", "to_bytes", "from_doc", "compact_structure"]

FORMAT = "streamdp.forest"
#: The version written; :data:`READ_VERSIONS` are read.
FORMAT_VERSION = 3
READ_VERSIONS = (1, 2, 3)

F = TypeVar("F")


def to_bytes(forest: Any) -> bytes:
    """``forest``'s blob (a :class:`~streamdp.forest.model.PrivateForest`; :meth:`PrivateForest.to_bytes`)."""
    return blob.dumps(
        FORMAT,
        FORMAT_VERSION,
        {
            "schema": forest.schema.to_dict(),
            "params": {
                "n_trees": forest.n_trees,
                "height": forest.height,
                "mechanism": forest.mechanism,
                "k": forest.k,
                "beta": forest.beta,
                "vote": forest.vote,
                "budget": forest.budget,
                "prior_trees": forest.prior_trees,
            },
            "privacy": {
                "epsilon": forest.epsilon,
                "delta": forest.delta,
                "private": forest.private,
                "threshold_share": forest.threshold_share,
                "threshold_spent": forest.threshold_spent,
            },
            # an all-categorical forest's thresholds (all +inf) and a fresh model's counts: shape and value alone
            "structure": compact_structure(forest.structure, forest.schema),
            "counts": blob.pack_array(forest._counts, fill_ok=True),
            "version": forest.version,
            "n_releases": forest.n_releases,
            "noise_variance": None if forest._noise_variance is None else [float(v) for v in forest._noise_variance],
            "node_variance": None if forest._node_variance is None else blob.pack_array(forest._node_variance),
            "created": time.time(),
        },
    )


def loads(data: Any) -> dict:
    """A forest blob decoded (any of :data:`READ_VERSIONS`); :class:`streamdp.blob.BlobError` otherwise."""
    return blob.loads(data, FORMAT, READ_VERSIONS)


def compact_structure(structure: ForestStructure, schema: Schema, bfs: bool = True) -> dict:
    """The blob fields of ``structure`` without its padding (format version 2).

    ``n_nodes``: each tree's nodes (a prefix of its row; the rest is padding: a leaf-less node testing the
    zero column, pointing to itself, threshold +inf); ``feature``, ``child`` and ``leaf``: the trees' nodes
    one tree after the other, each in the narrowest integer dtype that holds it exactly; ``threshold``: the
    split points of the inner nodes on numeric attributes, in the same order (every other node's is +inf);
    ``n_leaves``. A structure whose padding or thresholds are not of that form keeps its padded arrays
    (``layout`` ``"padded"``, as version 1). A structure in the canonical breadth-first order gets the
    ``"bfs"`` layout (format version 3, :func:`streamdp.forest.layout.bfs_fields`) instead, unless ``bfs`` is
    False.
    """
    fields = bfs_fields(structure, schema) if bfs else None
    if fields is not None:
        return fields
    m = schema.n_attributes
    feature, threshold, child, leaf = structure.feature, structure.threshold, structure.child, structure.leaf
    n_trees, width = feature.shape
    real = (leaf >= 0) | (feature != m)
    n_nodes = width - np.argmax(real[:, ::-1], axis=1)
    n_nodes[~real.any(axis=1)] = 1
    keep = np.arange(width)[None, :] < n_nodes[:, None]
    numeric = np.append(~np.asarray(schema.is_categorical, dtype=bool), False)[feature] & (leaf < 0)
    pad = ~keep
    canonical = (
        bool(np.all(feature[pad] == m))
        and bool(np.all(leaf[pad] == -1))
        and bool(np.all(child[pad] == np.broadcast_to(np.arange(width), child.shape)[pad]))
        and bool(np.all(np.isposinf(threshold[~numeric])))
    )
    if not canonical:
        padded = {
            name: blob.pack_array(blob.narrowest(a) if a.dtype.kind in "iu" else a, fill_ok=name == "threshold")
            for name, a in structure.arrays().items()
        }
        return {"layout": "padded", **padded}
    return {
        "layout": "compact",
        "n_nodes": blob.pack_array(blob.narrowest(n_nodes)),
        "feature": blob.pack_array(blob.narrowest(feature[keep])),
        "child": blob.pack_array(blob.narrowest(child[keep])),
        "leaf": blob.pack_array(blob.narrowest(leaf[keep])),
        "threshold": blob.pack_array(np.ascontiguousarray(threshold[numeric], dtype=np.float64)),
        "n_leaves": blob.pack_array(blob.narrowest(structure.n_leaves)),
    }


def _structure_arrays(sdoc: dict, schema: Schema) -> dict[str, np.ndarray]:
    """The padded node arrays of a blob's ``structure`` field (either layout), for ``ForestStructure.from_arrays``
    to validate."""
    if sdoc.get("layout", "padded") == "padded":
        arrays = {name: blob.unpack_array(sdoc.get(name), name) for name in ("feature", "child", "leaf", "n_leaves")}
        arrays["threshold"] = blob.unpack_array(
            sdoc.get("threshold"), "threshold", fill_shape=np.shape(arrays["feature"])
        )
        return arrays
    if sdoc.get("layout") != "compact":
        raise blob.BlobError(f"{FORMAT}: unknown structure layout {sdoc.get('layout')!r}")
    n_nodes = blob.unpack_array(sdoc.get("n_nodes"), "n_nodes", ndim=1)
    flat = {name: blob.unpack_array(sdoc.get(name), name, ndim=1) for name in ("feature", "child", "leaf")}
    n_leaves = blob.unpack_array(sdoc.get("n_leaves"), "n_leaves", ndim=1)
    for name, a in {"n_nodes": n_nodes, **flat, "n_leaves": n_leaves}.items():
        if a.dtype.kind not in "iu":
            raise blob.BlobError(f"{FORMAT}: structure '{name}' must hold integers, got dtype {a.dtype}")
    if not n_nodes.size or int(n_nodes.min()) < 1:
        raise blob.BlobError(f"{FORMAT}: structure 'n_nodes' must give at least one node a tree")
    total, width = int(n_nodes.astype(np.int64).sum()), int(n_nodes.max())
    if n_nodes.size * width * 8 > 1 << 30:
        raise blob.BlobError(f"{FORMAT}: structure of {n_nodes.size} trees of {width} nodes is too large")
    if any(a.size != total for a in flat.values()):
        raise blob.BlobError(f"{FORMAT}: structure arrays must hold {total} nodes, the sum of 'n_nodes'")
    m = schema.n_attributes
    if total and (int(flat["feature"].min()) < 0 or int(flat["feature"].max()) > m):
        raise blob.BlobError(f"{FORMAT}: a node tests an attribute outside the schema")
    for name in ("child", "leaf"):
        if total and (int(flat[name].min()) < -(2**31) or int(flat[name].max()) >= 2**31):
            raise blob.BlobError(f"{FORMAT}: structure '{name}' holds values outside the int32 range")
    shape = (n_nodes.size, width)
    keep = np.arange(width)[None, :] < n_nodes[:, None]
    feature = np.full(shape, m, dtype=np.int32)
    feature[keep] = flat["feature"]
    child = np.tile(np.arange(width, dtype=np.int32), (shape[0], 1))
    child[keep] = flat["child"]
    leaf = np.full(shape, -1, dtype=np.int32)
    leaf[keep] = flat["leaf"]
    numeric = np.append(~np.asarray(schema.is_categorical, dtype=bool), False)[feature] & (leaf < 0)
    thr = blob.unpack_array(sdoc.get("threshold"), "threshold", "<f8", ndim=1)
    if thr.size != int(numeric.sum()):
        raise blob.BlobError(f"{FORMAT}: {thr.size} thresholds for {int(numeric.sum())} numeric splits")
    threshold = np.full(shape, np.inf)
    threshold[numeric] = thr
    for a in (feature, threshold, child, leaf):  # read-only: the structure takes them as they are, no copy
        a.flags.writeable = False
    return {"feature": feature, "threshold": threshold, "child": child, "leaf": leaf, "n_leaves": n_leaves}


def from_doc(cls: Callable[..., F], doc: dict) -> F:
    """The forest of class ``cls`` a blob decoded by :func:`loads` holds
    (:meth:`PrivateForest.from_doc`); raises :class:`streamdp.blob.BlobError` on anything malformed."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("format_version") not in READ_VERSIONS:
        raise blob.BlobError(f"not a decoded {FORMAT} blob (use streamdp.forest.persistence.loads(data))")
    try:
        schema = Schema.from_dict(blob.field(doc, "schema", dict, FORMAT))
        params = blob.field(doc, "params", dict, FORMAT)
        privacy = blob.field(doc, "privacy", dict, FORMAT)
        sdoc = blob.field(doc, "structure", dict, FORMAT)
        height = blob.field(params, "height", int, FORMAT)
        if doc["format_version"] >= 3 and sdoc.get("layout") == "bfs":  # checked in full as it is rebuilt
            structure = ForestStructure(**bfs_arrays(sdoc, schema, height), height=height)
        else:  # version 1: the padded arrays, with no layout field
            arrays = _structure_arrays(sdoc if doc["format_version"] >= 2 else {**sdoc, "layout": "padded"}, schema)
            structure = ForestStructure.from_arrays(arrays, height, schema)
        prior_trees = blob.field(params, "prior_trees", int, FORMAT) if "prior_trees" in params else 0  # older blobs
        if prior_trees < 0 or blob.field(params, "n_trees", int, FORMAT) + prior_trees != structure.n_trees:
            raise blob.BlobError(f"{FORMAT}: n_trees + prior_trees does not match the structure")
        mechanism = blob.field(params, "mechanism", str, FORMAT)
        counts = blob.unpack_array(  # a spec's all-zero counts: their shape alone, which must be the structure's
            doc.get("counts"),
            "counts",
            "<f8" if mechanism == "laplace" else "<i8",
            ndim=3,
            fill_shape=(structure.n_trees, structure.max_leaves, schema.n_classes),
        )
        version = blob.field(doc, "version", int, FORMAT)
        n_releases = blob.field(doc, "n_releases", int, FORMAT)
        if version < 0 or n_releases < 0:
            raise blob.BlobError(f"{FORMAT}: version and n_releases must be non-negative")
        forest: Any = cls(
            schema,
            structure,
            epsilon=blob.field(privacy, "epsilon", (int, float), FORMAT),
            mechanism=mechanism,
            k=params.get("k"),
            beta=params.get("beta"),
            vote=blob.field(params, "vote", str, FORMAT),
            budget=blob.field(params, "budget", str, FORMAT),
            # an all-zero blob (a model's spec) gets fresh zeros: untouched pages, no resident copy
            counts=counts.copy() if counts.any() else np.zeros(counts.shape, counts.dtype.newbyteorder("=")),
            version=version,
            n_releases=n_releases,
            private=bool(blob.field(privacy, "private", bool, FORMAT)),
            prior_trees=prior_trees,
            noise_variance=_noise_variance(doc, params, privacy, mechanism, structure.n_trees, n_releases),
            threshold_share=privacy.get("threshold_share", 0.0),  # absent: a blob from before thresholds had a share
            threshold_spent=privacy.get("threshold_spent", 0.0),
        )
        if doc.get("node_variance") is not None:  # trees grown release by release
            forest.node_variance = blob.unpack_array(doc["node_variance"], "node_variance", "<f8", ndim=2)
    except blob.BlobError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise blob.BlobError(f"{FORMAT}: inconsistent blob ({e})") from None
    return forest


def _noise_variance(doc: dict, params: dict, privacy: dict, mechanism: str, n_trees: int, n_releases: int) -> Any:
    """The blob's noise variance; None (absent) is ``n_releases`` releases' at the forest's budget, but a blob
    from before :mod:`streamdp.forest.first_release` whose fit spent a share stored none and released every
    batch at what the share left: that variance, pinned."""
    spent = privacy.get("threshold_spent", 0.0)
    if doc.get("noise_variance") is not None or not spent or not isinstance(spent, (int, float)):
        return doc.get("noise_variance")
    eps, budget = blob.field(privacy, "epsilon", (int, float), FORMAT), blob.field(params, "budget", str, FORMAT)
    return released_variance(mechanism, eps, spent, n_trees, budget, n_releases)
