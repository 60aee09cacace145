"""Does the pooled posterior chain hold the majority floor on tall unpruned forests? Candidate rules compared.

A tall drawn forest (the service's stream models on numeric schemas; ``PrivateForest.fit(..., prune=False)``) on
little data has every pooled node within a few noise standard deviations of zero; with ``KAPPA`` the prior lets
each of the h levels move the record's share by about ``sqrt(p (1 - p) / KAPPA)``, so noise-driven moves add up
over the levels. The chain of :meth:`streamdp.estimation.ForestNodes.path_proba` is re-run here with other
rules on the same released forests (each draw: one structure, one noise), so the rules are compared pairwise
(post-processing of one release; nothing here changes the package):

* ``base``: the rule as it is (``KAPPA`` at every depth; equal to ``predict``, checked);
* ``kT``: the concentration times the random trees pooled (a pooled node averages T random cells: its
  share's spread around the parent's is about 1/T of one cell's); ``kTd``: times the trees whose node at that
  depth is a new one (a shallower leaf repeated below adds nothing new); ``kTs``: times the square root of that;
* ``kh``: the concentration times the height (the h levels' prior spreads add up to one level's);
* ``eb``: empirical Bayes per depth: the spread of the cells' true shares around the prior at each depth from
  the released counts (squared deviations minus their noise variance, the records per cell from the leaves
  below), its increments the prior spread of each level (floored at 0); ``ebsC``: the same less ``C``
  standard errors of the level's sum, and never weaker than ``KAPPA``; ``ebpC``: the same on the pooled nodes
  of points drawn uniformly over the schema's declared domains (:func:`public_points`);
* ``gateK``: a soft gate, the evidence weight times ``n^2 / (n^2 + K^2 v)`` (the pooled records ``n``
  against ``K`` noise standard deviations of the pooled total);
* ``rhoX``: the noise variance in the weight times ``1 + X 2r / (1 - r)``, ``r = sqrt(share)``: a depth's
  counts hold its child's noise (adjacent levels' shares correlate by about ``r``);
* ``nested``/``nestedX``: the exact Gaussian posterior of the path's shares with the nested noise taken as it
  is (the deepest pooled counts and each depth's pooled siblings are the independent numbers), a random-walk
  prior of concentration ``KAPPA`` (``X KAPPA``), solved per record (:func:`chain_nested`).

(a) Agrawal functions 0..9 (river's generator; 3,000 training rows, 5,000 held out; draws 1 and 2 of the
generator's seed), epsilon 0.5/1/2, one release (``fit(prune=False)``) or four (a fit on a quarter then three
``update``s), ``--draws`` forests per cell; plus a 30,000-row stream (functions 0, 2, 4, 6, 8). The floor:
majority share of the held-out rows minus 0.01. (b) ``--defaults R``: accuracy_small_data's datasets and
splits (R x 5-fold), the default fit, update, grow and river classifier, each release read with every rule.

    python benchmarks/studies/estimation_tall_floor.py --draws 5 --defaults 2 --out results/estimation_tall_floor.md
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streamdp import PrivateForest  # noqa: E402
from streamdp.estimation import rule as R  # noqa: E402

VARIANTS = ("base", "kT", "kTd", "kh", "eb", "ebs1", "gate2", "gate3", "rho1", "nested", "nested3")


def step(y, var_total, parent_p, parent_n, share, kappa, gate: float | None, corr: float = 0.0):
    """:func:`streamdp.estimation.rule.posterior_step` with a concentration per row (``kappa`` (k,)) and an
    optional soft gate ``n^2 / (n^2 + gate^2 v)`` on the evidence weight."""
    C = y.shape[1]
    t = y.sum(axis=1)
    v = np.where(var_total > 0, var_total, 0.0)
    m = np.where(share > 0, parent_n * share, parent_n)
    vm = (R.SHARE_SPREAD * m) ** 2 + 1.0
    pos = v > 0
    vs = np.where(pos, v, 1.0)
    n = np.where(pos, (t / vs + m / vm) / (1.0 / vs + 1.0 / vm), t)
    ok = n > 0
    n = np.where(ok, n, 0.0)
    den = np.maximum(np.abs(t), n)
    k = np.broadcast_to(np.asarray(kappa, dtype=np.float64), n.shape)[:, None]
    pq = np.maximum(parent_p * (1.0 - parent_p), 1e-6)
    nn = (n * n)[:, None]
    f = np.ones_like(n)
    if corr:  # the nested levels' noise: adjacent levels correlate by sqrt(share); long-run factor (1+r)/(1-r)
        r = np.sqrt(np.clip(share, 0.0, 0.999))
        f = 1.0 + corr * 2.0 * r / (1.0 - r)
    d = nn + k * n[:, None] + k * (f * v / C)[:, None] / pq
    w = nn / np.where(d > 0, d, 1.0)
    if gate is not None:
        g = nn[:, 0] / np.maximum(nn[:, 0] + gate * gate * v, 1e-300)
        w = w * g[:, None]
    q = parent_p + w * (y - t[:, None] * parent_p) / np.where(ok, den, 1.0)[:, None]
    q = np.where(q > 0, q, 0.0)
    s = q.sum(axis=1, keepdims=True)
    good = ok[:, None] & (s > 0)
    return np.where(good, q / np.where(s > 0, s, 1.0), parent_p), n


def cell_records(nodes, T: int) -> np.ndarray:
    """Records per cell (public): the roots' records times the cell's share of its tree's leaves (its variance
    counts them)."""
    v = nodes.var
    cur = np.arange(len(v))
    while True:  # each node's root: walk up
        up = nodes.parent[cur]
        if np.all(up < 0):
            break
        cur = np.where(up >= 0, up, cur)
    root_var = v[cur]
    return (nodes.records / T) * np.where(root_var > 0, v / np.where(root_var > 0, root_var, 1.0), 0.0)


def level_spread(nodes, T: int, c: float) -> tuple[np.ndarray, float]:
    """``(S2, sum_c p_c (1 - p_c))``: ``S2(d)`` the spread of the depth-d cells' true shares around the prior,
    from the released counts (the squared deviations minus their noise variance, less ``c`` standard errors of
    that sum), over the cells' squared records (public, :func:`cell_records`); kept nondecreasing with depth
    (nested cells' spread only grows) and below ``sum_c p_c (1 - p_c)``."""
    y, v, depth, prior = nodes.y, nodes.var, nodes.depth, nodes.prior
    C = y.shape[1]
    h = int(depth.max(initial=0))
    t = y.sum(axis=1)
    n_hat = cell_records(nodes, T)
    pq = float((prior * (1 - prior)).sum())
    S = np.zeros(h + 1)
    for d in range(1, h + 1):
        u = depth == d
        z = y[u] - t[u][:, None] * prior[None, :]
        s2 = v[u][:, None] * (1.0 / C - 2.0 * prior[None, :] / C + prior[None, :] ** 2)
        A = float((z * z - s2).sum())
        if c:
            mu2 = np.maximum(z * z - s2, 0.0)
            sd = np.sqrt(2 * s2 * s2 + 4 * mu2 * s2).sum(axis=1)  # classes taken as fully correlated (an upper bound)
            A -= c * float(np.sqrt((sd * sd).sum()))
        B = float((n_hat[u] ** 2).sum())
        S[d] = min(max(A / B if B > 0 else 0.0, S[d - 1]), pq)
    return S, pq


def eb_kappa(nodes, T: int) -> np.ndarray:
    """Per depth (index d, 1..h): ``sum_c p_c (1 - p_c)`` over the level's prior spread, from released counts."""
    S, pq = level_spread(nodes, T, 0.0)
    tau = np.diff(S)
    return np.concatenate([[R.KAPPA], np.where(tau > 0, pq / np.maximum(tau, 1e-12), 1e9)])


def eb_kappa_shrunk(nodes, T: int, c: float) -> np.ndarray:
    """Per depth (index d, 1..h): the level's prior strength ``sum_c p_c (1 - p_c) / tau2(d)``, at least
    ``KAPPA``, with ``tau2(d) = S2(d) - S2(d - 1)`` (:func:`level_spread`, less ``c`` standard errors): 0 (no
    move at that depth) where the level's spread is not measurable above its noise."""
    S, pq = level_spread(nodes, T, c)
    tau = np.diff(S)
    k = np.where(tau > 0, pq / np.maximum(tau, 1e-300), np.inf)
    return np.concatenate([[R.KAPPA], np.maximum(k, R.KAPPA)])


def public_points(schema, n: int, seed: int = 0) -> np.ndarray:
    """``n`` encoded records drawn uniformly over the schema's declared domains (public: no data read)."""
    from streamdp.records.domains import Categorical

    rng = np.random.default_rng(seed)
    cols = []
    for a in schema.attributes:
        if isinstance(a, Categorical):
            cols.append(rng.integers(0, a.arity, n).astype(np.float64))
        else:
            cols.append(rng.uniform(a.min, a.max, n))
    return np.stack(cols, axis=1)


def walk_up(nodes, leaves: np.ndarray) -> tuple:
    """``(n, T, C, h, path)``: each record's node at every depth in every tree (``path[h - d]`` at depth ``d``;
    a shallower leaf stands for the depths below it), as ``ForestNodes.path_proba`` walks them."""
    leaves = leaves[:, : nodes.leaf_node.shape[0]]
    n, T = leaves.shape
    node = nodes.leaf_node[np.arange(T)[None, :], leaves]
    h = int(nodes.depth.max(initial=0))
    path = [node]
    for d in range(h - 1, -1, -1):
        up = path[-1]
        path.append(np.where(nodes.depth[up] > d, nodes.parent[up], up))
    return n, T, nodes.y.shape[1], h, path


def pooled(y: np.ndarray, var: np.ndarray, nd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The records' pooled counts and variances of their nodes ``nd`` (n, T) in every tree."""
    Y, V = np.zeros((nd.shape[0], y.shape[1])), np.zeros(nd.shape[0])
    for t in range(nd.shape[1]):
        Y += y[nd[:, t]]
        V += var[nd[:, t]]
    return Y, V


def record_paths(nodes, leaves: np.ndarray) -> tuple:
    """:func:`walk_up`'s paths with the node table's counts and variances, ``(n, T, C, h, path, y, var)``
    (a root that is a leaf stands for no depth)."""
    n, T, C, h, path = walk_up(nodes, leaves)
    yv = nodes.node_table()
    y, var = yv[:, :C], yv[:, C]
    dep = np.append(nodes.depth, -1)
    return n, T, C, h, [np.where(dep[nd] >= 1, nd, len(var) - 1) for nd in path], y, var


def eb_pooled_kappa(nodes, leaves: np.ndarray, c: float) -> np.ndarray:
    """Per depth (index d, 1..h): the pooled level's prior strength from the pooled nodes of ``leaves`` (public
    points' leaves): the spread of the pooled true shares around the prior at each depth (squared deviations
    minus their noise variance, less ``c`` standard errors, over the pooled expected records squared), kept
    nondecreasing; its increments the levels' spreads; at least ``KAPPA``."""
    n, T, C, h, path, y, var = record_paths(nodes, leaves)
    prior = nodes.prior
    pq = float((prior * (1 - prior)).sum())
    S = np.zeros(h + 1)
    for d in range(1, h + 1):
        nd = path[h - d]
        _, first = np.unique(nd, axis=0, return_index=True)  # each distinct pooled node once
        nd = nd[first]
        Y = y[nd].sum(axis=1)
        V = var[nd].sum(axis=1)
        t = Y.sum(axis=1)
        m = nodes.records * V / nodes.root_var if nodes.root_var > 0 else t
        z = Y - t[:, None] * prior[None, :]
        s2 = V[:, None] * (1.0 / C - 2.0 * prior[None, :] / C + prior[None, :] ** 2)
        e = (z * z - s2).sum(axis=1)
        mu2 = np.maximum(z * z - s2, 0.0)
        sd = np.sqrt(2 * s2 * s2 + 4 * mu2 * s2).sum(axis=1)
        A = float(e.sum()) - c * float(np.sqrt((sd * sd).sum()))
        B = float((m * m).sum())
        S[d] = min(max(A / B if B > 0 else 0.0, S[d - 1]), pq)
    tau = np.diff(S)
    k = np.where(tau > 0, pq / np.maximum(tau, 1e-300), np.inf)
    return np.concatenate([[R.KAPPA], np.minimum(np.maximum(k, R.KAPPA), 1e12)])


def chain(nodes, leaves: np.ndarray, variant: str, points: np.ndarray | None = None) -> np.ndarray:
    """:meth:`ForestNodes.path_proba` with ``variant``'s rule."""
    n, T, C, h, path, y, var = record_paths(nodes, leaves)
    dep = np.append(nodes.depth, -1)
    ebk = eb_kappa(nodes, T) if variant == "eb" else None
    if variant.startswith("ebp"):  # ebpC: from the pooled nodes of public points (``points``: their leaves)
        ebk = eb_pooled_kappa(nodes, points, float(variant[3:]))
    elif variant.startswith("ebs"):
        ebk = np.minimum(eb_kappa_shrunk(nodes, T, float(variant[3:])), 1e12)
    gate = float(variant.split("gate")[1]) if "gate" in variant else None
    p = np.broadcast_to(nodes.prior, (n, C))
    m = np.full(n, nodes.records)
    above = np.full(n, nodes.root_var)
    last = None
    for d in range(1, h + 1):
        nd = path[h - d]
        Y, V = pooled(y, var, nd)
        if variant.startswith("kTs"):  # the square root of kTd's factor
            kappa = R.KAPPA * np.sqrt(np.maximum((dep[nd] == d).sum(axis=1), 1))
        elif variant.startswith("kTd"):
            kappa = R.KAPPA * np.maximum((dep[nd] == d).sum(axis=1), 1)
        elif variant.startswith("kT"):
            kappa = R.KAPPA * T
        elif variant.startswith("kd"):
            kappa = R.KAPPA * d
        elif variant.startswith("kg"):  # kgX: KAPPA * 2 ** ((d - 1) / X)
            kappa = R.KAPPA * 2.0 ** ((d - 1) / float(variant[2:].split("+")[0]))
        elif variant == "kh":
            kappa = R.KAPPA * h
        elif variant == "eb" or variant.startswith("ebs") or variant.startswith("ebp"):
            kappa = ebk[d]
        else:
            kappa = R.KAPPA
        share = np.where(above > 0, V / np.where(above > 0, above, 1.0), 0.0)
        corr = float(variant.split("rho")[1]) if "rho" in variant else 0.0
        q, k = step(Y, V, p, m, share, kappa, gate, corr)
        if last is not None:
            same = (Y == last[0]).all(axis=1) & (V == last[1])
            q, k, V = np.where(same[:, None], p, q), np.where(same, m, k), np.where(same, above, V)
        p, m, above, last = q, k, V, (Y, V)
    return p


def chain_nested(nodes, leaves: np.ndarray, kappa_factor: float = 1.0) -> np.ndarray:
    """The exact Gaussian posterior mean of the record's pooled shares along its path, with the nested noise
    taken as it is: a depth's counts are its child's plus the sibling subtrees', so the independent numbers are the
    deepest pooled counts and, at each depth, the pooled siblings' (the depth's counts minus the next depth's).
    Per class: a random walk prior ``theta_d - theta_(d-1) ~ N(0, p (1 - p) / kappa)`` from the prior ``p``,
    observations ``Y_h = n_h theta_h`` and ``Y_d - Y_(d+1) = n_d theta_d - n_(d+1) theta_(d+1)`` with their noise
    and sampling variances; the records ``n_d`` as the chain estimates them. Solved per record (h x h)."""
    n, T, C, h, path, y, var = record_paths(nodes, leaves)
    Ys, Vs, Ns, same = [], [], [], []
    p = np.broadcast_to(nodes.prior, (n, C))
    m = np.full(n, nodes.records)
    above = np.full(n, nodes.root_var)
    last = None
    for d in range(1, h + 1):
        nd = path[h - d]
        Y, V = pooled(y, var, nd)
        share = np.where(above > 0, V / np.where(above > 0, above, 1.0), 0.0)
        _, k = step(Y, V, p, m, share, R.KAPPA, None)
        sm = (Y == last[0]).all(axis=1) & (V == last[1]) if last is not None else np.zeros(n, bool)
        k = np.where(sm, m, k)
        Ys.append(Y)
        Vs.append(V)
        Ns.append(k)
        same.append(sm)
        m, above, last = k, np.where(sm, above, V), (Y, V)
    if h == 0:
        return np.array(np.broadcast_to(nodes.prior, (n, C)))
    Y = np.stack(Ys, 1)  # (n, h, C)
    V = np.stack(Vs, 1)  # (n, h)
    N = np.stack(Ns, 1)  # (n, h)
    S = np.stack(same, 1)
    prior = nodes.prior
    out = np.empty((n, C))
    kap = R.KAPPA * kappa_factor
    for c in range(C):
        pq = max(prior[c] * (1 - prior[c]), 1e-6)
        tau2 = np.where(S, 1e-12 * pq, pq / kap)  # (n, h): increment d (theta_d - theta_(d-1))
        A = np.zeros((n, h, h))
        b = np.zeros((n, h))
        idx = np.arange(h)
        # prior: sum_d (theta_d - theta_(d-1))^2 / tau2_d, theta_0 = prior[c]
        w = 1.0 / tau2
        A[:, idx, idx] += w
        A[:, idx[:-1], idx[:-1]] += w[:, 1:]
        A[:, idx[:-1], idx[1:]] -= w[:, 1:]
        A[:, idx[1:], idx[:-1]] -= w[:, 1:]
        b[:, 0] += w[:, 0] * prior[c]
        # the deepest counts
        s2 = np.maximum(V[:, -1] / C + N[:, -1] * pq, 1e-9)
        A[:, h - 1, h - 1] += N[:, -1] ** 2 / s2
        b[:, h - 1] += N[:, -1] * Y[:, -1, c] / s2
        # the siblings: Z_d = Y_d - Y_(d+1) = N_d th_d - N_(d+1) th_(d+1)
        for d in range(h - 1):
            Z = Y[:, d, c] - Y[:, d + 1, c]
            dn = np.maximum(N[:, d] - N[:, d + 1], 0.0)
            s2 = (V[:, d] - V[:, d + 1]) / C + dn * pq
            ok = (~S[:, d + 1]) & (s2 > 1e-9)
            prec = np.where(ok, 1.0 / np.where(ok, s2, 1.0), 0.0)
            a, bb = N[:, d], -N[:, d + 1]
            A[:, d, d] += prec * a * a
            A[:, d + 1, d + 1] += prec * bb * bb
            A[:, d, d + 1] += prec * a * bb
            A[:, d + 1, d] += prec * a * bb
            b[:, d] += prec * a * Z
            b[:, d + 1] += prec * bb * Z
        theta = np.linalg.solve(A, b[..., None])[..., 0]
        out[:, c] = theta[:, -1]
    out = np.clip(out, 0.0, None)
    s = out.sum(axis=1, keepdims=True)
    return np.where(s > 0, out / np.where(s > 0, s, 1.0), nodes.prior)


def agrawal(fn: int, seed: int, n: int):
    from river import datasets

    rows = list(datasets.synth.Agrawal(classification_function=fn, seed=seed).take(n))
    import pandas as pd

    return pd.DataFrame([x for x, _ in rows]), np.array([y for _, y in rows])


def released(schema, X, y, eps: float, releases: int, seed: int) -> PrivateForest:
    f = PrivateForest.create(schema, epsilon=eps, seed=seed)
    parts = np.array_split(np.arange(len(y)), releases)
    f.fit(X.iloc[parts[0]], y[parts[0]], prune=False)
    for part in parts[1:]:
        f.update(X.iloc[part], y[part])
    return f


def accuracies(f: PrivateForest, Xt, yt, variants) -> dict:
    enc = f.schema.encode(Xt, yt)
    leaves = f.apply(Xt)[:, : f.n_trees]
    nodes = f.estimation_nodes()
    pts = None
    if any(v.startswith("ebp") for v in variants):
        pts = f.structure.apply(public_points(f.schema, 4000), f.schema.is_categorical)[:, : f.n_trees]
    out = {}
    for v in variants:
        p = chain_nested(nodes, leaves, float(v[6:] or 1)) if v.startswith("nested") else chain(nodes, leaves, v, pts)
        out[v] = float((p.argmax(axis=1) == enc.y).mean())
    out["_default"] = float((f.predict(Xt) == yt).mean())
    return out


PAIRED = ("base", "kT", "kh")


def defaults_paired(repeats: int, folds: int, eps_list, datasets=None, variants=PAIRED) -> list[str]:
    """(b) paired: accuracy_small_data's datasets and splits, the default fit / update / grow / river, each released
    forest read with every prior strength of ``variants`` (post-processing of one release)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from accuracy_small_data import DATASETS, cv_splits, load_encoded

    out = [
        "\n## The defaults, paired\n",
        f"accuracy_small_data's datasets and splits ({repeats} x {folds}-fold), the default fit, update (a tenth then "
        "9 updates), grow (10 chunks) and river classifier (`PrivateForestClassifier` at its defaults: drawn trees "
        "on numeric schemas, never pruned), each released forest read with "
        "each prior strength (the same release: the differences are the rule's alone). Mean test accuracy; "
        "each rule minus `base` with the standard error of the paired difference over the splits.\n",
        "| dataset | epsilon | path | "
        + " | ".join(variants)
        + " | "
        + " | ".join(f"{m} - base" for m in variants[1:])
        + " |",
        "|---" * (3 + 2 * len(variants) - 1) + "|",
    ]
    KAPPAS = variants  # noqa: N806
    PATHS = ("fit", "update", "grow", "river")
    diffs: dict = {(m, p): [] for m in KAPPAS[1:] for p in PATHS}
    for name in datasets or DATASETS:
        rng = np.random.default_rng(0)
        schema, X, y = load_encoded(name, rng)
        splits = cv_splits(len(y), repeats, folds, rng)
        for eps in eps_list:
            acc = {(p, m): [] for p in PATHS for m in KAPPAS}
            for tr, te in splits:
                chunks = np.array_split(tr, 10)
                forests = {"fit": PrivateForest.create(schema, epsilon=eps).fit_encoded(X[tr], y[tr])}
                f = PrivateForest.create(schema, epsilon=eps).fit_encoded(X[chunks[0]], y[chunks[0]])
                for c in chunks[1:]:
                    f.update_encoded(X[c], y[c])
                forests["update"] = f
                f = PrivateForest.create(schema, epsilon=eps)
                for c in chunks:
                    f.grow_encoded(X[c], y[c])
                forests["grow"] = f
                from streamdp.river import PrivateForestClassifier

                model = PrivateForestClassifier(schema, epsilon=eps)
                model.learn_encoded(X[tr], y[tr])
                model.flush()
                forests["river"] = model.forest if model.forest_votes else None
                for p, f in forests.items():
                    if f is None:  # the river classifier still in its prior phase: every rule votes the prior
                        for m in KAPPAS:
                            acc[(p, m)].append(
                                float((model.predict_proba_encoded(X[te]).argmax(axis=1) == y[te]).mean())
                            )
                        continue
                    leaves = f.structure.apply(X[te], schema.is_categorical)[:, : f.n_trees]
                    nodes = f.estimation_nodes()
                    pts = None
                    if any(v.startswith("ebp") for v in KAPPAS):
                        pts = f.structure.apply(public_points(schema, 4000), schema.is_categorical)[:, : f.n_trees]
                    for m in KAPPAS:
                        pr = (
                            chain_nested(nodes, leaves, float(m[6:] or 1))
                            if m.startswith("nested")
                            else chain(nodes, leaves, m, pts)
                        )
                        acc[(p, m)].append(float((pr.argmax(axis=1) == y[te]).mean()))
            for p in PATHS:
                base = np.array(acc[(p, "base")])
                cells = []
                for m in KAPPAS[1:]:
                    d = np.array(acc[(p, m)]) - base
                    diffs[(m, p)].append(d.mean())
                    cells.append(f"{d.mean():+.4f} ({d.std(ddof=1) / np.sqrt(len(d)):.4f})")
                means = " | ".join(f"{np.mean(acc[(p, m)]):.3f}" for m in KAPPAS)
                out.append(f"| {name} | {eps:g} | {p} | {means} | " + " | ".join(cells) + " |")
                print(out[-1], flush=True)
    out.append("\nMean paired difference over the dataset x epsilon cells:\n")
    out.append("| rule | fit | update | grow | river |")
    out.append("|---|---|---|---|---|")
    for m in KAPPAS[1:]:
        out.append(f"| {m} - base | " + " | ".join(f"{np.mean(diffs[(m, p)]):+.4f}" for p in PATHS) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--functions", default="0,1,2,3,4,5,6,7,8,9")
    ap.add_argument("--eps", default="0.5,1,2")
    ap.add_argument("--releases", default="1,4")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--big", type=int, default=30000, help="rows of the large-stream check (0: skip)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default="")
    ap.add_argument("--defaults", type=int, default=0, help="repeats of the paired defaults check (0: skip)")
    ap.add_argument("--defaults-only", action="store_true")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    variants = args.variants.split(",")
    if args.defaults_only:
        t0 = time.time()
        text = (
            "\n".join(
                [f"load at start: {subprocess.getoutput('uptime')}"]
                + defaults_paired(args.defaults, 5, [float(e) for e in "0.1,0.5,1,2".split(",")], None, tuple(variants))
                + [f"\n{time.time() - t0:.0f} s; load at end: {subprocess.getoutput('uptime')}"]
            )
            + "\n"
        )
        if args.out:
            Path(args.out).write_text(text)
        print(text)
        return 0
    from streamdp.river import schemas as rs

    schema = rs.agrawal_schema()
    variants = args.variants.split(",")
    lines = []
    say = lines.append
    t0 = time.time()
    say("# The pooled chain on tall unpruned forests: candidate rules against the majority floor\n")
    say(
        f"`python benchmarks/studies/estimation_tall_floor.py --draws {args.draws} --functions {args.functions} "
        f"--eps {args.eps} --releases {args.releases} --rows {args.rows} --big {args.big} --variants {args.variants} "
        f"--defaults {args.defaults}`; git "
        f"{subprocess.getoutput('git rev-parse --short HEAD')}\n"
    )
    say(f"load at start: {subprocess.getoutput('uptime')}\n")
    say(
        "Per cell: mean accuracy over the draws minus the floor (majority share of the 5,000 held-out rows "
        "- 0.01); in brackets the worst draw's. Same forests for every rule (drawn trees of the default height, "
        "10 random trees and a prior stump, never pruned). `default`: `predict` as shipped (equals `base`).\n"
    )
    say("| rows | function | epsilon | releases | majority | " + " | ".join(variants) + " |")
    say("|---" * (5 + len(variants)) + "|")
    summary: dict = {v: [] for v in variants}
    below: dict = {v: 0 for v in variants}
    big: dict = {v: [] for v in variants}
    cells = 0
    sizes = [args.rows] + ([args.big] if args.big else [])
    for rows in sizes:
        fns = [int(s) for s in args.functions.split(",")] if rows == args.rows else [0, 2, 4, 6, 8]
        reps = args.draws if rows == args.rows else max(2, args.draws // 2)
        for fn in fns:
            X, y = agrawal(fn, 1, rows)
            Xt, yt = agrawal(fn, 2, 5000)
            vals, counts = np.unique(yt, return_counts=True)
            maj = counts.max() / len(yt)
            floor = maj - 0.01
            for eps in [float(e) for e in args.eps.split(",")]:
                for rel in [int(r) for r in args.releases.split(",")]:
                    accs = {v: [] for v in variants}
                    for s in range(reps):
                        f = released(schema, X, y, eps, rel, seed=1000 * fn + 10 * s + rel)
                        a = accuracies(f, Xt, yt, variants)
                        assert abs(a["_default"] - a["base"]) < 1e-9, (a["_default"], a["base"])
                        for v in variants:
                            accs[v].append(a[v])
                    row = []
                    for v in variants:
                        mean = float(np.mean(accs[v])) - floor
                        worst = float(np.min(accs[v])) - floor
                        row.append(f"{mean:+.3f} ({worst:+.3f})")
                        if rows == args.rows:
                            summary[v].append(mean)
                            below[v] += mean < 0
                        else:
                            big[v].append(mean)
                    cells += rows == args.rows
                    say(f"| {rows} | {fn} | {eps:g} | {rel} | {maj:.3f} | " + " | ".join(row) + " |")
                    print(lines[-1], flush=True)
    say("")
    say(
        f"Summary over the {cells} cells of {args.rows} rows: mean of (mean accuracy - floor); cells whose mean is below the floor.\n"
    )
    say("| rule | mean - floor | cells below |")
    say("|---|---|---|")
    for v in variants:
        say(f"| {v} | {np.mean(summary[v]):+.4f} | {below[v]} of {cells} |")
    if args.big:
        say(
            f"\nThe {args.big}-row stream (functions 0, 2, 4, 6, 8): mean of (mean accuracy - floor) over its cells; the lowest cell.\n"
        )
        say("| rule | mean - floor | lowest cell |")
        say("|---|---|---|")
        for v in variants:
            say(f"| {v} | {np.mean(big[v]):+.4f} | {np.min(big[v]):+.3f} |")
    if args.defaults:
        lines.extend(
            defaults_paired(args.defaults, 5, [0.1, 0.5, 1.0, 2.0], None, tuple(v for v in variants if v != "eb"))
        )
    say(f"\n{time.time() - t0:.0f} s; load at end: {subprocess.getoutput('uptime')}")
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
