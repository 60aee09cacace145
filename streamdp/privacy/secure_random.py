"""The cryptographically secure source of every random bit that protects privacy.

:class:`SecureRandom` reads an AES-256-CTR keystream (the ``cryptography``
package, OpenSSL underneath, hardware AES where the CPU has it): many times
the rate of ``os.urandom`` (``benchmarks/results/speed.noise.md``). Three modes:

* ``SecureRandom()`` (private, the default): a fresh 256-bit key from
  ``os.urandom`` for each generator, re-keyed from ``os.urandom`` in a forked
  child so parent and child never share a stream. Nothing is stored.
* ``SecureRandom.from_key(key, context)`` (private, deterministic): the
  stream is a function of a secret key and a public context (for example a
  model name and a batch id), so a redraw after a state rollback is the same
  draw, not a second independent look at the data. See :meth:`from_key` for
  who must hold the key.
* ``SecureRandom(seed=int)`` (tests only): a seeded numpy PCG64; ``private``
  is False and a :class:`NotPrivateWarning` is issued.

:meth:`SecureRandom.spawn` hands out child generators, each independent of
its parent and of every other child (the i-th child of a keyed generator is
keyed by HKDF of a key derived from the parent's and i). A release draws each block of cells
from its own child (:func:`streamdp.release.continual.noisy_node`), so a keyed
release's noise does not depend on how the code chunks the work.

The keystream is indistinguishable from uniform bits to anyone without the
key (AES as a pseudorandom permutation; CTR mode over at most 2**64 blocks per
key): the samplers built on it are analysed as if the bits were uniform.

>>> a = SecureRandom.from_key(b"k" * 32, b"model-a/batch-7").bits(4)
>>> b = SecureRandom.from_key(b"k" * 32, b"model-a/batch-7").bits(4)
>>> bool((a == b).all()), a.dtype
(True, dtype('uint64'))
"""

from __future__ import annotations

import itertools
import os
import secrets
import warnings

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["SecureRandom", "NotPrivateWarning", "NearlyExactWarning", "LAYOUTS"]

_TWO_POW_64 = float(2**64)
_KDF_INFO = b"streamdp noise stream v1\x00"
_SPAWN_INFO = b"streamdp spawn key v1\x00"
_CHILD_INFO = b"streamdp child stream v1\x00"
#: How :func:`streamdp.release.continual.noisy_node` lays noise out over a release's cells: "blocks" (each
#: block of cells from its own :meth:`SecureRandom.spawn` child) or "stream" (the layout of models
#: created before: one stream in chunks, kept byte for byte for their keyed redraws).
LAYOUTS = ("blocks", "stream")


class NotPrivateWarning(UserWarning):
    """Noise was drawn from a seeded (reproducible) generator: the output is not private."""


class NearlyExactWarning(UserWarning):
    """An epsilon so large that one release's noise on a count is below half a record: the released counts are
    nearly exact. The guarantee holds, at a budget that promises almost nothing; a budget is its owner's choice,
    said once where the model is made (:func:`streamdp.release.variance.warn_nearly_exact`)."""


def _aes_ctr(key: bytes) -> CipherContext:
    return Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()


class SecureRandom:
    """Uniform bits, uniforms, exponentials and small integers for noise.

    With ``seed=None`` (the default) every variate comes from an AES-256-CTR
    keystream keyed by 32 bytes of ``os.urandom``. A uniform is built from 64
    random bits ``u`` as ``(u + 0.5) / 2**64``: never 0, resolution 2**-64
    near 0. ``seed=int`` is for tests only (reproducible, ``private`` False).
    """

    def __init__(self, seed: int | None = None):
        self.private = seed is None
        self.keyed = False
        self.layout = "blocks"
        self._test_rng: np.random.Generator | None = None
        self._enc: CipherContext | None = None
        self._children = itertools.count()
        if seed is not None:
            warnings.warn(
                "SecureRandom(seed=...) gives reproducible noise: for tests only, the output is NOT private",
                NotPrivateWarning,
                stacklevel=2,
            )
            self._test_rng = np.random.default_rng(seed)
        else:
            self._rekey(os.urandom(32))

    @classmethod
    def from_key(cls, key: bytes, context: bytes, layout: str = "blocks") -> SecureRandom:
        """A deterministic private stream for ``(key, context)``: same pair, same draws.

        The stream key is HKDF-SHA256(``key``, info=``context``), so different
        contexts (use one per release: model name, batch id, release number)
        give independent streams, and a context can be public.

        ``key`` (at least 32 bytes from a CSPRNG) is a secret EQUIVALENT TO
        THE NOISE ITSELF: whoever holds it and reads a release can recompute
        its noise, subtract it and learn the exact counts. Only the process
        that draws the noise (the stream worker) may hold it: not producers,
        not consumers, not a job runner, never in Redis or in a blob, log or
        metric. Rotating the key is safe; re-drawing a release under a new key
        is a second, independent release and costs its epsilon again.

        ``layout`` (one of :data:`LAYOUTS`) is how a release's noise is laid over
        its cells; "stream" only for models created before "blocks" existed.
        """
        if not isinstance(key, (bytes, bytearray)) or len(key) < 32:
            raise ValueError("key must be at least 32 secret random bytes")
        if not isinstance(context, (bytes, bytearray)):
            raise TypeError(f"context must be bytes, got {type(context).__name__}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        return cls._keyed(_hkdf(bytes(key), _KDF_INFO + bytes(context)), layout)

    @classmethod
    def _keyed(cls, key: bytes, layout: str) -> SecureRandom:
        rng = cls.__new__(cls)
        rng.private, rng.keyed, rng.layout, rng._test_rng = True, True, layout, None
        rng._rekey(key)
        return rng

    def spawn(self) -> SecureRandom:
        """The next child generator: independent of this one's stream and of every other child.

        Child ``i`` (counted per generator) of a keyed generator is keyed by
        HKDF(HKDF(this generator's key, "spawn key"), ``i``): deterministic for
        the same sequence of spawns, and no other stream shares its key. A fresh
        private generator's children are keyed from its own random key (re-keyed
        after a fork, as the stream is); a seeded one's are seeded from its
        stream (tests only).

        >>> a, b = SecureRandom.from_key(b"k" * 32, b"ctx"), SecureRandom.from_key(b"k" * 32, b"ctx")
        >>> bool((a.spawn().bits(3) == b.spawn().bits(3)).all()), bool((a.spawn().bits(3) != b.bits(3)).all())
        (True, True)
        """
        if self._test_rng is not None:  # seeded from this one's stream: reproducible, and through a pickle too
            child = SecureRandom.__new__(SecureRandom)
            child.private, child.keyed, child.layout, child._enc = False, False, "blocks", None
            child._children = itertools.count()
            child._test_rng = np.random.default_rng(self._test_rng.integers(0, 2**63))
            return child
        if not self.keyed and self._pid != os.getpid():  # a forked child must not replay the parent's children
            self._rekey(os.urandom(32))
        i = next(self._children)  # one C call: no two spawns get the same index, threads or not
        child = SecureRandom._keyed(_hkdf(self._spawn_key, _CHILD_INFO + i.to_bytes(8, "big")), "blocks")
        child.keyed = self.keyed
        return child

    def __reduce__(self):
        """Copies and pickles never carry a key: a private generator comes back freshly keyed."""
        if self.keyed:
            raise TypeError("a keyed SecureRandom is not copied or pickled: its key is a secret; call from_key again")
        if self._test_rng is not None:
            return (_seeded_copy, (self._test_rng.bit_generator.state,))
        return (SecureRandom, ())

    def _rekey(self, key: bytes) -> None:
        self._spawn_key = _hkdf(key, _SPAWN_INFO)  # children's keys derive from this, not from the stream's key
        self._enc = _aes_ctr(key)
        self._pid = os.getpid()
        self._children = itertools.count()

    def random_bytes(self, n: int) -> bytes:
        """``n`` bytes of the stream."""
        if self._test_rng is not None:
            return self._test_rng.bytes(n)
        return self._stream(n).tobytes()

    def _stream(self, n: int) -> np.ndarray:
        if not self.keyed and self._pid != os.getpid():  # a forked child must not replay the parent's stream
            self._rekey(os.urandom(32))
        out = np.empty(n + 15, dtype=np.uint8)  # update_into wants room for a block
        assert self._enc is not None  # every generator but a seeded one (which never reads the stream) has one
        if n > 0:
            self._enc.update_into(np.zeros(n, dtype=np.uint8).data, out.data)
        return out[:n]

    def bits(self, size: int | tuple = ()) -> np.ndarray:
        """Uniform 64-bit words (``uint64``)."""
        shape = (size,) if isinstance(size, int) else tuple(size)
        n = int(np.prod(shape, dtype=np.int64))
        if self._test_rng is not None:
            w = self._test_rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)
        else:
            w = self._stream(8 * n).view("<u8").astype(np.uint64, copy=False)
        return w.reshape(shape)

    def uniform(self, size: int | tuple = ()) -> np.ndarray:
        """Uniform variates in the open interval (0, 1]."""
        u = self.bits(size).astype(np.float64)
        u += 0.5
        u *= 1.0 / _TWO_POW_64
        return u

    def exponential(self, size: int | tuple = ()) -> np.ndarray:
        """Standard exponential variates, ``-log(U)``."""
        return -np.log(self.uniform(size))

    def integers(self, high: int, size: int | tuple = ()) -> np.ndarray:
        """Uniform integers in ``[0, high)`` (rejection-free: 64-bit modulo bias < 2**-40 for high < 2**24)."""
        if not 0 < high < 2**24:
            raise ValueError(f"high must be in (0, 2**24), got {high}")
        return (self.bits(size) % np.uint64(high)).astype(np.int64)

    def token_bytes(self, n: int) -> bytes:
        if self._test_rng is not None:
            return self._test_rng.bytes(n)
        return secrets.token_bytes(n)


def _hkdf(key: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key)


def _seeded_copy(state: dict) -> SecureRandom:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        rng = SecureRandom(seed=0)
    assert rng._test_rng is not None  # a seeded generator always has one
    rng._test_rng.bit_generator.state = state
    return rng
