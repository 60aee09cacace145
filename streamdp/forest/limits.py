"""The size limits every forest structure keeps, drawn or read."""

__all__ = ["MAX_HEIGHT", "MAX_TREES", "DEFAULT_MAX_CELLS", "TooLargeError"]

#: The tallest structure drawn or read (routing is ``height`` steps; a blob claiming more is refused).
MAX_HEIGHT = 64
#: The most random trees drawn: the papers use tens; a budget split among more leaves each tree only noise, and
#: drawing millions takes minutes.
MAX_TREES = 1000
#: Default guard on n_trees * max_leaves * n_classes (int64 cells: 2**26 cells = 512 MiB).
DEFAULT_MAX_CELLS = 2**26


class TooLargeError(ValueError):
    """The requested forest would need more leaf cells than allowed."""
