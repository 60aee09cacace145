"""River's mini-batch API (learn_many / predict_many / predict_proba_many) agrees with the one-record methods."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

pytest.importorskip("river")
pd = pytest.importorskip("pandas")

from river import datasets  # noqa: E402

from streamdp.privacy.mechanisms import NotPrivateWarning  # noqa: E402
from streamdp.river import PrivateForestClassifier, PrivateWindowClassifier  # noqa: E402
from streamdp.river import schemas as rs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::streamdp.privacy.NotPrivateWarning")


def _holes(xs: list, rng: np.random.Generator) -> list:
    """Copies of the records with some values removed, NaN or undeclared (unknown categorical)."""
    out = []
    for x in xs:
        x = dict(x)
        r = rng.random()
        if r < 0.1:
            x.pop("elevel", None)  # missing categorical
        elif r < 0.2:
            x["salary"] = float("nan")  # missing number: the midpoint
        elif r < 0.25:
            x["car"] = 99  # undeclared categorical
        elif r < 0.3:
            x.pop("age", None)
        out.append(x)
    return out


def _same(model, X: pd.DataFrame) -> None:
    many = model.predict_proba_many(X)
    labels = model.predict_many(X)
    for i, x in enumerate(X.to_dict("records")):
        x = {k: v for k, v in x.items() if not (isinstance(v, float) and math.isnan(v) and k != "salary")}
        one = model.predict_proba_one(x)
        assert list(many.columns) == list(one)
        for k in one:
            assert math.isclose(one[k], many.iloc[i][k], abs_tol=1e-9), (i, k)
        assert labels.iloc[i] == model.predict_one(x)


@pytest.mark.parametrize(
    "make",
    [
        lambda: PrivateForestClassifier(rs.agrawal_schema(), n_trees=5, batch_size=400, seed=3),
        lambda: PrivateForestClassifier(rs.agrawal_schema(), n_trees=5, batch_size=400, vote="majority", seed=3),
        lambda: PrivateWindowClassifier(
            rs.agrawal_schema(), window=400, learner_params={"scorer": "gini"}, seed=3, first_window=100
        ),
    ],
    ids=["forest", "forest-majority", "window"],
)
@pytest.mark.filterwarnings("ignore::streamdp.river.encoding.UndeclaredValueWarning")  # _holes plants them
def test_mini_batches_build_the_same_model_and_predict_the_same(make):
    rng = np.random.default_rng(0)
    data = list(datasets.synth.Agrawal(seed=1).take(1500))
    xs = _holes([x for x, _ in data], rng)
    ys = [y for _, y in data]
    a, b = make(), make()
    for x, y in zip(xs, ys):
        a.learn_one(x, y)
    for lo, hi in ((0, 77), (77, 650), (650, 1500)):  # uneven chunks crossing the release/window boundaries
        b.learn_many(pd.DataFrame(xs[lo:hi]), pd.Series(ys[lo:hi]))
    assert a.n_buffered == b.n_buffered
    if isinstance(a, PrivateForestClassifier):
        assert a.n_releases == b.n_releases >= 4  # batches of 100, 200, 400, 400, ...; records with holes dropped
        np.testing.assert_array_equal(a.forest.counts, b.forest.counts)
    else:
        assert a.n_fits == b.n_fits == 4  # a prior phase of 100, windows of 100, 200, 400, 400
    X = pd.DataFrame(_holes([x for x, _ in datasets.synth.Agrawal(seed=5).take(150)], rng))
    _same(a, X)
    _same(b, X)


def test_before_any_learning_the_mini_batch_predictions_are_the_one_record_ones():
    for model in (
        PrivateForestClassifier(rs.stagger_schema(), n_trees=3, seed=1),
        PrivateWindowClassifier(rs.stagger_schema(), learner="diffp-id3", seed=1),
    ):
        X = pd.DataFrame([x for x, _ in datasets.synth.STAGGER(seed=1).take(5)])
        _same(model, X)


def test_integer_feature_names_and_boolean_labels():
    """SEA keys its features 0, 1, 2 and labels records True/False: frames with integer columns work too."""
    schema = rs.sea_schema()
    data = list(datasets.synth.SEA(seed=1).take(900))
    a = PrivateForestClassifier(schema, n_trees=5, batch_size=300, seed=2)
    b = a.clone()
    for x, y in data:
        a.learn_one(x, y)
    b.learn_many(pd.DataFrame([x for x, _ in data]), pd.Series([y for _, y in data]))
    np.testing.assert_array_equal(a.forest.counts, b.forest.counts)
    X = pd.DataFrame([x for x, _ in datasets.synth.SEA(seed=3).take(50)])
    assert list(X.columns) == [0, 1, 2]
    _same(a, X)
    assert set(a.predict_many(X)) <= {False, True}


def test_unknown_labels_in_a_mini_batch_are_named():
    m = PrivateForestClassifier(rs.stagger_schema(), n_trees=3, seed=1)
    X = pd.DataFrame([x for x, _ in datasets.synth.STAGGER(seed=1).take(3)])
    with pytest.raises(
        ValueError,
        match=r"record 1 \(0-based\): label 'class' has a class not declared in the schema \(declared: \[0, 1\]; it is text, none of the declared values is\)$",
    ):
        m.learn_many(X, pd.Series([0, "cat", 1]))
    with pytest.raises(ValueError, match="y has 2 labels but X has 3 records"):
        m.learn_many(X, pd.Series([0, 1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotPrivateWarning)
        assert m.n_buffered == 0
