"""A forest's blob: the self-describing msgpack document :meth:`PrivateForest.to_bytes` writes and
:meth:`PrivateForest.from_bytes` reads.

The blob holds the schema, the parameters, the privacy facts, the structure, the released counts and
their noise variances: everything a reader needs and nothing the noise could be rebuilt from (no seed).
Reading it refuses anything malformed with :class:`streamdp.blob.BlobError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from streamdp import blob
from streamdp.forest.structure import ForestStructure
from streamdp.records.schema import Schema

__all__ = ["FORMAT", "FORMAT_VERSION", "to_bytes", "from_doc"]

FORMAT = "streamdp.forest"
FORMAT_VERSION = 1

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
            "privacy": {"epsilon": forest.epsilon, "delta": forest.delta, "private": forest.private},
            # an all-categorical forest's thresholds (all +inf) and a fresh model's counts: shape and value alone
            "structure": {
                name: blob.pack_array(a, fill_ok=name == "threshold") for name, a in forest.structure.arrays().items()
            },
            "counts": blob.pack_array(forest._counts, fill_ok=True),
            "version": forest.version,
            "n_releases": forest.n_releases,
            "noise_variance": None if forest._noise_variance is None else [float(v) for v in forest._noise_variance],
            "node_variance": None if forest._node_variance is None else blob.pack_array(forest._node_variance),
            "created": time.time(),
        },
    )


def from_doc(cls: Callable[..., F], doc: dict) -> F:
    """The forest of class ``cls`` a blob decoded by ``blob.loads(data, FORMAT, FORMAT_VERSION)`` holds
    (:meth:`PrivateForest.from_doc`); raises :class:`streamdp.blob.BlobError` on anything malformed."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("format_version") != FORMAT_VERSION:
        raise blob.BlobError(f"not a decoded {FORMAT} blob (use blob.loads(data, {FORMAT!r}, {FORMAT_VERSION}))")
    try:
        schema = Schema.from_dict(blob.field(doc, "schema", dict, FORMAT))
        params = blob.field(doc, "params", dict, FORMAT)
        privacy = blob.field(doc, "privacy", dict, FORMAT)
        sdoc = blob.field(doc, "structure", dict, FORMAT)
        arrays = {name: blob.unpack_array(sdoc.get(name), name) for name in ("feature", "child", "leaf", "n_leaves")}
        arrays["threshold"] = blob.unpack_array(
            sdoc.get("threshold"), "threshold", fill_shape=np.shape(arrays["feature"])
        )
        height = blob.field(params, "height", int, FORMAT)
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
            noise_variance=doc.get("noise_variance"),  # absent or None: n_releases * cell_variance
        )
        if doc.get("node_variance") is not None:  # trees grown release by release
            forest.node_variance = blob.unpack_array(doc["node_variance"], "node_variance", "<f8", ndim=2)
    except blob.BlobError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise blob.BlobError(f"{FORMAT}: inconsistent blob ({e})") from None
    return forest
