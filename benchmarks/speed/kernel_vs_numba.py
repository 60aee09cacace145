"""Why the river loop's kernel is C and not numba (issue 15): one record's predict, four ways.

    pip install numba   # not a streamdp dependency; only this script uses it
    python benchmarks/speed/kernel_vs_numba.py > benchmarks/results/kernel_vs_numba.log

numba compiles route + vote + chain (the two-class chain) over the same
arrays the C kernel reads; it cannot read a river dict record, so the record
is encoded by the generated Python encoder and copied into a float64 array.
Prints numba's import and JIT time, its dispatch cost alone, the full numba
path, the C kernel (streamdp/river/_kernel.c: encode + route + vote + chain)
and the plain-Python path, best of 5 passes over 15,000 Agrawal records, with
the load average before and after.
"""

import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
print(f"load average at start: {os.getloadavg()[0]:.2f}")
warnings.simplefilter("ignore")
import numpy as np

t0 = time.perf_counter()
import numba

t_import = time.perf_counter() - t0
from river import datasets

from streamdp.river import PrivateForestClassifier
from streamdp.river.schemas import agrawal_schema


@numba.njit(cache=False)
def proba(a, feat, thr, nxt, root, iscat, rows, W, prior, snr, pw, mw):
    T = root.size
    pooled = np.zeros(W)
    for t in range(T):
        n = root[t]
        while feat[n] >= 0:
            f = feat[n]
            if iscat[f]:
                n = nxt[n] + int(a[f])
            else:
                n = nxt[n] + (1 if a[f] > thr[n] else 0)
        leaf = nxt[n]
        for c in range(W):
            pooled[c] += rows[leaf, c]
    p0, p1 = prior[0], prior[1]
    for d in range(0, W, 3):
        y0, y1, v = pooled[d], pooled[d + 1], pooled[d + 2]
        tot = y0 + y1
        if not v > 0:
            v = 0.0
        if not (tot > 0 and tot >= snr * np.sqrt(v)):
            continue
        aa = pw * v / (tot if tot > 1.0 else 1.0) + mw
        den = tot + aa
        q0 = (y0 + aa * p0) / den
        q1 = (y1 + aa * p1) / den
        if q0 < 0 or q1 < 0:
            q0 = q0 if q0 > 0 else 0.0
            q1 = q1 if q1 > 0 else 0.0
        s = q0 + q1
        if s > 0:
            p0, p1 = q0 / s, q1 / s
    return p0, p1


data = list(datasets.synth.Agrawal(seed=42).take(20000))
m = PrivateForestClassifier(agrawal_schema(), seed=1)
for x, y in data[:5000]:
    m.learn_one(x, y)
v = m._view
v._fresh()
# the same arrays the C kernel gets
feat, thr, nxt, root = [], [], [], []
for nodes in v._trees:
    off = len(feat)
    root.append(off)
    for f, th, ch, cat in nodes:
        split = 0 <= f < len(v._arity)
        feat.append(f if split else -1)
        thr.append(float(th) if split and not cat else 0.0)
        nxt.append(off + ch if split else ch if f < 0 else 0)
feat, thr, nxt, root = (np.array(feat, np.int64), np.array(thr), np.array(nxt, np.int64), np.array(root, np.int64))
iscat = np.array(m.encoder.is_cat)
real, rows = v._rows_src
table = np.zeros((v.forest.n_trees * v._L, rows.shape[1]))
table[real] = rows
prior = np.array(v._prior)
W = table.shape[1]
xs = [x for x, _ in data[5000:]]
v.proba_list(xs[0])
enc = m.encoder._compile_python()
t0 = time.perf_counter()
proba(np.array(enc(xs[0]), dtype=np.float64), feat, thr, nxt, root, iscat, table, W, prior, 3.0, 8.0, 1.0)
t_jit = time.perf_counter() - t0
v._python_rows()
ok = all(
    list(proba(np.array(enc(x), dtype=np.float64), feat, thr, nxt, root, iscat, table, W, prior, 3.0, 8.0, 1.0))
    == v._vote(v._route(enc(x)))
    for x in xs[:2000]
)


def bench(fn):
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for x in xs:
            fn(x)
        best = min(best, (time.perf_counter() - t0) / len(xs))
    return best * 1e6


a0 = np.array(enc(xs[0]), dtype=np.float64)
print(
    f"numba {numba.__version__}: import {t_import:.2f} s, first call (JIT) {t_jit:.2f} s, equal to the Python vote: {ok}"
)
print(
    f"numba dispatch alone (fixed array)          {bench(lambda x: proba(a0, feat, thr, nxt, root, iscat, table, W, prior, 3.0, 8.0, 1.0)):.2f} us/record"
)
print(
    f"Python encode + np.array + numba            {bench(lambda x: proba(np.array(enc(x), dtype=np.float64), feat, thr, nxt, root, iscat, table, W, prior, 3.0, 8.0, 1.0)):.2f} us/record"
)
print(f"C kernel (encode + route + vote + chain)    {bench(v._k.proba):.2f} us/record")
print(f"Python path (generated encode, route, vote + chain) {bench(lambda x: v._vote(v._route(enc(x)))):.2f} us/record")
print(f"load average at end: {os.getloadavg()[0]:.2f}")
