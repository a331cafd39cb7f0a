"""Records that cross a process, a file or a module boundary, each with its plain form beside
it (docs/architecture.md, "One schema per thing"). A leaf: torch-free and importing nothing of
the package but `syncswitch.errors`, so the synchronizer (core) and the run-directory readers
(rundir) share one class per record:

    Switch       a protocol switch: the synchronizer's event, a checkpoint's entry (either
                 of its two layouts), an events.jsonl line's payload, summary.json's `switches`
    Accounting   exactly-once gradient counts: the synchronizer's accounting and
                 summary.json's "gradients"
    WorkerFailure, ServerFailure, Resumption (failures.py)
                 the run record's failure entries: summary.json's reliability.failures, a
                 checkpoint's run record, and the worker_failed / server_failed / run_resumed
                 events' payloads
    Fields       checked reads of one JSON object's fields, for the classes that read files
"""

from syncswitch.records.accounting import Accounting
from syncswitch.records.fields import Fields
from syncswitch.records.switch import Switch

__all__ = ["Accounting", "Fields", "Switch"]
