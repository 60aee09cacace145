"""Progressive (test-then-train) evaluation of the private forest beside river's trees.

``streamdp evaluate`` streams a dataset once through every model: each record
is first predicted, then learned. Models:

* ``PrivateForest eps=E bs=B`` (:class:`streamdp.river.PrivateForestClassifier`,
  private: ``seed=None``) for every epsilon ``E`` and batch size ``B`` (``grown``:
  its trees grow release by release, the default on all-categorical schemas);
* river's ``HoeffdingTreeClassifier()`` and ``ARFClassifier(n_models=10, seed=42)``,
  non-private references. They get the categorical attributes as
  ``nominal_attributes`` only with ``--nominal`` (river's notes measured that
  declaring them hurts ARF on Agrawal).

Exactness of the fast path: a :class:`PrivateForestClassifier` only changes
when a batch is released, so predicting the records up to the next release
boundary in one vectorised call and then learning them gives exactly the
predictions of the one-record loop of ``river.evaluate.progressive_val_score``
(``tests/river/test_forest.py`` checks this). River's models go through the
one-record loop. Throughput counts everything after the stream is in memory:
encoding the record dicts, predicting and learning.

Datasets: ``agrawal:F`` (classification function F, ``--n`` samples, seed 42),
``drift`` (``ConceptDriftStream``: Agrawal function 0 drifting to function 2
at ``n/2`` over ``n/20`` records), ``stagger:F``, ``led``, ``uci:NAME``
(the whole UCI file, shuffled with ``--shuffle-seed``).

>>> from streamdp.river.evaluate import evaluate
>>> res = evaluate("stagger:0", n=2000, epsilons=(1.0,), batch_sizes=(500,), references=(), verbose=False)
>>> [r.model for r in res.rows]
['PrivateForest eps=1 bs=500 grown']
"""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from streamdp.validation import check_epsilon, check_integer

__all__ = ["evaluate", "EvalResult", "Row", "load_stream", "check_dataset", "plot", "REFERENCES"]

#: The non-private reference models (river's): HoeffdingTree, and an adaptive random forest of 10 trees.
REFERENCES = ("ht", "arf")


@dataclass
class Row:
    """One model's line of an evaluation: its progressive accuracy, throughput and, for private models, the
    settings and releases behind it."""

    model: str
    accuracy: float
    samples_per_s: float
    seconds: float
    n: int
    epsilon: float | None = None
    batch_size: int | None = None
    releases: int | None = None
    private: bool | None = None
    accuracy_sd: float | None = None  # over `repeats` fresh private models (new structure and noise each)
    repeats: int = 1
    curve: list = field(default_factory=list)  # cumulative accuracy at `EvalResult.steps`
    rolling: list = field(default_factory=list)  # accuracy over the last `window` records at steps


@dataclass
class EvalResult:
    """Every model's :class:`Row` over one stream, with the accuracy curves' steps and the machine's load."""

    dataset: str
    n: int
    steps: list
    window: int
    rows: list
    load: str = ""
    #: the most frequent label's share of the stream (in hindsight: the accuracy of always naming it)
    majority: float | None = None

    def table(self) -> str:
        """The result as a plain-text table, one model a line."""
        lines = [
            f"dataset {self.dataset}: {self.n:,} samples"
            + (f"  (load average at start: {self.load})" if self.load else ""),
            *(
                [f"majority class share {self.majority:.4f} (the accuracy of always naming the most frequent label)"]
                if self.majority is not None
                else []
            ),
        ]
        w = max([34, *(len(r.model) for r in self.rows)])  # (long window-learner names broke the columns)
        lines.append(f"{'model':<{w}} {'accuracy':>8} {'± sd':>7} {'samples/s':>11} {'seconds':>8} {'releases':>8}")
        for r in self.rows:
            rel = "" if r.releases is None else str(r.releases)
            sd = "" if r.accuracy_sd is None else f"{r.accuracy_sd:.4f}"
            lines.append(f"{r.model:<{w}} {r.accuracy:8.4f} {sd:>7} {r.samples_per_s:11,.0f} {r.seconds:8.2f} {rel:>8}")
        if any(r.releases is not None and r.accuracy_sd is None for r in self.rows):
            lines.append("(one run a private row, its noise and trees drawn once: --repeats N gives the mean and sd)")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The result as plain data (what ``streamdp evaluate`` writes as JSON)."""
        return {
            "dataset": self.dataset,
            "n": self.n,
            "steps": self.steps,
            "window": self.window,
            "load": self.load,
            "majority": self.majority,
            "rows": [asdict(r) for r in self.rows],
        }


# -- datasets -------------------------------------------------------------------
def load_stream(name: str, n: int | None = None, shuffle_seed: int = 0):
    """``(schema, [(x, y), ...], nominal_attribute_names)`` for a dataset spec (see the module docstring)."""
    from river.datasets import synth

    from streamdp.river import schemas as rs
    from streamdp.river import uci

    check_dataset(name)
    kind, _, arg = name.partition(":")
    if kind == "agrawal":
        fn = int(arg or 0)
        n = n or 50_000
        data = list(synth.Agrawal(classification_function=fn, seed=42).take(n))
        return rs.agrawal_schema(), data, ["elevel", "car", "zipcode"]
    if kind == "drift":
        n = n or 50_000
        stream = synth.ConceptDriftStream(
            stream=synth.Agrawal(classification_function=0, seed=42),
            drift_stream=synth.Agrawal(classification_function=2, seed=43),
            position=n // 2,
            width=max(1, n // 20),
            seed=42,
        )
        return rs.agrawal_schema(), list(stream.take(n)), ["elevel", "car", "zipcode"]
    if kind == "stagger":
        n = n or 20_000
        return (
            rs.stagger_schema(),
            list(synth.STAGGER(classification_function=int(arg or 0), seed=42).take(n)),
            ["size", "color", "shape"],
        )
    if kind == "led":
        n = n or 20_000
        return rs.led_schema(), list(synth.LED(seed=42, noise_percentage=0.1).take(n)), list(range(7))
    if kind == "uci":
        schema, data = uci.uci_stream(arg, shuffle_seed=shuffle_seed)
        if n:
            data = data[:n]
        nominal = [a.name for a in schema.attributes if hasattr(a, "values")]
        return schema, data, nominal
    raise AssertionError(name)  # check_dataset refused every other spec


def check_dataset(name: str) -> None:
    """Refuse a dataset spec :func:`load_stream` would refuse, without loading anything (a command given several
    checks them all before running the first).

    >>> check_dataset("uci:votes")
    Traceback (most recent call last):
    ...
    ValueError: unknown dataset 'uci:votes': uci:NAME takes one of ['adult', 'congressional-voting', 'mushroom', 'nursery', 'tic-tac-toe']
    """
    from streamdp.records.datasets import DATASETS

    kind, _, arg = name.partition(":")
    if kind == "uci":
        if arg not in DATASETS:
            raise ValueError(f"unknown dataset {name!r}: uci:NAME takes one of {sorted(DATASETS)}")
        return
    if kind not in ("agrawal", "drift", "stagger", "led"):
        raise ValueError(f"unknown dataset {name!r}: agrawal:F, drift, stagger:F, led, uci:NAME")
    if arg and kind in ("agrawal", "stagger"):
        top = 9 if kind == "agrawal" else 2  # river's generators: Agrawal 0-9, STAGGER 0-2
        if not (arg.isdigit() and int(arg) <= top):
            raise ValueError(f"unknown dataset {name!r}: {kind}:F takes a classification function 0..{top}")


# -- runners --------------------------------------------------------------------
def _curves(correct: np.ndarray, steps: list, window: int) -> tuple[list, list]:
    cum = np.cumsum(correct)
    curve = [float(cum[s - 1] / s) for s in steps]
    rolling = []
    for s in steps:
        lo = max(0, s - window)
        rolling.append(float((cum[s - 1] - (cum[lo - 1] if lo > 0 else 0)) / (s - lo)))
    return curve, rolling


#: ``progress(label, total)`` returns ``update(done)``, called as a model's run goes (last with ``done == total``).
ProgressFactory = Callable[[str, int], Callable[[int], None]]


def _no_progress(done: int) -> None:
    pass


def run_private(
    model, data: list, *, labels_to_codes: Callable | None = None, progress: Callable[[int], None] = _no_progress
) -> tuple[np.ndarray, float]:
    """Progressive validation of a PrivateForestClassifier, vectorised between releases (exact; see module doc).

    ``progress(done)`` is called after each run of records up to a release (last with ``len(data)``).
    Returns (per-record correctness, seconds).
    """
    enc = model.encoder
    t0 = time.perf_counter()
    n = len(data)
    correct = np.zeros(n, dtype=bool)
    i = 0
    while i < n:
        j = min(n, i + model.current_batch_size - model.n_buffered)  # records up to the next release
        chunk = data[i:j]
        X, bad = enc.encode_many([x for x, _ in chunk])
        ys = np.fromiter((enc.encode_label(y) for _, y in chunk), dtype=np.int64, count=len(chunk))
        if not bad.any():
            pred = model.predict_proba_encoded(X).argmax(axis=1)
            correct[i:j] = pred == ys
            model.learn_encoded(X, ys)
        else:  # rare: rows with a missing categorical value take the one-record path
            for k, (x, y) in enumerate(chunk):
                p = model.predict_proba_one(x)
                correct[i + k] = enc.encode_label(max(p, key=p.get)) == ys[k]
                model.learn_one(x, y)
        i = j
        progress(i)
    return correct, time.perf_counter() - t0


def run_river(model, data: list, *, progress: Callable[[int], None] = _no_progress) -> tuple[np.ndarray, float]:
    """The one-record test-then-train loop of ``river.evaluate.progressive_val_score``; ``progress(done)`` is
    called every 1/200 of the stream (last with ``len(data)``). Returns (per-record correctness, seconds)."""
    n = len(data)
    correct = np.zeros(n, dtype=bool)
    step = max(1, -(-n // 200))
    t0 = time.perf_counter()
    for start in range(0, n, step):
        for k in range(start, min(n, start + step)):
            x, y = data[k]
            y_pred = model.predict_one(x)
            correct[k] = y_pred is not None and y_pred == y
            model.learn_one(x, y)
        progress(min(n, start + step))
    return correct, time.perf_counter() - t0


def evaluate(
    dataset: str,
    *,
    n: int | None = None,
    epsilons: Sequence[float] = (0.5, 1.0, 2.0),
    batch_sizes: Sequence[int] = (100, 1000, 10000),
    n_trees: int = 10,
    height: int | None = None,
    references: Sequence[str] = ("ht", "arf"),
    nominal: bool = False,
    n_points: int = 100,
    shuffle_seed: int = 0,
    per_record: bool = False,
    repeats: int = 1,
    windows: Sequence[int | None] = (None,),
    window_learners: Sequence[str] = (),
    window_size: int = 5000,
    verbose: bool = True,
    progress: ProgressFactory | None = None,
) -> EvalResult:
    """Run progressive validation of every model on one dataset; see the module docstring.

    ``progress(label, n)``, when given, is called as each model's run starts (river's references included) and
    returns the ``update(done)`` the run calls as it goes (``streamdp evaluate`` draws a bar with it).
    """
    from river import base, tree
    from river import forest as rforest

    from streamdp.river import PrivateForestClassifier, PrivateWindowClassifier
    from streamdp.river.window import WINDOW_LEARNERS

    # every name before the first run (a typo is refused at once, not after minutes of runs)
    for ref in references:
        if ref not in REFERENCES:
            raise ValueError(f"unknown reference model {ref!r} ({', '.join(REFERENCES)})")
    for name in window_learners:
        if name not in WINDOW_LEARNERS:
            raise ValueError(f"unknown window learner {name!r} ({', '.join(sorted(WINDOW_LEARNERS))})")
    for e in epsilons:  # (finite: an evaluation of private models; inf is the library's test setting)
        check_epsilon(e)
    for b in batch_sizes:
        check_integer(b, "batch size")
    check_integer(n_trees, "n_trees")
    if height is not None:
        check_integer(height, "height")
    check_integer(repeats, "repeats")

    schema, data, nominal_names = load_stream(dataset, n, shuffle_seed)
    n = len(data)
    steps = sorted({max(1, round(n * k / n_points)) for k in range(1, n_points + 1)})
    window = max(1, n // 20)
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = ""
    rows: list[Row] = []

    def bar(label: str) -> Callable[[int], None]:
        return progress(label, n) if progress is not None else _no_progress

    def add(row: Row, correct: np.ndarray) -> None:
        row.curve, row.rolling = _curves(correct, steps, window)
        rows.append(row)
        if verbose:
            print(f"  {row.model:<34} acc {row.accuracy:.4f}  {row.samples_per_s:>10,.0f} samples/s", flush=True)

    if verbose:
        print(f"dataset {dataset}: {n:,} samples, load {load}", flush=True)
    for eps, bs, win in [(e, b, w) for e in epsilons for b in batch_sizes for w in windows]:
        accs, secs_all, corrects = [], [], []
        for i in range(max(1, repeats)):  # each repeat: a fresh structure and fresh noise
            model = PrivateForestClassifier(
                schema, n_trees=n_trees, height=height, epsilon=eps, batch_size=bs, window=win
            )
            run = f"PrivateForest eps={eps:g} bs={bs}" + (f" win={win}" if win else "")
            correct, secs = run_private(model, data, progress=bar(run + (f" #{i + 1}" if repeats > 1 else "")))
            accs.append(float(correct.mean()))
            secs_all.append(secs)
            corrects.append(correct)
        secs = float(np.median(secs_all))
        label = (
            f"PrivateForest eps={eps:g} bs={bs}" + (f" win={win}" if win else "") + (" grown" if model.grows else "")
        )
        row = Row(
            label,
            float(np.mean(accs)),
            n / secs,
            secs,
            n,
            eps,
            bs,
            model.n_releases,
            model.private,
            float(np.std(accs)) if len(accs) > 1 else None,
            len(accs),
        )
        add(row, np.mean(corrects, axis=0))
    if per_record and epsilons and batch_sizes:
        # Same model through the one-record loop (river's own path), for its throughput.
        eps, bs = epsilons[len(epsilons) // 2], batch_sizes[len(batch_sizes) // 2]
        model = PrivateForestClassifier(schema, n_trees=n_trees, height=height, epsilon=eps, batch_size=bs)
        correct, secs = run_river(model, data, progress=bar(f"PrivateForest eps={eps:g} bs={bs} 1-by-1"))
        add(
            Row(
                f"PrivateForest eps={eps:g} bs={bs} 1-by-1",
                float(correct.mean()),
                n / secs,
                secs,
                n,
                eps,
                bs,
                model.n_releases,
                model.private,
            ),
            correct,
        )
    for name, eps in [(w, e) for w in window_learners for e in epsilons]:
        # a batch learner refit on each disjoint window (DP-chosen splits), one record at a time
        accs, secs_all, corrects = [], [], []
        for i in range(max(1, repeats)):
            window_model = PrivateWindowClassifier(schema, learner=name, epsilon=eps, window=window_size)
            run = f"Window {name} eps={eps:g} w={window_size}" + (f" #{i + 1}" if repeats > 1 else "")
            correct, secs = run_river(window_model, data, progress=bar(run))
            accs.append(float(correct.mean()))
            secs_all.append(secs)
            corrects.append(correct)
        secs = float(np.median(secs_all))
        row = Row(
            f"Window {name} eps={eps:g} w={window_size}",
            float(np.mean(accs)),
            n / secs,
            secs,
            n,
            eps,
            window_size,
            window_model.n_fits,
            window_model.private,
            float(np.std(accs)) if len(accs) > 1 else None,
            len(accs),
        )
        add(row, np.mean(corrects, axis=0))
    noms: dict[str, Any] = {"nominal_attributes": list(nominal_names)} if nominal else {}
    for ref in references:
        reference: base.Classifier
        if ref == "ht":
            reference, label = tree.HoeffdingTreeClassifier(**noms), "HoeffdingTree"
        else:  # "arf"
            reference, label = rforest.ARFClassifier(n_models=10, seed=42, **noms), "ARF(10)"
        correct, secs = run_river(reference, data, progress=bar(label + " (not private)"))
        add(Row(label + " (not private)", float(correct.mean()), n / secs, secs, n), correct)
    labels = Counter(y for _, y in data)
    majority = max(labels.values()) / n if n else None
    return EvalResult(dataset, n, steps, window, rows, load, majority)


# -- plotting -------------------------------------------------------------------
def plot(result: EvalResult, path: str) -> str | None:
    """Accuracy over the stream, one line per model (cumulative and rolling). Needs matplotlib (optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is not installed: no plot written (pip install streamdp[bench])")
        return None
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5), sharey=True)
    priv = [r for r in result.rows if r.epsilon is not None]
    eps_values = sorted({r.epsilon for r in priv})
    bs_values = sorted({r.batch_size for r in priv})
    cmap = plt.get_cmap("viridis")
    styles = ["-", "--", ":", "-."]
    for ax, attr, title in (
        (axes[0], "curve", "cumulative (progressive) accuracy"),
        (axes[1], "rolling", f"accuracy over the last {result.window:,} records"),
    ):
        for r in result.rows:
            kw: dict[str, Any]
            if r.epsilon is None:
                kw = {"color": "black" if "Hoeffding" in r.model else "tab:red", "lw": 2.2}
            else:
                ci = eps_values.index(r.epsilon) / max(1, len(eps_values) - 1)
                kw = {
                    "color": cmap(0.1 + 0.75 * ci),
                    "ls": styles[bs_values.index(r.batch_size) % 4],
                    "lw": 2.4 if " win=" in r.model else 1.4,
                }
            ax.plot(result.steps, getattr(r, attr), label=r.model, **kw)
        ax.set_title(title)
        ax.set_xlabel("records seen")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{result.dataset}: {result.n:,} records, test-then-train")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
