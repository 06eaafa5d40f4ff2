"""The report does not claim to be self-contained: its page shows thumbnails from the thumbs/ folder beside it, so
its help and footer say it opens offline with the files beside it (issue 37 point 9). The labelling page, whose
images are data URIs, is the one that is self-contained."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from t2i_audit.cli import app


def test_the_report_says_it_needs_its_thumbs_folder(rendered):
    page = rendered.read_text()
    assert re.search(r'src="thumbs/[0-9a-f]{2}/', page), "the page no longer shows thumbs/: reword back"
    assert "self-contained" not in page and "opens offline with the files beside it (thumbs/, tables)" in page
    help_text = " ".join(CliRunner().invoke(app, ["report", "--help"]).output.split())
    assert "self-contained" not in help_text and "thumbs/" in help_text
