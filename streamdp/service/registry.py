"""The model registry: create (draw the structure, store the spec, publish version 0), list, show, delete.

A model's **spec** (``sdp:{NAME}:spec``) is the blob of the empty forest
(:meth:`PrivateForest.to_bytes` at version 0): schema, forest settings,
privacy parameters and the random structure, drawn once here from a
cryptographically seeded RNG. It holds nothing about the data. The registry
hash ``sdp:registry`` maps each name to a public JSON summary. Batch jobs'
models have their own key space and registry (``sdp:job-results``,
:class:`~.keys.Keys` ``job=True``); :func:`published_keys` finds either.

Creating a private model is one spend on the privacy budget ledger of the
source named like the model (:class:`~streamdp.service.ledger_store.RedisLedger`):
its epsilon (and delta) is charged before the spec exists, i.e. before any
worker can read a record. Deleting a model keeps its ledger: spends are
history, and the privacy loss they record is permanent.
"""

from __future__ import annotations

import json
import math
import time
import uuid
import warnings
from typing import Any

import redis

from streamdp.forest.growth import grows_by_default, service_ceiling
from streamdp.forest.model import PrivateForest
from streamdp.forest.structure import DEFAULT_MAX_CELLS, TooLargeError, fitting_height
from streamdp.options import VOTES
from streamdp.privacy.secure_random import NearlyExactWarning, NotPrivateWarning
from streamdp.records.schema import Schema
from streamdp.release.continual import MIN_RELEASE_EVERY, ReleasePolicy, class_total_sd
from streamdp.service.connection import connect
from streamdp.service.durability import check_replay
from streamdp.service.keys import GROUP, JOB_RESULTS, REGISTRY, Keys
from streamdp.service.ledger_store import charge_model
from streamdp.service.model_store import (
    ModelExists,
    ModelNotFound,
    batch_id_salt,
    load_policy,
    load_spec,
    load_unit,
    no_stream_model,
    published_keys,
    require_model,
)
from streamdp.service.noise_facts import release_noise
from streamdp.service.published import published_fields, release_record
from streamdp.service.rollback import MAKE_KEY, key_fingerprint, load_noise_key
from streamdp.service.schedule import cadence_fields, cadence_of, load_cadence
from streamdp.service.size_limits import DEFAULT_BULK_LIMIT, blob_max_cells, grown_blob_bound, server_value_limit
from streamdp.service.units import unit_of
from streamdp.validation import check_choice, check_epsilon, check_flag

#: Counts-sized arrays a ``tree`` model's state holds: about ``2 * log2(T)`` after T windows (50 at 2**24).
TREE_STATE_COPIES = 50

__all__ = [
    "create_model",
    "load_policy",
    "load_cadence",
    "list_models",
    "list_job_results",
    "show_model",
    "delete_model",
    "load_spec",
    "require_model",
    "published_keys",
    "load_unit",
    "no_stream_model",
    "ModelNotFound",
    "ModelExists",
    "server_value_limit",
    "blob_max_cells",
    "grown_blob_bound",
    "DEFAULT_BULK_LIMIT",
]


#: Summary fields for producers, not for display: the schema and the batch-id salt (:func:`batch_id_salt`).
PRODUCER_FIELDS = ("schema", "batch_id_salt")


def _summary(forest: PrivateForest, name: str, policy: ReleasePolicy, start: float, spec: bytes, cadence: Any) -> dict:
    return {
        "name": name,
        "n_trees": forest.n_trees,
        "prior_trees": forest.prior_trees,
        "height": forest.height,
        "max_leaves": forest.structure.max_leaves,
        "n_classes": forest.schema.n_classes,
        "n_attributes": forest.schema.n_attributes,
        "mechanism": forest.mechanism,
        "epsilon": forest.epsilon if math.isfinite(forest.epsilon) else "inf",
        "delta": forest.delta,
        "k": forest.k,
        "beta": forest.beta,
        "budget": forest.budget,
        "private": forest.private,
        "created": start,
        "release": policy.to_dict(),
        "release_start": start,
        **({} if cadence is None else {"cadence": cadence.to_dict()}),
        "schema": forest.schema.to_dict(),
        "batch_id_salt": batch_id_salt(spec).hex(),
    }


def create_model(
    r: Any,
    name: str,
    schema: Schema,
    n_trees: int = 10,
    height: int | None = None,
    epsilon: float = 1.0,
    mechanism: str = "geometric",
    k: int | None = None,
    beta: float | None = None,
    *,
    seed: int | None = None,
    vote: str = "proba",
    budget: str = "split",
    exist_ok: bool = False,
    ledger_budget: float | None = None,
    release: str | None = None,
    release_every: float | None = None,
    levels: int | None = None,
    estimator: str = "honaker",
    privacy_id: str | None = None,
    max_records_per_id: int | None = None,
    max_ids: int | None = None,
    noise_key_file: str | None = None,
    max_lag: float | None = None,
    cadence: str | None = None,
    half_life: float | None = None,
    half_life_unit: str = "releases",
    not_private: bool = False,
) -> PrivateForest:
    """Create model ``name``: draw its structure, charge the ledger, store the spec, publish the empty version 0.

    The model's epsilon (and delta) is one spend on the ledger of source
    ``name``. ``ledger_budget`` is that source's total epsilon: set when the
    source has no budget yet (default: the model's epsilon), raised when it
    is larger than the current one (never lowered here). A budget too small
    for the model raises :class:`~streamdp.privacy.ledger.BudgetExceeded` and leaves
    no model behind.

    ``epsilon`` must be finite: the service publishes only private models (its stats and exports call the
    released counts differentially private), so ``epsilon=inf`` raises ValueError before anything is stored or
    charged, by :func:`~streamdp.validation.check_epsilon`'s rule, the one batch jobs are refused by
    (``jobs.runner.check_params``). ``not_private=True`` is for tests only: it admits ``epsilon=inf`` (exact
    counts, stored ``"private": false``, never charged, refused over a source that has a budget) with one
    :class:`~streamdp.privacy.secure_random.NotPrivateWarning`.

    ``release`` is the release policy (:class:`~streamdp.release.continual.ReleasePolicy`):
    ``"window"`` (the exact tallies of ``release_every`` seconds are noised
    once and released together, empty windows too, on a public schedule from the
    model's creation time), ``"grow"`` (the same windows on trees that start from
    their roots and deepen as the released counts allow, never past ``height``:
    height is a ceiling, :mod:`streamdp.forest.growth`), ``"tree"`` (the same windows through the binary tree
    mechanism with no horizon, :mod:`streamdp.release.tree`; ``levels``, the fixed-horizon tree's, is refused) or ``"batch"`` (each pushed batch noised once,
    Jagannathan et al.; ``release_every`` is then refused: each batch is a release). ``None`` (default): ``"grow"`` where
    :func:`streamdp.forest.growth.grows_by_default` says so (every attribute categorical) and the forest
    :attr:`~streamdp.PrivateForest.can_grow`, else ``"window"``. The policy is public and fixed for the model's life.
    ``height=None``: :meth:`ForestStructure.draw`'s default (the budgeted draw: each tree within
    :func:`streamdp.forest.structure.leaf_budget` and the server's cells), except for a model that may grow
    (``"grow"``, or the default) over a schema whose attributes are all categorical: it gets
    :func:`streamdp.forest.structure.ceiling_height` (the river classifier's default), lowered by
    :func:`streamdp.forest.structure.fitting_height` where the trees could exceed what the server accepts
    (:func:`streamdp.forest.growth.service_ceiling`). A default model whose grown blob would not fit
    (:func:`grown_blob_bound`) is released by ``"window"`` on the same drawn trees; an explicit ``"grow"`` draws
    within the grown blob's bound.

    ``max_lag`` (seconds, ``"window"`` and ``"grow"``): the longest window. Window lengths follow the released
    record rate between ``release_every`` and ``max_lag`` (default :data:`~streamdp.release.cadence.DEFAULT_MAX_LAG`),
    and releases that cannot be told from an empty one are left out of the published counts
    (:mod:`streamdp.release.cadence`); ``max_lag=release_every`` keeps the clock's windows but still leaves the
    noise-only releases out (``cadence="fixed"`` merges every one). It needs a prior stump
    and geometric or Laplace noise (the released record count it reads); other models release on the clock.

    ``cadence``: ``"adaptive"`` (the windows above; refused where releases carry no record count), ``"fixed"``
    (the clock's windows of ``release_every``, every release merged, the noise-only ones too: each idle window
    adds a noise draw to every count, so accuracy falls while no data flow) or None (adaptive where the model
    can measure its releases, else fixed).

    ``half_life`` (``"window"`` only; ``release=None`` then means ``"window"``): forgetting for drifting streams.
    The published counts are ``C_t = lam_t * C_(t-1) + D_t`` over the released noisy deltas, halving every
    ``half_life`` merged releases or noisy records (``half_life_unit``): post-processing, no epsilon, and the
    noise variance per cell stays below ``v / (1 - lam**2)`` forever (:mod:`streamdp.service.forgetting`).

    ``privacy_id`` (a column producers send beside each record, never an attribute) with ``max_records_per_id``
    (K) makes the unit of privacy a person: at most K records per person are merged over the whole stream, the
    forest's noise is drawn at ``epsilon / K`` per record and the ledger charged ``epsilon`` (per person);
    ``max_ids`` bounds the persons kept (:mod:`.units`: the proof sketch, what happens at the bound). Without it
    the unit is a record. Refused with the k-anonymity mechanism, and without a noise key (ValueError, before
    anything is charged: the workers hash the ids with a key derived from it).

    ``noise_key_file`` (default ``$STREAMDP_NOISE_KEY_FILE``): the workers' noise key; its fingerprint is stored
    (:func:`~streamdp.service.rollback.key_fingerprint`), and a worker with another key, or none, refuses to draw.

    Raises :class:`ModelExists` unless ``exist_ok`` (then the stored model is returned), and
    :class:`~streamdp.service.durability.ReplayUnsafe` on a server that would drop the model when it restarts.
    """
    r = connect(r)
    keys = Keys(name)

    if release == "batch" and release_every is not None:
        raise ValueError(
            "release_every (CLI --release-every) is the schedule of release='window', 'grow' or "
            "'tree': with release='batch' each pushed batch is its own release"
        )
    if levels is not None:
        raise ValueError(
            "levels belonged to the fixed-horizon binary tree of earlier versions; release='tree' now counts "
            "with no horizon and has no levels"
        )
    if max_lag is not None and release in ("batch", "tree"):
        raise ValueError(
            f"max_lag (CLI --max-lag) bounds the windows of release='window' or 'grow'; release={release!r} "
            + ("releases each pushed batch" if release == "batch" else "releases its windows on the clock")
        )
    if half_life is not None and release not in (None, "window"):
        raise ValueError(
            f"half_life (CLI --half-life) decays the released deltas of release='window'; release={release!r} "
            + ("releases each pushed batch" if release == "batch" else "publishes no per-window deltas to decay")
        )
    if half_life is None and half_life_unit != "releases":
        raise ValueError("half_life_unit (CLI --half-life-unit) needs half_life (CLI --half-life)")
    release = "window" if half_life is not None else release
    release_every = 1.0 if release_every is None else release_every

    def policy_of(kind: str) -> ReleasePolicy:
        pol = ReleasePolicy(kind, release_every, None, estimator, half_life, half_life_unit)
        pol.check_mechanism(mechanism)
        if kind != "batch" and pol.release_every < MIN_RELEASE_EVERY:
            raise ValueError(
                f"release_every (seconds) must be at least {MIN_RELEASE_EVERY:g}, got {release_every!r}: "
                "each release adds a noise draw to every count and writes the model's counts"
            )
        return pol

    policy = None if release is None else policy_of(release)  # an explicit one is checked before anything is drawn
    epsilon = check_epsilon(epsilon, "epsilon", allow_inf=check_flag(not_private, "not_private"))
    unit = unit_of(privacy_id, max_records_per_id, max_ids, release, mechanism)
    if unit is not None and privacy_id in [*schema.names, schema.label.name]:
        raise ValueError(f"privacy_id {privacy_id!r} is a schema attribute or the label: it must not be learned from")
    if unit is not None and load_noise_key(noise_key_file) is None:  # before anything is charged or stored
        raise ValueError(
            f"privacy_id {privacy_id!r} needs the workers' noise key before the model is created (the workers hash "
            f"each person's id with a key derived from it; nothing was charged): {MAKE_KEY}, then give every "
            "worker host the same file"
        )
    declared = epsilon
    epsilon = epsilon / (unit.max_records_per_id if unit else 1)  # the noise per record: epsilon per K records
    # the one rule for whether this model grows (the default needs its grown blob to fit too, below)
    may_grow = release == "grow" or (
        release is None and grows_by_default(schema) and PrivateForest.growable(epsilon, mechanism)
    )
    if release == "grow" and math.isinf(epsilon):
        raise ValueError(
            "release='grow' needs a finite epsilon: without noise there is nothing to grow against "
            "(release='window' keeps the drawn trees)"
        )
    check_replay(r, refuse=True)  # a Redis that drops transactions at restart would erase the model
    start = time.time()
    if ledger_budget is not None:
        check_epsilon(ledger_budget, "ledger_budget")
    limit = server_value_limit(r)
    valid_trees = isinstance(n_trees, int) and n_trees >= 1  # else PrivateForest.create says what is wrong
    copies = TREE_STATE_COPIES if release == "tree" else 1  # (tree: its state's counts-sized arrays)
    cells = (
        blob_max_cells(schema, n_trees, limit, grows=release == "grow", count_copies=copies)
        if valid_trees
        else DEFAULT_MAX_CELLS
    )
    too_big = (
        f"model {name!r} would not fit in this Redis server: its blob must stay within {limit:,} bytes "
        f"(the server's proto-max-bulk-len), i.e. at most {cells:,} counts (trees x leaves x classes)"
        + (", with release='grow' adding a noise variance per node" if release == "grow" else "")
    )
    if cells < n_trees * schema.n_classes:
        raise TooLargeError(too_big + ". Lower the number of trees, or raise proto-max-bulk-len.")
    ceiling = service_ceiling(schema, n_trees) if height is None and may_grow and valid_trees else None
    if ceiling is not None:  # all categorical: the river default's ceiling; else the budgeted draw (height None)
        height = fitting_height(schema, ceiling, n_trees, min(DEFAULT_MAX_CELLS, cells))
    check_choice(vote, "vote", VOTES)  # (the service's readers implement these: not the forest's "trees")
    if math.isinf(epsilon):  # (not_private=True, tests only) said once, here, not by PrivateForest too
        warnings.warn(
            f"model {name!r}: epsilon=inf releases exact counts, NOT private", NotPrivateWarning, stacklevel=2
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if not_private else "default", NotPrivateWarning)
        warnings.simplefilter("ignore", NearlyExactWarning)  # the library's rule for one batch: show_model states the
        try:  # model's, for its release policy (noise_facts), and model create prints it
            forest = PrivateForest.create(
                schema,
                n_trees=n_trees,
                height=height,
                epsilon=epsilon,
                mechanism=mechanism,
                k=k,
                beta=beta,
                seed=seed,
                vote=vote,
                budget=budget,
                max_cells=min(DEFAULT_MAX_CELLS, cells),
                threshold_share=0.0,  # a stream's trees are drawn before any record (declared quantiles apply)
            )
        except TooLargeError as e:
            if cells >= DEFAULT_MAX_CELLS:
                raise
            raise TooLargeError(f"{too_big}; {e}") from None
    spec = forest.to_bytes()  # version 0: the structure every release's counts belong to
    grown_bytes = grown_blob_bound(forest, len(spec))
    if policy is None:  # the default: grow where the rule above says so and the grown blob fits the server
        policy = policy_of("grow" if may_grow and grown_bytes <= limit else "window")
    try:  # before anything is stored or charged
        policy.check_drawable(forest.epsilon_per_tree, forest.mechanism)
    except ValueError as e:
        raise ValueError(f"epsilon={forest.epsilon:g} is too small for this model: {e}") from None
    cadence_rule = cadence_of(policy, forest, max_lag, cadence)
    pub = published_fields(forest, zero=True)  # version 0's zero counts: no bytes (published.ZERO_COUNTS)
    if len(spec) > limit:  # the bound above should make this unreachable; a last check before anything is stored
        raise TooLargeError(f"{too_big}; its blob has {len(spec):,} bytes")
    if policy.kind == "grow" and grown_bytes > limit:
        raise TooLargeError(
            f"{too_big}: release='grow' publishes the grown trees with a noise variance per node, "
            f"up to {grown_bytes:,} bytes once the data fill every level; use release='window', "
            "fewer trees or a lower height"
        )
    noise_key = key_fingerprint(load_noise_key(noise_key_file))  # checked by every worker before it draws
    if r.hexists(JOB_RESULTS, name):
        raise ModelExists(f"{name!r} is a batch job's model (streamdp model delete {name} removes it)")
    summary = _summary(forest, name, policy, start, spec, cadence_rule)
    if unit is not None:
        summary.update(unit=unit.to_dict(), epsilon=declared, epsilon_per_record=forest.epsilon)
    if not r.hsetnx(REGISTRY, name, json.dumps(summary)):
        if exist_ok:
            return load_spec(r, name)
        raise ModelExists(f"model {name!r} already exists (delete it first: streamdp model delete {name})")
    model_id = uuid.uuid4().hex  # changes if the name is re-created
    # Order: claim the name (above), charge, then store the spec. No record can be read before the spec
    # exists, so charging first never under-charges; a crash after the charge only over-charges (safe).
    # A refused charge releases the name claim, so nothing is left behind.
    try:
        charge_model(
            r,
            name,
            declared if unit else forest.epsilon,
            forest.delta,
            ledger_budget,
            model_id,
            unit.privacy_id if unit else None,
            unit.max_records_per_id if unit else None,
        )
    except BaseException:
        r.hdel(REGISTRY, name)
        raise
    now = int(time.time() * 1000)
    p = r.pipeline(transaction=True)
    p.set(keys.spec, spec)
    p.hset(
        keys.state,
        mapping={
            "model_id": model_id,
            "version": 0,
            "counts": pub["counts"],
            "releases": 0,
            "open": 1,
            "release": json.dumps(policy.to_dict()),
            "release_start": repr(start),
            "noise_layout": "blocks",
            "unit": json.dumps(unit.to_dict()) if unit else "",
            "noise_key": noise_key,
            **cadence_fields(cadence_rule, start, policy),
        },
    )
    p.hset(
        keys.pub_model,
        mapping={
            **pub,
            "updated": now,
            "model_id": model_id,
            "release": json.dumps(policy.to_dict()),
            "release_start": repr(start),
            **cadence_fields(cadence_rule, start, policy),
            "unit": json.dumps(unit.to_dict()) if unit else "",
        },
    )
    p.set(keys.pub_version(0), release_record(forest, fill_ok=True))  # zero counts: their shape alone, not a copy
    p.execute()
    try:
        r.xgroup_create(keys.records, GROUP, id="0", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise
    return forest


def list_models(r: Any) -> dict[str, dict]:
    """The stream models' public summaries (``sdp:registry``)."""
    return _read_registry(connect(r), REGISTRY)


def list_job_results(r: Any) -> dict[str, dict]:
    """The batch jobs' published models (``sdp:job-results``): name -> summary with ``kind: "job"``."""
    return _read_registry(connect(r), JOB_RESULTS)


def _read_registry(r: redis.Redis, key: str) -> dict[str, dict]:
    out = {}
    for k, v in sorted(r.hgetall(key).items()):
        try:
            out[k if isinstance(k, str) else k.decode()] = {
                f: x for f, x in json.loads(v).items() if f not in PRODUCER_FIELDS
            }
        except (ValueError, UnicodeDecodeError):
            out[k if isinstance(k, str) else k.decode(errors="replace")] = {"error": "unreadable registry entry"}
    return out


def show_model(r: Any, name: str) -> dict:
    """Public facts about a model: settings, published version, batches merged, last update."""
    r = connect(r)
    keys = Keys(name)
    raw = r.hget(REGISTRY, name)
    if raw is None:
        keys = Keys(name, job=True)
        raw = r.hget(JOB_RESULTS, name)
    if raw is None:
        raise ModelNotFound(f"no model named {name!r}")
    info = {f: x for f, x in json.loads(raw).items() if f not in PRODUCER_FIELDS}
    version, updated, releases, sched, nv = r.hmget(
        keys.pub_model, "version", "updated", "releases", "schedule", "noise_variance"
    )
    info["version"] = int(version or 0)
    info["batches_merged"] = int(releases or 0)  # kept for old readers: releases (batches or windows)
    info["releases"] = int(releases or 0)  # merged into the published counts
    if sched is not None:  # a model with a cadence: its windows (public: the clock and released values)
        info["schedule"] = json.loads(sched)
    info["windows"] = info["schedule"]["released"] if sched is not None else info["releases"]
    info["last_update"] = int(updated) / 1000 if updated else None
    info.setdefault("release", ReleasePolicy("batch").to_dict())
    if info.get("kind") != "job" and info["mechanism"] in ("geometric", "laplace"):
        info.update(release_noise(info, scheduled=sched is not None))
    decayed = (info["release"] or {}).get("half_life") is not None
    if decayed:  # the published noise variance per cell (public), bounded by the half-life
        info["noise_variance"] = float(nv) if nv is not None and info["releases"] else 0.0
    if info.get("kind") != "job":
        info["class_total_sd"] = class_total_sd(
            ReleasePolicy.from_dict(info["release"]),
            info["releases"],
            float(info.get("epsilon_per_record", info["epsilon"])),  # (the noise's: epsilon / K with a privacy id)
            info["mechanism"],
            info["budget"],
            info["n_trees"],
            info.get("prior_trees", 0),
            info["noise_variance"] if decayed else None,
        )
    return info


def delete_model(r: Any, name: str) -> int:
    """Delete every key of model ``name`` except its ledger; returns the number of keys deleted.

    The ledger (``sdp:{NAME}:ledger*``) stays: spends are history and privacy loss is
    permanent, so a model re-created under the same name is charged against what is already spent.
    """
    r = connect(r)
    if not r.hexists(REGISTRY, name) and r.hexists(JOB_RESULTS, name):  # a batch job's model
        found = list(r.scan_iter(match=Keys(name, job=True).pattern, count=1000))
        n = r.delete(*found) if found else 0
        r.hdel(JOB_RESULTS, name)
        return n
    keys = Keys(name)
    ledger_prefix = f"{keys.prefix}:ledger".encode()
    n = 0
    batch = []
    for k in r.scan_iter(match=keys.pattern, count=1000):
        if (k if isinstance(k, bytes) else k.encode()).startswith(ledger_prefix):
            continue
        batch.append(k)
        if len(batch) >= 500:
            n += r.delete(*batch)
            batch = []
    if batch:
        n += r.delete(*batch)
    existed = r.hdel(REGISTRY, name)
    if not existed and n == 0:
        raise ModelNotFound(f"no model named {name!r}")
    return n
