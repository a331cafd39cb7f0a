"""Moved to `syncswitch.records.fields` (a leaf the synchronizer's records use too); kept so
that existing imports still work."""

from syncswitch.records.fields import Fields, short

__all__ = ["Fields", "short"]
