"""A real headless browser for the HTML report: Debian's chromium driven by Playwright for Python.

Playwright is told to use the installed /usr/bin/chromium (`executable_path`), so nothing is
downloaded. `opened(browser, path)` loads a file and records what a page should never do: log an
error (a script error, a blocked resource, a Content-Security-Policy violation), throw, open a
dialog (`alert`), or request anything but the file itself.

Run as a script it writes the README's screenshot of the report of a graph:

    python3 tests/browser.py GRAPH docs/html-report.png [PATTERN]

(PATTERN: the finding whose elements are lit, default the first.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = Path(os.environ.get("WITTY_CHROMIUM", "/usr/bin/chromium"))
VIEWPORT = {"width": 1460, "height": 1000}


def missing() -> str | None:
    """Why no browser can run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install playwright)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (apt-get install chromium)"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Opened:
    page: Any
    url: str
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@contextmanager
def opened(browser: Any, path: Path) -> Iterator[Opened]:
    page = browser.new_page(viewport=VIEWPORT)
    seen = Opened(page, path.resolve().as_uri())
    page.on("console", lambda m: seen.errors.append(f"console {m.type}: {m.text}") if m.type == "error"
            else None)
    page.on("pageerror", lambda e: seen.errors.append(f"exception: {e}"))
    page.on("request", lambda r: seen.requests.append(r.url))
    page.on("dialog", lambda d: (seen.dialogs.append(d.message), d.dismiss()))
    try:
        page.goto(seen.url, wait_until="load")
        yield seen
    finally:
        page.close()


def screenshot(graph_path: Path, out: Path, pattern: str | None = None) -> int:
    """The report of `graph_path` as the README shows it: the header, the topology with what a finding
    cites lit (`pattern`, else the first finding) and the findings, one viewport high."""
    import tempfile

    from witty_profiler.diagnosis import diagnose
    from witty_profiler.app.htmlreport import render_html
    from witty_profiler.topology import load_graph
    graph = load_graph(graph_path)
    with tempfile.TemporaryDirectory() as tmp, chromium() as browser:
        page_file = Path(tmp) / "report.html"
        page_file.write_text(render_html(graph, diagnose(graph)), encoding="utf-8")
        with opened(browser, page_file) as seen:
            which = f'article.finding[data-pattern="{pattern}"]' if pattern else "article.finding"
            button = seen.page.locator(f"{which} button.show").first
            if button.count():
                button.click()  # the picture as a reader sees it after asking where a finding points
            seen.page.evaluate("window.scrollTo(0, 0)")
            seen.page.screenshot(path=str(out), clip={"x": 0, "y": 0, **VIEWPORT})
            if seen.errors or seen.requests != [seen.url]:
                print(f"page misbehaved: {seen.errors} {seen.requests}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python3 tests/browser.py GRAPH OUT.png [PATTERN]")
    sys.exit(screenshot(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] if len(sys.argv) == 4 else None))
