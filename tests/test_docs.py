"""The docs hold together: every relative link in README.md and docs/*.md leads to a file (and heading)
that exists, every `docs/...` path the code names exists, and every `leaklab ...` command shown in a code
block is accepted by the command's own argument handling (nothing is trained or loaded: `train` gets
`print_config=true`, the others go through the parsers and recipe loading that run before any work)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CODE_DIRS = ("leaklab", "bench", "analysis", "tests")
CODE_SUFFIXES = {".py", ".yaml", ".yml", ".sh", ".toml", ".json"}

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w\-/]+\.\w+(?:#[\w\-]+)?")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_target(origin: Path, target: str) -> str | None:
    """Why `target` (a relative link or path, maybe with #anchor) does not resolve from `origin`'s
    folder, or None when it does."""
    path, _, anchor = target.partition("#")
    dest = (origin.parent / path).resolve() if path else origin
    if not dest.exists():
        return f"{target}: no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: no heading with the anchor #{anchor} in {dest.name}"
    return None


def broken_links(page: Path) -> list[str]:
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z+.-]*:", target):  # http:, https:, mailto: are not checked offline
            continue
        if why := broken_target(page, target):
            problems.append(f"{os.path.relpath(page, REPO)}: {why}")
    return problems


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A `code` heading (x)\n")
    page.write_text(
        "# Page\n\n[fine](other.md#a-code-heading-x) [self](#page) [web](https://example.org)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere) `[in code](nowhere.md)`\n"
        "```\n[in a block](nowhere.md)\n```\n"
    )
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "missing.md: no such file" in problems[0]
    assert "#nowhere" in problems[1]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_every_docs_path_named_in_code_exists():
    named = 0
    problems = []
    for folder in CODE_DIRS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in CODE_SUFFIXES or not path.is_file() or path == Path(__file__):
                continue
            for target in DOCS_PATH.findall(path.read_text(errors="replace")):
                named += 1
                if why := broken_target(REPO / "README.md", target):
                    problems.append(f"{path.relative_to(REPO)}: {why}")
    assert named >= 8, "the modules' pointers to their formula notes were not found"
    assert problems == []


# --------------------------------------------------------------------------- commands shown in the docs


ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
NOT_SHELL = ("python", "py", "toml", "yaml", "json")  # fenced blocks of these languages hold no commands


def shown_commands(text: str) -> list[list[str]]:
    """The `leaklab ...` commands in a page's fenced code blocks, as argument lists (after `leaklab`;
    `accelerate launch [options] leaklab/train.py ARGS` counts as `train ARGS`). Shell comments, line
    continuations, `&&`, `;` and `&` are handled; environment assignments before a command are skipped,
    and a variable set on a line of its own (`SIZES="a=1 b=2"`) is expanded where a later `$SIZES` uses it."""
    commands = []
    variables: dict[str, list[str]] = {}
    for block in FENCE.findall(text):
        if block.splitlines()[0].strip("`").strip() in NOT_SHELL:  # `import leaklab` is no command
            continue
        body = "\n".join(block.splitlines()[1:-1]).replace("\\\n", " ")
        for line in body.splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            segment: list[str] = []
            for token in [*lexer, ";"]:
                if token and set(token) <= set(";&|"):
                    if len(segment) == 1 and ASSIGNMENT.match(segment[0]):
                        name, value = segment[0].split("=", 1)
                        variables[name] = value.split()
                    commands.extend(_as_leaklab(segment))
                    segment = []
                elif token.startswith("$") and token[1:] in variables:
                    segment.extend(variables[token[1:]])
                else:
                    segment.append(token)
    return commands


def _as_leaklab(words: list[str]) -> list[list[str]]:
    for i, word in enumerate(words):
        if word == "leaklab":
            return [words[i + 1 :]]
        if word == "leaklab/train.py" and "accelerate" in words[:i]:
            return [["train", *words[i + 1 :]]]
    return []


def check_command(argv: list[str]) -> None:
    """Run `argv`'s argument handling, stopping before any work; raises (or fails) when it is refused."""
    from leaklab import cli

    command, args = argv[0], argv[1:]
    assert command in cli.COMMANDS, f"unknown command {command!r}"
    if command == "train":
        assert cli.main(["train", *args, "print_config=true"]) == 0, argv
    elif command == "sweep":
        from leaklab.sweep import parse_sweep_args, validate

        validate(parse_sweep_args(args))
    elif command == "counterfactual":
        from leaklab.memorization.standalone import parser

        parser().parse_args(args)
    elif command == "audit":
        from leaklab.audit import audit_overrides, clean_set_of
        from leaklab.recipe import load_recipe

        rest, _ = clean_set_of(args)
        load_recipe("tiny_cpt", ["name=audit", *audit_overrides(rest)])
    elif command == "mia":
        from leaklab.mia import parse_mia_args
        from leaklab.recipe import load_recipe

        overrides, _, _ = parse_mia_args(args)
        load_recipe("tiny_cpt", ["name=mia", *overrides])
    elif command in cli.HELP or command == "compare":
        # evaluate, report, select, compare, ...: their arguments are a run directory (a placeholder
        # here) and, for evaluate, evaluate.* keys, which must be keys the recipe accepts. Only commands
        # known to stop at --help get it: another might start its work.
        try:
            code = cli.main([command, "--help"])
        except SystemExit as stop:  # an argparse-based command (compare) exits after its help
            code = stop.code
        assert code == 0, argv
        keys = [a for a in args if "=" in a and not a.startswith("-")]
        if keys:
            from leaklab.recipe import load_recipe

            load_recipe("tiny_cpt", keys)


def test_shown_commands_are_found_in_blocks_only():
    text = (
        "Run `leaklab nothing here`.\n\n```bash\nleaklab train recipe=tiny_cpt   # a comment\n"
        "accelerate launch --config_file launch/cpu.yaml leaklab/train.py recipe=apps_cpt \\\n"
        "    mix.ratio=1:10\nfor g in 0 1; do CUDA_VISIBLE_DEVICES=$g leaklab evaluate RUN & done; wait\n"
        "leaklab sweep recipe=tiny_cpt seeds=0,1 --local && leaklab compare runs/sweeps/x\n```\n"
    )
    assert shown_commands(text) == [
        ["train", "recipe=tiny_cpt"],
        ["train", "recipe=apps_cpt", "mix.ratio=1:10"],
        ["evaluate", "RUN"],
        ["sweep", "recipe=tiny_cpt", "seeds=0,1", "--local"],
        ["compare", "runs/sweeps/x"],
    ]


def test_a_command_with_a_bad_key_is_refused():
    from leaklab.recipe import RecipeError

    with pytest.raises(RecipeError):
        check_command(["evaluate", "RUN_DIR", "evaluate.detectorz=[ppl]"])
    with pytest.raises(AssertionError):
        check_command(["trian", "recipe=tiny_cpt"])


def test_every_command_shown_in_the_docs_parses(capsys):
    commands = [(page.name, argv) for page in PAGES for argv in shown_commands(page.read_text())]
    assert len(commands) >= 10, commands
    for name, argv in commands:
        try:
            check_command(argv)
        except (Exception, SystemExit) as err:
            pytest.fail(f"{name}: `leaklab {' '.join(argv)}` is refused: {err!r}")
    capsys.readouterr()


def test_a_variable_set_in_a_block_is_expanded_in_its_commands():
    page = '```bash\nSIZES="a=1 \\\n  b=2"\nleaklab train recipe=x $SIZES out=y\n```\n'
    assert shown_commands(page) == [["train", "recipe=x", "a=1", "b=2", "out=y"]]
