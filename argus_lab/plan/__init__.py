"""Plans: the Plan model (_model.py), validation and graphs (graph.py), YAML/JSON
plans (static.py), HTN and LLM planners, and patches."""

from argus_lab.plan._model import Plan

__all__ = ["Plan"]
