"""The page speaks of the book alone: no chapter, book page or README refers the reader to the documents the course
was planned from, which the reader never sees."""

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TEXTS = sorted((REPO_ROOT / "chapters").glob("*.ipynb")) + sorted((REPO_ROOT / "book").glob("*.md")) + [
    REPO_ROOT / "README.md"
]
# Phrasings that point at the course's own planning documents (each was found on a page once).
BEHIND_THE_SCENES = re.compile(
    r"seed texts?|this course (grew|was asked|draws on)|course was (asked|commissioned)|the task was given",
    re.IGNORECASE,
)


def behind_the_scenes(text: str) -> list[str]:
    return [m.group(0) for m in BEHIND_THE_SCENES.finditer(text)]


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: p.name)
def test_no_page_points_at_documents_the_reader_never_sees(path):
    found = behind_the_scenes(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name} speaks of the course's planning documents: {found}"


def test_the_phrases_are_caught():
    assert behind_the_scenes("One of the seed texts lists Perceiver") == ["seed texts"]
    assert behind_the_scenes("The walk-through this course grew from writes") == ["this course grew"]
    assert behind_the_scenes("Surveys sometimes list Perceiver") == []
