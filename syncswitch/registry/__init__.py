"""The job registry: job fingerprints, search trials and stored timing decisions."""

from syncswitch.registry.fingerprint import (
    FINGERPRINT_VERSION,
    JOB_FIELDS,
    LATER_JOB_FIELDS,
    NOT_JOB_FIELDS,
    describe_job,
    fingerprint,
)
from syncswitch.registry.store import (
    DECISION_KINDS,
    ENV_VAR,
    ONLINE,
    SEARCH,
    DecisionRecord,
    JobOverview,
    JobRecord,
    Registry,
    RegistryError,
    RegistryLocation,
    default_path,
)
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
