"""The `--registry` option, shared by `train`, `search` and `jobs`."""

from __future__ import annotations

import argparse

from syncswitch.registry.store import ENV_VAR


def add_registry_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, purpose: str
) -> None:
    parser.add_argument(
        "--registry",
        metavar="URL|FILE",
        default=None,
        help=f"job registry {purpose}: a SQLite file path or any SQLAlchemy database URL "
        f"(e.g. postgresql+psycopg://user@host/db); default: ${ENV_VAR}, else registry.db "
        "in the user data directory",
    )
