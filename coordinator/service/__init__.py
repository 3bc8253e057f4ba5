"""The operations behind every endpoint, split by owner; no HTTP, no click."""
