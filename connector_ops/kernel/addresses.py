"""E-mail address syntax, checked one way for every connector (shared-link recipients, mail).

``email-validator`` without DNS look-ups: the check is about syntax, and actions stay fast and hermetic.
"""

from __future__ import annotations

from email_validator import EmailNotValidError, validate_email


def normalised_email(value: str, *, allow_display_name: bool = False) -> tuple[str, str | None]:
    """``(address, display name)`` of a syntactically valid address; ``ValueError`` saying why not."""
    try:
        result = validate_email(value, check_deliverability=False, allow_display_name=allow_display_name)
    except EmailNotValidError as exc:
        raise ValueError(f"{value!r} is not a valid e-mail address: {exc}") from None
    return result.normalized, result.display_name or None
