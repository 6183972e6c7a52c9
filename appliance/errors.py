"""The one error type for bad input: the CLI catches it once, prints it and exits 2."""

from __future__ import annotations


class ApplianceError(Exception):
    """Bad input. Names the field, the value, the fix and the reason."""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        value: object = None,
        fix: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = value
        self.fix = fix
        self.reason = reason

    def __str__(self) -> str:
        parts = [self.message]
        if self.fix:
            parts.append(f"fix: {self.fix}")
        if self.reason:
            parts.append(f"why: {self.reason}")
        return "\n  ".join(parts)
