"""The model layer: a small ``Model`` protocol, Anthropic, and offline models.

``AnthropicModel`` wraps the official SDK (imported on first use);
``al.llm.testing`` holds ``FunctionModel``, ``RecordingModel`` and ``ReplayModel``;
``ReplyCache`` keeps recorded replies as JSON, keyed by (model, request hash).
"""

from __future__ import annotations

from argus_lab.llm import testing
from argus_lab.llm.anthropic import AnthropicModel
from argus_lab.llm.base import (
    DEFAULT_MODEL,
    PRICES,
    PRICES_AS_OF,
    Block,
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    Price,
    RawBlock,
    RetryPolicy,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    complete_with_retries,
    cost,
    price_for,
    run_sync,
)
from argus_lab.llm.cache import (
    CacheStore,
    JsonDirStore,
    JsonlStore,
    MemoryStore,
    ReplayMiss,
    ReplyCache,
)

__all__ = [
    "DEFAULT_MODEL",
    "PRICES",
    "PRICES_AS_OF",
    "AnthropicModel",
    "Block",
    "CacheStore",
    "JsonDirStore",
    "JsonlStore",
    "MemoryStore",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "Price",
    "RawBlock",
    "ReplayMiss",
    "ReplyCache",
    "RetryPolicy",
    "TextBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "complete_with_retries",
    "cost",
    "price_for",
    "run_sync",
    "testing",
]
