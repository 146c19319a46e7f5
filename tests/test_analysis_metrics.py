"""Tests for toksmith.analysis.metrics: word rules by script, Gini, Lorenz, Rényi."""
import math
import random

import pytest

from toksmith.analysis import AnalysisError
from toksmith.analysis.metrics import (
    NO_SPACE_SCRIPTS,
    count_words,
    detect_script,
    gini,
    lorenz_curve,
    renyi_efficiency,
    renyi_entropy,
    word_rule_for_script,
)

SAMPLES = {
    # text, expected dominant script, expected word rule
    "eng": ("All human beings are born free and equal in dignity and rights.", "Latin", "whitespace"),
    "rus": ("Все люди рождаются свободными и равными.", "Cyrillic", "whitespace"),
    "ell": ("Όλοι οι άνθρωποι γεννιούνται ελεύθεροι.", "Greek", "whitespace"),
    "arb": ("يولد جميع الناس أحرارًا متساوين في الكرامة والحقوق.", "Arabic", "whitespace"),
    "hin": ("सभी मनुष्यों को गौरव और अधिकारों के मामले में जन्मजात स्वतन्त्रता प्राप्त है।", "Devanagari", "whitespace"),
    "kor": ("모든 인간은 태어날 때부터 자유로우며", "Hangul", "whitespace"),
    "amh": ("የሰው፡ልጅ፡ሁሉ፡ሲወለድ፡ነጻና፡በክብርና፡በመብትም፡እኩልነት፡ያለው፡ነው።", "Ethiopic", "whitespace"),
    "cmn": ("人人生而自由,在尊严和权利上一律平等。", "Han", "characters"),
    "jpn": ("すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。", "Japanese", "characters"),
    "tha": ("มนุษย์ทั้งหลายเกิดมามีอิสระและเสมอภาคกันในเกียรติศักด", "Thai", "characters"),
    "mya": ("လူတိုင်းသည် တူညီ လွတ်လပ်သော ဂုဏ်သိက္ခာဖြင့် လည်းကောင်း၊", "Myanmar", "characters"),
    "khm": ("មនុស្សទាំងអស់ កើតមកមានសេរីភាព និងសមភាព ក្នុងផ្នែកសេចក្ដីថ្លៃថ្នូរ", "Khmer", "characters"),
    "lao": ("ມະນຸດເກີດມາມີກຽດສັກສີ ແລະ ສິດທິເທົ່າທຽມກັນ", "Lao", "characters"),
    "bod": ("འགྲོ་བ་མིའི་རིགས་རྒྱུད་ཡོངས་ལ་སྐྱེས་ཙམ་ཉིད་ནས་", "Tibetan", "characters"),
}


@pytest.mark.parametrize("code", sorted(SAMPLES))
def test_script_detection_and_word_rule(code):
    text, script, rule = SAMPLES[code]
    assert detect_script(text) == script
    assert word_rule_for_script(detect_script(text)) == rule


def test_no_space_scripts_include_the_ones_the_issue_names():
    assert {"Han", "Hiragana", "Katakana", "Thai", "Myanmar", "Lao", "Khmer", "Tibetan"} <= NO_SPACE_SCRIPTS
    assert word_rule_for_script("Latin") == "whitespace"
    assert word_rule_for_script("Common") == "whitespace"
    assert detect_script("123 !?") == "Common"


def test_word_counts_follow_the_rule():
    assert count_words("All human beings are born free.", "whitespace") == 6
    assert count_words("  spaced   out \n text ", "whitespace") == 3
    # Ethiopic wordspace separates words like a space does.
    assert count_words("የሰው፡ልጅ፡ሁሉ", "whitespace") == 3
    # Characters rule: one per Han character, punctuation and spaces excluded.
    assert count_words("人人生而自由,在尊严和权利上一律平等。", "characters") == 17
    # A Thai consonant with its vowel and tone marks is one user-perceived character.
    assert count_words("ที่", "characters") == 1
    assert count_words("", "characters") == 0
    with pytest.raises(AnalysisError, match="unknown word rule"):
        count_words("x", "syllables")


def test_gini_of_equal_values_is_zero_and_of_concentrated_values_approaches_one():
    assert gini([1.0] * 7) == 0.0
    assert gini([3, 3]) == 0.0
    n = 50
    assert gini([0] * (n - 1) + [1]) == pytest.approx((n - 1) / n)
    assert gini([0, 0, 0]) == 0.0


def test_gini_matches_the_pairwise_definition_and_is_scale_invariant():
    rng = random.Random(7)
    xs = [rng.uniform(0.5, 20) for _ in range(31)]
    mean = sum(xs) / len(xs)
    pairwise = sum(abs(a - b) for a in xs for b in xs) / (2 * len(xs) ** 2 * mean)
    assert gini(xs) == pytest.approx(pairwise)
    assert gini([3 * x for x in xs]) == pytest.approx(gini(xs))
    assert gini(list(reversed(xs))) == pytest.approx(gini(xs))


def test_gini_rejects_bad_input():
    with pytest.raises(AnalysisError):
        gini([])
    with pytest.raises(AnalysisError, match="non-negative"):
        gini([1, -2])


def test_lorenz_curve_ends_at_one_and_lies_below_the_diagonal():
    xs = [5, 1, 3, 9, 2]
    points = lorenz_curve(xs)
    assert points[0] == (0.0, 0.0)
    assert points[-1] == pytest.approx((1.0, 1.0))
    assert all(y <= x + 1e-12 for x, y in points)
    # Twice the area between the diagonal and the curve is the Gini coefficient.
    area = sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(points, points[1:]))
    assert 1 - 2 * area == pytest.approx(gini(xs))
    assert lorenz_curve([2, 2, 2, 2]) == [(0.0, 0.0), (0.25, 0.25), (0.5, 0.5), (0.75, 0.75), (1.0, 1.0)]


def test_renyi_entropy_limits():
    uniform = [10] * 32
    for alpha in (0.5, 1, 2, 2.5, 10):
        # Every Rényi entropy of a uniform distribution is log(n).
        assert renyi_entropy(uniform, alpha) == pytest.approx(math.log(32))
    skewed = [1000, 10, 10, 1]
    # Rényi entropy does not increase with alpha.
    values = [renyi_entropy(skewed, a) for a in (0.5, 1, 2, 2.5, 5)]
    assert values == sorted(values, reverse=True)
    assert renyi_entropy([5], 2.5) == 0.0
    assert renyi_entropy([], 2.5) == 0.0


def test_renyi_efficiency_is_one_for_a_uniform_use_of_the_whole_vocabulary():
    assert renyi_efficiency([3] * 100, 100) == pytest.approx(1.0)
    half = renyi_efficiency([3] * 50, 100)
    assert half == pytest.approx(math.log(50) / math.log(100))
    assert 0 < renyi_efficiency([100, 1, 1], 1000) < half
    with pytest.raises(AnalysisError):
        renyi_efficiency([1], 1)
