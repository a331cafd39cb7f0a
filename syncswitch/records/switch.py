"""A protocol switch: one record for the synchronizer, checkpoints, events.jsonl and
summary.json, with every plain form it has ever had written and read here.

Two layouts exist, both kept byte for byte:

- the summary layout (`to_plain()`): "from" and "to" for the protocols. A checkpoint's run
  record, events.jsonl's switch lines and summary.json's `switches` hold it; the first two
  round the fraction and the time to 6 places, as they always have (`rounded=False` for
  summary.json).
- the state layout (`to_plain(state_layout=True)`): the attribute names, unrounded. A shard's
  state in a checkpoint holds it.

`from_plain()` reads either layout: from a checkpoint raising on a malformed entry, from a run
directory (`where` given) checked, in one RunDirError line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from syncswitch.records.fields import Fields

# The state layout's keys, in its order (the attribute names).
STATE_KEYS = (
    "at_fraction",
    "at_samples",
    "version",
    "from_protocol",
    "to_protocol",
    "time_s",
    "overhead_s",
    "reason",
)


@dataclass(frozen=True)
class Switch:
    at_fraction: float
    at_samples: int
    version: int | None  # weights version at the switch (None: a summary.json of an early run)
    from_protocol: str
    to_protocol: str
    time_s: float
    overhead_s: float = 0.0  # wall time to put the new rule in force, in place
    reason: str = ""

    def rounded(self) -> Switch:
        """As the run's records show it: fraction and time to 6 places."""
        return replace(self, at_fraction=round(self.at_fraction, 6), time_s=round(self.time_s, 6))

    # -- its plain forms -------------------------------------------------------------------

    def to_plain(self, *, rounded: bool = True, state_layout: bool = False) -> dict[str, Any]:
        """The summary layout, rounded (a checkpoint's run record, events.jsonl), or as it is
        (`rounded=False`: summary.json's `switches`); `state_layout=True`: the state layout (a
        shard's state in a checkpoint)."""
        if state_layout:
            return {key: getattr(self, key) for key in STATE_KEYS}
        switch = self.rounded() if rounded else self
        record: dict[str, Any] = {"at_fraction": switch.at_fraction, "at_samples": self.at_samples}
        if self.version is not None:
            record["version"] = self.version
        record.update(
            {
                "from": self.from_protocol,
                "to": self.to_protocol,
                "time_s": switch.time_s,
                "overhead_s": self.overhead_s,
                "reason": self.reason,
            }
        )
        return record

    @classmethod
    def from_plain(cls, record: Any, where: str | None = None) -> Switch:
        """Back from either layout. From a checkpoint (`where` None) every key must be there,
        and a malformed entry raises KeyError, TypeError or ValueError; from a run directory
        (`where` names the place) `version`, `overhead_s` and `reason` may be absent, as in
        early runs, and a malformed one is one RunDirError line naming `where`."""
        if where is not None:
            return cls._read_checked(Fields(record, where))
        source, target = _protocol_keys(record)
        return cls(
            at_fraction=float(record["at_fraction"]),
            at_samples=int(record["at_samples"]),
            version=int(record["version"]),
            from_protocol=str(record[source]),
            to_protocol=str(record[target]),
            time_s=float(record["time_s"]),
            overhead_s=float(record["overhead_s"]),
            reason=str(record["reason"]),
        )

    @classmethod
    def _read_checked(cls, read: Fields) -> Switch:
        source, target = _protocol_keys(read.data)
        return cls(
            at_fraction=read.number("at_fraction", low=0.0),
            at_samples=read.integer("at_samples"),
            version=read.optional_integer("version", None),
            from_protocol=read.text(source),
            to_protocol=read.text(target),
            time_s=read.number("time_s", low=0.0),
            overhead_s=read.number("overhead_s", 0.0, low=0.0),
            reason=read.text("reason", ""),
        )


def _protocol_keys(record: Mapping[str, Any]) -> tuple[str, str]:
    """The protocols' keys in `record`'s layout: the state layout's where it has them."""
    if "from_protocol" in record or "to_protocol" in record:
        return "from_protocol", "to_protocol"
    return "from", "to"


# What run directories written by 0.2 and before call the online switch rules; their records
# are read under the one name `--switch-rule` and every print use (describe strings written
# then keep the old spelling).
OLD_RULE_NAMES = {
    "staleness_noise": "staleness",
    "noise_scale": "noise-scale",
    "loss_plateau": "plateau",
}


def rule_name(recorded: str) -> str:
    """A recorded online switch rule's name as `--switch-rule` spells it."""
    return OLD_RULE_NAMES.get(recorded, recorded)
