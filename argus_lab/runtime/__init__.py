"""The runtime: Session (session.py), scheduler (pure), executor (one attempt)."""
