"""Domain errors, each carrying the HTTP status kagent's REST API would answer with."""

from __future__ import annotations


class ServiceError(Exception):
    """An expected refusal: its message is safe to show to the caller."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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


class DatabaseUnavailable(ServiceError):
    status = 503


def envelope(message: str) -> dict[str, str]:
    """kagent's failure envelope."""
    return {"error": message}
