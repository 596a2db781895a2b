"""lit_app/edge/static_cache.py: a static file's answer with its ETag and `no-cache`, 304 when the browser's copy is
current (the headers LIT sends are the ones lit_nlp/lib/wsgi_app.py `respond` writes for a static file)."""

from __future__ import annotations

import hashlib

from lit_app.edge import static_cache

BODY = b"console.log('bundle');\n"
TAG = '"' + hashlib.sha256(BODY).hexdigest()[:32] + '"'
LIT_HEADERS = [("Content-Type", "application/javascript; charset=utf-8"), ("Content-Length", str(len(BODY))),
               ("Expires", "Mon, 07 Dec 2026 19:00:00 GMT"), ("Cache-Control", "private, max-age=3600")]


def test_etag_is_the_quoted_sha256_prefix_and_changes_with_the_body():
    assert static_cache.etag(BODY) == TAG
    assert static_cache.etag(BODY + b" ") != TAG


def test_if_none_match_lists_weak_tags_and_star():
    assert static_cache.matches(TAG, TAG)
    assert static_cache.matches(f'"other", W/{TAG}', TAG)
    assert static_cache.matches("*", TAG)
    assert not static_cache.matches("", TAG)
    assert not static_cache.matches('"other"', TAG)
    assert not static_cache.matches(TAG.strip('"'), TAG)  # unquoted: not the tag


def test_a_200_gets_its_tag_and_no_cache_and_loses_lits_hour():
    status, headers, body = static_cache.revalidated({"REQUEST_METHOD": "GET"}, "200 OK", LIT_HEADERS, [BODY])
    assert status == "200 OK" and body == [BODY]
    assert headers == [("Content-Type", "application/javascript; charset=utf-8"),
                       ("Content-Length", str(len(BODY))), ("Cache-Control", "no-cache"), ("ETag", TAG)]


def test_the_current_tag_is_answered_304_without_a_body_or_its_headers():
    status, headers, body = static_cache.revalidated(
        {"REQUEST_METHOD": "GET", "HTTP_IF_NONE_MATCH": TAG}, "200 OK", LIT_HEADERS, [BODY[:5], BODY[5:]])
    assert (status, headers, body) == ("304 Not Modified", [("Cache-Control", "no-cache"), ("ETag", TAG)], [])


def test_an_old_tag_gets_the_whole_file():
    status, headers, body = static_cache.revalidated(
        {"REQUEST_METHOD": "GET", "HTTP_IF_NONE_MATCH": '"0123"'}, "200 OK", LIT_HEADERS, [BODY])
    assert status == "200 OK" and body == [BODY] and ("ETag", TAG) in headers


def test_head_only_loses_the_hour_and_other_statuses_are_unchanged():
    status, headers, body = static_cache.revalidated({"REQUEST_METHOD": "HEAD"}, "200 OK", LIT_HEADERS, [])
    assert status == "200 OK" and body == []
    assert headers == LIT_HEADERS[:2] + [("Cache-Control", "no-cache")]
    assert static_cache.revalidated({"REQUEST_METHOD": "GET", "HTTP_IF_NONE_MATCH": "*"}, "404 NOT FOUND",
                                    LIT_HEADERS, [b"Not found"]) == ("404 NOT FOUND", LIT_HEADERS, [b"Not found"])
