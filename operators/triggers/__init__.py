"""Triggers: hold only primitives, serialize cleanly, run in the triggerer."""
