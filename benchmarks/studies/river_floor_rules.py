"""Candidate post-processing rules that keep the river classifier at its released prior (issue #33's floor).

Every rule reads released numbers and public noise variances only: the record's pooled path counts and their
variance (:meth:`ForestNodes.path_rows` summed over the random trees, what the vote pools), the classifier's
released class prior and the number of releases. Each maps the same release to predicted classes, so variants
are paired on one model (``river_heldout.py --variants``, ``stream_paths_small.py --variants``).

* ``base``: the classifier's own prediction (argmax of its probabilities).
* ``leafK``: the prior's class unless the forest's class beats it at the record's deepest pooled node by more
  than ``K`` noise sds of that margin (cell variance: the node's total variance over ``C``, the margin's twice).
* ``anyK``: the same test at any depth of the path (the largest of the depths' z-scores).
* ``rootK``: the test on the pooled depth-1 node.
* ``tieD``: the prior's class where the forest's class leads it by at most ``D`` in probability.
* ``postK``: the prior's class unless the forest's class leads it by more than ``K`` sds of a difference of two
  shares among the chain's own records (the pooled chain's final ``n``: ``sqrt((p_c + p_m) / (n + 1))``).
* ``sigK``: a global gate: the forest votes only where its released nodes show a class signal, the largest over
  depths ``d >= 1`` of ``(S_d - k_d) / sqrt(2 k_d)`` above ``K``; ``S_d`` sums over the depth's nodes and classes
  ``(y_c - t pi_c)^2`` over its variance when the class does not depend on the node (the cell noise's, and
  ``t pi_c (1 - pi_c)`` from sampling; ``pi`` the released prior, ``t`` the node's noisy total), ``k_d`` its terms.
* ``prior``: the released prior's class alone (what the forest adds, by difference).
* ``blendA``: the probabilities shrunk to the prior, ``(r p + A prior) / (r + A)`` with ``r`` the tree releases.
"""

from __future__ import annotations

import numpy as np

VARIANTS = (
    "base", "prior", "tie0.01", "tie0.02", "tie0.05", "post0.25", "post0.5", "post1",
    "leaf0.5", "leaf1", "any1", "root1", "blend1", "sig2", "sig3",
)  # fmt: skip


def pooled_paths(model, X: np.ndarray) -> np.ndarray:
    """The records' pooled path rows, ``(n, depths, C + 1)``: per depth from 1 the pooled counts, then their
    total variance (a depth no tree deepens repeats the one above)."""
    f = model.forest
    nodes = f.estimation_nodes()
    T, L = nodes.leaf_node.shape
    C = f.schema.n_classes
    leaves = f.structure.apply(X, f.schema.is_categorical)[:, :T]
    flat = leaves + np.arange(T)[None, :] * L
    rows = nodes.path_rows(flat.reshape(-1)).reshape(len(X), T, -1).sum(axis=1)
    return rows.reshape(len(X), -1, C + 1)[:, 1:, :]


def chain_records(nodes, rows: np.ndarray) -> np.ndarray:
    """The pooled chain's final records ``n`` per record (:func:`path_proba_one`'s walk, keeping ``n``)."""
    from streamdp.estimation.one_record import posterior_one

    C = rows.shape[2] - 1
    out = np.empty(len(rows))
    prior = nodes.prior.tolist()
    for i, r in enumerate(rows.tolist()):
        p, m, above = prior, float(nodes.records), float(nodes.root_var)
        prev = None
        for row in r:
            if prev is not None and row == prev:
                continue
            prev = row
            v = row[C]
            share = v / above if above > 0 else 0.0
            p, m = posterior_one(row[:C], v, p, m, share)
            above = v
        out[i] = m
    return out


def signal_z(model) -> float:
    """``sigK``'s statistic: the largest over depths of the released nodes' class-signal z (module docstring)."""
    nodes = model.forest.estimation_nodes()
    prior = model.forest.prior()
    C = prior.size
    best = -np.inf
    for d in range(1, int(nodes.depth.max(initial=0)) + 1):
        at = nodes.depth == d
        if not at.any():
            continue
        y, cell = nodes.y[at], nodes.var[at] / C
        t = np.maximum(y.sum(axis=1, keepdims=True), 0.0)
        noise = cell[:, None] * (1.0 - 2.0 * prior + C * prior**2)[None, :]
        stat = float(((y - t * prior) ** 2 / (noise + t * prior * (1.0 - prior) + 1e-12)).sum())
        k = y.size
        best = max(best, (stat - k) / np.sqrt(2.0 * k))
    return best


def predictions(model, X: np.ndarray, variants=VARIANTS) -> dict[str, np.ndarray]:
    """Each variant's predicted classes for the encoded records ``X`` on the model's current release."""
    p = model.predict_proba_encoded(X)
    base = p.argmax(axis=1)
    out = {"base": base}
    if not model.forest_votes or model.forest.n_releases == 0 or len(X) == 0:
        return {v: base for v in variants}
    prior = model.forest.prior()
    m = int(np.argmax(prior))
    rows = pooled_paths(model, X)
    C = prior.size
    y, var = rows[:, :, :C], rows[:, :, C]
    idx = np.arange(len(X))
    margin = y[idx, :, base] - y[:, :, m]  # (n, depths)
    sd = np.sqrt(np.maximum(2.0 * var / C, 1e-12))
    z = margin / sd
    if z.shape[1] == 0:  # every tree a root: no depth to test
        z = np.full((len(X), 1), -np.inf)
    r = model.forest.n_releases
    pm = p[idx, base] - p[:, m]
    n_chain = None
    for v in variants:
        if v == "base":
            continue
        if v.startswith("tie"):
            out[v] = np.where(pm > float(v[3:]), base, m)
            continue
        if v.startswith("post"):
            if n_chain is None:
                n_chain = chain_records(model.forest.estimation_nodes(), rows)
            sd_p = np.sqrt((p[idx, base] + p[:, m]) / (n_chain + 1.0))
            out[v] = np.where((base == m) | (pm > float(v[4:]) * sd_p), base, m)
            continue
        if v.startswith("sig"):
            out[v] = base if signal_z(model) > float(v[3:]) else np.full(len(X), m)
            continue
        if v == "prior":
            out[v] = np.full(len(X), m)
            continue
        if v.startswith("leaf"):
            ok = z[:, -1] > float(v[4:])
        elif v.startswith("any"):
            ok = z.max(axis=1) > float(v[3:])
        elif v.startswith("root"):
            ok = z[:, 0] > float(v[4:])
        elif v.startswith("blend"):
            a = float(v[5:])
            out[v] = ((r * p + a * prior) / (r + a)).argmax(axis=1)
            continue
        else:
            raise ValueError(v)
        out[v] = np.where((base == m) | ok, base, m)
    return out
