import difflib
import math
import random

import pytest

from leaklab.similarity import text as tx
from leaklab.similarity.text import NGO_N, ngram_overlap, ngrams


def test_ngrams_are_a_set_of_windows():
    assert ngrams([1, 2, 1, 2, 1], 2) == {(1, 2), (2, 1)}
    assert ngrams([1, 2], 3) == set()


def test_default_n_is_seven():
    """SrDetection's NGO counts 7-token n-grams (App. A.1): without n, ngram_overlap and the suite's
    ngram_overlap_7 column score as n = 7 does, not as 6 or 8 would."""
    from leaklab.similarity.suite import compare, document

    gt = list(range(10))  # 7-grams (0..6) .. (3..9): 4; 6-grams: 5; 8-grams: 3
    seven = [*range(7), 99]  # holds exactly (0..6)
    sixes = [*range(6), 99, *range(4, 10)]  # holds (0..5) and (4..9), no 7 in a row
    assert ngram_overlap(seven, gt) == 1 / 4 and ngram_overlap(sixes, gt) == 0.0
    assert ngram_overlap(seven, gt, n=6) == 2 / 5 and ngram_overlap(seven, gt, n=8) == 0.0  # the others
    words = [f"w{i}" for i in gt]  # code_tokens keeps each word one token
    row = compare(document(" ".join(words)), document(" ".join([*words[:7], "x"])))
    assert row["ngram_overlap_7"] == 1 / 4
    assert NGO_N == 7


def test_golden_values_by_hand():
    gt = list(range(10))  # 7-grams: (0..6), (1..7), (2..8), (3..9) -> 4 distinct
    assert ngram_overlap(gt, gt) == 1.0
    # The generation reproduces tokens 0..7 then derails: it holds (0..6) and (1..7) -> 2 / 4.
    assert ngram_overlap([0, 1, 2, 3, 4, 5, 6, 7, 99, 98, 97], gt) == 0.5
    # Shifted copies still count: overlap is position-free.
    assert ngram_overlap([42, 42, *range(3, 10)], gt) == 0.25
    assert ngram_overlap([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], gt) == 0.0
    assert ngram_overlap([], gt) == 0.0


def test_set_semantics_count_a_repeated_ngram_once():
    # The ground truth repeats one 2-gram three times: its distinct 2-grams are {(1,2), (2,1)}.
    gt = [1, 2, 1, 2, 1, 2]
    assert ngram_overlap([1, 2], gt, n=2) == 0.5  # a multiset version would give 1/5
    assert ngram_overlap([2, 1, 2], gt, n=2) == 1.0


def test_short_reference_shrinks_n_and_empty_reference_is_nan():
    assert ngram_overlap([5, 1, 2, 3, 6], [1, 2, 3]) == 1.0  # whole reference found verbatim
    assert ngram_overlap([1, 2, 4], [1, 2, 3]) == 0.0
    assert math.isnan(ngram_overlap([1, 2], []))


def test_works_on_characters_too():
    assert ngram_overlap("abcdefgh", "abcdefgh", n=7) == 1.0


# --------------------------------------------------------------------------- the rest of the text suite


def _brute_lcs(a: str, b: str) -> int:
    """Longest common substring by the O(n*m) table (independent of the suffix automaton)."""
    best = 0
    prev = [0] * (len(b) + 1)
    for ch in a:
        cur = [0] * (len(b) + 1)
        for j, other in enumerate(b, start=1):
            if ch == other:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


def bleu(candidate, reference):
    return tx.bleu_from_counts(tx.ngram_counts(candidate), tx.ngram_counts(reference))


def test_bleu_golden_values_by_hand():
    assert bleu(list("abcd"), list("abcd")) == pytest.approx(1.0)
    # p1 = 3/4, p2 = 2/3, p3 = 1/2, p4 = 0 -> epsilon 0.1 / 1; equal lengths, no brevity penalty.
    assert bleu(list("abcd"), list("abce")) == pytest.approx((0.75 * (2 / 3) * 0.5 * 0.1) ** 0.25)
    # Two tokens against four: p1 = p2 = 1, p3 and p4 have no window (0/1 -> 0.1), penalty exp(1 - 4/2).
    assert bleu(list("ab"), list("abcd")) == pytest.approx((0.1 * 0.1) ** 0.25 * math.exp(-1))
    assert bleu(list("xy"), list("abcd")) == 0.0
    assert bleu([], list("abcd")) == 0.0


def test_bleu_matches_codebleus_nltk_copy_on_random_token_lists():
    bleu_module = pytest.importorskip("codebleu.bleu")
    rng = random.Random(0)
    for _ in range(50):
        ref = [rng.choice("abcdef") for _ in range(rng.randint(1, 30))]
        cand = [rng.choice("abcdef") for _ in range(rng.randint(1, 30))]
        expected = bleu_module.sentence_bleu([ref], cand)
        assert bleu(cand, ref) == pytest.approx(expected, abs=1e-12)


def test_code_tokens_split_punctuation_and_decode_bad_bytes():
    assert tx.code_tokens("x+=f(y_1):  # c") == ["x", "+", "=", "f", "(", "y_1", ")", ":", "#", "c"]
    assert tx.as_text(b"ok") == ("ok", False)
    text, lossy = tx.as_text(b"a\xffb")
    assert lossy and text == "a\ufffdb"


def test_exact_match_ignores_line_endings_and_trailing_space_only():
    assert tx.exact_match("def f():\r\n    return 1  \n\n", "def f():\n    return 1") == 1.0
    assert tx.exact_match("def f():\n  return 1", "def f():\n    return 1") == 0.0


def test_edit_similarity_golden():
    # MRI's: normalised by the longer string
    assert tx.edit_similarity_max_len("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert tx.edit_similarity_max_len("", "") == 1.0
    assert tx.edit_similarity_max_len("abc", "") == 0.0


def test_edit_similarity_by_the_ground_truths_length():
    # the counterfactual paper's: normalised by |reference| (the ground truth), floored at 0
    assert tx.edit_similarity_truth_len("sitting", "kitten") == pytest.approx(1 - 3 / 6)
    assert tx.edit_similarity_truth_len("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    # a 100-character truth against a 200-character generation sharing nothing: distance 200
    truth, generation = "a" * 100, "b" * 200
    assert tx.edit_similarity_max_len(generation, truth) == pytest.approx(0.0)
    assert tx.edit_similarity_truth_len(generation, truth) == 0.0  # 1 - 200 / 100, floored
    # the truth followed by 100 extra characters: distance 100 -> 0 by |x|, 0.5 by the longer string
    assert tx.edit_similarity_max_len(truth + generation[:100], truth) == pytest.approx(0.5)
    assert tx.edit_similarity_truth_len(truth + generation[:100], truth) == 0.0
    assert tx.edit_similarity_truth_len(truth + generation[:50], truth) == pytest.approx(0.5)
    assert tx.edit_similarity_truth_len("", "") == 1.0 and tx.edit_similarity_truth_len("a", "") == 0.0


def test_longest_common_substring_against_the_table_and_difflib():
    assert tx.longest_common_substring("xabcdy", "zabcdw") == 4
    assert tx.lcs_similarity("xabcdy", "zabcdw") == pytest.approx(4 / 6)
    assert tx.lcs_similarity("", "") == 1.0 and tx.lcs_similarity("a", "") == 0.0
    rng = random.Random(1)
    for _ in range(200):
        a = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 40)))
        b = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 40)))
        assert tx.longest_common_substring(a, b) == _brute_lcs(a, b)
    # difflib's autojunk treats characters in > 1% of a 200+ character text as junk: on code the
    # spaces go, and the "longest match" it reports is far too short.
    a = "    total = 0\n" + "".join(f"    value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, 12))
    b = a.replace("compute", "combine")
    truth = _brute_lcs(a, b)
    assert tx.longest_common_substring(a, b) == truth
    junked = difflib.SequenceMatcher(None, a, b).find_longest_match(0, len(a), 0, len(b)).size
    assert junked < truth


def test_jaccard_and_minhash():
    assert tx.jaccard(["a", "b", "c"], ["b", "c", "d"]) == pytest.approx(2 / 4)
    assert tx.jaccard([], []) == 1.0
    a = [f"t{i}" for i in range(100)]
    b = [f"t{i}" for i in range(50, 150)]  # true Jaccard 50 / 150
    sig_a, sig_b = tx.minhash_signature(a), tx.minhash_signature(b)
    assert tx.minhash_similarity(sig_a, sig_a) == 1.0
    assert abs(tx.minhash_similarity(sig_a, sig_b) - 1 / 3) < 0.15
    assert tx.minhash_similarity(sig_a, tx.minhash_signature(["zz"])) < 0.05
    assert tx.minhash_similarity(tx.minhash_signature([]), tx.minhash_signature([])) == 1.0
