"""The engine-agnostic core: protocols, parameter update, policies, records. No Ray here."""
