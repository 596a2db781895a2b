"""No frontend source file is over 300 lines (issue 44: a part a newcomer reads in one sitting; the same bound
as docs/architecture.md's). Over it, move one responsibility out into a file of its own and name it in the doc's
frontend table (salience/first_highlight.ts came out of salience/controller.ts, 309 lines, that way)."""

from tests import frontend_source

MAX_LINES = 300


def test_no_frontend_source_file_is_over_300_lines():
    over = {p.relative_to(frontend_source.SRC).as_posix(): n for p in sorted(frontend_source.SRC.rglob("*.ts"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not over, f"frontend/src files over {MAX_LINES} lines: {over}; move one responsibility out of each."
