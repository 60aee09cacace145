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
import hmac
import logging
import os
import stat
from pathlib import Path

import numpy as np

from streamdp.privacy.secure_random import LAYOUTS, SecureRandom
from streamdp.service.log import jlog

__all__ = [
    "NoiseSource",
    "RollbackGuard",
    "RollbackDetected",
    "GuardDamaged",
    "NoiseKeyMismatch",
    "NoNoiseKey",
    "WorkerRefused",
    "MAKE_KEY",
    "load_noise_key",
    "key_fingerprint",
    "ENV_KEY",
    "ENV_STATE",
    "NO_KEY",
]

ENV_KEY = "STREAMDP_NOISE_KEY_FILE"
ENV_STATE = "STREAMDP_STATE_DIR"
#: How to make a noise key and hand it to the commands (shown wherever one is missing).
MAKE_KEY = f"head -c 32 /dev/urandom > noise.key && chmod 600 noise.key; export {ENV_KEY}=$PWD/noise.key"


#: The fingerprint stored for a model created without a noise key.
NO_KEY = "none"
_FINGERPRINT_LABEL = b"streamdp noise key fingerprint v1"

log = logging.getLogger("streamdp.worker")


class WorkerRefused(RuntimeError):
    """A configuration a worker must not run with (a missing or mismatched noise key, a rolled-back model): a
    worker process logs it as one line (``worker.refused``) and exits non-zero, never with a traceback."""


class RollbackDetected(WorkerRefused):
    """The model's published version is older than one this host already published: Redis was rolled back."""


class GuardDamaged(RollbackDetected):
    """The rollback guard's file holds no version number: the guard cannot tell, so the worker refuses to publish."""


class NoNoiseKey(WorkerRefused):
    """A model whose unit is a person, and no noise key on this host: its workers hash the ids with a key derived
    from the master noise key, so without one they cannot merge a record."""


class NoiseKeyMismatch(WorkerRefused):
    """This host's noise key (or its lack of one) is not the one the model was created with: a release it drew
    would differ from the same release drawn on another host, so a rollback would publish it twice."""


def load_noise_key(path: str | os.PathLike | None = None) -> bytes | None:
    """The master noise key (>= 32 random bytes) from ``path`` or ``$STREAMDP_NOISE_KEY_FILE``; None if unset.

    Make one with ``head -c 32 /dev/urandom > noise.key && chmod 600 noise.key``.

    Raises ValueError: the variable set but empty (it never means "no key"), a file shorter than 32 bytes,
    or one whose bytes are all the same (all zeros: a file truncated or made by mistake), or a file that
    other users can read or write (group or world permission bits: whoever reads the key can strip the noise).
    """
    from_env = path is None and ENV_KEY in os.environ
    if from_env:
        path = os.environ[ENV_KEY]
        if not path.strip():
            raise ValueError(f"${ENV_KEY} is set but empty: unset it to run without a noise key, or name the key file")
    if path is None or path == "":
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if from_env:  # (not echoed: a key pasted into the variable by mistake would reach the terminal and logs)
            raise ValueError(f"${ENV_KEY} names no file: it holds the key file's path, not the key") from None
        raise
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise ValueError(
            f"noise key file {path} has mode {stat.S_IMODE(st.st_mode):04o}: other users could read the key, which "
            f"strips the noise from every release; chmod 600 {path}"
        )
    key = Path(path).read_bytes()
    if len(key) < 32:
        raise ValueError(f"noise key file {path} holds {len(key)} bytes; it needs at least 32 random bytes")
    if key.count(key[:1]) == len(key):
        raise ValueError(
            f"noise key file {path} holds one byte value repeated: it needs 32 random bytes (head -c 32 /dev/urandom)"
        )
    return key


def key_fingerprint(key: bytes | None) -> str:
    """What ``model create`` stores of the noise key: HMAC-SHA256 of a fixed label under the key (hex), or
    :data:`NO_KEY`. It tells keys apart and says nothing about the key itself (HMAC is a PRF).

    >>> key_fingerprint(None), len(key_fingerprint(bytes(range(32))))
    ('none', 64)
    """
    if key is None:
        return NO_KEY
    return hmac.new(bytes(key), _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()


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
        return self.key is not None

    @property
    def fingerprint(self) -> str:
        """:func:`key_fingerprint` of this source's key."""
        return key_fingerprint(self.key)

    def check(self, stored: bytes | str | None, model: str) -> None:
        """Raise :class:`NoiseKeyMismatch` (logged as ``worker.noise_key_mismatch``) unless ``stored``, the
        fingerprint the model was created with (its state's ``noise_key``), is this source's. A model created
        before the field existed holds none and is not checked."""
        msg = self.mismatch(stored, model)
        if msg is None:
            return
        stored = stored.decode() if isinstance(stored, bytes) else str(stored)
        jlog(
            log,
            logging.ERROR,
            "worker.noise_key_mismatch",
            model=model,
            stored=stored[:16],
            this_host=self.fingerprint[:16],
        )
        raise NoiseKeyMismatch(msg)

    def mismatch(self, stored: bytes | str | None, model: str) -> str | None:
        """What :meth:`check` would refuse, in words (None: this source's key is the model's), logging nothing."""
        if not stored:
            return None
        stored = stored.decode() if isinstance(stored, bytes) else stored
        mine = self.fingerprint
        if hmac.compare_digest(stored, mine):
            return None

        def said(fp: str) -> str:
            return "no noise key" if fp == NO_KEY else f"the noise key with fingerprint {fp[:16]}"

        return (
            f"model {model!r} was created with {said(stored)}, this worker has {said(mine)} "
            f"(${ENV_KEY}): its noise would differ from the other hosts', and a release drawn again after a Redis "
            "rollback would be a second look at the same records; refusing to draw noise. Give every worker host "
            "the key file the model was created with (docs/security.md, 'Noise keys that differ between hosts')."
        )

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
        """The highest version recorded on this host; -1 when the file does not exist (nothing recorded yet).

        Raises :class:`GuardDamaged` when the file holds anything but a version number (empty, "1O", ...):
        a damaged guard is an error, never a disabled guard. :meth:`record` replaces the file atomically, so
        neither a crash nor a concurrent reader ever sees it empty.
        """
        if self.path is None:
            return -1
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return -1
        digits = text.strip()
        if not digits.isdigit() or not digits.isascii() or len(digits) > 19:
            raise GuardDamaged(
                f"rollback guard file {self.path} is damaged (it holds {len(text)} bytes that are not a version "
                "number): refusing to publish. Write the model's highest published version into it (streamdp model "
                "show NAME, on a host that did not see a rollback), or delete it if no rollback is possible."
            )
        return int(digits)

    def check(self, version: int) -> None:
        """Raise :class:`RollbackDetected` if ``version`` is below the highest one recorded."""
        top = self.highest
        if version < top:
            raise RollbackDetected(
                f"published version {version} is below version {top} already published (recorded in {self.path}): "
                "the Redis state was rolled back; refusing to publish. See docs/service.md, 'State rollback'."
            )

    def record(self, version: int) -> None:
        """Raise the recorded version to ``version`` (under a lock file; written to a temporary file, fsynced and
        renamed over the guard file, so the file always holds a whole version number)."""
        if self.path is None:
            return
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if self.highest >= version:  # (raises GuardDamaged on a damaged file)
                return
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(out, str(int(version)).encode())
                os.fsync(out)
            finally:
                os.close(out)
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the rename itself survives a power loss
            finally:
                os.close(dir_fd)
        finally:
            os.close(fd)  # closing releases the lock
