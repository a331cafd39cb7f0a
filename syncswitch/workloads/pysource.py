"""The `pysource` corpus: the running interpreter's own standard-library source text.

Every machine that runs this project already has it, and it may be redistributed (the PSF
licence), so a language model needs no download. The corpus is the first `size_bytes` bytes
of a fixed, sorted list of pure-Python modules that CPython 3.11 and later ship, read from
`sysconfig.get_paths()["stdlib"]`. Another Python version ships other text, so the corpus's
SHA-256 is recorded with every run (config.json) and is part of the job's fingerprint.

Standard library only (no torch): the registry computes the checksum for a fingerprint.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from syncswitch.errors import WorkloadError

PYSOURCE = "pysource"
# Modules every CPython 3.11+ ships as one pure-Python file each, sorted (the order is the
# corpus's order). Left out: modules that became packages (pathlib in 3.13, string in 3.14)
# and those distributions split off (turtle, idlelib and tkinter go with python3-tk).
FILES: tuple[str, ...] = (
    "argparse.py",
    "ast.py",
    "calendar.py",
    "collections/__init__.py",
    "configparser.py",
    "contextlib.py",
    "csv.py",
    "dataclasses.py",
    "difflib.py",
    "doctest.py",
    "enum.py",
    "fractions.py",
    "ftplib.py",
    "functools.py",
    "gettext.py",
    "heapq.py",
    "http/client.py",
    "imaplib.py",
    "inspect.py",
    "ipaddress.py",
    "json/decoder.py",
    "json/encoder.py",
    "logging/__init__.py",
    "mailbox.py",
    "optparse.py",
    "pdb.py",
    "pickle.py",
    "platform.py",
    "pprint.py",
    "queue.py",
    "random.py",
    "selectors.py",
    "shlex.py",
    "shutil.py",
    "smtplib.py",
    "socket.py",
    "statistics.py",
    "subprocess.py",
    "tarfile.py",
    "tempfile.py",
    "textwrap.py",
    "threading.py",
    "tokenize.py",
    "traceback.py",
    "typing.py",
    "urllib/parse.py",
    "uuid.py",
    "weakref.py",
)


@dataclass(frozen=True)
class Corpus:
    """The corpus's text, as each file contributes to it, and its checksum."""

    # (file, its bytes taken), in FILES' order; megabytes, so left out of the repr
    parts: tuple[tuple[str, bytes], ...] = field(repr=False)
    sha256: str  # of the concatenated bytes

    @property
    def size_bytes(self) -> int:
        return sum(len(text) for _, text in self.parts)


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_corpus(size_bytes: int, root: Path | None = None) -> Corpus:
    """The first `size_bytes` bytes of FILES under `root` (the interpreter's standard
    library), refusing in one line if a file of the list is absent."""
    return _read(size_bytes, str(root or stdlib_dir()))


def corpus_sha256(size_bytes: int) -> str:
    return read_corpus(size_bytes).sha256


@lru_cache(maxsize=4)  # the fingerprint, the data and config.json all ask: read once
def _read(size_bytes: int, root: str) -> Corpus:
    if size_bytes < 1:
        raise WorkloadError(f"pysource_bytes = {size_bytes} takes no text; give at least 1")
    paths = [Path(root, name) for name in FILES]
    for name, path in zip(FILES, paths, strict=True):
        if not path.is_file():
            raise WorkloadError(
                f"the pysource corpus needs {name} in this interpreter's standard library "
                f"({root}), and it is absent; use another Python (3.11 or later) or dataset"
            )
    parts: list[tuple[str, bytes]] = []
    left = size_bytes
    digest = hashlib.sha256()
    for name, path in zip(FILES, paths, strict=True):
        if left <= 0:
            break
        text = path.read_bytes()[:left]
        parts.append((name, text))
        digest.update(text)
        left -= len(text)
    return Corpus(tuple(parts), digest.hexdigest())
