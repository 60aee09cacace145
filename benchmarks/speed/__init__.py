"""Speed scenarios: our operation beside a plain baseline doing the same work, reported as a ratio."""
