"""The training job's configuration: its options (options.py), validated once, when it is
built.

`TrainConfig` is `TrainOptions` with its checks: each field's own (its declaration: checks.py)
and what relates fields to each other (validation.py). What validation parses (the schedule,
the cluster file, the straggler scenario, the fault plan) is kept on the config (`parsed`),
so nothing parses it again. The config builds no component's configuration: each is built in
one place, components.py (from the options) or control/plan.py (from the options and the
run), and `control.plan.RunPlan.resolve` composes them. A changed job is a new config
(`dataclasses.replace`, or `with_schedule`), validated once itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from syncswitch.config.checks import check_field
from syncswitch.config.components import chooses_follower as _chooses_follower
from syncswitch.config.limits import DEFAULT_MODEL
from syncswitch.config.options import TrainOptions
from syncswitch.config.validation import (
    STALENESS_OPTIONS,
    SWITCH_OPTIONS,
    Parsed,
    StalenessOptionsError,
    SwitchOptionsError,
    is_auto,
    role_devices,
    validate_job,
)
from syncswitch.core.stragglers.policies import StragglerPolicyKind
from syncswitch.core.sync.protocol import Schedule
from syncswitch.core.sync.server_optimizer import default_lr
from syncswitch.errors import ConfigError


@dataclass(frozen=True)
class TrainConfig(TrainOptions):
    """A training job: every option (see TrainOptions), checked once when it is built."""

    if TYPE_CHECKING:
        # Set once by __post_init__ (the dataclass is frozen); not a field at run time, and
        # init=False tells the type checker it is none of the constructor's arguments.
        _parsed: Parsed = field(init=False)

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        """Every field against its declaration, then what relates fields to each other
        (validation.py); what is parsed on the way is kept (`_parsed`)."""
        if self.lr is None:  # the optimizer's own default; a known optimizer is checked below
            object.__setattr__(self, "lr", default_lr(self.optimizer))
        for f in fields(self):
            check_field(f, getattr(self, f.name))
        object.__setattr__(self, "_parsed", validate_job(self))

    def with_schedule(self, schedule: str, **changes: Any) -> TrainConfig:
        """This job under another schedule (and `changes`); switch options that a schedule
        with no online END makes moot, and staleness options that one with no ASP/SSP phase
        makes moot (a search's BSP baseline), are set aside (back to their defaults), not
        refused."""
        aside: dict[str, Any] = {}
        while True:
            try:
                return replace(self, schedule=schedule, **{**aside, **changes})
            except (SwitchOptionsError, StalenessOptionsError) as error:
                switch = isinstance(error, SwitchOptionsError)
                moot = SWITCH_OPTIONS if switch else STALENESS_OPTIONS
                if all(name in aside for name in moot):
                    raise
                aside |= {f.name: f.default for f in fields(self) if f.name in moot}

    # -- what validation parsed, and views read from the fields --------------------------------

    def role_devices(self) -> dict[str, str]:
        """Each role's device as asked ('auto' still to be resolved against the cluster)."""
        return role_devices(self)

    @property
    def model_name(self) -> str:
        return self.model or DEFAULT_MODEL[self.dataset]

    @property
    def schedule_is_auto(self) -> bool:
        return is_auto(self.schedule)

    @property
    def chooses_follower(self) -> bool:
        """`--schedule online` alone: the run chooses what follows BSP, ASP or local-H
        (core/timing/follower.py); `bsp:online,asp` names it."""
        return _chooses_follower(self)

    def parsed_schedule(self) -> Schedule:
        if self._parsed.schedule is None:
            raise ConfigError(
                "schedule 'auto' must be resolved before training: use `syncswitch train` or "
                "syncswitch.recurring.resolve_auto_schedule(config)"
            )
        return self._parsed.schedule

    @property
    def parsed(self) -> Parsed:
        """What validation parsed and built (validation.py's `Parsed`: the learning rate
        schedule, the straggler scenario, the emulation, the fault plan, the simulator's
        cluster), each by its component's function (components.py), read from here."""
        return self._parsed

    @property
    def watches_stragglers(self) -> bool:
        """Whether the run detects stragglers: a policy acts on them or they are emulated."""
        return self.online_policy != StragglerPolicyKind.NONE or bool(self.stragglers)

    def to_plain(self) -> dict[str, Any]:
        return asdict(self)
