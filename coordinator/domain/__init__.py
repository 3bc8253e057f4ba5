"""The pure core of the coordinator: its model, rules and texts. No I/O, no asyncio."""
