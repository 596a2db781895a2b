"""lit_app/edge/lit_components.py: a file LIT cannot read or write answers a 400 naming ?path=, and the path it shows
keeps the name the client wrote (its end) when the server's folder in front of it makes it long."""

from __future__ import annotations

import pytest

from lit_app.edge import lit_components
from lit_app.errors import RequestError


def _missing(path: str):
    def call():
        raise FileNotFoundError(2, "No such file or directory", path)
    return call


def test_a_short_path_is_shown_whole():
    with pytest.raises(RequestError, match=r"^/load_datapoints \?path= 'a\.lit\.jsonl': No such file or directory\. Fix: "):
        lit_components.file_call("/load_datapoints", "a.lit.jsonl", _missing("a.lit.jsonl"))


def test_a_long_path_keeps_the_file_name_the_client_wrote():
    path = "/tmp/pytest-of-root/pytest-58/popen-gw1/data0/" + "missing.lit.jsonl"  # as in a CI run under xdist
    with pytest.raises(RequestError) as got:
        lit_components.file_call("/load_datapoints", path, _missing(path))
    text = str(got.value)
    assert "missing.lit.jsonl'" in text and "\u2026" in text
    shown = text.split("?path= ", 1)[1].split(": No such file", 1)[0]
    assert shown.startswith("\u2026") and len(shown) < len(repr(path))  # shortened from the front
