"""The independent judge for validator tests: ``jsonschema`` (draft 2020-12, format
assertion on), with three format checks corrected where ``jsonschema`` departs from the
RFCs and the JSON Schema test suite:

- ``email``: ``jsonschema`` accepts any string with an ``@``; here RFC 5321's ABNF for a
  ``Mailbox``, written as one regular expression (the code under test parses instead);
- ``time`` / ``date-time``: ``jsonschema`` (rfc3339-validator) refuses every leap second;
  here a second of 60 is valid where the time in UTC is 23:59, and otherwise the verdict
  is ``jsonschema``'s own.
"""

from __future__ import annotations

import re

import jsonschema

_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_QUOTED = r'"(?:[ !#-\[\]-~]|\\[ -~])*"'
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_V4 = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"
MAILBOX = re.compile(rf"(?P<local>{_ATOM}(?:\.{_ATOM})*|{_QUOTED})@"
                     rf"(?:{_LABEL}(?:\.{_LABEL})*|\[{_V4}\]|\[[Ii][Pp][Vv]6:(?P<v6>[0-9A-Fa-f:.]+)\])",
                     re.ASCII)
_LEAP = re.compile(r"(\d\d):(\d\d):60(\.\d+)?([zZ]|([+-])(\d\d):(\d\d))", re.ASCII)

_base = jsonschema.Draft202012Validator.FORMAT_CHECKER


def _email(value) -> bool:
    if not isinstance(value, str):
        return True
    match = MAILBOX.fullmatch(value)
    if match is None or len(match.group("local")) > 64:
        return False
    return match.group("v6") is None or _base.conforms(match.group("v6"), "ipv6")


def _time(value) -> bool:
    if not isinstance(value, str):
        return True
    match = _LEAP.search(value)
    if match is None or match.end() != len(value):
        return _base.conforms(value, "time")
    hour, minute = int(match.group(1)), int(match.group(2))
    sign = {"+": 1, "-": -1}.get(match.group(5), 0)
    utc = (hour * 60 + minute - sign * (int(match.group(6) or 0) * 60 + int(match.group(7) or 0))) % 1440
    return utc == 23 * 60 + 59 and _base.conforms(value[:match.start() + 6] + "59" + value[match.start() + 8:], "time")


def _date_time(value) -> bool:
    if not isinstance(value, str):
        return True
    if len(value) > 11 and value[10] in "Tt" and _LEAP.fullmatch(value[11:]):
        return _base.conforms(value[:10], "date") and _time(value[11:])
    return _base.conforms(value, "date-time")


FORMAT_CHECKER = jsonschema.FormatChecker(formats=())
FORMAT_CHECKER.checkers = dict(_base.checkers)
FORMAT_CHECKER.checks("email")(_email)
FORMAT_CHECKER.checks("time")(_time)
FORMAT_CHECKER.checks("date-time")(_date_time)


def oracle_valid(schema, value) -> bool:
    """jsonschema's verdict, draft 2020-12, format assertion on."""
    return jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER).is_valid(value)


def oracle_valid_in_its_draft(schema, value) -> bool:
    """``jsonschema``'s verdict under the draft the schema declares (``$schema``; 2020-12
    when it names none), with the same format checks."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=FORMAT_CHECKER).is_valid(value)
