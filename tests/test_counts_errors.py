"""Counts files (`toksmith count`, `merge-counts`, `train --from-counts`) that cannot be added up
or read are errors, never a wrong count: 64-bit sums are checked (they wrapped before)."""

import pytest

import toksmith
from toksmith.trainers import merge_counts

MAX = 2**64 - 1


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("chunk", ["the", "a chunk longer than sixteen bytes"])
def test_counts_that_pass_64_bits_are_an_error(tmp_path, chunk):
    a = write(tmp_path / "a.tsv", f"{chunk}\t{MAX}\n")
    b = write(tmp_path / "b.tsv", f"{chunk}\t1\n")
    out = tmp_path / "merged.tsv"
    with pytest.raises(toksmith.TokenizerError, match="passes 2\\^64 - 1"):
        merge_counts([a, b], out)
    assert not out.exists()
    # Up to the limit is fine.
    c = write(tmp_path / "c.tsv", f"{chunk}\t{MAX - 1}\n")
    assert merge_counts([c, b], out) == 1
    assert out.read_text(encoding="utf-8").strip().endswith(str(MAX))


def test_counts_that_pass_64_bits_across_spilled_runs_are_an_error(tmp_path):
    # A tiny memory budget spills each file's counts to a run of its own; the runs are added
    # up when merged.
    files = [write(tmp_path / f"{k}.tsv", "".join(f"w{i}\t{MAX // 2 + 1}\n" for i in range(200))) for k in range(2)]
    with pytest.raises(toksmith.TokenizerError, match="passes 2\\^64 - 1"):
        merge_counts(files, tmp_path / "merged.tsv", max_memory="1KB")


def test_a_line_with_two_tabs_is_an_error(tmp_path):
    bad = write(tmp_path / "bad.tsv", "x\ty\t3\n")
    with pytest.raises(toksmith.TokenizerError, match="bad.tsv:1: more than one tab"):
        merge_counts([bad], tmp_path / "merged.tsv")
