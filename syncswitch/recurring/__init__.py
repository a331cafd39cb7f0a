"""The offline timing policy for recurring jobs: search the switch point, store it, reuse it.

- `syncswitch.core.timing.fraction_search`: the search itself, a pure function of trial results;
- `search_runner`: runs the trials (train() on Ray), stores them and the decision in the registry;
- `search_dirs`: where the search keeps its trials, and the markers that say whose they are;
- `results`: the trial runs, the time saved and the search result (plain data);
- `search_report`: the trace as CSV/JSON/markdown and the accuracy-vs-fraction plot;
- `auto`: `--schedule auto`, the stored decision for a job (or the default, with a hint);
- `online`: an online run's chosen share stored as a decision of kind `online`.
"""

from syncswitch.recurring.auto import DEFAULT_SCHEDULE, describe_source, resolve_auto_schedule
from syncswitch.recurring.online import record_online_decision

__all__ = [
    "DEFAULT_SCHEDULE",
    "describe_source",
    "record_online_decision",
    "resolve_auto_schedule",
]
