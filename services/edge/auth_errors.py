"""The authentication errors the services map to HTTP answers (401, 403, 503)."""

from __future__ import annotations


class AuthError(Exception):
    """The request could not be authenticated."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class Unauthenticated(AuthError):
    """The request carries no valid identity token."""


class Forbidden(AuthError):
    """The identity token is valid but its caller is not allowed."""


class CertsUnavailable(AuthError):
    """The token signing certificates could not be fetched; try again later."""
