"""Domain errors, each carrying the HTTP status kagent's REST API would answer with."""

from __future__ import annotations


class ServiceError(Exception):
    """An expected refusal: its message is safe to show to the caller."""

    status = 400

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers


class BadRequest(ServiceError):
    status = 400


class Unauthorized(ServiceError):
    status = 401


class Forbidden(ServiceError):
    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class PayloadTooLarge(ServiceError):
    status = 413


class UnsupportedMediaType(ServiceError):
    status = 415


class Unprocessable(ServiceError):
    status = 422


class TooManyRequests(ServiceError):
    """A limit per caller and time (FORK_RATE_PER_MINUTE); `Retry-After` says when to come back."""

    status = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})
        self.retry_after = retry_after


class DatabaseUnavailable(ServiceError):
    status = 503


class Busy(ServiceError):
    """A bounded wait ran out (a pooled connection, an Idempotency-Key's lock): nothing was done; retry."""

    status = 503

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Retry-After": "1"})


def envelope(message: str) -> dict[str, str]:
    """kagent's failure envelope."""
    return {"error": message}


class NotConfigured(ServiceError):
    """A capability whose setting is missing (the what-if without KAGENT_A2A_URL)."""

    status = 503
