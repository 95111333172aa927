"""The repository's docs stand alone: every Markdown link in README.md, docs/, bench/README.md and the clients'
READMEs resolves to a file inside the repository (and an anchor to a heading of it): none sends readers to a
folder beside the checkout, which users of the repository do not have (tests/test_fresh_clone.py checks every
file for such a path)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")]
    + [p for p in (ROOT / "clients").rglob("README.md") if "node_modules" not in p.parts]
)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)


def links(text: str) -> list[str]:
    """The targets of the page's inline links and images and of its reference definitions, outside code blocks."""
    prose = FENCE.sub("", text)
    prose = re.sub(r"`[^`\n]*`", "", prose)  # code spans: `[a](b)` there is code, not a link
    return LINK.findall(prose) + REFERENCE.findall(prose)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", page.read_text()), re.M):
        text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
        found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def test_the_pages_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/design.md", "docs/api.md", "bench/README.md", "clients/typescript/README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves_inside_the_repository(page: Path) -> None:
    text = page.read_text()
    broken = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: outside the repository by intent
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / unquote(path)).resolve() if path else page
        if not resolved.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor.lower() not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, broken


def test_the_check_sees_a_broken_link(tmp_path: Path) -> None:
    """The walk itself can fail: the links it must find, in the forms the pages use."""
    text = (
        'See [the design](docs/design.md), ![a shot](docs/x.png "title") and [a section](#the-map).\n'
        "```sh\n[not a link](nowhere.md)\n```\n`[code](nowhere.md)` and [web](https://example.com).\n"
        "[ref]: docs/api.md\n"
    )
    assert links(text) == ["docs/design.md", "docs/x.png", "#the-map", "https://example.com", "docs/api.md"]
    assert "the-map" in anchors(ROOT / "docs" / "design.md")
    assert "the-explorer-page" in anchors(ROOT / "README.md")
