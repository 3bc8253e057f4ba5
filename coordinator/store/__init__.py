"""State storage: one interface (base.Store), SQLite by default, PostgreSQL for HA."""
