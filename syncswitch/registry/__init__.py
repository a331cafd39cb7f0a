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
    ENV_VAR,
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
    "ENV_VAR",
    "FINGERPRINT_VERSION",
    "JOB_FIELDS",
    "LATER_JOB_FIELDS",
    "NOT_JOB_FIELDS",
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
