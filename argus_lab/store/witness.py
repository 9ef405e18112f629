"""A second witness of a session's latest commit, outside its SQLite file.

SQLite cannot see WAL frames it lost: a truncated or bit-flipped ``-wal`` file
(a bad copy, a bad sector, a power cut under durability "normal") rolls the
session back to an older version without an error. Two small files beside
``cache.db`` let Argus see it:

- ``witness``: a 32-byte line rewritten in place (one ``pwrite``) after every
  commit, ``"AW1 <version:016d> <crc32:08x>\\n"``. A head older than this is a
  loss.
- ``journal``: one line per commit, appended: ``"<version> <task id> ...\\n"``,
  the tasks that commit touched, so a loss can be named task by task.

Both are written after the SQLite transaction commits (a crash in between
leaves the witness behind the head, which is harmless) and are left to the page
cache at every durability; what matters is only that the witness never names a
commit SQLite did not make. Under "normal" a power cut may keep the witness's
page and drop WAL frames: that loss is real, and reported. Under "full" SQLite
has fsynced each commit before its witness is written, so a power cut can only
drop witness writes: the witness then lags the head, which reports nothing
false and hides nothing (SQLite lost no commit). A bad copy or a bad sector is
seen as under "normal". fdatasyncing both files after every commit (issue 13's
first design) bought no detection and cost 6-9 KB of page writes a step
(BENCHMARKS.md, issue 18). A commit that skipped its fsync under "full"
(``commit(relaxed=True)``, an intent whose loss only reruns work) is journaled
but not witnessed, so a power cut that drops it is not reported as a loss; the
next fsynced commit is witnessed as usual. Closing a "full" store fdatasyncs both
files once.

If the journal does not cover a lost version, every unfinished task counts as
possibly lost: the fallback is conservative, never silent.

A third copy of the line, the *mark*, is kept outside the folder (a session's
is ``<workspace>/marks/<session id>``, ``mark=``): the witness and journal
travel with the folder, so an older backup of the whole folder restored over
it brings back an older witness and journal that agree with its older
checkpoint, and nothing in the folder can tell. The mark stays behind, still
naming the latest commit, and a head older than it is a loss all the same
(``SessionStore.load``). It is written like the witness and with it: the same
line, one ``pwrite`` right after the witness's, inside the witness's ``flock``
(every writer of the folder takes it: no lock of its own), and only a greater
version than it names (one ``pread`` first), so it never moves backwards (an
accepted loss moves the head past the mark instead). A kill between the two
writes leaves it behind the witness: harmless, as for the witness. It is
never fsynced (nor at close): a mark lagging after a power cut misses a
restore made of exactly those commits, and claims nothing SQLite did not do.

The witness never moves backwards. Two writers of one folder (two processes, or
two stores in one) each write after their own commit: A commits v10 and is
descheduled, B commits v11 and witnesses it, then A's late write of 10 would
hide a later loss of v11. Each write therefore holds an exclusive ``flock`` on
the witness, reads it back (one ``pread``), and writes only a greater version.
Only an accepted loss sets it lower, on purpose (``backwards=True``).

After its 32-byte line the witness keeps ``"origin <crc32> <folder>\\0"``, the
real path of the folder a lease of this store was last committed from
(``copies.py`` tells a copy of the files by it), and the journal gets the same
as a line of its own, so that a witness deleted or damaged by the copy still
leaves it readable. Both are written once per store, after the store's first
lease commit: no file of their own to create. A write a kill tore, or a bad
copy damaged, fails its checksum and names no origin.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import zlib
from pathlib import Path

__all__ = ["Witness"]

log = logging.getLogger("argus_lab")

_SIZE = 32
_ORIGIN = b"origin "


def _line(version: int) -> bytes:
    # "AW1 {version:016d} {crc32:08x}" without the format machinery (every
    # commit writes one: ~2k instructions of a step's ~560k). Fixed size, so
    # each rewrite is one pwrite over the same bytes.
    body = ("AW1 " + str(version).zfill(16)).encode()
    crc = zlib.crc32(body).to_bytes(4, "big").hex().encode()
    return (body + b" " + crc).ljust(_SIZE - 1) + b"\n"


def _origin_line(folder: str) -> bytes:
    """``"origin <crc32> <folder>\\0"``: the checksum tells a whole one from
    one a kill tore or a bad copy damaged (those name no folder)."""
    path = os.fsencode(folder)
    return (
        _ORIGIN
        + zlib.crc32(path).to_bytes(4, "big").hex().encode()
        + b" "
        + path
        + b"\0"
    )


def _origin_in(data: bytes) -> str | None:
    """The folder an origin line at the start of ``data`` names, if whole."""
    if not data.startswith(_ORIGIN) or b"\0" not in data:
        return None
    crc, _, path = data[len(_ORIGIN) : data.index(b"\0")].partition(b" ")
    if zlib.crc32(path).to_bytes(4, "big").hex().encode() != crc:
        return None
    return os.fsdecode(path)


def _parse(data: bytes) -> int | None:
    """The version a witness line names; None if it is not a whole, good one."""
    text = data[:_SIZE].decode("ascii", "replace").rstrip()
    parts = text.split(" ")
    if len(parts) != 3 or parts[0] != "AW1":
        return None
    body = f"{parts[0]} {parts[1]}"
    if f"{zlib.crc32(body.encode()):08x}" != parts[2] or not parts[1].isdigit():
        return None
    return int(parts[1])


class Witness:
    """The witness and journal files of one session folder."""

    def __init__(
        self, directory: Path, *, fsync: bool, mark: Path | None = None
    ) -> None:
        self.path = Path(directory) / "witness"
        self.mark_path = mark
        """The mark outside the folder (module docstring); None: none kept."""
        self._mfd: int | None = None
        """The mark's descriptor; -1 once it could not be opened (given up)."""
        self._mark_mine = b""
        self.journal_path = Path(directory) / "journal"
        self.fsync = fsync
        """fdatasync both files on close (durability "full"), never per commit."""
        self._fd: int | None = None
        self._jfd: int | None = None
        self._warned = False
        self._mine = b""
        """The line this object wrote last: read back unchanged, it needs no
        parse (the common case of one writer)."""

    def read(self) -> int | None:
        """The version last witnessed, or None (neither witness nor journal).

        A witness that is missing or damaged while the journal is there falls
        back on the journal's last version: a deleted or bit-flipped witness
        must not switch the loss check off (with a damaged WAL beside it, the
        session would roll back in silence and repeat side effects).
        """
        v = self._read_witness()
        if v is not None:
            return v
        last = self._journal_last()
        if last is not None:
            log.warning(
                "%s is missing or damaged: checking for lost commits against "
                "the journal (%s) instead",
                self.path,
                self.journal_path,
            )
        return last

    def _read_witness(self) -> int | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return _parse(data)

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._jfd = os.open(
                self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
            )
        return self._fd

    def _witness(self, fd: int, version: int, backwards: bool) -> None:
        """Writes ``version`` unless the witness already names a greater one
        (another writer's later commit) and ``backwards`` is False."""
        line = _line(version)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if not backwards:
                data = os.pread(fd, _SIZE, 0)
                if data != self._mine:
                    # Another writer's line (or damage: then ours replaces it).
                    cur = _parse(data)
                    if cur is not None and cur > version:
                        return
                elif data > line:
                    # Our own line, so well-formed: the zero-padded digits
                    # compare as bytes as they do as numbers.
                    return
            os.pwrite(fd, line, 0)
            self._mine = line
            if self.mark_path is not None:
                self._raise_mark(line, version)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def read_mark(self) -> int | None:
        """The version the mark names (None: no mark kept, none written yet,
        or a damaged one, which the next commit rewrites)."""
        if self.mark_path is None:
            return None
        try:
            data = self.mark_path.read_bytes()
        except OSError:
            return None
        return _parse(data)

    def _raise_mark(self, line: bytes, version: int) -> None:
        """Writes ``line`` (of ``version``) to the mark unless it names as much
        already. Called holding the witness's lock, after the witness's write."""
        fd = self._mfd
        if fd is None:
            fd = self._mfd = self._open_mark()
        if fd < 0:
            return
        try:
            data = os.pread(fd, _SIZE, 0)
            if data != self._mark_mine:
                # Another writer's, or none yet (or damage: ours replaces it).
                cur = _parse(data)
                if cur is not None and cur >= version:
                    return
            elif data >= line:  # ours: compares as bytes as it does as numbers
                return
            os.pwrite(fd, line, 0)
            self._mark_mine = line
        except OSError as e:
            self._mark_failed(e)

    def _open_mark(self) -> int:
        """The mark's descriptor, made with its folder if missing; -1 if it
        cannot be (a read-only or full disk: no mark then, as no witness)."""
        assert self.mark_path is not None
        try:
            try:
                return os.open(self.mark_path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # the workspace's first mark
                self.mark_path.parent.mkdir(exist_ok=True)
                return os.open(self.mark_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            self._mark_failed(e)
            return -1

    def _mark_failed(self, e: OSError) -> None:
        if not self._warned:
            log.warning("could not update %s: %s", self.mark_path, e)
            self._warned = True

    def origin(self) -> str | None:
        """The folder named as the origin: by the witness, else by the
        journal's last whole origin line (None: neither names one)."""
        try:
            found = _origin_in(self.path.read_bytes()[_SIZE:])
        except OSError:
            found = None
        if found is not None:
            return found
        try:
            journal = self.journal_path.read_bytes()
        except OSError:
            return None
        for line in reversed(journal.split(b"\n")):
            if line.startswith(_ORIGIN) and (found := _origin_in(line)) is not None:
                return found
        return None

    def claim_origin(self, folder: str) -> bool:
        """Names ``folder`` as the origin in the witness (unless it does
        already) and in a line of the journal (a compaction may have emptied
        it: the caller claims once per store). False: not yet (no witness line
        written: a hole before it would read as damage); True once done, or
        given up on (a read-only or full disk: copies are then not told apart,
        and trying at every commit would cost every commit)."""
        want = _origin_line(folder)
        try:
            fd = self._fd if self._fd is not None else self._open()
            if os.fstat(fd).st_size < _SIZE:
                return False
            if os.pread(fd, len(want), _SIZE) != want:
                os.pwrite(fd, want, _SIZE)
            if b"\n" not in want:  # (a path may hold one: no journal line then)
                assert self._jfd is not None
                os.write(self._jfd, want + b"\n")
        except OSError:
            pass
        return True

    def _journal_last(self) -> int | None:
        """The highest version the journal names (None: no journal, or empty).

        It may name a relaxed commit a power cut dropped (journaled, never
        witnessed): only when the witness is damaged too is that reported as
        a loss, which is conservative, never silent.
        """
        try:
            entries = self._entries()
        except OSError:
            return None
        return max((v for v, _, _ in entries), default=None) if entries else None

    def _entries(self) -> list[tuple[int, int | None, list[str]]] | None:
        """The journal's lines as (version, last seq or None, task ids); None
        when there is no journal. A torn or damaged line is skipped."""
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return None
        out = []
        for raw in data.split(b"\n"):
            parts = raw.split(b" ")
            if not parts[0].isdigit() or len(parts[0]) > 18:  # bytes: ASCII only
                continue
            seq = None
            if len(parts) > 1 and parts[1][:1] == b"@":
                n = parts.pop(1)[1:]
                seq = int(n) if n.isdigit() and len(n) < 19 else None
            tids = [p.decode("utf-8", "replace") for p in parts[1:] if p]
            out.append((int(parts[0]), seq, tids))
        return out

    def record(
        self,
        version: int,
        task_ids: list[str],
        *,
        durable: bool = True,
        last_seq: int | None = None,
        backwards: bool = False,
    ) -> None:
        """Journals that ``version`` touched ``task_ids`` and witnesses it.

        Args:
            version: The version just committed.
            task_ids: The tasks whose records that commit wrote.
            durable: False for a commit that skipped its fsync under "full"
                (relaxed): it is journaled, but the witness stays at the last
                fsynced version, so a power cut that drops it is not a "loss".
            last_seq: The last event seq as of this commit, journaled as
                ``@N`` (a task id never starts with "@"): after a loss, new
                events are numbered past every lost one (``lost_seq``).
            backwards: Witness ``version`` even if an older one: only after an
                accepted loss whose versions will be written again.
        """
        try:
            fd = self._fd if self._fd is not None else self._open()
            assert self._jfd is not None
            if last_seq is None:
                line = " ".join([str(version), *task_ids]) + "\n"
            else:
                line = f"{version} @{last_seq} {' '.join(task_ids)}\n"
            os.write(self._jfd, line.encode())
            if durable:
                self._witness(fd, version, backwards)
        except OSError as e:
            # The commit itself is already in SQLite: a witness left behind the
            # head is safe (it can only miss a loss, never invent one), so a
            # full disk here must not turn a good commit into an error.
            if not self._warned:
                log.warning("could not update %s: %s", self.path, e)
                self._warned = True

    def compact(self, limit: int = 1 << 16) -> None:
        """Empties a journal over ``limit`` bytes; call only when no WAL is left.

        With every commit in cache.db itself, no version can be lost to a
        damaged WAL any more, so the journal's lines name nothing worth naming.
        A line a concurrent writer appends meanwhile may go too: a loss it would
        have named is then reported as "any unfinished task" (conservative).
        """
        try:
            if self.journal_path.stat().st_size > limit:
                os.truncate(self.journal_path, 0)
        except OSError:
            pass  # no journal yet, or read-only: nothing to gain

    def touched(self, after: int, upto: int) -> set[str] | None:
        """Tasks the commits ``after < version <= upto`` touched.

        None when the journal does not cover every one of those versions (it
        was lost or cut short): then any task may have been touched.
        """
        entries = self._entries()
        if entries is None:
            return None
        lines = [e for e in entries if after < e[0] <= upto]
        if len({v for v, _, _ in lines}) < upto - after:
            return None
        return {t for _, _, tids in lines for t in tids}

    def lost_seq(self, after: int, upto: int) -> int | None:
        """The highest event seq the commits ``after < version <= upto`` had
        reached (their ``@N``), or None if the journal names none."""
        entries = self._entries() or ()
        seqs = [q for v, q, _ in entries if after < v <= upto and q is not None]
        return max(seqs, default=None)

    def close(self) -> None:
        """Flushes (under "full") and closes the files (the data stays on disk)."""
        if self._mfd is not None and self._mfd >= 0:
            os.close(self._mfd)  # never fsynced (module docstring)
        self._mfd = None
        for fd in (self._jfd, self._fd):
            if fd is None:
                continue
            if self.fsync:
                # Once per store, not per commit: a witness lagging after a
                # power cut is safe (module docstring), this only spares the
                # next open a lagging one after a clean close.
                with contextlib.suppress(OSError):
                    os.fdatasync(fd)
            os.close(fd)
        self._fd = self._jfd = None
