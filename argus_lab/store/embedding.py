"""Embedding functions for :mod:`argus_lab.store.memory`.

:class:`Embedder` is what memory accepts: any callable ``list[str] -> vectors``,
optionally naming itself (``name``, ``version``, ``dim``: recorded with the
vectors so that two models' spaces are never mixed) and embedding queries apart
(``embed_query``). :class:`HashEmbedder` is a small deterministic lexical one;
the default semantic one lives in :mod:`argus_lab.store.memory_embedders`.
``_Embedding`` adapts any of them (or a raw LanceDB registry function) to the
batch-of-documents and single-query calls memory makes, checking the vectors.

numpy is imported on first use, not with this module.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from argus_lab.errors import ArgusError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Embedder", "EmbedderMismatchError", "HashEmbedder"]


@runtime_checkable
class Embedder(Protocol):
    """Embeds a batch of texts: one vector per text, all one size.

    Only the call is required; the optional attributes make an embedder
    recognisable when a memory is reopened:

    - ``name`` (str) and ``version`` (str): which model and which release
      (default: the class's or function's qualified name, no version);
    - ``dim`` (int): the vector size (default: found by embedding one text);
    - ``embed_query(text) -> vector``: for models that embed queries
      differently from documents (default: the call on ``[text]``).
    """

    def __call__(
        self, texts: list[str], /
    ) -> Sequence[Sequence[float]] | npt.NDArray[Any]: ...


class EmbedderMismatchError(ArgusError):
    """A memory's vectors came from another embedder than the one configured.

    Vectors of two models live in different spaces: comparing them ranks
    nonsense. Use the embedder the memory was built with, or re-embed
    (``memory.reembed()``, or ``Memory(..., on_mismatch="reembed")``).
    """


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

    name = "argus_lab/hash"
    """Recorded with the vectors (with :attr:`version` and :attr:`dim`)."""
    version = "1"
    """Bumped whenever the same text would hash to a different vector."""

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


def _qualified(obj: Any) -> str:
    target = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{target.__module__}.{target.__qualname__}"


class _Embedding:
    """Adapts an embedder (or a LanceDB embedding function) to docs/query calls."""

    def __init__(self, fn: Any) -> None:
        # Given as "default": an existing memory built by another bundled
        # embedder keeps it (Memory._ensure_space) instead of being refused.
        self.default = fn == "default"
        if isinstance(fn, str):
            from argus_lab.store.memory_embedders import named_embedder

            fn = named_embedder(fn)
        self.fn = fn
        self.call = fn
        if hasattr(fn, "compute_source_embeddings"):  # a raw registry function
            from argus_lab.store.memory_embedders import LanceDBEmbedder

            self.call = LanceDBEmbedder(fn)
        elif not callable(fn):
            raise TypeError(
                "embedder must be a callable list[str] -> list[list[float]] or a "
                f"LanceDB embedding function, got {type(fn).__name__}"
            )
        self._dim: int | None = None

    def docs(self, texts: list[str]) -> Any:
        m = self._matrix(self.call(texts), len(texts))
        declared = getattr(self.call, "dim", None)
        if isinstance(declared, int) and declared != m.shape[1]:
            # The declared dim is what gets recorded with the vectors.
            raise ArgusError(
                f"embedder {self.space_name()} says dim={declared} but returned "
                f"{m.shape[1]}-d vectors; fix its dim attribute (or drop it)"
            )
        self._dim = int(m.shape[1])
        return m

    def space_name(self) -> str:
        """The embedder's name, as recorded with its vectors."""
        name = getattr(self.call, "name", None)
        return name if isinstance(name, str) else _qualified(self.call)

    def query(self, text: str) -> Any:
        q = getattr(self.call, "embed_query", None)
        out = [q(text)] if q is not None else self.call([text])
        return self._matrix(out, 1)[0]

    def space(self) -> dict[str, Any]:
        """Which embedder this is: name, version and dim (as recorded)."""
        version = getattr(self.call, "version", None)
        dim = getattr(self.call, "dim", None)
        if not isinstance(dim, int):
            dim = self._dim or int(self.docs(["dimension probe"]).shape[1])
        return {
            "name": self.space_name(),
            "version": str(version) if isinstance(version, str | int) else "",
            "dim": dim,
        }

    def _matrix(self, out: Any, n: int) -> Any:
        import numpy as np

        try:
            m = np.asarray(out, dtype=np.float32)
        except (TypeError, ValueError) as e:
            what = (
                "vectors of different sizes"
                if "inhomogeneous" in str(e)
                else "something that is not numbers"
            )
            raise ArgusError(
                f"embedder returned {what} ({e}); it must return one list of "
                "floats per text, all of one size"
            ) from None
        if m.ndim != 2 or m.shape[0] != n or m.shape[1] == 0:
            raise ArgusError(
                f"embedder returned {m.shape[0] if m.ndim else 0} vector(s) of shape "
                f"{m.shape[1:]} for {n} text(s); it must return one vector per text"
            )
        if not np.isfinite(m).all():
            raise ArgusError("embedder returned NaN or infinite values")
        return m


def describe(space: dict[str, Any] | None) -> str:
    """An embedder's record as text, for messages."""
    if space is None:
        return "an unrecorded embedder (vectors written before Argus recorded it)"
    version = f" {space['version']}" if space.get("version") else ""
    return f"{space['name']}{version} ({space['dim']}-d)"
