"""Structural similarity: hand-computed values, and the `apted`, `tsed` and `codebleu` packages on fixed pairs."""

import math
import random
import sys
import types

import pytest

from leaklab.similarity import dataflow
from leaklab.similarity import structure as st

REF = '''def mean_of(xs, k=3):
    """Docstring."""
    total = 0
    y = k + 1
    if total > y:
        total = y * 2
    else:
        z = total - y
        total = z
    return total
'''
CAND = """def average(items, k=2):
    s = 0
    w = k - 1
    # comment
    if s < w:
        s = w + 2
    return s
"""
# Loop-free pairs (codebleu orders merged loop edges by set(), which depends on PYTHONHASHSEED).
PAIRS = [
    (REF, CAND),
    (CAND, REF),
    ("def f(a, b):\n    c = a + b\n    d = c * a\n    return d - b\n", "def g(x, y):\n    return x * y\n"),
    ("def f(a):\n    b, c = a, 2\n    return b ** c\n", "def f(a):\n    b, c = a, 3\n    return c ** b\n"),
]


def _tuple_tree(node):
    return st.ordered_tree(node, lambda n: list(n[1:]), lambda n: n[0])


def test_tree_edit_distance_by_hand():
    abc = _tuple_tree(("a", ("b",), ("c",)))
    assert st.tree_edit_distance(abc, abc) == 0
    assert st.tree_edit_distance(abc, _tuple_tree(("a", ("b",)))) == pytest.approx(1.0)  # delete c
    assert st.tree_edit_distance(abc, _tuple_tree(("a", ("b",), ("c",), ("d",)))) == pytest.approx(0.8)
    assert st.tree_edit_distance(abc, _tuple_tree(("a", ("b",), ("x",)))) == pytest.approx(1.0)  # rename
    # a(b(c)) -> a(c): delete b, its child moves up.
    assert st.tree_edit_distance(_tuple_tree(("a", ("b", ("c",)))), _tuple_tree(("a", ("c",)))) == 1.0
    # (max_nodes - TED) / max_nodes, clamped: 3 nodes vs 1 node -> (3 - 2) / 3.
    assert st.normalised_tree_similarity(abc, _tuple_tree(("a",)), st.TSED_COSTS) == pytest.approx(1 / 3)
    # a -> z(y): rename a to y (1) + insert z (0.8) -> (2 - 1.8) / 2.
    assert st.normalised_tree_similarity(_tuple_tree(("a",)), _tuple_tree(("z", ("y",))), st.TSED_COSTS) == (
        pytest.approx(0.1)
    )
    # Nothing in common: three renames -> 0. (With these costs TED never exceeds max_nodes, so the clamp
    # at 0 only guards other costs.)
    assert st.normalised_tree_similarity(abc, _tuple_tree(("x", ("y",), ("z",))), st.TSED_COSTS) == 0.0


def _random_tree(rng, depth=0):
    kids = [] if depth > 4 else [_random_tree(rng, depth + 1) for _ in range(rng.choice([0, 0, 1, 2, 3]))]
    return (rng.choice("abcd"), *kids)


def test_tree_edit_distance_equals_apted_on_random_trees():
    apted = pytest.importorskip("apted")

    class Node:
        def __init__(self, t):
            self.name, self.children = t[0], [Node(c) for c in t[1:]]

    rng = random.Random(0)
    for _ in range(60):
        a, b = _random_tree(rng), _random_tree(rng)
        ours = st.tree_edit_distance(_tuple_tree(a), _tuple_tree(b))
        theirs = apted.APTED(
            Node(a), Node(b), apted.PerEditOperationConfig(1.0, 0.8, 1.0)
        ).compute_edit_distance()
        assert abs(ours - theirs) <= 1e-9


@pytest.fixture(scope="module")
def tsed_package():
    """The `tsed` package with its tree_sitter_language_pack import served by our pinned parser."""
    pytest.importorskip("apted")
    stub = types.ModuleType("tree_sitter_language_pack")
    stub.get_parser = lambda language: st.python_parser()
    stub.SupportedLanguage = str
    saved = sys.modules.get("tree_sitter_language_pack")
    sys.modules["tree_sitter_language_pack"] = stub
    try:
        module = pytest.importorskip("TSED")
        yield module
    finally:
        if saved is None:
            sys.modules.pop("tree_sitter_language_pack", None)
        else:
            sys.modules["tree_sitter_language_pack"] = saved


def _tsed_package_label(node) -> str:
    # The tsed package reads `str(node)` word by word and keeps the last bare word inside a node's
    # parentheses: the last field label ("body:") printed before a named child, else the node type.
    label = node.type
    for i, child in enumerate(node.children):
        if child.is_named:
            name = node.field_name_for_child(i)
            if name:
                label = name + ":"
    return label


def _tsed_with_package_labels(reference: str, candidate: str) -> float:
    trees = [
        st.ordered_tree(
            st.python_parser().parse(text.encode()).root_node,
            lambda node: node.named_children,
            _tsed_package_label,
        )
        for text in (reference, candidate)
    ]
    return st.normalised_tree_similarity(*trees, st.TSED_COSTS)


def test_tsed_equals_the_tsed_package_with_its_labels_and_documents_the_label_difference(tsed_package):
    for ref, cand in PAIRS:
        theirs = tsed_package.Calculate("python", ref, cand, 1.0, 0.8, 1.0)
        assert abs(_tsed_with_package_labels(ref, cand) - theirs) <= 1e-9
    # The package names function_definition nodes "body:" (the last field label it reads), so two
    # functions that differ only in a node type it overwrote look identical to it; with node types they do not.
    assert st.tsed(st.structure(REF), st.structure(CAND)) != _tsed_with_package_labels(REF, CAND)


def test_codebleu_parts_equal_the_codebleu_package_where_it_is_right():
    codebleu = pytest.importorskip("codebleu")
    for ref, cand in PAIRS:
        theirs = codebleu.calc_codebleu([ref], [cand], lang="python")
        ours = st.codebleu_parts(st.structure(ref), st.structure(cand))
        assert ours["ngram"] == pytest.approx(theirs["ngram_match_score"], abs=1e-12)
        assert ours["syntax"] == pytest.approx(theirs["syntax_match_score"], abs=1e-12)
        assert ours["dataflow"] == pytest.approx(theirs["dataflow_match_score"], abs=1e-12)
        if len(cand.split()) >= len(ref.split()):  # no brevity penalty: see the next test
            assert ours["weighted_ngram"] == pytest.approx(theirs["weighted_ngram_match_score"], abs=1e-12)
            assert ours["equal"] == pytest.approx(theirs["codebleu"], abs=1e-12)


def test_codebleu_package_differences_are_documented_and_ours_hold():
    codebleu = pytest.importorskip("codebleu")
    # 1. Weighted n-gram: the package measures the brevity penalty against len([tokens, weights]) == 2,
    #    so a short candidate is never penalised. Ours applies exp(1 - r/c) like BLEU.
    theirs = codebleu.calc_codebleu([REF], [CAND], lang="python")
    ours = st.codebleu_parts(st.structure(REF), st.structure(CAND))
    r, c = len(REF.split()), len(CAND.split())
    assert ours["weighted_ngram"] == pytest.approx(theirs["weighted_ngram_match_score"] * math.exp(1 - r / c))
    # 2. A data-flow match of 0 is 0 here; the package's `theta * (dataflow or 1)` counts it as 1.
    ref = "def f(a):\n    b = a\n    return b\n"
    cand = "def f():\n    return 7\n"
    theirs = codebleu.calc_codebleu([ref], [cand], lang="python")
    ours = st.codebleu_parts(st.structure(ref), st.structure(cand))
    assert theirs["dataflow_match_score"] == 0 and ours["dataflow"] == 0.0
    parts = [ours[k] for k in ("ngram", "weighted_ngram", "syntax")]
    assert ours["equal"] == pytest.approx(sum(parts) / 4)
    assert theirs["codebleu"] == pytest.approx(
        0.25
        * (
            theirs["ngram_match_score"]
            + theirs["weighted_ngram_match_score"]
            + theirs["syntax_match_score"]
            + 1
        )
    )
    # 3. A reference without any data flow: undefined here (mean of the other three), 1 in the package.
    ours = st.codebleu_parts(st.structure("def f():\n    return 1\n"), st.structure(cand))
    assert ours["dataflow"] is None
    assert ours["equal"] == pytest.approx((ours["ngram"] + ours["weighted_ngram"] + ours["syntax"]) / 3)


def test_a_string_assigned_to_an_attribute_keeps_the_data_flow():
    codebleu = pytest.importorskip("codebleu")
    # `self.kind = 'abc'`: both sides have three parts (self . kind / ' abc '), codebleu pairs them, its
    # token lookup fails on the string's inner part and it drops the function's whole data flow (0 edges,
    # "degenerates to 0", then counted as 1 by `or 1`). Here the string stays one token.
    code = "def f(self, a):\n    b = a\n    self.kind = 'abc'\n    return b\n"
    assert codebleu.calc_codebleu([code], [code], lang="python")["dataflow_match_score"] == 0
    ours = st.structure(code)
    assert ours.flow and st.dataflow_match(ours, ours) == 1.0


def test_strip_comments_and_docstrings():
    assert st.strip_comments_and_docstrings('def f():\n    """doc"""\n    # c\n    return "s"  # t\n') == (
        'def f():\n    return "s"  '
    )


def test_ast_similarity_by_hand_and_mri():
    one, binop = st.structure("x = 1\n"), st.structure("x = a + 1\n")
    # Module, Assign, Name, Constant vs Module, Assign, Name, BinOp(Name, Add, Constant): insert 3 of 7.
    assert st.ast_similarity(one, binop) == pytest.approx(4 / 7)
    assert st.ast_similarity(one, st.structure("y = 2\n")) == 1.0
    same = st.structure(REF)
    assert st.mri_similarity(same, st.structure(REF.replace("    ", "\t"))) == 1.0  # unparse normalises


def test_structure_reports_why_it_cannot_parse():
    assert st.structure("def f(:\n").error.startswith("SyntaxError")
    assert st.structure("   \n").error == "empty"
    assert st.structure(REF).error is None


def test_grammar_versions_are_recorded():
    versions = st.grammar_versions()
    assert set(versions) == {"tree-sitter", "tree-sitter-python"} and all(versions.values())


# Edge cases of tokenize's docstring rule the scanner must reproduce (INDENT, NEWLINE, NL, DEDENT before
# a string; prefixes; strings inside brackets; a keyword running into a string; multi-line strings).
STRIP_CASES = [
    'def f():\n    """doc"""\n    return 1\n',
    'def f():\n\n    """after a blank row: still INDENT"""\n    x = 1\n\n    "after NL: kept"\n    return x\n',
    'def f():\n    x = 1\n    # a comment row\n    "kept: NL before it"\n    "dropped: NEWLINE before it"\n',
    'def f():\n    if a:\n        b()\n    "kept: DEDENT before it"\n    return rb"x"\n',
    'def f():\n    r"""raw doc"""\n    s = ("a"\n         "b")\n    t = f"{s}" if"x" in s else s  # tail\n',
    'def f():\n    x = """one\n\n  two"""\n    """dropped\n    over rows"""; y = 2\n    return x\n',
    'x = 1  # c\n"col 0"\nclass A:\n    u"doc"\n    def g(self):\n        return {"k": [1, (2, 3)]}\n',
]


def test_the_scanner_strips_exactly_as_tokenize_does():
    import sysconfig
    from pathlib import Path

    texts = list(STRIP_CASES)
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:60]:
        texts.append(path.read_text(encoding="utf-8", errors="replace"))
    scanned = 0
    for text in texts:
        fast = st._strip_by_scanning(text)
        if fast is None:  # tabs, backslash continuations, ...: tokenize does it
            continue
        scanned += 1
        assert fast == st._strip_by_tokenize(text), text[:200]
    assert scanned >= len(STRIP_CASES) + 20
    assert st._strip_by_scanning("x = 1 + \\\n    2\n") is None
    assert st.strip_comments_and_docstrings("x = 1 + \\\n    2  # c\n") == st._strip_by_tokenize(
        "x = 1 + \\\n    2  # c\n"
    )


def _nodes_with_children(tree):
    """str(node) of the root and of every node with children, in preorder (what `_subtree_keys` keys)."""
    out, cursor, first = [], tree.walk(), True
    while True:
        if first or cursor.node.child_count:
            out.append(str(cursor.node))
        first = False
        if cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return out


def test_subtree_keys_are_equal_exactly_when_the_s_expressions_are():
    # Keys are built bottom-up instead of printing each subtree; over valid and broken code (ERROR,
    # MISSING, UNEXPECTED nodes, the unnamed "is not" / "not in") a key must name one s-expression.
    rng = random.Random(0)
    texts = [REF, CAND, "x = a is not b\ny = c not in d\nz = (\n", "def f():\n    return a ? b\nx = [1,\n"]
    for ref, cand in PAIRS:
        lines = (ref + cand).split("\n")
        for _ in range(6):
            cut = list(lines)
            del cut[rng.randrange(len(cut))]
            texts.append("\n".join(cut)[: rng.randrange(20, 400)])
    key_to_sexp, sexp_to_key = {}, {}
    parser = st.python_parser()
    for text in texts:
        source = text.encode()
        tree = parser.parse(source)
        keys = st._subtree_keys(st._flatten(tree), source)
        sexps = _nodes_with_children(tree)
        assert len(keys) == len(sexps)
        for key, sexp in zip(keys, sexps):
            assert key_to_sexp.setdefault(key, sexp) == sexp
            assert sexp_to_key.setdefault(sexp, key) == key
    assert len(key_to_sexp) > 100


def _stdlib_functions(limit: int, max_lines: int = 60) -> list[str]:
    """Dedented top-level functions and methods of up to `max_lines` lines from the standard library."""
    import ast
    import sysconfig
    import textwrap
    from pathlib import Path

    found = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        source = path.read_text(encoding="utf-8", errors="replace")
        try:
            module = ast.parse(source)
        except SyntaxError:
            continue
        for top in module.body:
            for node in [top, *(top.body if isinstance(top, ast.ClassDef) else [])]:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    node.end_lineno - node.lineno < max_lines
                ):
                    found.append(textwrap.dedent(ast.get_source_segment(source, node, padded=True)))
                    if len(found) >= limit:
                        return found
    return found


def test_codebleu_alone_parses_once_and_gives_what_all_parts_give():
    # CodeBLEU alone skips the raw text's tree-sitter parse when the stripped text's tree is clean;
    # the parts it gives, and which snippets count as unparseable, must not change.
    texts = _stdlib_functions(200) + [
        "def f():\n    '''only a docstring'''\n",  # stripped tree broken: the raw parse decides
        "def f():\n    x = 1  # c\n    return x\n",
        "x = foo(\n'col 0 string')\n",
    ]
    for text in texts:
        alone, full = st.structure(text, ("codebleu",)), st.structure(text)
        assert alone.error == full.error, text[:200]
        assert (alone.subtrees, alone.flow, alone.words) == (full.subtrees, full.flow, full.words), text[:200]


# --------------------------------------------------------------------------- data flow


def _flow(text: str):
    source = st.strip_comments_and_docstrings(text).encode()
    return dataflow.data_flow(st._flatten(st.python_parser().parse(source)), source)


# Every rule and its corners: paired and unpaired targets, `x: int`, for-else (the body is not walked),
# while-else, elif chains, nested ifs, comprehensions (also inside an f-string, which is one token),
# defaults with and without values, shadowing.
CORNERS = [
    "a, b = b, a\n(c, d) = 1, 2\ne, = f,\nx: int\ny: int = x\nz += y\n",
    "for i in range(3):\n    s = i\nelse:\n    s = 0\nwhile s:\n    s -= 1\nelse:\n    t = s\n",
    "if a:\n    x = 1\nelif b:\n    x = 2\n    if c:\n        y = x\nelse:\n    x = y\nz = x + y\n",
    "v = [k * w for k in c if k for w in k]\nu = {a: b for a, b in v}\nt = f'{[q for q in u]}'\n",
    "def f(a, b=1, *c, d=e, **g):\n    identifier = a\n    return identifier, b, c, d, g\n",
    "x = 1\ndef g(x=x):\n    x = x + 1\n    return [x for x in range(x)]\n",
]
# The corners' flows as a second, independent implementation (a numba walk over integer arrays, since
# removed) computed them; it agreed with this walk on these and on 250 standard-library functions.
CORNER_FLOWS = [
    [
        (1, 1, (0,)),
        (0, 1, (1,)),
        (0, 0, ()),
        (1, 0, ()),
        (4, 1, (2, 3)),
        (5, 1, (2, 3)),
        (2, 0, ()),
        (3, 0, ()),
        (7, 1, (6,)),
        (6, 0, ()),
        (9, 1, (8,)),
        (8, 0, ()),
        (10, 1, (9,)),
        (9, 0, (9,)),
    ],
    [
        (2, 1, (0, 1)),
        (0, 0, (0,)),
        (1, 0, ()),
        (3, 0, (3,)),
        (3, 1, (4,)),
        (4, 0, ()),
        (5, 1, (3,)),
        (3, 0, (3,)),
    ],
    [
        (1, 1, (0,)),
        (0, 0, ()),
        (1, 1, (2,)),
        (2, 0, ()),
        (3, 1, (1,)),
        (1, 0, (1,)),
        (1, 1, (3,)),
        (3, 0, ()),
        (4, 1, (1, 3)),
        (1, 0, (1,)),
        (3, 0, (3,)),
    ],
    [
        (3, 1, (0, 1, 0, 2, 0, 1, 0)),
        (0, 0, (0,)),
        (1, 0, (1,)),
        (0, 1, (2,)),
        (2, 0, ()),
        (0, 0, (0,)),
        (1, 1, (0,)),
        (0, 0, (0,)),
        (6, 1, (4, 5, 4, 5, 3)),
        (4, 0, (4,)),
        (5, 0, (5,)),
        (4, 1, (3,)),
        (5, 1, (3,)),
        (3, 0, (3,)),
        (8, 1, (7,)),
        (7, 0, ()),
    ],
    [
        (0, 0, ()),
        (2, 0, (1,)),
        (1, 0, ()),
        (3, 0, ()),
        (5, 0, (4,)),
        (4, 0, ()),
        (6, 0, ()),
        (0, 0, (0,)),
        (2, 0, (2,)),
        (3, 0, (3,)),
        (5, 0, (5,)),
        (6, 0, (6,)),
    ],
    [
        (1, 1, (0,)),
        (0, 0, ()),
        (1, 0, (1,)),
        (1, 0, (1,)),
        (1, 1, (1, 0)),
        (1, 0, (1,)),
        (0, 0, ()),
        (1, 0, (1,)),
        (1, 1, (2, 1)),
        (2, 0, ()),
        (1, 0, (1,)),
    ],
]


def test_data_flow_of_the_corners_equals_the_independent_walk():
    assert [_flow(text) for text in CORNERS] == CORNER_FLOWS


def test_data_flow_golden_by_hand():
    # Worked by hand from the rules in `dataflow`'s docstring. A "variable" is any token whose type is not
    # its text, so the constant 1 is one (codebleu's rule). Tokens: x 1 | y x | x y x (lines 1-3).
    # x@1 computedFrom 1; 1 comesFrom nothing; y@2 computedFrom x; x@2 comesFrom x@1; the target x@3
    # computedFrom y and x (the value's variables in order); y@3 comesFrom y@2; the last x comesFrom x@1.
    # Names numbered by first appearance (parents before the head): 1 = 0, x = 1, y = 2.
    # Relation 0 = comesFrom, 1 = computedFrom.
    assert _flow("x = 1\ny = x\nx = y + x\n") == [
        (1, 1, (0,)),
        (0, 0, ()),
        (2, 1, (1,)),
        (1, 0, (1,)),
        (1, 1, (2, 1)),
        (2, 0, (2,)),
        (1, 0, (1,)),
    ]


def test_data_flow_of_broken_code_is_walked():
    # ERROR and MISSING nodes (a docstring-only body once stripped) give zero-width tokens, which share a
    # byte span: the walk aliases them instead of failing.
    assert _flow("def f():\n    '''only a docstring'''\n") == []


def test_compiled_subtree_keys_equal_the_python_ones():
    # Clean trees are keyed by compiled code, broken ones in Python: a subtree must get one key either way.
    parser = st.python_parser()
    for text in CORNERS + _stdlib_functions(150):
        source = st.strip_comments_and_docstrings(text).encode()
        flat = st._flatten(parser.parse(source))
        compiled = st._k_subtree_keys(*flat.arrays, *st._label_tables(flat.language)).tolist()
        assert compiled == st._subtree_keys_python(flat, source), text[:300]
