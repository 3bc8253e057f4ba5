"""The core of the coordinator: its model, rules and texts. No I/O and no asyncio (checked by
.importlinter); its only state is in-memory (rate-limit buckets, a fingerprint cache)."""
