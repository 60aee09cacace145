"""The one private release of a node's (or window's) exact integer counts: noise drawn once, keyed, by blocks.

Every release policy noises through :func:`noisy_node`; :func:`window_delta` is ``window``'s step.
"""

from __future__ import annotations

import numpy as np

from streamdp.privacy.mechanisms import SecureRandom, geometric_noise, laplace_noise

__all__ = ["NOISE_BLOCK", "STREAM_CHUNK", "noisy_node", "window_delta"]


#: The noise layout "blocks": cells (flat, C order) ``[b * NOISE_BLOCK, (b + 1) * NOISE_BLOCK)`` of a
#: release draw their noise from the next child of the release's generator (:meth:`SecureRandom.spawn`;
#: child ``b`` when the generator draws one release). Part of every keyed release's definition:
#: changing it changes every redraw (never change it; ``test_the_block_layout_is_pinned``).
NOISE_BLOCK = 1 << 16
#: The layout "stream" (keyed models created before "blocks"): one stream, chunks of this many cells.
STREAM_CHUNK = 1 << 20


def noisy_node(
    exact: np.ndarray,
    epsilon: float,
    mechanism: str,
    rng: SecureRandom,
    real: np.ndarray | None = None,
    k: int | None = None,
    in_place: bool = False,
) -> np.ndarray:
    """The one private release of a node's (or window's) exact integer counts.

    ``epsilon`` is ``policy.node_epsilon(epsilon_per_tree)``; geometric noise keeps
    integers, Laplace gives floats; ``real`` (boolean, the counts' shape) marks the
    cells that exist: the others stay exactly 0. ``mechanism="kanon"`` (``window`` and
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
    if real is not None and np.shape(real) != exact.shape:
        raise ValueError(f"real mask of shape {np.shape(real)} does not match counts of shape {exact.shape}")
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
            whole = np.asarray(real, dtype=bool)
            out[whole] += draw(int(whole.sum()), epsilon, rng)
        return out
    flat = out.reshape(-1)
    mask = None if real is None else np.asarray(real, dtype=bool).reshape(-1)
    step = STREAM_CHUNK if stream else NOISE_BLOCK
    for s in range(0, flat.size, step):
        seg = flat[s : s + step]
        src = rng if stream else rng.spawn()
        if mask is None:
            seg += draw(seg.size, epsilon, src)
        else:
            m = mask[s : s + step]
            seg[m] += draw(int(m.sum()), epsilon, src)
    return out


def window_delta(
    exact: np.ndarray | None,
    shape: tuple,
    epsilon: float,
    mechanism: str,
    rng: SecureRandom,
    real: np.ndarray | None = None,
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
