"""JSON Schema ``format`` names → regexes (ECMA-262 syntax, no lookarounds or backreferences).

A format's value is decided by *all* of its regexes matching the whole string (so a length cap can
sit next to a structural pattern). The regexes follow RFC 3339 (date, time, date-time, duration),
RFC 3986 (uri, uri-reference), RFC 1123 (hostname), RFC 5321 simplified (email), RFC 4291 (ipv6),
RFC 4122 (uuid) and RFC 6901 (json-pointer), as far as a regular language allows. Known gaps,
always on the safe side (valid strings rejected, never invalid ones accepted):

* email accepts dot-atom or quoted local parts and LDH or bracketed IP domains;
* hostname rejects every label with ``--`` in its 3rd and 4th positions, A-labels (``xn--…``)
  included (listed in :data:`NARROWED_FORMATS`). Whether an A-label is valid depends on its
  Punycode decoding and on the IDNA rules of the decoded label (code point categories, contextual
  rules that look at neighbours, bidi). Decoding inserts each code point at a position the
  encoding computes, so an automaton would need the whole decoded label in its state: finite,
  as labels are at most 63 characters, but far too many states to build. Nothing smaller is
  provably sound, so the regexes reject these labels rather than accept invalid ones.
"""

from __future__ import annotations

_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"

_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{IPV4})"


def _ipv6() -> str:
    forms = [
        rf"(?:{_H16}:){{6}}{_LS32}",
        rf"::(?:{_H16}:){{5}}{_LS32}",
        rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
        rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    ]
    return "(?:" + "|".join(forms) + ")"


IPV6 = _ipv6()

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
LDH_NAME = rf"{_LABEL}(?:\.{_LABEL})*"
"""Dot-separated LDH labels (RFC 1123), no final dot."""

_MONTH_31 = r"(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
_MONTH_30 = r"(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
_FEB = r"02-(?:0[1-9]|1[0-9]|2[0-8])"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
DATE = rf"(?:[0-9]{{4}}-(?:{_MONTH_31}|{_MONTH_30}|{_FEB})|{_LEAP_YEAR}-02-29)"

_FRAC = r"(?:\.[0-9]+)?"
_OFFSET = r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"


def leap_second_times() -> list[tuple[str, tuple[str, ...]]]:
    """``(local "HH:MM", offsets)``: a ``:60`` second is valid exactly when the local time and its
    offset make 23:59:60 UTC; for each local minute, the one positive and one negative offset."""
    utc = 23 * 60 + 59
    table = []
    for local in range(24 * 60):
        plus, minus = (local - utc) % 1440, (utc - local) % 1440
        offsets = (f"+{plus // 60:02d}:{plus % 60:02d}", f"-{minus // 60:02d}:{minus % 60:02d}")
        if local == utc:
            offsets += ("Z", "z")
        table.append((f"{local // 60:02d}:{local % 60:02d}", offsets))
    return table


def _leap_seconds() -> str:
    hours: dict[str, list[str]] = {}
    for local, offsets in leap_second_times():
        alternatives = "|".join(o.replace("+", "\\+") for o in offsets)
        hours.setdefault(local[:2], []).append(f"{local[3:]}:60{_FRAC}(?:{alternatives})")
    return "(?:" + "|".join(f"{h}:(?:{'|'.join(m)})" for h, m in hours.items()) + ")"


TIME_REGULAR = rf"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]{_FRAC}{_OFFSET}"
"""Times without a leap second."""
TIME = rf"(?:{TIME_REGULAR}|{_leap_seconds()})"
DATE_TIME = rf"{DATE}[Tt]{TIME}"

_N = r"[0-9]+"
_DUR_TIME = rf"T(?:{_N}H(?:{_N}M(?:{_N}S)?)?|{_N}M(?:{_N}S)?|{_N}S)"
_DUR_DATE = rf"(?:{_N}D|{_N}M(?:{_N}D)?|{_N}Y(?:{_N}M(?:{_N}D)?)?)(?:{_DUR_TIME})?"
DURATION = rf"P(?:{_DUR_DATE}|{_DUR_TIME}|{_N}W)"

UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_QUOTED_LOCAL = r'"(?:[ !#-\[\]-~]|\\[ -~])*"'
EMAIL = rf"(?:{_ATEXT}+(?:\.{_ATEXT}+)*|{_QUOTED_LOCAL})@(?:{LDH_NAME}|\[{IPV4}\]|\[IPv6:{IPV6}\])"

# RFC 3986
_PCT = r"%[0-9A-Fa-f]{2}"
_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*"
_USERINFO = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*"
_IPVFUTURE = rf"v[0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+"
_REG_NAME = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*"
_HOST = rf"(?:\[(?:{IPV6}|{_IPVFUTURE})\]|{IPV4}|{_REG_NAME})"
_AUTHORITY = rf"(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?"
_SEGMENT = rf"{_PCHAR}*"
_SEGMENT_NZ = rf"{_PCHAR}+"
_SEGMENT_NZ_NC = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+"
_PATH_ABEMPTY = rf"(?:/{_SEGMENT})*"
_PATH_ABSOLUTE = rf"/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_PATH_ROOTLESS = rf"{_SEGMENT_NZ}(?:/{_SEGMENT})*"
_PATH_NOSCHEME = rf"{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*"
_QUERY = rf"(?:{_PCHAR}|[/?])*"
_HIER = rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_ROOTLESS}|)"
URI = rf"{_SCHEME}:{_HIER}(?:\?{_QUERY})?(?:#{_QUERY})?"
_RELATIVE = rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_NOSCHEME}|)(?:\?{_QUERY})?(?:#{_QUERY})?"
URI_REFERENCE = rf"(?:{URI}|{_RELATIVE})"

JSON_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
RELATIVE_JSON_POINTER = rf"(?:0|[1-9][0-9]*)(?:#|{JSON_POINTER})"

# RFC 6531 lets addresses carry any non-ASCII character where ASCII letters may go.
_UTF8_NON_ASCII = "\u0080-\U0010ffff"
_ATEXT_IDN = rf"[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~{_UTF8_NON_ASCII}-]"
_QUOTED_LOCAL_IDN = rf'"(?:[ !#-\[\]-~{_UTF8_NON_ASCII}]|\\[ -~])*"'
_LABEL_IDN = rf"[A-Za-z0-9{_UTF8_NON_ASCII}](?:[A-Za-z0-9{_UTF8_NON_ASCII}-]*[A-Za-z0-9{_UTF8_NON_ASCII}])?"
IDN_EMAIL = (
    rf"(?:{_ATEXT_IDN}+(?:\.{_ATEXT_IDN}+)*|{_QUOTED_LOCAL_IDN})"
    rf"@(?:{_LABEL_IDN}(?:\.{_LABEL_IDN})*|\[{IPV4}\]|\[IPv6:{IPV6}\])"
)

# Labels whose third and fourth characters are not both "-" (IDNA reserves those, "xn--" too).
_NOT_RESERVED_LABEL = r"(?:[^.]{0,3}|[^.]{2}(?:[^.-][^.]|-[^.-])[^.]*)"
NOT_RESERVED_HOSTNAME = rf"{_NOT_RESERVED_LABEL}(?:\.{_NOT_RESERVED_LABEL})*"

# RFC 6570, level 4; the operators reserved for future use ("=", ",", "!", "@", "|") are refused.
_UCSCHAR = "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef\U00010000-\U0001fffd"
_TEMPLATE_LITERAL = rf"(?:[!#$&'(-;=?-\[\]_a-z~{_UCSCHAR}]|{_PCT})"
_VARCHAR = rf"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
URI_TEMPLATE = rf"(?:{_TEMPLATE_LITERAL}|\{{[+#./;?&]?{_VARSPEC}(?:,{_VARSPEC})*\}})*"

FORMAT_REGEXES: dict[str, tuple[str, ...]] = {
    "date": (DATE,),
    "time": (TIME,),
    "date-time": (DATE_TIME,),
    "duration": (DURATION,),
    "email": (EMAIL,),
    "hostname": (LDH_NAME, r"[\s\S]{1,253}", NOT_RESERVED_HOSTNAME),
    "ipv4": (IPV4,),
    "ipv6": (IPV6,),
    "uuid": (UUID,),
    "uri": (URI,),
    "uri-reference": (URI_REFERENCE,),
    "json-pointer": (JSON_POINTER,),
    "relative-json-pointer": (RELATIVE_JSON_POINTER,),
    "uri-template": (URI_TEMPLATE,),
    "idn-email": (IDN_EMAIL,),
    "idn-hostname": (LDH_NAME, r"[\s\S]{1,253}", NOT_RESERVED_HOSTNAME),
}
"""Format name → regexes that must all match the whole decoded string."""

NARROWED_FORMATS: dict[str, str] = {
    "hostname": "labels with '--' in the 3rd and 4th positions are rejected, valid xn-- A-labels included "
                "(their Punycode and IDNA validity is not checked)",
    "idn-hostname": "ASCII host names only (no U-labels, no xn-- A-labels, no final dot)",
}
"""Formats whose regexes reject some valid strings (never accept an invalid one), and why."""


__all__ = ["FORMAT_REGEXES", "NARROWED_FORMATS"]
