"""Format regexes against jsonschema's format checker (with the format-nongpl extras) and hand-checked values."""

from __future__ import annotations

import jsonschema
import pytest
import regex

from grammask.schemas.formats import FORMAT_REGEXES, NARROWED_FORMATS

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER

SAMPLES = {
    "date": ["2024-02-29", "2023-02-29", "1900-02-29", "2000-02-29", "2021-04-31", "2021-12-31", "21-01-01", "2021-1-01"],
    "time": ["12:00:00Z", "22:59:60Z", "12:00:00.123+05:45", "24:00:00Z", "12:00:00", "12:60:00Z"],
    "date-time": ["2021-01-01T00:00:00Z", "2021-01-01t00:00:00z", "2021-01-01 00:00:00Z", "2021-02-30T00:00:00Z"],
    "ipv4": ["0.0.0.0", "255.255.255.255", "256.0.0.1", "01.2.3.4", "1.2.3", "1.2.3.4.5"],
    "ipv6": ["::", "::1", "1::", "2001:db8::8a2e:370:7334", "::ffff:192.0.2.1", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "12345::", ":1"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"],
    "duration": ["P1D", "PT1H", "P1Y2M3DT4H5M6S", "P1W", "P", "PT", "P1D2H", "P1Y1W"],
    "json-pointer": ["", "/a/b", "/a~0b~1", "a", "/a~2"],
    "relative-json-pointer": ["0", "1/a", "2#", "-1", "01"],
    "uri": ["http://example.com/a?b#c", "urn:isbn:0451450523", "//example.com", "http://[::1]:80/", "http://a b", "mailto:x@y.z"],
    "uri-template": ["http://x/{term:1}/{term}", "{+var}", "{a.b}", "{v:0}", "{v:10000}", "{}", "{x,y*}", "a%41b", "{a,,b}", "foo}bar"],
}


def test_uri_template_follows_rfc_6570_where_jsonschema_is_loose():
    for text in ("{a..b}", "a b", "{var=def}"):  # the test suite's labels: invalid
        assert not regex_verdict("uri-template", text) and CHECKER.conforms(text, "uri-template")


def test_sound_narrowings_never_accept_what_jsonschema_rejects():
    # idn-email: any RFC 6531 address; idn-hostname: ASCII names only (a listed narrowing).
    for text in ["joe@example.com", "δοκιμή@example.com", "user@café.com", "no-at-sign", "user＠example.com"]:
        assert not regex_verdict("idn-email", text) or CHECKER.conforms(text, "idn-email"), text
    assert regex_verdict("idn-email", "δοκιμή@example.com") and not regex_verdict("idn-email", "no-at-sign")
    for text in ["example.com", "Example.com", "ab--cd.com", "xn--abc.com", "a" * 64, "-a.com", "a.b", "1.2.3.4"]:
        assert not regex_verdict("idn-hostname", text) or CHECKER.conforms(text, "idn-hostname"), text
    assert regex_verdict("idn-hostname", "example.com") and not regex_verdict("idn-hostname", "ab--cd.com")


def regex_verdict(name: str, text: str) -> bool:
    return all(regex.fullmatch(r, text) for r in FORMAT_REGEXES[name])


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_regexes_agree_with_jsonschema(name):
    for text in SAMPLES[name]:
        assert regex_verdict(name, text) == CHECKER.conforms(text, name), (name, text)


def test_leap_seconds_follow_the_test_suite():
    # jsonschema rejects every leap second; the suite (RFC 3339) accepts 23:59:60 UTC at any offset.
    assert regex_verdict("time", "23:59:60Z") and regex_verdict("time", "01:29:60+01:30")
    assert regex_verdict("time", "15:59:60-08:00") and regex_verdict("date-time", "1998-12-31T15:59:60.1-08:00")
    assert not regex_verdict("time", "22:59:60Z") and not regex_verdict("time", "23:59:60+00:01")


def test_hostname_and_email_hand_checked():
    assert regex_verdict("hostname", "example.com") and regex_verdict("hostname", "a-b.c")
    assert regex_verdict("hostname", "a--b.com")  # '--' elsewhere than the 3rd and 4th positions
    assert not regex_verdict("hostname", "-a.com") and not regex_verdict("hostname", "a_b.com")
    assert not regex_verdict("hostname", "a" * 64) and not regex_verdict("hostname", ".".join(["a" * 60] * 5))
    assert regex_verdict("email", "joe.bloggs@example.com") and regex_verdict("email", '"joe bloggs"@example.com')
    assert not regex_verdict("email", "joe..bloggs@example.com") and not regex_verdict("email", "no-at-sign")


def test_hostname_never_accepts_what_rfc_1123_and_idna_reject():
    # Issue #12: a final dot and invalid A-labels were accepted (the test suite's hostname.json).
    for text in ["example.", "www.example.com.", "xn--X", "xn--hello-txk", "xn--hello-zed", "xn--vek",
                 "XN--aa---o47jg78q", "ab--cd.com", "a.xn--l-fda"]:
        assert not regex_verdict("hostname", text), text
    # The listed narrowing: valid A-labels are rejected too (IDNA validity is not checked).
    assert not regex_verdict("hostname", "xn--9n2bp8q.xn--9t4b11yi5a") and "hostname" in NARROWED_FORMATS
    assert not regex_verdict("email", "joe@example.") and regex_verdict("email", "joe@xn--9n2bp8q.com")
