"""The C kernel's Python surface is memory safe: bad sizes, calls back into it and failed constructions raise.

Each crash case runs in a subprocess: a segmentation fault shows as a failed test, not as the end of pytest.
A hypothesis fuzz drives the surface with arbitrary arguments and records and compares it with the
plain-Python path. ``.ci/kernel_asan.py`` runs this file and tests/river/test_kernel.py under
AddressSanitizer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdp.records.coding import lookup_key
from streamdp.river import kernel
from streamdp.river import schemas as rs
from streamdp.river.encoding import RecordEncoder

pytestmark = pytest.mark.filterwarnings("ignore::streamdp.privacy.NotPrivateWarning")

needs_kernel = pytest.mark.skipif(not kernel.available(), reason="the C kernel is not built")

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """
import numpy as np
from streamdp.river import _kernel
from streamdp.river.encoding import RecordEncoder
from streamdp.river.schemas import sea_schema
from streamdp.records.coding import lookup_key
enc = RecordEncoder(sea_schema())
m = len(enc._spec)
def new(spec=None):
    return _kernel.Kernel(list(enc._spec) if spec is None else spec, enc._encode, lookup_key(False), lookup_key(True))
def one_leaf(k):
    k.set_trees(1, 1, np.array([-1], np.int32), np.zeros(1), np.zeros(1, np.int64), np.zeros(1, np.int64),
                np.full(m, 2, np.int64))
k = new()
"""


def _run(body: str) -> str:
    """Run ``body`` after PRELUDE in a fresh interpreter; its stdout. A crash (signal) fails the test."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"exit {proc.returncode} (negative: killed by a signal)\n{proc.stderr[-2000:]}"
    return proc.stdout


@needs_kernel
@pytest.mark.parametrize(
    "call",
    [
        "one_leaf(k); k.set_rows(2, 2**62, 2, b'', np.array([.5, .5]), 1., 1., 1., 1.); print(k.proba({}))",
        "k.set_rows(2, 2**62, 2, b'', np.array([.5, .5]), 1., 1., 1., 1.)",
        "k.set_trees(2**62, 1, b'', b'', b'', np.zeros(1, np.int64), np.full(m, 2, np.int64))",
        "k.set_trees(1, 2**61, np.array([-1], np.int32), np.zeros(1), np.zeros(1, np.int64), b'', np.full(m, 2, np.int64))",
        "one_leaf(k); k.set_paths(2**61, 8, b'')",
        "one_leaf(k); k.set_paths(1, 1, np.zeros(1, np.int64)); k.set_nodes(2**61, b'', np.array([.5, .5]), 1., 1., 1., 1.)",
        "one_leaf(k); k.set_paths(1, 1, np.zeros(1, np.int64)); k.set_nodes(1, b'', np.zeros(2**60 // 2**57), 1., 1., 1., 1.)",
    ],
    ids=["rows-then-proba", "rows", "trees", "roots", "paths", "nodes", "nodes-classes"],
)
def test_size_products_that_overflow_raise(call):
    """Sizes whose byte counts overflow a Py_ssize_t (8*n_rows*W, 4*n, ...) are refused before any copy."""
    out = _run(
        f"""
        try:
            {call}
        except (ValueError, OverflowError) as e:
            print("refused", e)
        """
    )
    assert out.startswith("refused"), out


@needs_kernel
@pytest.mark.parametrize(
    "method", ["clear_rows()", "set_trees(*trees)", "set_rows(*rows)", "__init__(list(enc._spec), 1, 2, 3)"]
)
@pytest.mark.parametrize("entry", ["proba", "predict", "encode"])
def test_a_call_back_into_the_kernel_raises(method, entry):
    """A record key whose __eq__ changes the kernel while it encodes that record raises RuntimeError."""
    out = _run(
        f"""
        trees = (1, 1, np.array([-1], np.int32), np.zeros(1), np.zeros(1, np.int64), np.zeros(1, np.int64),
                 np.full(m, 2, np.int64))
        rows = (2, 1, 2, np.array([1., 2.]), np.array([.5, .5]), 1., 1., 1., 1.)
        k.set_trees(*trees); k.set_rows(*rows)
        name = enc._spec[0][0]
        class Key:
            def __hash__(self):
                return hash(name)
            def __eq__(self, other):
                k.{method}
                return False
        for _ in range(20):
            try:
                k.{entry}({{Key(): 1.0, **{{n: 0.5 for n, *_ in enc._spec[1:]}}}})
            except RuntimeError as e:
                assert "in use" in str(e) or "initialised twice" in str(e), e
            else:
                raise SystemExit("no RuntimeError")
        print(k.proba({{n: 0.5 for n, *_ in enc._spec}}))
        """
    )
    assert out.startswith("[0.3333333333333333, 0.6666666666666666]"), out


@needs_kernel
def test_init_reads_a_snapshot_of_the_spec():
    """A bound whose __float__ empties the spec list while the kernel reads it: no crash, the snapshot is used."""
    out = _run(
        """
        spec = list(enc._spec)
        class Bound:
            def __float__(self):
                spec.clear()
                return 1.0
        name, alt, lookup, lo, hi, mid = spec[0]
        spec[0] = (name, alt, lookup, lo, hi, Bound())
        spec += [spec[0], spec[0]]
        kk = new(spec)
        print(len(kk.encode({})))
        """
    )
    assert out.split() == [str(len(RecordEncoder(rs.sea_schema())._spec) + 2)]


@needs_kernel
def test_a_failed_init_leaves_a_kernel_whose_methods_raise():
    """__init__ failing on the second attribute (a bound that is no number) leaves nothing half set."""
    out = _run(
        """
        spec = list(enc._spec)
        name, alt, lookup, lo, hi, mid = spec[1]
        spec[1] = (name, alt, lookup, "not a number", hi, mid)
        kk = _kernel.Kernel.__new__(_kernel.Kernel)
        for call in [lambda: kk.__init__(spec, enc._encode, lookup_key(False), lookup_key(True)),
                     lambda: kk.encode({"x": 1}), lambda: kk.proba({}), lambda: kk.predict({}), kk.clear_rows,
                     lambda: one_leaf(kk), lambda: kk.set_paths(1, 1, np.zeros(1, np.int64))]:
            try:
                call()
            except (TypeError, RuntimeError) as e:
                print(type(e).__name__)
        kk.__init__(list(enc._spec), enc._encode, lookup_key(False), lookup_key(True))  # a good spec: usable
        print(len(kk.encode({})))
        """
    )
    assert out.split() == ["TypeError"] + ["RuntimeError"] * 6 + [str(len(RecordEncoder(rs.sea_schema())._spec))]


@needs_kernel
def test_the_module_functions_read_a_snapshot():
    """chain() and py_sum() with a float whose __float__ empties the list they read."""
    out = _run(
        """
        xs = [1.0, 2.0, 3.0]
        class F:
            def __float__(self):
                xs.clear()
                return 0.5
        xs[0] = F()
        print(_kernel.py_sum(xs))
        ys = [1.0, 2.0, 0.5, 3.0, 4.0, 0.5]
        class G:
            def __float__(self):
                ys.clear()
                return 1.0
        ys[0] = G()
        print(len(_kernel.chain(ys, [0.5, 0.5], 1.0, 1.0, 1.0, 1.0)))
        """
    )
    assert out.split() == ["5.5", "2"]


# ---- hypothesis: the surface with arbitrary arguments, and the kernel against the plain-Python path ----

SCHEMAS = [rs.sea_schema(), rs.stagger_schema(), rs.agrawal_schema(), rs.mixed_schema()]
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.sampled_from([np.float32(1.5), np.int64(2), np.bool_(True), 0, 1, 2, "red", "small", 0.5]),
)


def _kernel_of(schema):
    enc = RecordEncoder(schema)
    return enc, kernel._kernel.Kernel(list(enc._spec), enc._encode, lookup_key(False), lookup_key(True))


@needs_kernel
@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SCHEMAS), st.data())
def test_fuzz_encode_equals_the_python_encoder(schema, data):
    enc, k = _kernel_of(schema)
    names = [n for n, *_ in enc._spec]
    keys = st.one_of(st.sampled_from(names), st.sampled_from([str(i) for i in range(4)]), st.integers(0, 4))
    x = data.draw(st.dictionaries(keys, VALUES, max_size=len(names) + 2))
    got, want = k.encode(x), enc._encode(x)
    assert [type(v) for v in got] == [type(v) for v in want]
    assert all(u == w or (u != u and w != w) for u, w in zip(got, want))


def _int_arrays(n_max: int):
    sizes = st.one_of(st.integers(-2, 6), st.sampled_from([2**31, 2**61, 2**62, 2**63 - 1, -(2**62)]))
    arrays = st.one_of(
        st.binary(max_size=64),
        st.lists(st.integers(-3, n_max + 3), max_size=12).map(lambda v: np.array(v, dtype=np.int64)),
        st.lists(st.integers(-3, n_max + 3), max_size=12).map(lambda v: np.array(v, dtype=np.int32)),
        st.lists(st.floats(-10, 10), max_size=12).map(lambda v: np.array(v, dtype=np.float64)),
    )
    return sizes, arrays


@needs_kernel
@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SCHEMAS), st.data())
def test_fuzz_the_setters_raise_or_route_inside_the_arrays(schema, data):
    """Arbitrary sizes and buffers through set_trees/set_rows/set_paths/set_nodes in any order: each call
    succeeds or raises ValueError/OverflowError/TypeError; proba then answers a list summing to 1, or None."""
    enc, k = _kernel_of(schema)
    sizes, arrays = _int_arrays(8)
    prior = st.sampled_from([np.array([0.5, 0.5]), np.array([0.2, 0.3, 0.5]), b"", np.zeros(1)])
    consts = (100.0, 1000.0, *kernel.constants())
    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["trees", "rows", "paths", "nodes", "clear"]))
        try:
            if op == "trees":
                n, T = data.draw(sizes), data.draw(sizes)
                k.set_trees(n, T, *(data.draw(arrays) for _ in range(4)), np.full(len(enc._spec), 2, np.int64))
            elif op == "rows":
                mode = data.draw(st.integers(0, 3))
                k.set_rows(mode, data.draw(sizes), data.draw(sizes), data.draw(arrays), data.draw(prior), *consts)
            elif op == "paths":
                k.set_paths(data.draw(sizes), data.draw(sizes), data.draw(arrays))
            elif op == "nodes":
                k.set_nodes(data.draw(sizes), data.draw(arrays), data.draw(prior), *consts)
            else:
                k.clear_rows()
        except (ValueError, OverflowError, TypeError):
            pass
        x = data.draw(st.dictionaries(st.sampled_from([n for n, *_ in enc._spec]), VALUES))
        p = k.proba(x)
        assert p is None or (all(v == v for v in p) and abs(sum(p) - 1.0) < 1e-9 or sum(p) == 0.0)


@needs_kernel
@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.sampled_from([rs.agrawal_schema, rs.stagger_schema, rs.sea_schema]),
    st.sampled_from(["shrink", "leaf"]),
    st.integers(0, 2**16),
    st.data(),
)
def test_fuzz_predictions_equal_the_python_path(schema, estimator, seed, data):
    """Twin models (same seed) with and without the kernel give the same probabilities on arbitrary records."""
    from streamdp.river import PrivateForestClassifier

    def make():
        m = PrivateForestClassifier(schema(), n_trees=3, guard=0, batch_size=40, first_batch=20, seed=seed)
        m.forest.estimator = estimator
        return m

    fast = make()
    compiled, kernel._kernel = kernel._kernel, None
    try:
        slow = make()
    finally:
        kernel._kernel = compiled
    assert fast._view._k is not None and slow._view._k is None
    enc = fast.encoder
    names = [n for n, *_ in enc._spec]
    rng = np.random.default_rng(seed)
    for _ in range(3):  # a few releases, so the kernel holds real rows
        for _ in range(40):
            x = {n: _plain(a, rng) for n, a in zip(names, schema().attributes)}
            y = schema().label.values[int(rng.integers(len(schema().label.values)))]
            fast.learn_one(x, y)
            slow.learn_one(x, y)
        for _ in range(5):
            x = data.draw(st.dictionaries(st.sampled_from(names), VALUES, max_size=len(names)))
            assert fast.predict_proba_one(x) == slow.predict_proba_one(x)


def _plain(attr, rng):
    values = getattr(attr, "values", None)
    if values is not None:
        return values[int(rng.integers(len(values)))]
    return float(rng.uniform(attr.min, attr.max))
