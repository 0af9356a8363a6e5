"""analysis/heldout_functions.py on a small fake package: which functions become held-out tasks."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from leaklab.data.benchmarks import load_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "analysis" / "heldout_functions.py"

KEPT = '''
def scale(values, factor):
    """Multiply every value by factor."""
    out = []
    for v in values:
        out.append(v * factor)
    return out
'''

UNDOCUMENTED = """
def undocumented(values):
    total = 0
    for v in values:
        total += v
    return total
"""

TOO_SHORT = '''
def short(x):
    """One line."""
    return x
'''

METHOD = '''
class Box:
    @staticmethod
    def clamp(value, low, high):
        """Clamp value to [low, high]."""
        if value < low:
            return low
        return min(value, high)
'''


def load_script():
    spec = importlib.util.spec_from_file_location("heldout_functions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_package(root: Path) -> Path:
    pkg = root / "fakepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "tests").mkdir()
    (pkg / "__init__.py").write_text(KEPT + UNDOCUMENTED + TOO_SHORT)
    (pkg / "sub" / "copy.py").write_text(KEPT)  # an exact duplicate: kept once
    (pkg / "sub" / "box.py").write_text(METHOD)
    (pkg / "sub" / "test_things.py").write_text(KEPT.replace("scale", "scale_t"))
    (pkg / "tests" / "helpers.py").write_text(KEPT.replace("scale", "scale_h"))
    (pkg / "broken.py").write_text("def (:\n")
    return pkg


def test_extracts_documented_functions_outside_tests_once(tmp_path):
    script = load_script()
    rows = script.heldout_rows(fake_package(tmp_path), count=10, seed=0)
    assert sorted(r["entry_point"] for r in rows) == ["clamp", "scale"]
    scale = next(r for r in rows if r["entry_point"] == "scale")
    assert scale["task_id"] == "fakepkg/__init__.py:2:scale"
    assert scale["prompt"] == 'def scale(values, factor):\n    """Multiply every value by factor."""\n'
    assert scale["prompt"] + scale["canonical_solution"] == KEPT.lstrip("\n")
    clamp = next(r for r in rows if r["entry_point"] == "clamp")
    assert clamp["prompt"].startswith("@staticmethod\ndef clamp(value, low, high):\n")  # dedented
    assert all(r["test"] == "" for r in rows)


def test_count_and_seed_draw_a_fixed_subset(tmp_path):
    script = load_script()
    root = fake_package(tmp_path)
    one = script.heldout_rows(root, count=1, seed=3)
    assert len(one) == 1
    assert one == script.heldout_rows(root, count=1, seed=3)


def test_written_file_loads_as_a_benchmark(tmp_path):
    script = load_script()
    out = tmp_path / "held.jsonl"
    script.main([str(fake_package(tmp_path)), "--out", str(out), "--count", "5"])
    assert len(out.read_text().splitlines()) == 2
    assert all(json.loads(line)["test"] == "" for line in out.read_text().splitlines())
    tasks = load_benchmark("humaneval", label="heldout-fake", path=out)
    assert {t.entry_point for t in tasks} == {"scale", "clamp"}
    assert {t.benchmark for t in tasks} == {"heldout-fake"}
