"""The infra package's exceptions: one base, one subclass per kind of failure."""

from __future__ import annotations


class InfraError(ValueError):
    """The Pulumi program cannot build this stack."""


class InfraConfigError(InfraError):
    """The stack configuration is invalid."""


class CronError(InfraError):
    """The schedule is not a valid 5-field unix-cron expression."""


class NameTooLongError(InfraError):
    """A derived resource name does not fit Google's limits."""
