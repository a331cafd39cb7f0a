"""How an option declares itself: besides its help and its checks (checks.py), its `--help`
group, whether it is part of the job's identity, and whether `--resume` may override it.

Each TrainConfig field says all of it once, in its metadata (`option(...)`); `--help`'s
grouping (`flag_groups`), the fingerprint's three lists (registry/fingerprint.py) and the
resume overrides (`resume_overrides`) are derived from those declarations, so adding an
option is adding its field.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import Field, dataclass, field
from enum import Enum
from typing import Any

from syncswitch.config.limits import IMPORT_PATH

# `--help` shows the flags in these groups, in this order; within a group in the fields'
# order. A field that declares no group (a subclass's own) is listed under the first.
JOB_GROUP = "job"
SCHEDULE_GROUP = "schedule & switch"
LOCAL_GROUP = "local phases"
EMULATION_GROUP = "emulation & stragglers"
RELIABILITY_GROUP = "reliability"
RUNTIME_GROUP = "runtime & cluster"
OUTPUT_GROUP = "output & loggers"
GROUPS: tuple[str, ...] = (
    JOB_GROUP,
    SCHEDULE_GROUP,
    LOCAL_GROUP,
    EMULATION_GROUP,
    RELIABILITY_GROUP,
    RUNTIME_GROUP,
    OUTPUT_GROUP,
)


class Identity(Enum):
    """Whether, and how, an option is part of the job's fingerprint (which runs are "the
    same job", so that a stored timing decision may be reused)."""

    # Always hashed: fingerprint version 1's fields (what is trained on what, by how many
    # workers, with which optimizer settings and how much work, on which emulated cluster).
    JOB = "job"
    # Hashed only when set to other than its default, so that jobs stored before the option
    # existed keep their fingerprint. A field that declares nothing is treated so: a field
    # nobody classified is assumed to change the job.
    WHEN_SET = "when set"
    # Never: what the search decides, how a run is watched, stored or kept safe.
    NONE = "none"


class Resume(Enum):
    """What `--resume` does with an option: a resumed run is the job it was started with."""

    FIXED = "fixed"  # taken from the run directory; giving it beside --resume is refused
    OVERRIDE = "override"  # may be given beside --resume; else the run directory's
    # May be given beside --resume, and is taken only from there, never from the run
    # directory (which can come from anywhere, docs/security.md): where the job connects,
    # injected faults, where its figures are sent.
    FLAGS_ONLY = "flags only"


@dataclass(frozen=True)
class Role:
    """Where an option sits: its `--help` group, its part in the job's identity, and what
    `--resume` does with it."""

    group: str
    identity: Identity
    resume: Resume = Resume.FIXED

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"group {self.group!r} is not one of {', '.join(GROUPS)}")


def option(default: Any, help: str, role: Role, **checks: Any) -> Any:
    """A TrainConfig field with its declaration; `checks` are checks.py's (`choices=`,
    `range=`) and the flag's shape (`repeatable=`, `from_file=`, `online_only=`, and
    `flags=` when its flags are not the field's name: see `flag_names`)."""
    return field(default=default, metadata={"help": help, "role": role, **checks})


def flag_names(f: Field) -> tuple[str, ...]:
    """A field's `syncswitch train` flags: the documented one first, then its aliases (old
    spellings that still work). Without `flags=` the one flag is the field's name, with
    dashes; the field's name is its key in config files and config.json either way."""
    return tuple(f.metadata.get("flags", ("--" + f.name.replace("_", "-"),)))


def role_of(f: Field) -> Role:
    """A field's declared role; one that declares none (a subclass's own field) is listed
    under the first group, counts in the job when set, and is fixed on resume."""
    role = f.metadata.get("role")
    return role if isinstance(role, Role) else Role(JOB_GROUP, Identity.WHEN_SET)


def flag_groups(options: Iterable[Field]) -> dict[str, tuple[str, ...]]:
    """Each `--help` group's options, the groups in GROUPS' order."""
    options = list(options)
    return {g: tuple(f.name for f in options if role_of(f).group == g) for g in GROUPS}


def with_identity(options: Iterable[Field], identity: Identity) -> tuple[str, ...]:
    return tuple(f.name for f in options if role_of(f).identity is identity)


def resume_overrides(options: Iterable[Field]) -> tuple[str, ...]:
    """The options `--resume` may be given beside it."""
    return tuple(f.name for f in options if role_of(f).resume is not Resume.FIXED)


def named_again(options: Iterable[Field]) -> tuple[str, ...]:
    """The options that may name the user's code (an IMPORT_PATH among their choices): a
    resumed run never imports a path from its run directory, the command line names it
    again (docs/security.md)."""
    return tuple(f.name for f in options if IMPORT_PATH in f.metadata.get("choices", ()))


def from_flags_only(options: Iterable[Field]) -> tuple[str, ...]:
    """The options a resumed run never takes from its run directory."""
    return tuple(f.name for f in options if role_of(f).resume is Resume.FLAGS_ONLY)


def online_only(options: Iterable[Field]) -> tuple[str, ...]:
    """The options that tune how an online phase decides; they do nothing without one."""
    return tuple(f.name for f in options if f.metadata.get("online_only"))
