"""Keeping a real Placement service in sync with the provider tree."""
