"""Whether a run's planned schedule is the one that ran: what changed it, said in a few words.

A run can complete with a schedule other than the one asked for: the divergence guard rolled
it back and pinned a protocol for the rest of it, or an online phase ended at its ceiling
because its signal never crossed the threshold. The terminal's headline, `report`'s table and
the examples say so from these phrases, so no run reads "complete" as "ran as planned".
"""

from __future__ import annotations

from syncswitch.rundir.summary import Summary


def schedule_changes(summary: Summary | None) -> tuple[str, ...]:
    """What changed the planned schedule, one short phrase each; empty when it ran as planned
    (or when there is no summary to tell)."""
    if summary is None:
        return ()
    changes: list[str] = []
    reliability = summary.reliability
    if reliability is not None and reliability.rollbacks > 0:
        at = [
            float(d["progress"])
            for d in reliability.decisions
            if d.get("action") == "rollback" and isinstance(d.get("progress"), int | float)
        ]
        where = f" at {', '.join(f'{p:.0%}' for p in at)}" if at else ""
        times = "once" if reliability.rollbacks == 1 else f"{reliability.rollbacks} times"
        text = f"rolled back {times}{where} by the divergence guard"
        if reliability.pinned_protocol:
            text += f", then {reliability.pinned_protocol.upper()} to the end"
        changes.append(text)
    timing = summary.online_timing
    if timing is not None and timing.switched and timing.reason == "ceiling":
        ended = f" at {timing.at_fraction:.0%}" if timing.at_fraction is not None else ""
        changes.append(f"online timing left BSP at its ceiling{ended} (the signal never crossed)")
    return tuple(changes)


def changed_headline(summary: Summary | None) -> str:
    """ ", schedule changed: ..." to append to a status, or "" when it ran as planned."""
    changes = schedule_changes(summary)
    return f", schedule changed: {'; '.join(changes)}" if changes else ""
