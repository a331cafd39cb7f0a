"""The `syncswitch` command: thin parsers that build configs and call the library."""
