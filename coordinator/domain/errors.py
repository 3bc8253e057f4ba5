"""Why a coordinator operation refused: each maps to one HTTP status in the API layer."""


class NotFound(Exception):
    """404"""


class Conflict(Exception):
    """409: the operation does not fit the current state."""


class Unauthorized(Exception):
    """401: no credential, or one that is unknown, expired or revoked."""


class Gone(Exception):
    """410: the machine a request names, or whose credential it carries, was deleted."""


class Forbidden(Exception):
    """403: a good credential that may not do this."""


class TooManyRequests(Exception):
    """429: slow down; `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(message)
