"""Release policies of the stream model and continual counting over its releases."""
