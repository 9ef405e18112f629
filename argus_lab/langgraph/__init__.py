"""Argus as a LangGraph checkpointer (the optional ``langgraph`` extra).

    from argus_lab.langgraph import ArgusSaver
    app = graph.compile(checkpointer=ArgusSaver(ws))

``import argus_lab`` never imports this package (nor LangGraph).
"""

from __future__ import annotations

from argus_lab.errors import MissingDependency

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingDependency(
        f"argus_lab.langgraph needs LangGraph: pip install 'argus-lab[langgraph]' ({e})"
    ) from e

from argus_lab.langgraph._codec import UnsafeValueError
from argus_lab.langgraph._secrets import SecretUnsetError
from argus_lab.langgraph.saver import ArgusSaver

__all__ = ["ArgusSaver", "SecretUnsetError", "UnsafeValueError"]
