"""Reading and writing files that may not be what they claim to be.

Writing: every result file that is rewritten while a run goes (summary.json, actors.json,
checkpoints, a truncated CSV on resume) goes through `write_atomic` / `atomic_writer`: a temp
file made by `tempfile.mkstemp` in the same directory (a random name from the OS's random
source, opened with O_CREAT | O_EXCL | O_NOFOLLOW, so a name planted in advance, symlink or
not, makes it pick another name rather than follow it; given the umask's mode, as any file
the run writes), flushed and fsynced, then renamed over
the target (atomic on POSIX within one file system; a symlink at the target is replaced, not
followed), and the directory fsynced so the rename survives a crash. Logs that grow while a
run goes are opened with `open_append`, which refuses a symlink or anything but a regular file.

Reading: `read_regular` opens without blocking and checks, on the open descriptor, that the
file is a regular file before reading at most a given number of bytes. A FIFO would otherwise
block the reader forever, a device such as /dev/zero never end, and a huge file fill memory.
Inside a run directory (not trusted: it may come from elsewhere) symlinks are refused too,
so a planted link cannot make the run read or append to a file outside it.

One writer per directory: `DirectoryLock` holds an exclusive `flock` on a lock file inside a
run or search directory for as long as the run or search goes. The kernel drops the lock when
its process ends, however it ends (kill -9 included), so a lock file left behind by a dead
process never blocks the next one: only a live holder does.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

TMP_SUFFIX = ".tmp"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class UnsafeFileError(OSError):
    """A file that is not a regular file, is a refused symlink, or is larger than allowed.

    The message is one line naming the path and what was found.
    """


@contextmanager
def atomic_writer(path: Path, *, tmp_prefix: str = ".write-") -> Iterator[IO[bytes]]:
    """A binary handle whose contents replace `path` in one step when the block ends."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=tmp_prefix, suffix=TMP_SUFFIX)
    try:
        # mkstemp makes the file 0600; a result file gets what open() would give it (the
        # umask's), as the CSVs beside it do.
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def current_umask() -> int:
    """The process's umask, read without changing it where the OS tells it (Linux's
    /proc/self/status); elsewhere set and put back at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes | str, *, tmp_prefix: str = ".write-") -> None:
    """Replace `path` by `data` in one step (see the module docstring)."""
    payload = data.encode() if isinstance(data, str) else data
    with atomic_writer(path, tmp_prefix=tmp_prefix) as handle:
        handle.write(payload)


def write_output(path: Path, data: bytes | str, what: str) -> None:
    """Write a result file the user named (`--plot`, `--html`, `calibrate -o`), atomically.

    Checked first, so that a bad path is one OutputPathError line naming it: an existing
    target must be a regular file or a symbolic link (replaced, never followed); a directory,
    a device (which an atomic rename would replace, as root even /dev/null) or a FIFO is
    refused, as is a parent that is not a directory."""
    from syncswitch.errors import OutputPathError

    check_output(path, what)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise OutputPathError(f"{what} {str(path)!r} cannot be written: {reason}") from None


def check_output(path: Path, what: str) -> None:
    """`write_output`'s checks alone, to refuse a bad path before the work that fills it."""
    from syncswitch.errors import OutputPathError

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:  # e.g. a path under a file: ENOTDIR
        raise OutputPathError(f"{what} {str(path)!r} cannot be written: {error.strerror}") from None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OutputPathError(f"{what} {str(path)!r} is {_kind(mode)}; give a file name to write")
    for parent in path.parents:  # the nearest existing ancestor must be a directory
        try:
            parent_mode = os.stat(parent).st_mode
        except FileNotFoundError:
            continue
        except OSError as error:
            raise OutputPathError(
                f"{what} {str(path)!r} cannot be written: {error.strerror}"
            ) from None
        if not stat.S_ISDIR(parent_mode):
            raise OutputPathError(
                f"{what} {str(path)!r} cannot be written: {str(parent)!r} is not a directory"
            )
        return


# The longest name one part of a path may have on the usual file systems (ext4, XFS, APFS,
# tmpfs: 255 bytes); a longer one fails every call with ENAMETOOLONG.
NAME_MAX_BYTES = 255


def name_too_long(path: Path, what: str) -> str | None:
    """A one-line reason when a part of `path` is longer than a file system allows (None:
    every part fits), said before any call fails on it."""
    for part in Path(path).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX_BYTES:
            shown = part if len(part) <= 40 else part[:37] + "..."
            return (
                f"{what} {shown!r}: a part of the path is {size} bytes long; a file system "
                f"allows at most {NAME_MAX_BYTES} bytes per name"
            )
    return None


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str))


def fsync_directory(directory: Path) -> None:
    """Make a rename inside `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | _DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_regular(path: Path, *, follow_symlinks: bool = True) -> int:
    """An O_RDONLY descriptor of `path`, checked to be a regular file (caller closes it).

    Opened with O_NONBLOCK so that a FIFO is refused instead of blocking the open.
    """
    flags = os.O_RDONLY | _NONBLOCK | (0 if follow_symlinks else _NOFOLLOW)
    return _open_regular_fd(path, flags, check_symlink=not follow_symlinks)


def read_regular(path: Path, max_bytes: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (UnsafeFileError otherwise)."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(
            f"{str(path)!r} is larger than the {_size(max_bytes)} allowed for this file"
        )
    return data


def open_append(path: Path) -> IO[str]:
    """A text handle appending to `path` (created if absent), never through a symlink."""
    return os.fdopen(open_append_fd(path), "a", newline="")


def open_append_fd(path: Path) -> int:
    """A descriptor appending to `path` (created if absent): never through a symlink, never
    blocking on a FIFO, a regular file only (caller closes it)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK
    return _open_regular_fd(path, flags, check_symlink=True, writing=True)


def append_bytes(fd: int, data: bytes) -> None:
    """All of `data` at the end of an appending descriptor: `os.write` may take less than it
    is given (a nearly full disk), so the rest follows until done or an OSError says why not.
    Nothing is buffered here, so a failed write leaves nothing to be retried at close."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def drop_torn_tail(path: Path) -> int:
    """Cut a log back to its last complete line, the bytes after its last line feed: what a
    crash or a full disk left mid-line. Returns how many bytes were dropped (0: none, or no
    file). Never through a symbolic link, a regular file only (UnsafeFileError)."""
    flags = os.O_RDWR | _NOFOLLOW | _NONBLOCK
    try:
        fd = _open_regular_fd(path, flags, check_symlink=True, writing=True)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        keep = _after_last_line_feed(fd, size)
        if keep < size:
            os.ftruncate(fd, keep)
            os.fsync(fd)
        return size - keep
    finally:
        os.close(fd)


def _after_last_line_feed(fd: int, size: int, chunk: int = 1 << 16) -> int:
    """The length of the file's complete lines: up to and including its last line feed."""
    end = size
    while end > 0:
        start = max(end - chunk, 0)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks, so DirectoryLock locks nothing
    fcntl = None  # type: ignore[assignment]


class DirectoryBusy(Exception):
    """Another live process holds the directory's lock; `holder` is what it wrote there (its
    process id), or "" when that cannot be read."""

    def __init__(self, directory: Path, holder: str) -> None:
        super().__init__(f"{str(directory)!r} is in use by another process")
        self.directory = directory
        self.holder = holder


@dataclass
class _Held:
    fd: int  # the lock file's (it holds the process id)
    directory_fd: int  # the directory's own: the lock that holds when the file is deleted
    count: int = 1


# The locks this process holds, by the directory's (device, inode): a process that already
# holds one (the CLI around train(), then train()'s writer) takes it again instead of being
# refused by its own lock, which flock would do for a second descriptor.
_HELD: dict[tuple[int, int], _Held] = {}


@dataclass
class DirectoryLock:
    """An exclusive lock on `directory`, taken on creation: DirectoryBusy when another
    process holds it. `release()` (or the end of a `with` block) lets it go. The lock is on
    the directory itself, so deleting the lock file (`name`, which says the holder's process
    id and stays, empty of meaning once no process holds it) does not free it."""

    directory: Path
    name: str
    _key: tuple[int, int] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        directory_fd = os.open(self.directory, os.O_RDONLY | _DIRECTORY)
        info = os.fstat(directory_fd)
        key = (info.st_dev, info.st_ino)
        if key in _HELD:
            os.close(directory_fd)
            _HELD[key].count += 1
            self._key = key
            return
        try:
            if fcntl is not None:
                fcntl.flock(directory_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(directory_fd)
            raise DirectoryBusy(self.directory, self._holder()) from None
        except BaseException:
            os.close(directory_fd)
            raise
        try:
            flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW | _NONBLOCK
            path = self.directory / self.name
            fd = _open_regular_fd(path, flags, check_symlink=True, writing=True)
        except BaseException:
            os.close(directory_fd)
            raise
        try:
            if fcntl is not None:  # the file too: a process of an earlier version locks it
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            os.close(directory_fd)
            raise DirectoryBusy(self.directory, holder) from None
        except BaseException:
            os.close(fd)
            os.close(directory_fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD[key] = _Held(fd, directory_fd)
        self._key = key

    def _holder(self) -> str:
        """The process id the lock file says, or "" (deleted, unreadable)."""
        try:
            data = read_regular(self.directory / self.name, 64, follow_symlinks=False)
        except OSError:
            return ""
        return data.decode("ascii", "replace").strip()

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None or key not in _HELD:
            return
        held = _HELD[key]
        held.count -= 1
        if held.count == 0:
            del _HELD[key]
            os.close(held.fd)  # the locks go with the descriptors; the file stays
            os.close(held.directory_fd)

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def require_plain_directory(path: Path, what: str) -> bool:
    """Whether `path` exists as a real directory (False: absent). A symbolic link (even to a
    directory: it could point anywhere) or anything else is one UnsafeFileError line."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(mode):
        return True
    raise UnsafeFileError(
        f"{what} {str(path)!r} is {_kind(mode)}; it must be a directory inside the run "
        "directory, not a link"
    )


def require_regular_if_present(path: Path) -> None:
    """A file a library will open by name (so it cannot be opened here for it): if present,
    it must be a regular file, not a symbolic link, FIFO or device."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise UnsafeFileError(
            f"{str(path)!r} is {_kind(mode)}, not a regular file; files inside a run "
            "directory must be regular files"
        )


def _open_regular_fd(path: Path, flags: int, *, check_symlink: bool, writing: bool = False) -> int:
    """`os.open` with `flags` (O_NONBLOCK among them, so a FIFO cannot block the open), then
    refused unless a regular file; back to blocking mode. A refused symlink (O_NOFOLLOW) is
    said as one, not as the bare errno. `writing`: the file is also refused, before anything
    is written, unless it is ours (`_require_ours`)."""
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        if check_symlink and Path(path).is_symlink():
            raise UnsafeFileError(
                f"{str(path)!r} is a symbolic link; files inside a run directory must be "
                "regular files"
            ) from None
        raise error
    try:
        _require_regular(fd, path)
        if writing:
            _require_ours(fd, path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _require_regular(fd: int, path: Path) -> None:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        raise UnsafeFileError(
            f"{str(path)!r} is {_kind(mode)}, not a regular file; only regular files are read"
        )


def _require_ours(fd: int, path: Path) -> None:
    """A file written in place must be this user's and have one name: through a second hard
    link (made by anyone who can write the directory) a write would land in a file outside
    it, which O_NOFOLLOW cannot see; a file of another user is not ours to write."""
    info = os.fstat(fd)
    if info.st_nlink > 1:
        raise UnsafeFileError(
            f"{str(path)!r} has {info.st_nlink} hard links; a file a run writes in place must "
            "have one (a link could make the write land outside the run directory)"
        )
    uid = getattr(os, "getuid", None)
    if uid is not None and info.st_uid != uid():
        raise UnsafeFileError(
            f"{str(path)!r} is owned by user id {info.st_uid}, not by you ({uid()}); a run "
            "writes in place only files of its own"
        )


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _size(n_bytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:g} {unit}"
    return f"{n_bytes} bytes"
