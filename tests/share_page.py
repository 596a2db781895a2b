"""Reading a shared page (sequence_salience/display/share.py) back, for the tests of "Share this view": the unit
tests of the page and its notebook cell, and the browser tests that download it from the module."""

from __future__ import annotations

import html.parser


class SharePage(html.parser.HTMLParser):
    """Collects the shared page's values: map segments, matrix cells by row, faithfulness AOPCs, the about list,
    the notebook cell, and every tag and attribute (for the offline check)."""

    def __init__(self) -> None:
        super().__init__()
        self.segments: dict[int, float] = {}
        self.matrix: dict[int, list[float]] = {}
        self.columns: list[int] = []  # the matrix's column segments (data-s)
        self.shown_faith: list[tuple[str, str]] = []  # the faithfulness rows of the method shown
        self.faith: dict[tuple[str, str], float] = {}
        self.about: dict[str, str] = {}
        self.cell = ""
        self.tags: list[tuple[str, dict]] = []
        self._row: int | None = None
        self._faith_row: tuple[str, str] | None = None
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        cls = a.get("class") or ""
        if tag == "span" and "ss-seg" in cls and "data-value" in a:
            self.segments[int(a["data-s"])] = float(a["data-value"])
        elif tag == "tr" and "data-row" in a:
            self._row = int(a["data-row"])
            self.matrix[self._row] = []
        elif tag == "th" and "data-s" in a:
            self.columns.append(int(a["data-s"]))
        elif tag == "tr" and "data-mode" in a:
            self._faith_row = (a["data-mode"], a["data-name"])
            if "ss-shown" in cls:
                self.shown_faith.append(self._faith_row)
        elif tag == "td" and "data-value" in a and self._row is not None:
            self.matrix[self._row].append(float(a["data-value"]))
        elif tag == "td" and "data-value" in a and self._faith_row is not None:
            self.faith.setdefault(self._faith_row, float(a["data-value"]))  # the first: the AOPC
        elif tag == "dd":
            self._in = cls.removeprefix("ss-about-")
        elif tag == "pre" and "ss-cell" in cls:
            self._in = "cell"

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = self._faith_row = None
        if tag in ("dd", "pre"):
            self._in = None

    def handle_data(self, data):
        if self._in == "cell":
            self.cell += data
        elif self._in:
            self.about[self._in] = self.about.get(self._in, "") + data


def parse_share_page(text: str) -> SharePage:
    """The page's values (SharePage) read from its HTML text."""
    page = SharePage()
    page.feed(text)
    return page
