"""The README and the guide in docs/: every relative link leads to a file of the repo, and
CI runs exactly the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    """The targets of a page's Markdown links that point into the repo (no URL, no bare anchor)."""
    return [t.split("#")[0] for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_leads_to_a_file(page: Path):
    missing = [t for t in relative_links(page.read_text()) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(REPO)} links to files that do not exist: {missing}"


def test_the_link_check_can_fail():
    assert relative_links("[a](docs/x.md#y) [b](https://e.org) [c](#top) ![d](report.png)") == [
        "docs/x.md",
        "report.png",
    ]


def test_ci_runs_the_readme_test_command():
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert block, "the README's first bash block holds its two commands"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands[0].startswith("bin/ct-fleet eval ")
    assert commands[1] == "bin/test"
    assert f"exec {commands[1]}" in (REPO / ".ci" / "run").read_text().splitlines()
