"""Machines joining, trusted and leaving: registration, approval, credentials and tokens, clones,
refused attempts, deletion."""
