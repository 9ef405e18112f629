"""Tools: the registry and the ``@tool`` decorator (registry.py)."""
