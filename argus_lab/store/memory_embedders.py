"""Embedders for memory beyond :class:`~argus_lab.store.embedding.HashEmbedder`.

- :func:`default_embedder`: :class:`~argus_lab.store.memory_minilm.MiniLMEmbedder`
  (all-MiniLM-L6-v2, int8 ONNX), the default of vector and hybrid search.
- :class:`WordLlamaEmbedder` (``embedder="wordllama"``): WordLlama's
  ``l2_supercat`` static token embeddings (256 dimensions, MIT), whose weights
  and tokenizer ship inside the ``wordllama`` wheel. It is loaded from the
  package's own folder with downloads disabled, on first use, once per process:
  nothing is fetched, ever. It loads in ~0.3-0.7 s and embeds ~20-50k short
  texts per second on two cores, ~100x MiniLM's rate, but finds less than half
  as many paraphrases (BENCHMARKS.md): the choice for bulk loads. It was the
  default before MiniLM; memories built with it keep it (see :class:`Memory`).
- :class:`LanceDBEmbedder` adapts a function of LanceDB's embedding registry
  (``get_registry().get("openai").create(...)``, sentence-transformers, a GPU
  model, your own ``@register``-ed class) so memory can use it.

Neither imports anything heavy until it embeds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ArgusError
from argus_lab.store.memory_minilm import MiniLMEmbedder

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "BUNDLED",
    "LanceDBEmbedder",
    "WordLlamaEmbedder",
    "default_embedder",
    "named_embedder",
]


class WordLlamaEmbedder:
    """WordLlama's bundled ``l2_supercat`` 256-d model, loaded offline on first use.

    Texts are embedded as the L2-normalised average of their token vectors (a
    static model: no attention, so no GPU and no warm-up). One model is shared
    by every instance in a process.

    Raises:
        ArgusError: on first use, if the wordllama package or its bundled files
            are missing (the message says how to install it).
    """

    name = "wordllama/l2_supercat"
    """Recorded with the vectors (with :attr:`version` and :attr:`dim`)."""
    dim = 256
    """The vector size."""
    config = "l2_supercat"

    _model: Any = None
    _lock = threading.Lock()

    def __repr__(self) -> str:
        return "WordLlamaEmbedder()"

    @property
    def version(self) -> str:
        """The wordllama package version (its weights ship inside it)."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("wordllama")
        except PackageNotFoundError:
            return "missing"

    @classmethod
    def model(cls) -> Any:
        """The loaded WordLlama model (loading it the first time)."""
        if cls._model is None:
            with cls._lock:
                if cls._model is None:
                    cls._model = cls._load()
        return cls._model

    @classmethod
    def _load(cls) -> Any:
        try:
            import wordllama
        except ImportError:
            raise ArgusError(
                "the default memory embedder needs the wordllama package, which "
                "ships its model: pip install wordllama (or pass embedder=None "
                "for full-text search only)"
            ) from None
        # wordllama 0.4.0.post1's default lookup misses the tokenizer bundled in
        # its wheel and would go to Hugging Face; pointing cache_dir at the
        # package folder finds weights/ and tokenizers/ there, and
        # disable_download makes a missing file an error instead of a fetch.
        home = Path(wordllama.__file__).parent
        try:
            return wordllama.WordLlama.load(
                config=cls.config,
                dim=cls.dim,
                cache_dir=home,
                disable_download=True,
            )
        except FileNotFoundError as e:
            raise ArgusError(
                f"wordllama's bundled model files were not found under {home} "
                f"({e}); reinstall it: pip install --force-reinstall wordllama"
            ) from None

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeds texts: one unit-length 256-d float32 row per text."""
        import numpy as np

        out = self.model().embed(list(texts), norm=False, batch_size=512)
        m = np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        # A text of no known token (an empty one) pools to zeros, which wordllama
        # would divide by; cosine needs a direction, so it gets a fixed one.
        empty = norms[:, 0] == 0
        m[empty, 0], norms[empty] = 1.0, 1.0
        out32: npt.NDArray[np.float32] = m / norms
        return out32


_CLASSES: dict[str, type[Any]] = {
    "minilm": MiniLMEmbedder,
    "wordllama": WordLlamaEmbedder,
}
_NAMED: dict[str, Any] = {}

BUNDLED = {short: cls.name for short, cls in _CLASSES.items()}
"""Embedders whose models ship with Argus Lab's dependencies: the short name
``Memory(embedder=...)`` takes, and the name recorded with their vectors."""


def named_embedder(name: str) -> Any:
    """The process-wide embedder of a short name: "default", "minilm" or
    "wordllama". Its model loads on the first embedding, not here.

    Raises:
        TypeError: for any other name (the message lists them).
    """
    key = "minilm" if name == "default" else name
    if key not in BUNDLED:
        raise TypeError(
            'embedder must be "default", "minilm", "wordllama", None, a callable '
            f"or a LanceDB embedding function, got the string {name!r}"
        )
    if key not in _NAMED:
        _NAMED[key] = _CLASSES[key]()
    return _NAMED[key]


def default_embedder() -> Any:
    """The embedder vector and hybrid memory search use unless told otherwise.

    Returns the process-wide
    :class:`~argus_lab.store.memory_minilm.MiniLMEmbedder`; its model loads on
    the first embedding, not here.
    """
    return named_embedder("default")


class LanceDBEmbedder:
    """Memory embedder backed by a LanceDB embedding-registry function.

    Documents go through ``compute_source_embeddings`` and queries through
    ``compute_query_embeddings``, so asymmetric models (e5's "query:" and
    "passage:" prefixes, OpenAI's input types) are used as they are meant to.

    Args:
        fn: A LanceDB ``EmbeddingFunction`` instance, e.g.
            ``get_registry().get("sentence-transformers").create(name=...)``.
        name: Recorded with the vectors; default from the function's class and
            its ``name`` / ``model_name`` field.

    Example:
        >>> from lancedb.embeddings import get_registry  # doctest: +SKIP
        >>> fn = get_registry().get("openai").create(name="text-embedding-3-small")
        >>> ws.memory.embedder = LanceDBEmbedder(fn)  # doctest: +SKIP
    """

    def __init__(self, fn: Any, *, name: str | None = None) -> None:
        if not hasattr(fn, "compute_source_embeddings"):
            raise TypeError(
                "LanceDBEmbedder needs a LanceDB embedding function (with "
                f"compute_source_embeddings), got {type(fn).__name__}"
            )
        self.fn = fn
        model = getattr(fn, "name", None) or getattr(fn, "model_name", None)
        self.name = name or f"lancedb:{type(fn).__name__}" + (
            f"/{model}" if isinstance(model, str) else ""
        )

    def __repr__(self) -> str:
        return f"LanceDBEmbedder({self.name!r})"

    @property
    def version(self) -> str:
        """The function's ``version`` field if it has one, else "": the model
        name in :attr:`name` is what identifies its vectors (a lancedb upgrade
        does not change an API model's)."""
        v = getattr(self.fn, "version", None)
        return v if isinstance(v, str) else ""

    @property
    def dim(self) -> int | None:
        """The function's ``ndims()``, or None if it cannot tell without a call."""
        try:
            return int(self.fn.ndims())
        except Exception:
            return None

    def __call__(self, texts: Sequence[str]) -> Any:
        """Embeds documents."""
        return self.fn.compute_source_embeddings(list(texts))

    def embed_query(self, text: str) -> Any:
        """Embeds a search query (one vector)."""
        return self.fn.compute_query_embeddings(text)[0]
