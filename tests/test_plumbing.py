"""Plumbing written once: the "did you mean" hint and the process rank each have one home that every
module uses, so a change to either reaches every message and every engine."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

from leaklab.distributed import world
from leaklab.errors import closest

PACKAGE = Path(__file__).resolve().parents[1] / "leaklab"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def test_closest_names_the_nearest_option_or_nothing():
    assert closest("lerning_rate", ["learning_rate", "epochs"]) == "; did you mean 'learning_rate'?"
    assert closest("zzz", ["learning_rate", "epochs"]) == ""
    # a stricter cutoff drops a weak match that the default keeps
    assert closest("mnk", ["mink"]) == "; did you mean 'mink'?"
    assert closest("ab", ["abcdef"], cutoff=0.9) == ""


def test_only_errors_asks_difflib_for_a_hint():
    callers = [
        path.relative_to(PACKAGE).as_posix()
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "get_close_matches"
    ]
    assert callers == ["errors.py"]


def test_world_is_defined_once():
    defined = [
        path.relative_to(PACKAGE).as_posix()
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name in ("world", "_world")
    ]
    assert defined == ["distributed.py"]


def test_world_reads_the_accelerator():
    assert world(None) == (0, 1)
    assert world(SimpleNamespace(num_processes=1, process_index=0)) == (0, 1)
    assert world(SimpleNamespace(num_processes=4, process_index=2)) == (2, 4)


def test_the_evaluation_base_depends_on_no_detector():
    tree = ast.parse((PACKAGE / "evaluations" / "base.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(str(m).startswith("leaklab.detectors") for m in imported), imported


def test_context_of_is_the_text_before_the_solution():
    from leaklab.data.tasks import context_of

    assert context_of("def f():\n    return 1\n", "    return 1\n") == "def f():\n"
    assert context_of("whole text", "") == "whole text"
    assert context_of("text without it", "other") == ""


def test_an_evaluation_record_declares_the_recipe_keys_it_needs(monkeypatch):
    import dataclasses

    import pytest

    from leaklab import recipe as recipe_module
    from leaklab.evaluations import EVALUATIONS
    from leaklab.recipe import RecipeError, load_recipe

    for record in EVALUATIONS.values():  # every declared key exists in a recipe
        for key, _, _ in record.requires:
            recipe_module.get_key(load_recipe("tiny_cpt", []), key)
    # A requirement declared on any record is enforced, without the loader naming the evaluation.
    patched = dict(EVALUATIONS)
    patched["mri"] = dataclasses.replace(
        EVALUATIONS["mri"], requires=(("inject.doses", "the doses", "[1, 4]"),)
    )
    monkeypatch.setattr(recipe_module, "EVALUATIONS", patched)
    with pytest.raises(
        RecipeError, match=r"'mri' measures the doses that inject.doses sets; set inject.doses"
    ):
        load_recipe("tiny_sft", [])


def test_the_detector_inputs_are_typed_and_carry_the_recipe_settings():
    import pytest

    from leaklab.detectors.inputs import ModelInputs
    from leaklab.recipe import EvaluateConfig

    hints = ModelInputs.__annotations__
    assert hints and not [name for name, hint in hints.items() if "Any" in str(hint)]
    assert hints["settings"] == "EvaluateConfig"
    with pytest.raises(TypeError, match="settings"):
        ModelInputs(None, None, ["a"])  # the recipe's settings are always handed in
    settings = EvaluateConfig(prompt_boundary="none", batch_tokens=64)
    inputs = ModelInputs(None, None, ["a"], settings)
    assert inputs.scoring().batch_tokens == 64


def test_no_detector_restates_a_recipe_default_through_getattr():
    """`getattr(settings, "cv_folds", 5)` repeats the recipe's default in a second place, where it drifts."""
    found = []
    for path in sorted((PACKAGE / "detectors").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "getattr"
                and len(node.args) == 3
            ):
                target = ast.unparse(node.args[0])
                if "settings" in target:
                    found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def _parameters(node: ast.FunctionDef) -> int:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


# Public entry points whose keywords are their documented options: the signal engine, the generation
# back-end and the sandbox. Any other function past eight parameters wants a named context instead.
ENTRY_POINTS = {
    "signals/logprobs.py:compute_token_stats",
    "signals/generation.py:HFGenerator.__init__",
    "execution/sandbox.py:Sandbox.__init__",
}


def _functions_with_docs(tree: ast.Module):
    """(name, node, docstring) of every function; a method is named Class.method, and its class's
    docstring documents an `__init__` that has none of its own."""
    methods = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            for item in cls.body:
                if isinstance(item, ast.FunctionDef):
                    own = ast.get_docstring(item)
                    doc = own if own or item.name != "__init__" else ast.get_docstring(cls)
                    methods[item] = (f"{cls.name}.{item.name}", doc)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            name, doc = methods.get(node, (node.name, ast.get_docstring(node)))
            yield name, node, doc or ""


def _options(node: ast.FunctionDef) -> list[str]:
    """The parameters that have a default: a function's options."""
    a = node.args
    positional = a.posonlyargs + a.args
    return [x.arg for x in positional[len(positional) - len(a.defaults) :]] + [
        x.arg for x, default in zip(a.kwonlyargs, a.kw_defaults) if default is not None
    ]


def test_functions_take_at_most_eight_parameters_unless_documented_entry_points():
    """Beyond eight, a function's arguments are a context that wants a name (`ModelInputs`, `Decoding`,
    `SetSettings`). The few entry points that keep their keywords document every option they take."""
    over, undocumented = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, node, doc in _functions_with_docs(ast.parse(path.read_text())):
            if _parameters(node) > 8:
                where = f"{path.relative_to(PACKAGE).as_posix()}:{name}"
                over.append(where)
                if where in ENTRY_POINTS:
                    undocumented += [f"{where} {k}" for k in _options(node) if k not in doc]
    assert set(over) <= ENTRY_POINTS, sorted(set(over) - ENTRY_POINTS)
    assert undocumented == []


def test_functions_fit_in_80_lines_unless_a_comment_says_why_they_read_better_whole():
    """A function longer than a screen is read in pieces; the few kept whole say why, in a `# Kept whole:`
    comment right above them (at most five)."""
    over, unexplained = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno - node.lineno >= 80
            ):
                over.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.name}")
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
                above = "\n".join(lines[max(0, first - 6) : first])
                if "# Kept whole:" not in above:
                    unexplained.append(over[-1])
    assert len(over) <= 5, over
    assert unexplained == [], unexplained
