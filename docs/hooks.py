"""MkDocs hook: the figures the benchmarks commit under benchmarks/results/, and the study
notes beside them (`*-study.md`: tuning rounds, goals checks), are part of the site.

CHANGELOG.md (at the repository's root, where people look for it) is served as a page too.
The pages link them as `../benchmarks/results/...` (so they also render on a repository
browser); the site serves them under `benchmarks-results/`, without copying them into docs/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CHANGELOG = ROOT / "CHANGELOG.md"
SOURCE_PREFIX = "../benchmarks/results/"
SITE_PREFIX = "benchmarks-results/"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(RESULTS.rglob("*.png")):
        uri = SITE_PREFIX + path.relative_to(RESULTS).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    for path in sorted(RESULTS.glob("*-study.md")):
        uri = SITE_PREFIX + path.name
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    files.append(File.generated(config, "changelog.md", abs_src_path=str(CHANGELOG)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri.startswith(SITE_PREFIX):
        # A study note links the pages as a repository browser finds them (../../docs/).
        return markdown.replace("../../docs/", "../")
    if page.file.src_uri == "changelog.md":
        return markdown.replace("](docs/", "](")
    return markdown.replace(SOURCE_PREFIX, SITE_PREFIX)
