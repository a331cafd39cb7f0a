"""The job registry: job fingerprints, search trials and stored timing decisions."""

from syncswitch.registry.fingerprint import (
    FINGERPRINT_VERSION,
    JOB_FIELDS,
    LATER_JOB_FIELDS,
    NOT_JOB_FIELDS,
    describe_job,
    fingerprint,
)
from syncswitch.registry.location import ENV_VAR, RegistryLocation, default_path
from syncswitch.registry.rows import (
    DECISION_KINDS,
    ONLINE,
    SEARCH,
    DecisionRecord,
    JobOverview,
    JobRecord,
)
from syncswitch.registry.store import Registry, RegistryError
from syncswitch.registry.trial import TRACE_COLUMNS, TrialRecord, TrialSource, TrialStatus

__all__ = [
    "DECISION_KINDS",
    "ENV_VAR",
    "FINGERPRINT_VERSION",
    "JOB_FIELDS",
    "LATER_JOB_FIELDS",
    "NOT_JOB_FIELDS",
    "ONLINE",
    "SEARCH",
    "TRACE_COLUMNS",
    "DecisionRecord",
    "JobOverview",
    "JobRecord",
    "Registry",
    "RegistryError",
    "RegistryLocation",
    "TrialRecord",
    "TrialSource",
    "TrialStatus",
    "default_path",
    "describe_job",
    "fingerprint",
]
