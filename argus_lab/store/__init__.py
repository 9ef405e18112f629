"""Storage: checkpoints (diskcache), artifacts (content-addressed files)."""
