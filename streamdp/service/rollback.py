"""What a Redis state rollback cannot change: the noise key and the release mirror.

A rollback (restart from an older RDB/AOF, power loss with ``appendfsync
everysec``, a backup restore) forgets stored noised deltas that were already
published; the next worker would draw NEW noise for the same release, a second
independent look at the same records. Two defences, both outside Redis:

* :class:`NoiseSource`: each release's noise is derived from a secret master key
  and the release's identity, ``SecureRandom.from_key(key, model_id/kind/release
  id/SHA-256(exact input))``. The key lives in a file on the worker hosts
  (``$STREAMDP_NOISE_KEY_FILE``), never in Redis, so no rollback reaches it; the
  model id is drawn at create, so a model created before the snapshot keeps it
  (one created after is gone entirely). A redrawn release over the SAME exact
  input is the same draw, byte for byte. The hash of the exact input is in the
  context on purpose: the same noise on DIFFERENT inputs (a window that got
  other entries after the rollback) would publish the exact difference; with
  the hash such a release gets independent noise (a second release of those
  records, as without a key) and the guard below is what catches it. The key is
  equivalent to the noise itself (see :meth:`SecureRandom.from_key`): whoever
  holds it and a release can strip the noise.
* :class:`RollbackGuard`: the highest version this host published or saw, per
  model id, in a local file (``$STREAMDP_STATE_DIR``, fsynced). A worker that
  finds the model's published version below it refuses to publish
  (:class:`RollbackDetected`). A rollback that no guarded host witnessed (all
  state dirs lost too, or a fresh host) cannot be detected from inside Redis:
  the snapshot is self-consistent (stream, group, state and counts roll back
  together).

Without a key the service falls back to fresh noise from ``os.urandom`` (still
drawn once and stored with SET NX); without a state dir there is no guard.
deploy/ sets both.

>>> src = NoiseSource(b"k" * 32, "model-1", "blocks")
>>> a = src.rng("window", "7", b"exact").bits(2); b = src.rng("window", "7", b"exact").bits(2)
>>> bool((a == b).all()), bool((src.rng("window", "7", b"other").bits(2) != a).any())
(True, True)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

import numpy as np

from streamdp.privacy.secure_random import LAYOUTS, SecureRandom

__all__ = ["NoiseSource", "RollbackGuard", "RollbackDetected", "load_noise_key", "ENV_KEY", "ENV_STATE"]

ENV_KEY = "STREAMDP_NOISE_KEY_FILE"
ENV_STATE = "STREAMDP_STATE_DIR"


class RollbackDetected(RuntimeError):
    """The model's published version is older than one this host already published: Redis was rolled back."""


def load_noise_key(path: str | os.PathLike | None = None) -> bytes | None:
    """The master noise key (>= 32 random bytes) from ``path`` or ``$STREAMDP_NOISE_KEY_FILE``; None if unset.

    Make one with ``head -c 32 /dev/urandom > noise.key && chmod 600 noise.key``.
    """
    path = path or os.environ.get(ENV_KEY) or None
    if path is None:
        return None
    key = Path(path).read_bytes()
    if len(key) < 32:
        raise ValueError(f"noise key file {path} holds {len(key)} bytes; it needs at least 32 random bytes")
    return key


class NoiseSource:
    """The noise generator of each release: keyed (deterministic per release) when a master key is given.

    ``layout`` is the model's noise layout (:data:`~streamdp.privacy.secure_random.LAYOUTS`), fixed at
    ``model create`` and kept in its state: "blocks" for models created since it existed, "stream"
    for older ones, whose keyed redraws must stay byte for byte what their first draw was. It has no
    default: a caller reads it from the model's state.
    """

    def __init__(self, key: bytes | None, model_id: str, layout: str):
        self.key, self.model_id, self.layout = key, model_id, layout
        if key is not None and not model_id:
            raise ValueError("a keyed noise source needs the model id (drawn at model create)")
        if layout not in LAYOUTS:
            raise ValueError(f"noise layout must be one of {LAYOUTS}, got {layout!r}")

    @property
    def keyed(self) -> bool:
        """Whether releases draw keyed noise (a redraw of the same release is the same draw)."""
        return self.key is not None

    def rng(self, kind: str, release_id: str, *exact: bytes | np.ndarray) -> SecureRandom:
        """The generator of release ``kind``/``release_id`` over ``exact`` (its secret exact input)."""
        if self.key is None:
            return SecureRandom()
        h = hashlib.sha256()
        for x in exact:
            h.update(np.ascontiguousarray(x).reshape(-1).view(np.uint8) if isinstance(x, np.ndarray) else x)  # no copy
        ctx = f"{self.model_id}/{kind}/{release_id}/".encode() + h.digest()
        return SecureRandom.from_key(self.key, ctx, self.layout)


class RollbackGuard:
    """The highest published version of a model seen on this host, kept in ``state_dir/<model_id>.version``."""

    def __init__(self, state_dir: str | os.PathLike | None, model_id: str):
        self.path = Path(state_dir) / f"{model_id}.version" if state_dir and model_id else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    @property
    def highest(self) -> int:
        """The highest version recorded on this host, -1 if none (or no state directory)."""
        if self.path is None or not self.path.exists():
            return -1
        text = self.path.read_text().strip()
        return int(text) if text else -1

    def check(self, version: int) -> None:
        """Raise :class:`RollbackDetected` if ``version`` is below the highest one recorded."""
        top = self.highest
        if version < top:
            raise RollbackDetected(
                f"published version {version} is below version {top} already published (recorded in {self.path}): "
                "the Redis state was rolled back; refusing to publish. See docs/service.md, 'State rollback'."
            )

    def record(self, version: int) -> None:
        """Raise the recorded version to ``version`` (under a file lock; fsynced before returning)."""
        if self.path is None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            cur = os.read(fd, 64).strip()
            if not cur or int(cur) < version:
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.write(fd, str(int(version)).encode())
                os.fsync(fd)
        finally:
            os.close(fd)  # closing releases the lock
