"""Plans: validation and graphs (graph.py), YAML/JSON plans (static.py)."""
