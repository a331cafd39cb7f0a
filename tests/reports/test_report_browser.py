"""The HTML report in a real browser: headless Chromium loads the page, draws it, decodes its
figure, and logs no error. Slow-marked, and skipped where no Chromium is installed (a fresh CI
machine has none: `apt-get install chromium-headless-shell` on Debian)."""

from __future__ import annotations

import io

import pytest

from syncswitch.cli.main import main
from tests.reports.browser import find_browser, open_page

pytestmark = pytest.mark.slow

# What the page shows once loaded: its images (decoded?), tables and size.
PAGE_FACTS = """({
  ready: document.readyState,
  images: Array.from(document.images).map(i => ({
    complete: i.complete, width: i.naturalWidth, height: i.naturalHeight, shown: i.width})),
  tables: Array.from(document.querySelectorAll("table")).map(t => t.rows.length),
  title: document.title,
  height: document.body.scrollHeight,
})"""


@pytest.mark.parametrize("style", ["paper", "dashboard"])
def test_the_html_report_renders_in_chromium_with_its_figure_and_no_errors(
    seeded_sim_runs, tmp_path, style
) -> None:
    browser = find_browser()
    if browser is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium-headless-shell)")
    dirs = [str(d) for runs in seeded_sim_runs.values() for d in runs]
    page = tmp_path / "report.html"
    assert main(["report", *dirs, "--html", str(page), "--plot-style", style]) == 0

    visit = open_page(browser, page, PAGE_FACTS, tmp_path / "profile")

    assert visit.errors() == []
    facts = visit.value
    assert facts["ready"] == "complete" and facts["title"] == "Sync-Switch report"
    (image,) = facts["images"]
    assert image["complete"] and image["width"] >= 1000 and image["height"] >= 500
    assert 0 < image["shown"] <= 1280  # scaled to the window (max-width: 100%)
    assert facts["tables"][0] == 1 + len(dirs)  # the runs table: a header and a row per run
    assert len(facts["tables"]) == 1 + len(dirs)  # and a workers table per run
    assert facts["height"] > image["height"] / 2
    # Drawn, not blank: the screenshot holds text, lines and the figure's colours.
    from PIL import Image

    shot = Image.open(io.BytesIO(visit.screenshot_png)).convert("L")
    dark = sum(count for level, count in enumerate(shot.histogram()) if level < 200)
    assert dark / (shot.width * shot.height) > 0.01


def test_the_browser_check_sees_a_broken_figure_and_a_console_error(tmp_path) -> None:
    """The check above is worth its pass: a page with an undecodable image, a console error and
    an uncaught exception fails it."""
    browser = find_browser()
    if browser is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium-headless-shell)")
    page = tmp_path / "broken.html"
    page.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>t</title></head>'
        '<body><img alt="x" src="data:image/png;base64,AAAA">'
        '<script>console.error("boom"); undefined_name();</script></body></html>'
    )
    visit = open_page(browser, page, PAGE_FACTS, tmp_path / "profile")
    (image,) = visit.value["images"]
    assert image["width"] == 0  # not decoded
    errors = visit.errors()
    assert any("boom" in line for line in errors)
    assert any(line.startswith("exception:") for line in errors)
