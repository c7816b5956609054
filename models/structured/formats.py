"""String ``format`` checks for the validator: what each format means, exactly.

JSON Schema 2020-12 leaves ``format`` an annotation unless format assertion is on;
QuantDesk asserts the formats listed in :data:`CHECKED_FORMATS` (a reply that claims to
be a date must be one) and treats every other format as an annotation, as the
specification says for formats an implementation does not know. The grammar (llguidance)
enforces its own reading of date-time, time, date, email, ipv4, ipv6, uuid, hostname and
uri; where it is wider (February 29 in any year, a leap second at any minute) the check
here still catches the reply.

Definitions:

- ``date``: RFC 3339 ``full-date`` (ASCII digits, a real calendar day, year 0001–9999 as
  Python's calendar has them; ``jsonschema`` agrees).
- ``time``: RFC 3339 ``full-time``: ``HH:MM:SS[.frac](Z|+HH:MM|-HH:MM)``, ``z`` in either
  case, offsets up to 23:59. Second 60 (a leap second) only where the time in UTC is
  23:59, as the JSON Schema test suite requires (``23:59:60Z``, ``01:29:60+01:30``).
- ``date-time``: a ``date``, ``T`` (either case), a ``time``.
- ``uuid``: RFC 4122's 8-4-4-4-12 hex digits (either case).
- ``email``: RFC 5321 ``Mailbox``: a dot-atom local part (no leading, trailing or double
  dot) or a quoted string, at most 64 octets; ``@``; a domain of LDH labels (1–63
  characters, no leading or trailing hyphen) or an address literal ``[IPv4]`` /
  ``[IPv6:...]``.
- ``ipv4`` / ``ipv6``: Python's ``ipaddress`` (dotted quad without leading zeros; IPv6
  without a zone), as ``jsonschema`` checks them.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from typing import Callable

_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", re.ASCII)
_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?"
                   r"(?:([zZ])|([+-])([0-9]{2}):([0-9]{2}))", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
                   re.ASCII)
# RFC 5321: atext is RFC 5322's; qtextSMTP is printable ASCII but '"' and '\'.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_STRING = re.compile(rf"{_ATEXT}+(?:\.{_ATEXT}+)*", re.ASCII)
_QUOTED_STRING = re.compile(r'"(?:[\x20\x21\x23-\x5B\x5D-\x7E]|\\[\x20-\x7E])*"', re.ASCII)
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def is_date(value: str) -> bool:
    """RFC 3339 full-date, a real calendar day."""
    match = _DATE.fullmatch(value)
    if match is None:
        return False
    try:
        datetime.date(*(int(g) for g in match.groups()))
    except ValueError:
        return False
    return True


def is_time(value: str) -> bool:
    """RFC 3339 full-time; a leap second only at 23:59 UTC."""
    match = _TIME.fullmatch(value)
    if match is None:
        return False
    hour, minute, second = (int(g) for g in match.group(1, 2, 3))
    offset = 0
    if match.group(5):
        off_h, off_m = int(match.group(6)), int(match.group(7))
        if off_h > 23 or off_m > 59:
            return False
        offset = (off_h * 60 + off_m) * (1 if match.group(5) == "+" else -1)
    if hour > 23 or minute > 59 or second > 60:
        return False
    if second == 60:
        return (hour * 60 + minute - offset) % (24 * 60) == 23 * 60 + 59
    return True


def is_date_time(value: str) -> bool:
    """RFC 3339 date-time: date, ``T`` or ``t``, time."""
    return len(value) > 11 and value[10] in "Tt" and is_date(value[:10]) and is_time(value[11:])


def is_uuid(value: str) -> bool:
    """RFC 4122 text form."""
    return _UUID.fullmatch(value) is not None


def _is_address_literal(text: str) -> bool:
    if not (text.startswith("[") and text.endswith("]")):
        return False
    inner = text[1:-1]
    try:
        if inner[:5].lower() == "ipv6:":
            ipaddress.IPv6Address(inner[5:])
        else:
            ipaddress.IPv4Address(inner)
    except ValueError:
        return False
    return "%" not in inner


def is_email(value: str) -> bool:
    """RFC 5321 Mailbox (ASCII): dot-string or quoted local part, domain or address literal."""
    at = value.rfind("@")
    if at <= 0:
        return False
    local, domain = value[:at], value[at + 1:]
    if len(local) > 64 or not (_DOT_STRING.fullmatch(local) or _QUOTED_STRING.fullmatch(local)):
        return False
    if _is_address_literal(domain):
        return True
    return len(domain) <= 255 and all(_LABEL.fullmatch(label) for label in domain.split("."))


def is_ipv4(value: str) -> bool:
    """Dotted quad as ``ipaddress`` reads it (no leading zeros)."""
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def is_ipv6(value: str) -> bool:
    """IPv6 text as ``ipaddress`` reads it, without a zone (``%eth0``)."""
    try:
        address = ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return not getattr(address, "scope_id", None)


CHECKED_FORMATS: dict[str, Callable[[str], bool]] = {
    "date": is_date, "time": is_time, "date-time": is_date_time, "uuid": is_uuid,
    "email": is_email, "ipv4": is_ipv4, "ipv6": is_ipv6,
}


def format_ok(value: str, fmt: str) -> bool:
    """Whether ``value`` is a valid ``fmt``; formats not in :data:`CHECKED_FORMATS` pass."""
    check = CHECKED_FORMATS.get(fmt)
    return True if check is None else check(value)
