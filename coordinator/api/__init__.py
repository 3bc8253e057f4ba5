"""The coordinator's HTTP API (aiohttp): agent endpoints, admin endpoints, health, OpenAPI."""
