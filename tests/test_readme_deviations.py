"""Every row of the "Deviations from the papers" table (docs/deviations.md) names a test that backs it,
and that test exists: a row whose test is renamed or deleted fails here rather than going stale."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_REF = re.compile(r"(tests/[\w/]+\.py)::(\w+)")


def deviation_rows() -> list[list[str]]:
    text = (REPO / "docs" / "deviations.md").read_text()
    section = text.split("# Deviations from the papers", 1)[1].split("\n## ", 1)[0]
    rows = [
        line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Method")
    ]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def test_every_deviation_row_names_an_existing_test():
    rows = deviation_rows()
    assert len(rows) >= 10, "the table lost its rows"
    for cells in rows:
        assert len(cells) == 6, cells
        refs = TEST_REF.findall(cells[-1])
        assert refs, f"no test backs the row {cells[0]!r}"
        for path, name in refs:
            source = (REPO / path).read_text()
            assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{path}::{name} ({cells[0]})"
