"""Process wiring: serving the API over TLS, and initializing a data directory."""
