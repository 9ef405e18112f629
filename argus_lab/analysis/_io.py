"""Export every frame to parquet and load it back, dtypes and all.

``export(src, folder)`` writes ``<frame>.parquet`` for each frame plus a
``manifest.json``; each parquet file also carries, in its schema metadata under
``argus_lab``, the exact pandas dtype of every column, so ``load(folder)`` gives
back frames equal to the exported ones (categories, nullable integers, UTC
timestamps and Arrow-backed columns included). Share the folder to share a
post-mortem: the post-mortem helpers accept the loaded :class:`Frames`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.analysis._columns import DtypeBackend, arrow
from argus_lab.analysis._frames import FRAME_NAMES, Frames, frames
from argus_lab.analysis._read import Source

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FORMAT", "export", "load"]

FORMAT = "argus-lab-frames/1"
"""The folder format written by ``export`` (in manifest.json)."""
_META_KEY = b"argus_lab"


def _describe(dtype: Any) -> dict[str, Any]:
    import pandas as pd

    if isinstance(dtype, pd.CategoricalDtype):
        return {
            "kind": "category",
            "categories": [str(c) for c in dtype.categories],
            "ordered": bool(dtype.ordered),
        }
    if isinstance(dtype, pd.ArrowDtype):
        return {"kind": "arrow", "name": str(dtype)}
    return {"kind": "pandas", "name": str(dtype)}


def export(
    src: Source | Frames,
    folder: str | Path,
    *,
    dtype_backend: DtypeBackend = "numpy_nullable",
) -> Path:
    """Writes every frame of ``src`` to ``folder`` as parquet (one file per frame).

    Args:
        src: A Session, a Workspace, a list of Sessions, or Frames.
        folder: Where to write (created if missing; existing frame files are
            replaced).
        dtype_backend: When reading sessions: "numpy_nullable" (default) or
            "pyarrow" (Frames are written as they are).

    Returns:
        The folder.
    """
    from argus_lab import __version__

    pa, pq = arrow(), arrow("pyarrow.parquet")

    out = Path(folder)
    if out.exists() and not out.is_dir():  # checked before reading any session
        raise NotADirectoryError(
            f"{out} is a file: export writes a folder of parquet files (one per "
            "frame) and a manifest; give a folder path"
        )
    f = src if isinstance(src, Frames) else frames(src, dtype_backend=dtype_backend)
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "argus_lab": __version__,
        "exported": time.time(),
        "sessions": f.session_ids,
        "frames": {},
    }
    for name, df in f.items():
        meta = {c: _describe(df[c].dtype) for c in df.columns}
        table = pa.Table.from_pandas(df, preserve_index=False)
        table = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), _META_KEY: json.dumps(meta).encode()}
        )
        path = out / f"{name}.parquet"
        pq.write_table(table, path)
        manifest["frames"][name] = {"file": path.name, "rows": len(df)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def _read_frame(path: Path) -> pd.DataFrame:
    import pandas as pd

    table = arrow("pyarrow.parquet").read_table(path)
    raw = (table.schema.metadata or {}).get(_META_KEY)
    if raw is None:
        plain: pd.DataFrame = table.to_pandas()
        return plain
    meta: dict[str, dict[str, Any]] = json.loads(raw)
    data: dict[str, Any] = {}
    for name in table.column_names:
        d = meta.get(name, {"kind": "pandas", "name": "object"})
        col = table.column(name)
        if d["kind"] == "arrow":
            data[name] = pd.Series(pd.arrays.ArrowExtensionArray(col))
            continue
        s = table.select([name]).to_pandas()[name]
        if d["kind"] == "category":
            dtype: Any = pd.CategoricalDtype(d["categories"], ordered=d["ordered"])
        elif d["name"].startswith("timedelta64"):
            # Exported before durations became float seconds: read them as such,
            # so the post-mortem helpers work on old folders too.
            data[name] = s.astype(d["name"]).dt.total_seconds()
            continue
        else:
            dtype = pd.api.types.pandas_dtype(d["name"])
        data[name] = s.astype(dtype)
    return pd.DataFrame(data, columns=table.column_names)


def load(folder: str | Path) -> Frames:
    """Reads the frames ``export`` wrote to ``folder``.

    Raises:
        FileNotFoundError: ``folder`` holds no export (the message says what is
            missing).
    """
    root = Path(folder)
    manifest = root / "manifest.json"
    if not manifest.exists():
        raise FileNotFoundError(
            f"{root} holds no exported frames (no manifest.json); write them with "
            "al.analysis.export(session_or_workspace, folder)"
        )
    info = json.loads(manifest.read_text())
    if info.get("format") != FORMAT:
        raise ValueError(
            f"{manifest}: unknown format {info.get('format')!r} (expected {FORMAT!r})"
        )
    missing = [n for n in FRAME_NAMES if not (root / f"{n}.parquet").exists()]
    if missing:
        raise FileNotFoundError(f"{root}: missing {', '.join(missing)} frame file(s)")
    return Frames(**{n: _read_frame(root / f"{n}.parquet") for n in FRAME_NAMES})
