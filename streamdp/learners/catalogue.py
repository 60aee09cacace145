"""The catalogue of algorithms: names as users type them, classes, parameters, blob formats.

One entry per algorithm; the job layer (:mod:`streamdp.jobs`), the CLI's
``streamdp job algorithms``, :func:`streamdp.learners.load_model` and the
river window classifier all read it. Classes are imported only when asked
for (:meth:`Algorithm.cls`), so reading the catalogue costs no learner import.
What an algorithm needs of a schema is stated here too (:meth:`Algorithm.schema_refusal`),
read by a job's submit and worker, by the learners' ``fit`` and by ``auto``.

=================  ==================================================================
``dpea``           :class:`streamdp.learners.DPEA` (Bai et al.)
``sulq-id3``       :class:`streamdp.learners.SuLQID3` (Friedman & Schuster, Alg. 1)
``diffp-id3``      :class:`streamdp.learners.DiffPID3` (Friedman & Schuster, Alg. 2)
``diffp-c45``      :class:`streamdp.learners.DiffPC45` (Friedman & Schuster)
``hanisch-forest`` :class:`streamdp.learners.HanischForest` (Hanisch)
``private-rdt``    :class:`streamdp.PrivateForest`, geometric noise (Jagannathan et al.)
``kanon-forest``   :class:`streamdp.PrivateForest`, ``mechanism="kanon"`` (Li, Qardaji & Su)
``auto``           :class:`streamdp.learners.AutoPrivateClassifier`: the most accurate of the above, chosen privately
=================  ==================================================================

>>> a = algorithm("diffp-id3")
>>> a.learner, a.format, a.param_names()
('DiffPID3', 'streamdp.diffp_id3', ['max_depth', 'scorer', 'n_bound', 'top_up'])
>>> a.check_params({"max_depth": 4})
{'max_depth': 4}
>>> a.check_params({"max_depth": 99})
Traceback (most recent call last):
...
streamdp.learners.catalogue.AlgorithmError: diffp-id3: max_depth must be an integer in [0, 20], got 99
>>> by_format("streamdp.forest").cls().__name__
'PrivateForest'
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from streamdp.forest.limits import MAX_TREES
from streamdp.validation import AnyOf, Flag, Interval, Options

__all__ = [
    "Algorithm",
    "AlgorithmError",
    "AlgorithmNotAvailable",
    "ALGORITHMS",
    "FORMATS",
    "Param",
    "algorithm",
    "by_format",
    "learners",
]


class AlgorithmError(ValueError):
    """An algorithm or parameter that cannot run as specified; retrying will not help."""


class AlgorithmNotAvailable(AlgorithmError):
    """The algorithm's module is not part of this build."""


@dataclass(frozen=True)
class Param:
    """A parameter a user may set: its rule (type and bounds), default and a short help."""

    name: str
    rule: Any  # a streamdp.validation constraint: Interval, Options, Flag or AnyOf
    default: Any
    help: str = ""


@dataclass(frozen=True)
class Algorithm:
    """One catalogue entry. ``learner`` is the class name inside ``module`` (imported lazily)."""

    name: str
    description: str
    learner: str
    module: str
    format: str
    params: tuple[Param, ...]
    mechanism: str | None = None  # PrivateForest algorithms: the forest's noise mechanism
    required: tuple[str, ...] = ()  # parameters without a usable default
    window: bool = True  # a batch learner the river window classifier may retrain
    categorical_only: bool = False  # splits on categorical attributes only (numeric ones are not used)

    @property
    def is_forest(self) -> bool:
        """True for the stream's :class:`~streamdp.PrivateForest` (random trees), False for a batch learner."""
        return self.mechanism is not None

    def cls(self) -> type[Any]:
        """The estimator class (imported now; :class:`AlgorithmNotAvailable` if absent)."""
        try:
            return getattr(importlib.import_module(self.module), self.learner)
        except (ImportError, AttributeError) as e:
            raise AlgorithmNotAvailable(
                f"algorithm {self.name!r} is not available in this build ({self.module}.{self.learner}: {e})"
            ) from None

    def param_names(self) -> list[str]:
        """Parameters a user may set (schema and epsilon come from elsewhere; test-only noise seeds are excluded)."""
        self.cls()  # an algorithm missing from the build has no parameters to offer
        return [p.name for p in self.params]

    def schema_refusal(self, schema: Any) -> str | None:
        """Why this algorithm cannot learn from ``schema`` (a :class:`~streamdp.records.schema.Schema`), or None.

        The one rule of what each algorithm needs of a schema, read before anything is charged by a job's
        submit and worker, by the learners' ``fit`` and by ``auto`` (which drops such candidates). From the
        schema alone (public). Why: a learner that splits on categorical attributes only, given none, would
        charge its epsilon to fit the class counts alone.

        >>> from streamdp.records.schema import Schema
        >>> numeric = Schema.from_dict({"attributes": [{"name": "x", "type": "numeric", "min": 0, "max": 1}],
        ...                             "label": {"name": "y", "values": [0, 1]}})
        >>> print(algorithm("sulq-id3").schema_refusal(numeric))  # doctest: +ELLIPSIS
        sulq-id3 (SuLQID3) splits on categorical attributes only and this schema has none ...
        >>> algorithm("diffp-c45").schema_refusal(numeric) is None
        True
        """
        if self.categorical_only and not any(bool(c) for c in schema.is_categorical):
            return (
                f"{self.name} ({self.learner}) splits on categorical attributes only and this schema has none "
                f"(its attributes {list(schema.names)} are numeric): it would spend its epsilon on the class "
                "counts alone; bin them into categories, or use diffp-c45 or private-rdt"
            )
        return None

    def check_schema(self, schema: Any) -> None:
        """:class:`AlgorithmError` with :meth:`schema_refusal`'s reason, if any."""
        why = self.schema_refusal(schema)
        if why is not None:
            raise AlgorithmError(why)

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}

    def check_params(self, params: dict) -> dict:
        """``params`` with every name known and every value within its rule, or :class:`AlgorithmError`."""
        if not isinstance(params, dict):
            raise AlgorithmError(f"params must be a mapping, got {type(params).__name__}")
        rules = {p.name: p.rule for p in self.params}
        for k in params:
            if k == "noise_seed":
                raise AlgorithmError(
                    "noise_seed is for tests only (it makes a model NOT private); jobs are always private"
                )
            if k not in rules:
                raise AlgorithmError(f"algorithm {self.name!r} has no parameter {k!r}; parameters: {', '.join(rules)}")
        missing = [k for k in self.required if k not in params]
        if missing:
            raise AlgorithmError(f"{self.name} needs parameters {', '.join(missing)}")
        out = {}
        for k, v in params.items():
            try:
                rules[k].check(v, k)
            except ValueError as e:
                raise AlgorithmError(f"{self.name}: {e}") from None
            out[k] = v
        return out

    def describe(self) -> dict:
        """Name, description, availability and parameters with their rules and defaults (for the CLI)."""
        try:
            names = self.param_names()
        except AlgorithmNotAvailable as e:
            return {"name": self.name, "description": self.description, "available": False, "reason": str(e)}
        return {
            "name": self.name,
            "description": self.description,
            "available": True,
            "params": names,
            "rules": {p.name: {"rule": str(p.rule), "default": p.default, "help": p.help} for p in self.params},
        }


# -- shared parameter rules ----------------------------------------------------------------------
# Bounds: what the papers use, with room, and what fits in memory and time on a small machine. A job is
# checked against them before its ledger is charged (a job that cannot finish must not spend budget).
MAX_DEPTH = 20  # every learner splits its budget over the levels: past ~10 each query gets almost nothing
_SEED = Param(
    "seed", AnyOf((Interval(int, 0, 2**128, closed="left"), Options((None,)))), None, "reproducible structure (public)"
)
_N_BOUND = Param(
    "n_bound",
    AnyOf((Interval(int, 1, 10**12), Options((None,)))),
    None,
    "most records an InfoGain/GainRatio split score uses, enforced by the data layer "
    "(None: the root's noisy count plus a margin)",
)
from streamdp.options import (  # noqa: E402
    BUDGETS,
    DEFAULT_THRESHOLD_SHARE,
    FOREST_VOTES,
    MAX_PRIOR_TREES,
    SCORERS,
    VOTES,
)

_TOP_UP = Param(
    "top_up",
    Flag(),
    True,
    "a branch that stops early spends what it has left on its leaf's counts (false: the paper's budget)",
)


@dataclass(frozen=True)
class CandidateList:
    """A rule: a non-empty list of ``[algorithm, params]`` pairs (each checked against its entry when built)."""

    def __str__(self) -> str:
        return "a non-empty list of [algorithm, {params}]"

    def accepts(self, value: Any) -> bool:
        return (
            isinstance(value, (list, tuple))
            and len(value) > 0
            and all(
                isinstance(c, (list, tuple)) and len(c) == 2 and isinstance(c[0], str) and isinstance(c[1], dict)
                for c in value
            )
        )

    def check(self, value: Any, name: str) -> Any:
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self}, got {value!r}")
        return value


def _depth(default: int, low: int = 0) -> Param:
    return Param("max_depth", Interval(int, low, MAX_DEPTH), default, "split levels")


def _forest_params(kanon: bool) -> tuple[Param, ...]:
    base = (
        Param(
            "n_trees",
            AnyOf((Interval(int, 1, MAX_TREES), Options((None,)))),
            None,
            "random trees (None: 10 drawn, of which the fit keeps as many as the released signal carries)",
        ),
        Param(
            "height", AnyOf((Interval(int, 1, 30), Options((None,)))), None, "levels per tree (None: from the schema)"
        ),
        _SEED,
        Param(
            "vote",
            AnyOf((Options(FOREST_VOTES), Options((None,)))),
            None,
            "how trees combine (None: trees, each tree's estimate averaged, without n_trees; else proba)",
        ),
        Param("budget", Options(BUDGETS), "split", "how epsilon is shared among trees"),
    )
    if not kanon:
        return base + (
            Param(
                "threshold_share",
                AnyOf((Interval(float, 0, 1, closed="left"), Options((None,)))),
                None,
                "share of epsilon spent on noisy histograms to draw numeric thresholds where the records are "
                f"(None: {DEFAULT_THRESHOLD_SHARE:g} with a numeric attribute that declares no quantiles, else 0)",
            ),
        )
    return base + (
        Param("k", Interval(int, 1, 10**9), None, "k-anonymity threshold"),
        Param("beta", Interval(float, 0, 1, closed="neither"), None, "sampling rate"),
    )


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            "dpea",
            "Bai et al.'s deep embedding with MCMC",
            "DPEA",
            "streamdp.learners.dpea",
            "streamdp.dpea",
            (
                _depth(5, low=1),
                Param(
                    "embed_depth", AnyOf((Interval(int, 1, MAX_DEPTH), Options(("whole",)))), 1, "levels drawn per step"
                ),
                Param("min_instances", Interval(float, 0, 1e12), 20, "a node with fewer (noisy) records stops"),
                # Bai et al.'s chain: a window of scores and a step cap (the trace is step_limit floats per step)
                Param("buffer_size", Interval(int, 1, 10_000), 50, "MCMC stopping rule: window of scores"),
                Param("step_limit", Interval(int, 1, 100_000), 1000, "MCMC stopping rule: most steps"),
                Param("variance_threshold", Interval(float, 0, 1e12), 0.0, "MCMC stopping rule: score variance"),
                # Bai et al. sample 2 levels exactly; the exact sampler's work grows like (attributes x arity)^levels,
                # 3 levels of a 22-attribute schema is already millions of node scores
                Param("exact_max_levels", Interval(int, 1, 3), 2, "steps this shallow are sampled exactly"),
                _TOP_UP,
            ),
            categorical_only=True,
        ),
        Algorithm(
            "sulq-id3",
            "Friedman & Schuster's SuLQ-based ID3",
            "SuLQID3",
            "streamdp.learners.id3",
            "streamdp.sulq_id3",
            (_depth(5), _TOP_UP),
            categorical_only=True,
        ),
        Algorithm(
            "diffp-id3",
            "Friedman & Schuster's DiffPID3",
            "DiffPID3",
            "streamdp.learners.id3",
            "streamdp.diffp_id3",
            (_depth(5), Param("scorer", Options(SCORERS), "infogain", "split quality"), _N_BOUND, _TOP_UP),
            categorical_only=True,
        ),
        Algorithm(
            "diffp-c45",
            "Friedman & Schuster's DiffPC4.5",
            "DiffPC45",
            "streamdp.learners.c45",
            "streamdp.diffp_c45",
            (
                _depth(5),
                Param("scorer", Options(SCORERS), "gini", "split quality"),
                _N_BOUND,
                Param("prune", Flag(), True, "C4.5 error-based pruning"),
                Param("cf", Interval(float, 0, 1, closed="neither"), 0.25, "C4.5 certainty factor"),
                _TOP_UP,
            ),
        ),
        Algorithm(
            "hanisch-forest",
            "Hanisch's private random forest",
            "HanischForest",
            "streamdp.learners.hanisch",
            "streamdp.hanisch_forest",
            (
                _depth(3),
                Param("n_trees", Interval(int, 1, MAX_TREES), 10, "random trees"),
                Param(
                    "max_leaves",
                    Interval(int, 1, 1_000_000),
                    1_000_000,
                    "refuse trees that could have more leaves (at most a million: n_trees x leaves x classes "
                    "counts are held in memory)",
                ),
                _SEED,
                Param(
                    "prior_trees",
                    Interval(int, 0, MAX_PRIOR_TREES),
                    1,
                    "prior stumps: class totals released at one tree's share, so the class prior is measured "
                    "(our addition)",
                ),
                Param(
                    "vote",
                    Options(VOTES),
                    "proba",
                    "proba: the trees' evidence pooled depth by depth (our addition); majority: Hanisch's vote",
                ),
            ),
            categorical_only=True,
        ),
        Algorithm(
            "private-rdt",
            "Jagannathan et al.'s one-shot Private-RDT (random trees, geometric noise)",
            "PrivateForest",
            "streamdp.forest",
            "streamdp.forest",
            _forest_params(False),
            mechanism="geometric",
        ),
        Algorithm(
            "kanon-forest",
            "random trees with beta-sampling and a k threshold (Li, Qardaji & Su)",
            "PrivateForest",
            "streamdp.forest",
            "streamdp.forest",
            _forest_params(True),
            mechanism="kanon",
            required=("k", "beta"),
        ),
        Algorithm(
            "auto",
            "the most accurate of a few learners and settings, chosen privately (exponential mechanism)",
            "AutoPrivateClassifier",
            "streamdp.learners.selection",
            "streamdp.auto",  # (never written: a fitted selection writes its winner's blob)
            (
                Param(
                    "candidates",
                    AnyOf((CandidateList(), Options((None,)))),
                    None,
                    "[[algorithm, {params}], ...] to choose from (None: a few by the schema)",
                ),
                Param(
                    "selection_share",
                    Interval(float, 0, 1, closed="right"),
                    0.1,
                    "share of epsilon spent on choosing; the rest refits the winner on every record (1: no refit)",
                ),
                _SEED,
                Param(
                    "holdout_share",
                    AnyOf((Interval(float, 0, 1, closed="neither"), Options((None,)))),
                    None,
                    "share of records that scores the candidates (None: as many as each candidate's)",
                ),
            ),
            window=False,
        ),
    )
}

# blob format tag -> the algorithm that writes it (the forest's tag names its first algorithm)
FORMATS: dict[str, Algorithm] = {}
for _a in ALGORITHMS.values():
    FORMATS.setdefault(_a.format, _a)
del _a


def algorithm(name: str) -> Algorithm:
    """The algorithm called ``name`` (:class:`AlgorithmError` naming the known ones otherwise)."""
    a = ALGORITHMS.get(name) if isinstance(name, str) else None
    if a is None:
        raise AlgorithmError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}")
    return a


def by_format(fmt: Any) -> Algorithm:
    """The algorithm whose models carry blob format tag ``fmt`` (:class:`AlgorithmError` otherwise)."""
    a = FORMATS.get(fmt) if isinstance(fmt, str) else None
    if a is None:
        raise AlgorithmError(f"unknown model format {fmt!r}; known: {sorted(FORMATS)}")
    return a


def learners() -> dict[str, Algorithm]:
    """The batch learners (not the stream's forest), by name: what the river window classifier can retrain."""
    return {a.name: a for a in ALGORITHMS.values() if not a.is_forest and a.window}
