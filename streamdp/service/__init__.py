"""Redis service parts: they move bytes and call the pure core."""
