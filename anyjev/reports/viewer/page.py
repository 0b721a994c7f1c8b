"""The page: ``index.html`` from the package's template (``assets/``, this project's own HTML, CSS and
JavaScript), with its stylesheet, script and the run's data inline, so the run page is one file."""

from __future__ import annotations

import re
from pathlib import Path

from anyjev.errors import FileFormatError
from anyjev.reports.viewer.encoding import safe_json

ASSETS = Path(__file__).with_name("assets")
TEMPLATE = ASSETS / "page.html"
MARKERS = ("/*CSS*/", "/*JS*/", "/*RUN*/")  # where the template takes the stylesheet, the script and the run's data


def index_html(run: dict) -> str:
    """The page: the template with its CSS, JavaScript and RUN (the run page's data) inline."""
    page = TEMPLATE.read_text(encoding="utf-8")
    inline = {"/*CSS*/": (ASSETS / "viewer.css").read_text(encoding="utf-8"),
              "/*JS*/": (ASSETS / "viewer.js").read_text(encoding="utf-8"), "/*RUN*/": safe_json(run)}
    for marker in MARKERS:
        if page.count(marker) != 1:
            raise FileFormatError(str(TEMPLATE), f"marker {marker}", f"occurs {page.count(marker)} times, must occur once: "
                                  "the viewer's page template is damaged (reinstall anyjev)")
    return re.sub("|".join(map(re.escape, MARKERS)), lambda m: inline[m.group(0)], page)
