"""The one private release of a node's (or window's) exact integer counts: noise drawn once, keyed, by blocks.

Every release policy noises through :func:`noisy_node`; :func:`window_delta` is ``window``'s step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamdp.privacy.mechanisms import SecureRandom, geometric_noise, laplace_noise

__all__ = ["NOISE_BLOCK", "STREAM_CHUNK", "RealRows", "noisy_node", "window_delta"]


#: The noise layout "blocks": cells (flat, C order) ``[b * NOISE_BLOCK, (b + 1) * NOISE_BLOCK)`` of a
#: release draw their noise from the next child of the release's generator (:meth:`SecureRandom.spawn`;
#: child ``b`` when the generator draws one release). Part of every keyed release's definition:
#: changing it changes every redraw (never change it; ``test_the_block_layout_is_pinned``).
NOISE_BLOCK = 1 << 16
#: The layout "stream" (keyed models created before "blocks"): one stream, chunks of this many cells.
STREAM_CHUNK = 1 << 20


@dataclass(frozen=True)
class RealRows:
    """Which cells exist, as a prefix of each row: of counts of ``shape`` seen as ``(shape[0], row_size)``,
    row ``r``'s first ``lengths[r]`` cells exist and the rest is padding (a forest's counts: a tree's leaves
    come first, each with all its classes). The mask it stands for is built a block at a time
    (:meth:`mask`), so a release noises a model's cells without holding a counts-sized mask.

    >>> rows = RealRows(np.array([4, 2]), 4, (2, 2, 2))
    >>> rows.mask(0, 8).astype(int).tolist(), rows.mask(5, 7).astype(int).tolist()
    ([1, 1, 1, 1, 1, 1, 0, 0], [1, 0])
    """

    lengths: np.ndarray
    row_size: int
    shape: tuple

    def mask(self, start: int, stop: int) -> np.ndarray:
        """The mask of flat cells ``[start, stop)`` (C order), from the rows' bounds (a block's bytes, no
        per-cell index arithmetic)."""
        rows = np.arange(start // self.row_size, -(-stop // self.row_size), dtype=np.int64)
        lo = rows * self.row_size
        hi = lo + np.asarray(self.lengths, dtype=np.int64)[rows]
        lo, hi = np.clip(lo, start, stop) - start, np.clip(hi, start, stop) - start
        if len(rows) <= 8:  # a few long rows (a forest's trees): their real runs set directly
            out = np.zeros(stop - start, dtype=bool)
            for a, b in zip(lo.tolist(), hi.tolist()):
                out[a:b] = True
            return out
        steps = np.zeros(stop - start + 1, dtype=np.int8)  # +1 where a row's real cells begin, -1 where they end
        np.add.at(steps, lo, 1)
        np.add.at(steps, hi, -1)
        return np.cumsum(steps[:-1], dtype=np.int8) > 0


def _mask(real: np.ndarray | RealRows, start: int, stop: int) -> np.ndarray:
    """Flat cells ``[start, stop)`` of ``real`` (a boolean array of the counts' shape, or :class:`RealRows`)."""
    if isinstance(real, RealRows):
        return real.mask(start, stop)
    return np.asarray(real, dtype=bool).reshape(-1)[start:stop]


def noisy_node(
    exact: np.ndarray,
    epsilon: float,
    mechanism: str,
    rng: SecureRandom,
    real: np.ndarray | RealRows | None = None,
    k: int | None = None,
    in_place: bool = False,
) -> np.ndarray:
    """The one private release of a node's (or window's) exact integer counts.

    ``epsilon`` is ``policy.node_epsilon(epsilon_per_tree)``; geometric noise keeps
    integers, Laplace gives floats; ``real`` (boolean, the counts' shape, or the same
    mask as :class:`RealRows`) marks the cells that exist: the others stay exactly 0. ``mechanism="kanon"`` (``window`` and
    ``batch`` only) zeroes cells below ``k`` of a beta-sampled tally instead. The
    caller must store the result (SET NX) before using it, and reuse the stored one
    on a retry: each node's noise is drawn once. ``in_place``: the noise is added into
    ``exact`` itself where its dtype is the result's and it is C-contiguous (a fresh
    tally the caller drops: no second counts-sized array); use the returned array.

    Layout (``rng.layout``): "blocks" draws each block of :data:`NOISE_BLOCK` cells
    from its own child of ``rng``, the real cells only, in C order: a keyed release is
    a function of the key, the context, the block's real cells and the generator's
    earlier spawns, the same draw whatever chunking a version of this code uses, and
    the sampler's temporaries are a block's (a few MiB), not the counts'. "stream" is
    the layout of keyed models created before it (one stream in chunks of
    :data:`STREAM_CHUNK`), kept byte for byte so their redraws after a rollback stay the
    same draw (except for input that is not C-contiguous, which that code left without
    noise beyond one chunk: now noised).

    >>> rng = SecureRandom.from_key(b"k" * 32, b"doc")
    >>> a = noisy_node(np.zeros(3 * NOISE_BLOCK, np.int64), 1.0, "geometric", rng)
    >>> b = noisy_node(np.zeros(NOISE_BLOCK, np.int64), 1.0, "geometric", SecureRandom.from_key(b"k" * 32, b"doc"))
    >>> bool((a[:NOISE_BLOCK] == b).all())  # a block's noise does not depend on the blocks after it
    True
    """
    exact = np.asarray(exact)
    if exact.dtype.kind not in "iu":
        raise ValueError(f"exact counts must be integers, got dtype {exact.dtype}")
    real_shape = None if real is None else tuple(real.shape) if isinstance(real, RealRows) else np.shape(real)
    if real_shape is not None and real_shape != exact.shape:
        raise ValueError(f"real mask of shape {real_shape} does not match counts of shape {exact.shape}")
    if mechanism == "kanon":
        if k is None:
            raise ValueError("mechanism='kanon' needs the threshold k")
        out = exact.astype(np.int64)
        out[out < k] = 0
        return out
    if mechanism not in ("geometric", "laplace"):
        raise ValueError(f"mechanism must be 'geometric', 'laplace' or 'kanon', got {mechanism!r}")
    out = exact.astype(np.int64 if mechanism == "geometric" else np.float64, copy=not in_place)
    if not out.flags.c_contiguous:  # the cells are noised through a flat view
        out = np.ascontiguousarray(out)
    draw = geometric_noise if mechanism == "geometric" else laplace_noise
    stream = rng.layout == "stream"
    if stream and out.size <= STREAM_CHUNK:
        if real is None:
            out += draw(exact.shape, epsilon, rng)
        else:
            whole = _mask(real, 0, out.size).reshape(out.shape)
            out[whole] += draw(int(whole.sum()), epsilon, rng)
        return out
    flat = out.reshape(-1)
    step = STREAM_CHUNK if stream else NOISE_BLOCK
    for s in range(0, flat.size, step):
        seg = flat[s : s + step]
        src = rng if stream else rng.spawn()
        if real is None:
            seg += draw(seg.size, epsilon, src)
        else:
            m = _mask(real, s, s + seg.size)
            seg[m] += draw(int(m.sum()), epsilon, src)
    return out


def window_delta(
    exact: np.ndarray | None,
    shape: tuple,
    epsilon: float,
    mechanism: str,
    rng: SecureRandom,
    real: np.ndarray | RealRows | None = None,
    k: int | None = None,
    in_place: bool = False,
) -> np.ndarray:
    """``release="window"``: the noisy delta to merge for one closed window.

    ``exact`` is the window's secret accumulator, or ``None`` when no entry arrived: an
    empty window is released too (pure noise), so the releases do not depend on the data.
    Store the delta (SET NX) before merging; delete the accumulator in the merge step.
    ``in_place``: as :func:`noisy_node`'s (the caller's accumulator becomes the delta).

    >>> d = window_delta(None, (2, 3), float("inf"), "geometric", SecureRandom())
    >>> d.tolist()
    [[0, 0, 0], [0, 0, 0]]
    """
    if exact is None:
        exact = np.zeros(shape, dtype=np.int64)
    elif np.shape(exact) != tuple(shape):
        raise ValueError(f"window accumulator of shape {np.shape(exact)} where {tuple(shape)} was expected")
    return noisy_node(exact, epsilon, mechanism, rng, real, k, in_place)
