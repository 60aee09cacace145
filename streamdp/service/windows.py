"""Release windows in the service: seal, noise once, merge and publish on the public schedule.

For ``release="window"``, ``"grow"`` and ``"tree"`` (:mod:`streamdp.continual`) workers add each
entry's EXACT tally into the open window's accumulator ``priv:acc:<w>`` (a hash with one
field per add: ``b:<first batch id>`` -> the add's nonzero cells, :func:`sparse_cells`; worker-only) in the atomic add script (:data:`.commit.WINDOW_ADD_LUA`),
which records the batch id and XACKs in the same step. The open window is the
state field ``open``: a public rule (the first window not yet sealed), read inside
the script, so an entry lands in exactly one window.

Closing window ``w`` is three idempotent steps any worker may run (no lock; a short lease
``priv:closing:<w>`` only keeps the other workers from duplicating a close, never decides anything):

1. **seal** (:data:`.commit.SEAL_LUA`): once the clock passed ``w``'s end
   (:func:`~streamdp.continual.windows_due`, ``release_every`` seconds from the
   model's creation), ``open`` moves from ``w`` to ``w+1`` if nothing is sealed yet;
   from then on adds go to ``w+1`` and ``priv:acc:<w>`` is frozen;
2. **noise**: read the state, the frozen accumulator (and the tree state) in one
   MULTI; draw the window's noisy delta (``window``) or each closing node's noisy
   sum (``tree``), or the whole grown release (``grow``: structure and counts, as a model blob), and store
   it with ``SET NX`` (``priv:wdelta:<w>``,
   ``priv:node:<epoch:level:index>``) before use: a racing or later closer reads the
   stored draw, so each release's noise is drawn once;
3. **merge** (:meth:`WindowCloser._release`, one MULTI/EXEC under WATCH of the state): CAS on
   ``releases == w-1``, ``open > w`` and the version;
   write counts (``grow``: the grown blob; and the tree state), publish ``pub:model``/``pub:v:<N>``, delete the
   accumulator, set a TTL on the stored noise, announce. Exactly one closer wins.

**Catching up** (``window`` only): a worker behind the clock (workers down, or a model created long
before its first push) would seal and release each due window alone: four counts-sized writes each
(stored noise, state, ``pub:model``, retained version; 0.54 s a window at Adult's default height). Instead
one seal takes up to :data:`FOLD_MAX` due windows (``open`` moves from ``w`` past them: the windows after
``w`` were never open and hold nothing) and one close walks them: per window its draw (the one a close of
that window alone makes) stored under ``priv:wdelta:<j>`` and, where the retention keeps it, its version
``pub:v:<N>`` (:meth:`WindowCloser._retain`); state and ``pub:model`` once, at the end, with
``version == releases``. What is published is what closing them one at a time publishes (the same
versions, releases and draws), so how far behind a worker was shows in no published number.

A closer killed after any step leaves state another worker's next tick resumes from:
nothing sealed-but-lost (adds after the seal go to ``w+1``), nothing noised twice
(step 2's SET NX), nothing merged twice (step 3's CAS). Windows are released in
order and every due window is released, empty or not, so the number of releases
is a function of the clock alone.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from typing import Any, Callable

import numpy as np
import redis

from ..continual import ReleasePolicy, TreeState, noisy_node, published_variance, window_delta
from ..estimation import cell_variance
from ..forest import PrivateForest
from .commit import SEAL_LUA
from .group import jlog
from .keys import Keys, as_str
from .published import counts_from_bytes, counts_view, drawn_once, release_record_parts, stored_once
from .rollback import NoiseSource, RollbackGuard

__all__ = ["WindowCloser", "sparse_cells", "joined_cells", "acc_counts"]

log = logging.getLogger("streamdp.worker")
#: The most windows one tick releases (then the worker reads its entries, and ticks again).
MAX_WINDOWS_PER_TICK = 1000
#: The most due windows one seal takes, closed in one pass (``window`` only), when a worker is behind the clock.
FOLD_MAX = 64


#: Field prefix of one add's tally in a window accumulator (the rest of the name: the add's first batch id).
ADD_FIELD = b"b:"


def sparse_cells(counts: np.ndarray) -> bytes:
    """Nonzero cells of an exact tally as one bytes value: the flat indices, then their counts
    (little-endian int64 each). The add script stores it whole as one field of the window's
    accumulator (one HSET per add, not one HINCRBY per cell).

    >>> np.frombuffer(sparse_cells(np.array([[0, 2], [0, 1]])), dtype="<i8").tolist()
    [1, 3, 2, 1]
    """
    flat = np.asarray(counts).ravel()
    nz = np.flatnonzero(flat)
    out = np.empty(2 * len(nz), dtype="<i8")
    out[:len(nz)], out[len(nz):] = nz, flat[nz]
    return out.tobytes()


def joined_cells(parts: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    """Several tallies' nonzero cells (``(flat indices, counts)`` pairs,
    :meth:`streamdp.forest.PrivateForest.sparse_tally_encoded`) as one :func:`sparse_cells` value of their
    sum (a cell may repeat: the accumulator adds every pair, :func:`acc_counts`); no counts-sized array is built.

    >>> a, b = (np.array([1, 2]), np.array([2, 1])), (np.array([0, 1]), np.array([1, 2]))
    >>> acc_counts({b"b:x": joined_cells([a, b])}, (3,)).tolist()
    [1, 4, 1]
    """
    idx = [p[0] for p in parts]
    val = [p[1] for p in parts]
    n = sum(len(i) for i in idx)
    out = np.empty(2 * n, dtype="<i8")
    if n:
        out[:n], out[n:] = np.concatenate(idx), np.concatenate(val)
    return out.tobytes()


def acc_counts(raw: dict, shape: tuple) -> np.ndarray | None:
    """A window accumulator hash back to exact int64 counts; ``None`` when no entry arrived.

    Fields ``b:<batch id>`` hold one add's :func:`sparse_cells`; a field that is a bare cell
    index holding a count (what earlier workers added with HINCRBY) is read too.

    >>> acc_counts({b"b:x": sparse_cells(np.array([0, 2, 1])), b"1": b"5"}, (3,)).tolist()
    [0, 7, 1]
    """
    if not raw:
        return None
    size = int(np.prod(shape))
    out = np.zeros(size, dtype=np.int64)
    cells = [(k, v) for k, v in raw.items() if not bytes(k).startswith(ADD_FIELD)]
    for k, v in raw.items():
        if bytes(k).startswith(ADD_FIELD):
            if len(v) % 16:
                raise ValueError("window accumulator holds a malformed tally")
            a = np.frombuffer(v, dtype="<i8")
            idx, val = a[:len(a) // 2], a[len(a) // 2:]
            if idx.size and (idx.min() < 0 or idx.max() >= size):
                raise ValueError("window accumulator holds a cell index outside the forest")
            np.add.at(out, idx, val)
    if cells:
        idx = np.fromiter((int(k) for k, _ in cells), dtype=np.int64, count=len(cells))
        val = np.fromiter((int(v) for _, v in cells), dtype=np.int64, count=len(cells))
        if idx.min() < 0 or idx.max() >= out.size:
            raise ValueError("window accumulator holds a cell index outside the forest")
        np.add.at(out, idx, val)
    return out.reshape(shape)


class WindowCloser:
    """Closes the due windows of one model (run by every worker; see the module docstring)."""

    def __init__(self, r: redis.Redis, keys: Keys, spec: PrivateForest, policy: ReleasePolicy, start: float, *,
                 noise: NoiseSource, guard: RollbackGuard, fault: Callable[[str], None], version_ttl_s: int = 0,
                 keep_versions: int = 20, noise_ttl_s: int = 7 * 86400):
        if policy.kind == "batch":
            raise ValueError("release='batch' has no windows")
        self.r, self.keys, self.spec, self.policy, self.start = r, keys, spec, policy, start
        self.noise, self.guard, self.fault = noise, guard, fault
        self.version_ttl_s, self.keep_versions, self.noise_ttl_s = version_ttl_s, keep_versions, noise_ttl_s
        self.dtype = spec.counts.dtype.type  # the forest owns its counts dtype (float for laplace)
        self.eps_node = policy.node_epsilon(spec.epsilon_per_tree)
        self.real = spec.real_cells
        self._seal = r.register_script(SEAL_LUA)
        self._released = -1  # last known releases (a cache: the scripts decide)
        self._last: tuple[int, np.ndarray] | None = None  # (version, counts) this closer published last
        # Every worker of a model ticks at the same window ends: without the lease each would draw the blob and
        # send it (tens of MB at height 6) only for all but one to lose the CAS. Correctness never depends on
        # it (SET NX noise, CAS close); it expires after about what a close of this size takes, so a closer
        # killed mid-close delays the window by that much.
        self.lease_ms = 250 + int(np.prod(spec.shape)) // 1000
        self.token = secrets.token_hex(8)
        # Behind the clock (workers down, a model created long before its first push), a ``window`` model's
        # due windows are sealed and released FOLD_MAX at a time (see the module docstring); the other
        # policies need each window's own release (the tree's nodes, each grown structure).
        self.fold = FOLD_MAX if policy.kind == "window" else 1

    def now(self) -> float:
        """The schedule's clock: the host's wall clock (keep hosts on NTP). Only the schedule's
        precision depends on it: sealing and releasing are decided by the scripts' checks."""
        return time.time()

    def due(self, now: float) -> int:
        """How many windows have ended by ``now`` (public: the clock only)."""
        return max(0, math.floor((now - self.start) / self.policy.release_every))

    def seconds_to_next(self, now: float) -> float:
        """Seconds until the next window ends (the worker bounds its blocking read by it)."""
        nxt = self.start + (self.due(now) + 1) * self.policy.release_every
        return max(0.0, nxt - now)

    def tick(self, now: float | None = None) -> int:
        """Seal and release every window due by ``now``; returns the number of windows this worker released."""
        now = self.now() if now is None else now
        due = self.due(now)
        if due <= self._released:
            return 0
        n = 0
        for _ in range(MAX_WINDOWS_PER_TICK):
            if n >= MAX_WINDOWS_PER_TICK:
                break
            open_, rel = (int(x) for x in self._seal(keys=[self.keys.state], args=[due, self.keys.model_id, self.fold]))
            if rel < 0:
                break  # the model was deleted (its workers stop on NOGROUP)
            self._released = rel
            if open_ <= rel + 1:
                break  # nothing sealed: no window due
            self.fault("close_after_seal")
            lease = self.keys.closing(rel + 1)
            # each further window sealed with it: a draw and its stored noise, ~30 ns a cell measured; 50 allowed
            lease_ms = self.lease_ms + int(np.prod(self.spec.shape)) * (open_ - rel - 2) // 20_000
            if not self.r.set(lease, self.token, nx=True, px=lease_ms):
                break  # another worker is closing it: a later tick resumes if that one died (the lease expires)
            try:
                n += self.close(rel + 1)
            finally:
                self.r.delete(lease)
        return n

    def holds_unreleased(self) -> bool:
        """Whether a window that entries were added to is not released yet (its accumulator exists): a worker
        run ``until_drained`` waits for it, on the public schedule, or it would exit with the last records
        merged but not published."""
        open_, rel = (int(x or 0) for x in self.r.hmget(self.keys.state, "open", "releases"))
        return open_ > rel and bool(self.r.exists(*(self.keys.acc(w) for w in range(rel + 1, open_ + 1))))

    def close(self, w: int) -> int:
        """Noise and release sealed window ``w`` (``window``: with the empty windows sealed with it, up to the
        open one); returns the number of windows released (0: another worker released them first)."""
        p = self.r.pipeline(transaction=True)
        # The counts only change with the version: those of the version this closer released last are not read again.
        # (``tree`` publishes its state's estimate and needs no counts.)
        window = self.policy.kind == "window"
        cached = self._last if self._last is not None else (-1, None)
        p.hmget(self.keys.state, "version", "releases", "open")
        p.hgetall(self.keys.acc(w))
        p.get(self.keys.tree)
        (version, rel, open_), acc_raw, tree_b = p.execute()
        version, rel, open_ = int(version or 0), int(rel or 0), int(open_ or 1)
        if rel != w - 1 or open_ <= w:
            return 0
        last = open_ - 1 if window else w  # the seal's windows (more than one only under ``window``)
        self.guard.check(version)
        if self.policy.kind == "grow":
            return self._close_grown(w, version, acc_raw)
        if window and cached[0] == version:
            old = cached[1]
        elif window and version == 0:  # nothing released yet: the spec's zero counts (not read: a read of a
            old = np.zeros(self.spec.shape, self.dtype)  # counts-sized value briefly costs redis-py 2x)
        elif window:
            now_version, counts_b = self.r.hmget(self.keys.state, "version", "counts")
            if int(now_version or 0) != version:
                return 0  # released meanwhile (the caller seals and looks again)
            old = counts_from_bytes(counts_b, self.spec) if counts_b else np.zeros(self.spec.shape, self.dtype)
            del counts_b
        exact = acc_counts(acc_raw, self.spec.shape)
        del acc_raw
        if window:
            # In place: ``old`` is this closer's own array (read above, or kept from its last release); the
            # cache is dropped first, so a failed release reads the counts again.
            self._last = None
            noise_keys, state_b = [], b""
            for j in range(w, last + 1):
                key = self.keys.window_delta(j)
                delta = self._stored(key, lambda j=j, ex=exact: self._window_draw(j, ex))
                exact = None  # (window w's accumulator became its delta, in place)
                old += delta
                del delta
                noise_keys.append(key)
                if j < last and not self._retain(w, last, version, j, old):
                    return 0  # released meanwhile, or no longer this closer's model
            new_counts = old
        else:
            state = TreeState.from_bytes(tree_b) if tree_b else TreeState.empty(self.policy, self.spec.shape)
            if state.t != w - 1:
                raise RuntimeError(f"tree state is at window {state.t}, the model released {w - 1}: corrupted state")
            noisy, noise_keys = {}, []
            for node, x in state.closing_sums(exact).items():
                key = self.keys.node(node.key)
                noisy[node] = self._stored(key, lambda x=x, node=node: noisy_node(
                    x, self.eps_node, self.spec.mechanism, self.noise.rng("node", node.key, x), self.real))
                noise_keys.append(key)
            new_state = state.advance(exact, noisy)
            new_counts, state_b = new_state.published(self.dtype), new_state.to_bytes()
        # the published counts' noise variance: w windows' under `window`, the decomposition's under `tree`
        variance = published_variance(self.policy, last, cell_variance(self.spec.mechanism, self.eps_node, self.spec.k))
        nv = version + last - w + 1  # one version per window: version == releases, however the windows were sealed
        forest = self.spec.with_counts(new_counts, version=nv, n_releases=last, noise_variance=variance)
        self.fault("close_before_commit")
        ok = self._release(w, version, forest, state_b, noise_keys, variance, last=last)
        self.fault("close_in_commit")
        if not ok:
            return 0
        self.guard.record(nv)
        self._released = last
        self._last = (nv, new_counts) if window else None
        jlog(log, logging.DEBUG, "worker.window_released", model=self.keys.name, window=w, windows=last - w + 1,
             version=nv)
        return last - w + 1

    def _window_draw(self, j: int, exact: np.ndarray | None) -> np.ndarray:
        """Window ``j``'s noisy delta (the draw its close makes whatever it is sealed with); ``exact`` (its
        accumulator, read here for the windows a seal folded after the first: never open, so None) becomes it."""
        if exact is None:
            exact = acc_counts(self.r.hgetall(self.keys.acc(j)), self.spec.shape)
        # in place: the accumulator's counts become the delta (its noise key is hashed before)
        return window_delta(exact, self.spec.shape, self.eps_node, self.spec.mechanism,
                            self.noise.rng("window", str(j), self._exact_bytes(exact)), self.real, self.spec.k,
                            in_place=True)

    def _retain(self, w: int, last: int, version: int, j: int, counts: np.ndarray) -> bool:
        """A fold's version of window ``j < last`` (``counts``: the published counts after window ``j``), kept as
        ``pub:v:<N>`` when the retention keeps it, so the retained versions are those one release per window
        leaves (the fold shows in no published number; its ``updated`` time is a timing fact). Written before
        the fold's release, on condition (WATCH) that the state is still at ``version`` with ``w`` to ``last``
        sealed and this closer's model: every closer of the fold writes the same bytes (the stored draws, the
        same base). False: released meanwhile or replaced (the caller gives up the close)."""
        nv = version + j - w + 1
        if self.keep_versions > 0 and last - j >= self.keep_versions:
            return True  # a version one release per window would have deleted by now
        variance = published_variance(self.policy, j, cell_variance(self.spec.mechanism, self.eps_node, self.spec.k))
        record = release_record_parts(self.spec.with_counts(counts, version=nv, n_releases=j, noise_variance=variance))
        with self.r.pipeline(transaction=True) as p:
            try:
                p.watch(self.keys.state)
                if not self._at(p, version, w, last):
                    return False
                p.multi()
                self._write_record(p, nv, record)
                p.execute()
            except redis.WatchError:
                return False
        return True

    def _at(self, p: Any, version: int, w: int, last: int) -> bool:
        """Whether the state (read in the WATCHing pipeline ``p``) is at ``version``, with ``w - 1`` released,
        ``w`` to ``last`` sealed, and this closer's model."""
        v, rel, open_, mid = p.hmget(self.keys.state, "version", "releases", "open", "model_id")
        if int(v or 0) != version or int(rel or 0) != w - 1 or int(open_ or 1) <= last:
            return False
        return mid is None or as_str(mid) == self.keys.model_id  # (keys: the state's id, Keys.of)

    def _write_record(self, p: Any, nv: int, record: list) -> None:
        """Version ``nv``'s retained release in ``p``'s transaction: SET, then APPEND of its pieces (no copy of
        the counts)."""
        p.set(self.keys.pub_version(nv), record[0], ex=self.version_ttl_s or None)
        for part in record[1:]:
            if len(part):
                p.append(self.keys.pub_version(nv), part)

    def _close_grown(self, w: int, version: int, acc_raw: dict) -> bool:
        """``grow``: window ``w``'s exact tally on the drawn trees grows the published forest by one release
        (:meth:`PrivateForest.grow_exact`); the whole new release (structure, counts, node variances) is
        stored SET NX before it is published, so a retry or a racing closer publishes the same one."""
        if self._last is not None and self._last[0] == version:
            old = self._last[1]
        else:
            now_version, blob_b = self.r.hmget(self.keys.state, "version", "blob")
            if int(now_version or 0) != version:
                return 0  # released meanwhile (the caller seals and looks again)
            old = self.spec.holding(PrivateForest.from_bytes(blob_b)) if blob_b else self.spec.holding(self.spec)
        exact = acc_counts(acc_raw, self.spec.shape)
        key = self.keys.window_delta(w)

        drawn: list[PrivateForest] = []

        def draw() -> bytes:
            tally = np.zeros(self.spec.shape, np.int64) if exact is None else exact
            # keyed over the base release too: a re-released (rolled back) base makes another release
            rng = self.noise.rng("window", str(w), self._exact_bytes(exact), np.ascontiguousarray(old.counts))
            drawn.append(self.spec.holding(old).grow_exact(tally, rng))  # a copy: the cached base stays as it was
            return drawn[0].to_bytes()

        blob_b, fresh = stored_once(self.r, key, draw, stats_key=self.keys.stats, reused="noise_reused",
                                    after_draw=lambda: self.fault("close_after_draw"),
                                    after_store=lambda: self.fault("close_after_store"))
        # this closer's draw as it is, or the one stored first (decoded and checked)
        forest = drawn[0] if fresh else self.spec.holding(PrivateForest.from_bytes(blob_b))
        if forest.version != version + 1 or forest.n_releases != w:
            raise RuntimeError(f"stored release {key} is version {forest.version} of {forest.n_releases} windows, "
                               f"the model expects {version + 1} of {w}: corrupted state")
        self.fault("close_before_commit")
        # a grown release changes the structure: its state, pub:model and retained version are whole blobs
        ok = self._release(w, version, forest, b"", [key], float(np.max(forest.noise_variance)), grown=blob_b)
        self.fault("close_in_commit")
        if not ok:
            return 0
        self.guard.record(version + 1)
        self._released = w
        self._last = (version + 1, forest)
        jlog(log, logging.DEBUG, "worker.window_released", model=self.keys.name, window=w, version=version + 1,
             height=forest.height)
        return 1

    def _release(self, w: int, version: int, forest: PrivateForest, state_b: bytes, noise_keys: list[str],
                 variance: float, grown: bytes | None = None, last: int | None = None) -> bool:
        """Step 3: publish the release of windows ``w`` to ``last`` (default ``w``; ``forest.version``, one
        version per window) in one MULTI/EXEC, on condition (WATCH of the state) that the state is still at
        ``version`` with ``w - 1`` released and ``last`` sealed; False otherwise.

        Plain commands, not a script: a script copies its arguments (tens of MB at height 6) into Lua
        strings before writing them, which made a release about twice as slow. The state hash holds
        everything the condition reads, and any write to it between WATCH and EXEC (a seal, another
        closer's release) makes EXEC write nothing.

        Memory: the counts travel as views of the forest's array (:func:`.published.counts_view`, and
        the release record in pieces, :func:`.published.release_record_parts`); no model blob is built
        (``pub:model`` holds the counts; the structure is the spec's, :func:`.published.published_fields`).

        ``grown`` (``release="grow"``): the stored release's blob. The structure changes with the releases,
        so the state holds the blob (not the counts), ``pub:model`` holds the blob and no counts field (the
        consumers' counts-only fast path assumes one structure) and the retained version is the blob."""
        nv, now = forest.version, int(time.time() * 1000)
        keep, last = self.keep_versions, w if last is None else last
        with self.r.pipeline(transaction=True) as p:
            try:
                p.watch(self.keys.state)
                if not self._at(p, version, w, last):
                    return False  # released meanwhile, or deleted and re-created under this name
                pub = {"version": nv, "updated": now, "releases": last, "noise_variance": repr(float(variance))}
                if grown is None:  # the structure is the spec's: counts only (published.published_fields)
                    counts_b, record = counts_view(forest.counts), release_record_parts(forest)
                    state, pub["counts"], gone = {"counts": counts_b}, counts_b, "blob"
                else:
                    record, state, pub["blob"], gone = [grown], {"blob": grown}, grown, "counts"
                p.multi()
                p.hset(self.keys.state, mapping={"version": nv, "releases": last, **state})
                p.hdel(self.keys.pub_model, gone)
                p.hset(self.keys.pub_model, mapping=pub)
                # a retained version holds the release alone (the structure is the spec's); the versions the
                # retention drops, one per window (a fold's earlier versions were written by _retain)
                self._write_record(p, nv, record)
                if keep > 0 and nv - keep >= 0:
                    p.delete(*(self.keys.pub_version(v) for v in range(max(0, version + 1 - keep), nv - keep + 1)))
                p.delete(*(self.keys.acc(j) for j in range(w, last + 1)))
                if state_b:
                    p.set(self.keys.tree, state_b)
                for k in noise_keys:
                    p.expire(k, self.noise_ttl_s)
                p.hincrby(self.keys.stats, "windows_released", last - w + 1)
                p.hset(self.keys.stats, "last_release_ms", now)
                p.execute()
            except redis.WatchError:
                return False
        # Announced after EXEC: redis-py's cluster pipelines refuse PUBLISH, and a lost announcement only
        # delays a consumer (Consumer.wait_newer re-reads the version).
        self.r.publish(self.keys.pub_events, nv)
        return True

    def _exact_bytes(self, exact: np.ndarray | None) -> bytes | np.ndarray:
        """The exact counts as the noise key hashes them (little-endian int64; no copy on little-endian hosts)."""
        return b"" if exact is None else np.ascontiguousarray(exact, dtype="<i8")

    def _stored(self, key: str, draw: Callable[[], np.ndarray]) -> np.ndarray:
        """The noise stored under ``key``, or drawn now and stored with SET NX (the first stored one wins)."""
        return drawn_once(self.r, key, draw, self.spec, stats_key=self.keys.stats, reused="noise_reused",
                          after_draw=lambda: self.fault("close_after_draw"),
                          after_store=lambda: self.fault("close_after_store"))
