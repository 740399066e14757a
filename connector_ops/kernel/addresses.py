"""E-mail address syntax, checked one way for every connector (shared-link recipients, mail).

``email-validator`` without DNS look-ups: the check is about syntax, and actions stay fast and hermetic.
"""

from __future__ import annotations

from email_validator import EmailNotValidError, validate_email


def normalised_email(value: str, *, allow_display_name: bool = False,
                     ascii_local_part: bool = False) -> tuple[str, str | None]:
    """``(address, display name)`` of a syntactically valid address; ``ValueError`` saying why not.

    ``ascii_local_part`` refuses non-ASCII before the ``@`` (``josé@…``): such an address can only be sent
    with the SMTPUTF8 extension, and has no ASCII form (an internationalised domain does, see
    :func:`ascii_email`)."""
    try:
        result = validate_email(value, check_deliverability=False, allow_display_name=allow_display_name)
    except EmailNotValidError as exc:
        raise ValueError(f"{value!r} is not a valid e-mail address: {exc}") from None
    if ascii_local_part and result.ascii_email is None:
        raise ValueError(f"{result.normalized!r} has non-ASCII characters before the @ ({result.local_part!r}): "
                         "sending it needs the SMTPUTF8 extension, which many mail servers lack, so it is refused")
    return result.normalized, result.display_name or None


def ascii_email(address: str) -> str:
    """A valid address with its domain in IDNA ASCII form (``user@bücher.de`` → ``user@xn--bcher-kva.de``),
    what a server without SMTPUTF8 takes; the address itself when it has no ASCII form."""
    result = validate_email(address, check_deliverability=False)
    return result.ascii_email or result.normalized
