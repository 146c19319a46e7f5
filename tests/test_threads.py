"""Many Python threads on one tokenizer (regressions of an audit, session 26): the first encode
of several threads at once, the thread pools that batch calls keep, ids far past the vocabulary."""

import subprocess
import sys
import textwrap
import time

import pytest

import toksmith

from conftest import data_path

FIRST_ENCODES = textwrap.dedent("""
    import sys, threading, toksmith
    tok = toksmith.load("r50k_base", tiktoken_dir=sys.argv[1])
    sys.setswitchinterval(1e-5)  # switch threads often: the window of the old deadlock
    barrier = threading.Barrier(8)
    results = []
    def first_encode():
        barrier.wait()
        results.append(tok.encode("hello world"))
    threads = [threading.Thread(target=first_encode) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert len(results) == 8 and all(r == results[0] for r in results)
    print("ok")
""")


def test_first_encodes_of_many_threads_at_once_do_not_deadlock():
    """The process-wide table of ints made its first check (which imports modules, so lets other
    threads run) inside a lock that waiting threads held the GIL for: 8 of 10 fresh processes
    hung on their first encode from 8 threads."""
    tiktoken_dir = str(data_path("tokenizers", "tiktoken"))
    for _ in range(4):
        proc = subprocess.run([sys.executable, "-c", FIRST_ENCODES, tiktoken_dir], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def live_threads() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc/self/status")
def test_batch_calls_with_many_thread_counts_keep_few_pools():
    """A pool was kept for every num_threads ever asked for: num_threads=1..128 left 8,000 OS
    threads, and then starting more failed."""
    tok = toksmith.Tokenizer(tokens={i: bytes([i]) for i in range(256)}, merges=[], pattern=r"\w+|\W")
    before = live_threads()
    for k in range(1, 41):
        assert tok.encode_batch(["hello world"] * 50, num_threads=k)[0] == list(b"hello world")
    # The last 4 sizes (37..40) are kept; the others' threads end once idle.
    deadline = time.monotonic() + 20
    while live_threads() > before + 37 + 38 + 39 + 40 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_threads() <= before + 37 + 38 + 39 + 40


def test_an_id_far_past_the_vocabulary_is_an_error_not_gigabytes():
    """A special token at id 10^8 made every table indexed by id that long (6 GB, 12 s; near
    2^28 the process aborted on a failed allocation)."""
    tokens = {i: bytes([i]) for i in range(256)}
    with pytest.raises(toksmith.FormatError, match="far past the vocabulary"):
        toksmith.Tokenizer(tokens=tokens, merges=[], pattern=r"\w+", special_tokens={"<x>": 10**8})
    ok = toksmith.Tokenizer(tokens=tokens, merges=[], pattern=r"\w+", special_tokens={"<x>": 1000})
    assert ok.encode("a<x>", allowed_special="all") == [97, 1000]


@pytest.mark.parametrize("arg, dtype", [(b"abc", "uint32"), (5, "uint32"), (None, "uint32"), ("abc", "bogus"),
                                        ("abc", None), ("abc", "float64")])
def test_encode_to_numpy_bad_input_is_an_encode_error(arg, dtype):
    tok = toksmith.Tokenizer(tokens={i: bytes([i]) for i in range(256)}, merges=[], pattern=r"\w+")
    with pytest.raises(toksmith.EncodeError):
        tok.encode_to_numpy(arg, dtype=dtype)


def test_the_constructor_takes_pattern_names_as_train_does():
    """pattern="gpt2" was taken as a regex matching only "gpt2": encode("hello world") gave []."""
    tok = toksmith.Tokenizer(tokens={i: bytes([i]) for i in range(256)}, merges=[], pattern="gpt2")
    assert tok.encode("hello world") == list(b"hello world") and tok.pattern_name == "gpt2"
    assert toksmith.Tokenizer(tokens={i: bytes([i]) for i in range(256)}, merges=[], pattern="o200k_base").pattern_name == "o200k"
