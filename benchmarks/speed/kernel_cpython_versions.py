"""The kernel against the running CPython's sum() and estimation's chain, without numpy (for interpreters
that have no numpy installed, e.g. the 3.12 and 3.13 beside the project's 3.11, where sum() of floats
is compensated).

    gcc -shared -fPIC -O2 -ffp-contract=off -I$(pythonX.Y -c "import sysconfig; print(sysconfig.get_paths()['include'])") \
        streamdp/river/_kernel.c -o DIR/_kernel$(pythonX.Y -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
    cd DIR && pythonX.Y .../benchmarks/speed/kernel_cpython_versions.py .../streamdp/estimation/rule.py .../streamdp/estimation/one_record.py

Reads posterior_one / path_proba_one and the constants from those files' source
(no import: it needs numpy) and compares 20,000 random sums and 20,000 random chains (2, 3, 7, 10 classes).
"""

import ast
import math
import random
import sys

ns = {"math": math, "KAPPA": 8.0, "SHARE_SPREAD": 0.5}
for node in [n for path in sys.argv[1:] for n in ast.parse(open(path).read()).body]:
    if (
        isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("KAPPA", "SHARE_SPREAD")
    ):
        exec(compile(ast.Module([node], []), "est", "exec"), ns)
    if isinstance(node, ast.FunctionDef) and node.name in ("posterior_one", "path_proba_one"):
        exec(compile(ast.Module([node], []), "est", "exec"), ns)
sys.path.insert(0, ".")
import _kernel

rng = random.Random(0)
bad = 0
for _ in range(20000):
    xs = [rng.gauss(0, 1) * 10 ** rng.randint(-8, 16) for _ in range(rng.randint(1, 40))]
    if rng.random() < 0.3:
        xs += [1e16, -1e16, 1.0, -0.0]
    rng.shuffle(xs)
    bad += _kernel.py_sum(xs) != sum(xs)
print(sys.version.split()[0], "sum mismatches:", bad, "of 20000")
consts = (ns["KAPPA"], ns["SHARE_SPREAD"])
bad = n = 0
for C in (2, 3, 7, 10):
    for _ in range(5000):
        scale = 10 ** rng.uniform(-1, 4)
        rows = []
        for _d in range(rng.randint(1, 8)):
            rows += [rng.gauss(0, 1) * scale + rng.uniform(-1, 3) * scale for _c in range(C)]
            rows.append(rng.choice([0.0, -1.0, rng.uniform(0, 4) * scale**2]))
        w = [rng.random() for _ in range(C)]
        prior = [x / sum(w) for x in w]
        root = (rng.choice([0.0, rng.uniform(0, 10) * scale]), rng.choice([0.0, rng.uniform(0, 40) * scale**2]))
        bad += _kernel.chain(rows, prior, *root, *consts) != ns["path_proba_one"](rows, prior, *root)
        n += 1
print(sys.version.split()[0], "chain mismatches:", bad, "of", n)
