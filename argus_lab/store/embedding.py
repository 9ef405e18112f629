"""Embedding functions for :mod:`argus_lab.store.memory`.

:class:`HashEmbedder` is a small deterministic offline embedder; ``_Embedding``
adapts any embedder (a callable ``list[str] -> list[list[float]]`` or a LanceDB
embedding-registry function) to the batch-of-documents and single-query calls
memory makes, checking the vectors it returns.

numpy is imported on first use, not with this module.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ArgusError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Embedder", "HashEmbedder"]

Embedder = Callable[[list[str]], "Sequence[Sequence[float]] | npt.NDArray[Any]"]
"""A function embedding a batch of texts: one vector per text, all one size
(a list of lists or a 2-d numpy array)."""


class HashEmbedder:
    """A deterministic, offline embedder: hashed character trigrams and words.

    Each trigram of ``<word>`` adds +/-1 and each whole word +/-0.5 to a slot
    chosen by blake2b (stable across processes, unlike ``hash``); the vector is
    L2-normalised. Trigrams dominate so that a misspelt word still lands near
    the right one. It is lexical, not semantic — it matches spelling variants,
    inflections and typos, not synonyms — but needs no model download, which
    makes it right for tests, benchmarks and offline demos.

    Args:
        dim: Vector size (fewer slots, more collisions: keep it >= 256).
    """

    def __init__(self, dim: int = 512) -> None:
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        self.dim = dim
        self._slots: dict[str, tuple[int, float]] = {}

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self.dim})"

    def _slot(self, feature: str) -> tuple[int, float]:
        s = self._slots.get(feature)
        if s is None:
            h = int.from_bytes(hashlib.blake2b(feature.encode()).digest()[:8], "little")
            s = (h % self.dim, 1.0 if (h >> 40) & 1 else -1.0)
            if len(self._slots) < 1_000_000:
                self._slots[feature] = s
        return s

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for row, text in enumerate(texts):
            idx: list[int] = []
            weights: list[float] = []
            for word in re.findall(r"\w+", text.lower()):
                j, sign = self._slot("w:" + word)
                idx.append(j)
                weights.append(0.5 * sign)
                padded = f"<{word}>"
                for k in range(len(padded) - 2):
                    j, sign = self._slot(padded[k : k + 3])
                    idx.append(j)
                    weights.append(sign)
            if idx:
                out[row] = np.bincount(idx, weights=weights, minlength=self.dim)
            if not out[row].any():
                out[row, 0] = 1.0  # cosine needs a non-zero vector
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out.astype(np.float32)


class _Embedding:
    """Adapts a callable or a LanceDB embedding function to docs/query calls."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.registry = hasattr(fn, "compute_source_embeddings")
        if not (self.registry or callable(fn)):
            raise TypeError(
                "embedder must be a callable list[str] -> list[list[float]] or a "
                f"LanceDB embedding function, got {type(fn).__name__}"
            )

    def docs(self, texts: list[str]) -> Any:
        out = (
            self.fn.compute_source_embeddings(texts)
            if self.registry
            else self.fn(texts)
        )
        return self._matrix(out, len(texts))

    def query(self, text: str) -> Any:
        if self.registry:
            out = self.fn.compute_query_embeddings(text)
        else:
            out = self.fn([text])
        return self._matrix(out, 1)[0]

    def _matrix(self, out: Any, n: int) -> Any:
        import numpy as np

        try:
            m = np.asarray(out, dtype=np.float32)
        except ValueError as e:
            raise ArgusError(
                f"embedder returned vectors of different sizes: {e}"
            ) from None
        if m.ndim != 2 or m.shape[0] != n or m.shape[1] == 0:
            raise ArgusError(
                f"embedder returned {m.shape[0] if m.ndim else 0} vector(s) of shape "
                f"{m.shape[1:]} for {n} text(s); it must return one vector per text"
            )
        if not np.isfinite(m).all():
            raise ArgusError("embedder returned NaN or infinite values")
        return m
