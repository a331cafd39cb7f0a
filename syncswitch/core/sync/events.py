"""A protocol switch, as it happened: a record the runtime is handed and a state keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SwitchEvent:
    at_fraction: float
    at_samples: int
    version: int
    from_protocol: str
    to_protocol: str
    time_s: float
    overhead_s: float  # wall time to put the new rule in force, in place
    reason: str

    def to_summary(self) -> dict[str, Any]:
        return {
            "at_fraction": round(self.at_fraction, 6),
            "at_samples": self.at_samples,
            "version": self.version,
            "from": self.from_protocol,
            "to": self.to_protocol,
            "time_s": round(self.time_s, 6),
            "overhead_s": self.overhead_s,
            "reason": self.reason,
        }

    @classmethod
    def from_summary(cls, record: dict[str, Any]) -> SwitchEvent:
        """Back from `to_summary()` (a checkpointed run record); raises on a malformed one."""
        return cls(
            at_fraction=float(record["at_fraction"]),
            at_samples=int(record["at_samples"]),
            version=int(record["version"]),
            from_protocol=str(record["from"]),
            to_protocol=str(record["to"]),
            time_s=float(record["time_s"]),
            overhead_s=float(record["overhead_s"]),
            reason=str(record["reason"]),
        )
