"""A protocol switch: one record for the synchronizer, checkpoints, events.jsonl and
summary.json, with every plain form it has ever had written and read here.

Two layouts exist, both kept byte for byte:

- the summary layout (`to_summary()` / `to_json()`): "from" and "to" for the protocols. A
  checkpoint's run record, events.jsonl's switch lines and summary.json's `switches` hold it;
  `to_summary()` rounds the fraction and the time to 6 places, as those have always been.
- the state layout (`to_state()`): the attribute names, unrounded. A shard's state in a
  checkpoint holds it.

`from_summary()` reads either layout from a checkpoint (raising on a malformed entry);
`from_json()` reads one from a run directory, checked (one RunDirError line).
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

    # -- the summary layout ------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The summary layout as it is (summary.json's `switches`)."""
        record: dict[str, Any] = {"at_fraction": self.at_fraction, "at_samples": self.at_samples}
        if self.version is not None:
            record["version"] = self.version
        record.update(
            {
                "from": self.from_protocol,
                "to": self.to_protocol,
                "time_s": self.time_s,
                "overhead_s": self.overhead_s,
                "reason": self.reason,
            }
        )
        return record

    def to_summary(self) -> dict[str, Any]:
        """The summary layout, rounded (a checkpoint's run record, events.jsonl)."""
        return self.rounded().to_json()

    # -- the state layout --------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """The state layout (a shard's state in a checkpoint)."""
        return {key: getattr(self, key) for key in STATE_KEYS}

    # -- reading -----------------------------------------------------------------------------

    @classmethod
    def from_summary(cls, record: Mapping[str, Any]) -> Switch:
        """Back from a checkpoint: the summary layout (its run record) or the state layout (a
        shard's state), every key present; raises KeyError, TypeError or ValueError on a
        malformed entry."""
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
    def from_json(cls, data: Any, where: str) -> Switch:
        """Back from a run directory (either layout; `version`, `overhead_s` and `reason`
        may be absent, as in early runs), checked: one RunDirError line naming `where`."""
        read = Fields(data, where)
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
