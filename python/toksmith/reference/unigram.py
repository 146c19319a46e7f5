"""Textbook Unigram language-model tokenization (Kudo, 2018): slow, plain, easy to follow.

A Unigram model is a list of pieces with log probabilities (scores). A word can be spelled by
many sequences of pieces; all of them together form its *lattice* (a graph whose edges are the
pieces found at each position). The model's probability of a segmentation is the product of its
pieces' probabilities, so

- **encoding** picks the segmentation with the highest total score (Viterbi, dynamic
  programming over the lattice);
- **training** (EM) computes, for every piece, how many times it is *expected* to be used over
  all segmentations weighted by their probability (forward-backward), then re-estimates the
  scores from those counts; between EM rounds, the pieces whose removal costs the least
  likelihood are pruned, until the vocabulary has the wanted size.

Training here follows ``rust/train/unigram.rs`` rule for rule (seed selection, thresholds, tie
rules), so the two give the same vocabulary; the fast version finds the seed substrings with a
suffix array, this one by looking at every substring. Words are whole Metaspace words
(``"▁low"``); this module imports nothing else from toksmith.

>>> words = {"▁low": 5, "▁lower": 2, "▁newest": 6, "▁widest": 3, "▁new": 4}
>>> pieces = train_unigram(words, vocab_size=14)
>>> viterbi("▁lowest", dict(pieces))[0]
['▁low', 'e', 's', 't']
"""
import math

WS = "\u2581"
UNK_PENALTY = 10.0  # the unknown token scores the lowest piece score minus this
MIN_EXPECTED = 0.5  # the M-step drops pieces expected fewer times than this
UNKNOWN_CHAR = "\uffff"  # stands for every character left out by character_coverage


def digamma(x):
    """psi(x), the derivative of log Gamma: recurrence up to 10, then the asymptotic series.
    ``digamma(1) = -0.5772...`` (minus the Euler-Mascheroni constant)."""
    result = 0.0
    while x < 10.0:
        result -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    tail = f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f * (1 / 240 - f / 132))))
    return result + math.log(x) - 0.5 / x - tail


def log_add(x, y):
    """log(exp(x) + exp(y)) without overflow."""
    if x == -math.inf:
        return y
    if y == -math.inf:
        return x
    hi, lo = max(x, y), min(x, y)
    return hi + math.log1p(math.exp(lo - hi))


# ------------------------------------------------------------------------------ the lattice


def lattice(word, pieces, max_len=None):
    """Every piece found in ``word``: a list, per start position, of ``(end, piece)``.
    A position no one-character piece covers gets ``(start + 1, None)``: the unknown token.

    >>> lattice("abc", {"a": -1, "ab": -2, "b": -1, "c": -1})
    [[(1, 'a'), (2, 'ab')], [(2, 'b')], [(3, 'c')]]
    """
    if max_len is None:
        max_len = max((len(p) for p in pieces), default=1)
    out = []
    for start in range(len(word)):
        found = [(end, word[start:end]) for end in range(start + 1, min(len(word), start + max_len) + 1)
                 if word[start:end] in pieces]
        if not found or found[0][0] != start + 1:
            found.insert(0, (start + 1, None))
        out.append(found)
    return out


def unk_score(pieces):
    return min(pieces.values(), default=0.0) - UNK_PENALTY


def viterbi(word, pieces, exclude_whole=False):
    """The best segmentation of ``word`` and its score. Ties keep the path found first
    (starts left to right, shorter pieces first). ``exclude_whole``: not the piece that is
    the whole word (used by pruning). Unknown characters come out as None."""
    unk = unk_score(pieces)
    best = [(-math.inf, None, None)] * (len(word) + 1)  # (score, start of last piece, piece)
    best[0] = (0.0, None, None)
    for start, edges in enumerate(lattice(word, pieces)):
        if best[start][0] == -math.inf:
            continue
        for end, piece in edges:
            if exclude_whole and start == 0 and end == len(word):
                continue
            score = best[start][0] + (pieces[piece] if piece is not None else unk)
            if score > best[end][0]:
                best[end] = (score, start, piece)
    path, pos = [], len(word)
    while pos > 0 and best[pos][1] is not None:
        path.append(best[pos][2])
        pos = best[pos][1]
    return path[::-1], best[len(word)][0]


def all_segmentations(word, pieces):
    """Every segmentation with its score (exponential: for checking on short words)."""
    unk = unk_score(pieces)
    edges = lattice(word, pieces)
    out = []

    def walk(pos, path, score):
        if pos == len(word):
            out.append((path, score))
            return
        for end, piece in edges[pos]:
            walk(end, path + [piece], score + (pieces[piece] if piece is not None else unk))

    walk(0, [], 0.0)
    return sorted(out, key=lambda x: -x[1])


def forward_backward(word, pieces):
    """log P(word) (summed over all segmentations) and the expected number of times each
    piece is used, given the word: P(piece at [i, j)) = alpha(i) * p(piece) * beta(j) / P(word).

    >>> logp, expected = forward_backward("ab", {"a": math.log(0.5), "b": math.log(0.5), "ab": math.log(0.25)})
    >>> round(math.exp(logp), 4), {p: round(e, 4) for p, e in expected.items()}
    (0.5, {'a': 0.5, 'ab': 0.5, 'b': 0.5})
    """
    unk = unk_score(pieces)
    edges = lattice(word, pieces)
    n = len(word)
    alpha = [-math.inf] * (n + 1)  # log P(word[:i])
    alpha[0] = 0.0
    for start in range(n):
        for end, piece in edges[start]:
            alpha[end] = log_add(alpha[end], alpha[start] + (pieces[piece] if piece is not None else unk))
    beta = [-math.inf] * (n + 1)  # log P(word[i:])
    beta[n] = 0.0
    for start in reversed(range(n)):
        for end, piece in edges[start]:
            beta[start] = log_add(beta[start], (pieces[piece] if piece is not None else unk) + beta[end])
    expected = {}
    for start in range(n):
        for end, piece in edges[start]:
            if piece is not None:
                p = math.exp(alpha[start] + pieces[piece] + beta[end] - alpha[n])
                expected[piece] = expected.get(piece, 0.0) + p
    return alpha[n], expected


# ------------------------------------------------------------------------------ seeds


def required_chars(words, coverage):
    """The most frequent characters, until they make up ``coverage`` of the text."""
    counts = {}
    for w, n in words.items():
        for c in w:
            counts[c] = counts.get(c, 0) + n
    total = sum(counts.values())
    chosen, covered = [], 0
    for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if coverage < 1.0 and covered / total >= coverage:
            break
        covered += n
        chosen.append(c)
    return sorted(chosen), counts


def valid_prefix(s, classes=None, split_digits=False):
    """Length of the longest prefix of ``s`` that may be a piece: no unknown character, ``▁``
    only first, never two script classes (``classes``: char -> class, 0 joins anything), with
    ``split_digits`` a digit only alone."""
    prev = 0
    for i, c in enumerate(s):
        if c == UNKNOWN_CHAR:
            return i
        if c == WS:
            if i > 0:
                return i
            continue
        if split_digits and c.isascii() and c.isdigit():
            return 1 if i == 0 else i
        cls = (classes or {}).get(c, 0)
        if cls and prev and cls != prev:
            return i
        if cls:
            prev = cls
    return len(s)


def is_node(occurrences, words, length, max_len):
    """A substring is a node of the (depth-limited) suffix tree of the words when it reaches
    the depth limit, or ends a word somewhere, or is followed by two different characters."""
    if length == max_len:
        return True
    following = set()
    for w, i in occurrences:
        if i + length == len(words[w]):
            return True
        following.add(words[w][i + length])
    return len(following) > 1


def seed_pieces(words, *, max_len=16, seed_size=1_000_000, coverage=1.0, classes=None, split_digits=False):
    """Seed pieces with their frequencies: the required characters (code point order), then
    the candidates with the highest frequency * length (ties: string order).

    A candidate is a suffix-tree node seen at least twice (counting word frequency), cut to its
    longest valid prefix, which must be longer than the node's parent (its longest proper prefix
    that is a node) and at least two characters."""
    chars, char_counts = required_chars(words, coverage)
    keep = set(chars)
    # Characters left out by the coverage all look the same: they never form pieces.
    texts = [("".join(c if c in keep else UNKNOWN_CHAR for c in w), n) for w, n in sorted(words.items())]
    strings = [t for t, _ in texts]
    occurrences = {}
    for w, (t, _) in enumerate(texts):
        for i in range(len(t)):
            for j in range(i + 1, min(len(t), i + max_len) + 1):
                occurrences.setdefault(t[i:j], []).append((w, i))
    nodes = {s for s, occ in occurrences.items() if is_node(occ, strings, len(s), max_len)}
    candidates = []
    for s in nodes:
        parent = max((k for k in range(1, len(s)) if s[:k] in nodes), default=0)
        t = s[:valid_prefix(s, classes, split_digits)]
        freq = sum(texts[w][1] for w, _ in occurrences[s])
        if len(t) > parent and len(t) >= 2 and freq >= 2:
            candidates.append((t, freq))
    candidates.sort(key=lambda x: (-x[1] * len(x[0]), x[0]))
    candidates = candidates[:max(0, seed_size - len(chars))]
    return [(c, char_counts[c]) for c in chars] + candidates


# ------------------------------------------------------------------------------ training


def em_step(words, pieces, required):
    """One EM iteration: expected counts (E), then drop the pieces expected fewer than 0.5
    times (never a required character) and score the rest digamma(count) - digamma(total) (M).
    Returns the new pieces and the average negative log-likelihood per word."""
    expected = dict.fromkeys(pieces, 0.0)
    loglik = 0.0
    for w, n in sorted(words.items()):
        logp, e = forward_backward(w, pieces)
        loglik += n * logp
        for p, x in e.items():
            expected[p] += n * x
    counts = {}
    for p in pieces:
        if p in required:
            counts[p] = max(expected[p], MIN_EXPECTED)
        elif expected[p] >= MIN_EXPECTED:
            counts[p] = expected[p]
    total = digamma(sum(counts.values()))
    return {p: digamma(c) - total for p, c in counts.items()}, -loglik / sum(words.values())


def prune(words, pieces, required, *, shrinking_factor, stop_size):
    """Removes the pieces whose loss is smallest, keeping max(stop_size, shrinking_factor * size).

    A piece's replacement is the best segmentation of its own string without it. The loss of
    removing the piece: the share of words using it (Viterbi count / number of words) times
    the drop in log probability when its count moves to the replacement's pieces. A piece
    whose replacement scores higher, or that no Viterbi path uses, goes first."""
    freq = dict.fromkeys(pieces, 0.0)
    for w, n in sorted(words.items()):
        for p in viterbi(w, pieces)[0]:
            if p is not None:
                freq[p] += n
    total = sum(freq.values())
    num_words = sum(words.values())
    kept, candidates = [], []
    for p, score in pieces.items():
        if p in required:
            kept.append(p)
            continue
        alt, alt_score = viterbi(p, pieces, exclude_whole=True)
        if alt_score > score or not alt or freq[p] == 0:
            continue
        f = freq[p]
        log_sum_alt = math.log(total + f * (len(alt) - 1))
        logprob_alt = sum(math.log(freq[a] + f) - log_sum_alt for a in alt)
        loss = f / num_words * (math.log(f) - math.log(total) - logprob_alt)
        candidates.append((loss, p))
    order = {p: i for i, p in enumerate(pieces)}
    candidates.sort(key=lambda x: (-x[0], order[x[1]]))
    target = max(stop_size, int(shrinking_factor * len(pieces)))
    kept += [p for _, p in candidates[:max(0, target - len(kept))]]
    keep = set(kept)
    return {p: s for p, s in pieces.items() if p in keep}


def train_unigram(words, vocab_size, *, stop_size=None, coverage=1.0, max_len=16, seed_size=1_000_000,
                  shrinking_factor=0.75, num_sub_iterations=2, classes=None, split_digits=False, trace=None):
    """Trains on ``{word: count}``; returns ``[(piece, score)]``, highest score first, at most
    ``vocab_size`` pieces (the required characters always among them). ``trace``: a list that
    receives the objective of every EM iteration."""
    seeds = seed_pieces(words, max_len=max_len, seed_size=seed_size, coverage=coverage, classes=classes,
                        split_digits=split_digits)
    chars, _ = required_chars(words, coverage)
    required = set(chars)
    # Characters outside the coverage are unknown: one symbol that no piece holds.
    masked = {}
    for w, n in words.items():
        m = "".join(c if c in required else UNKNOWN_CHAR for c in w)
        masked[m] = masked.get(m, 0) + n
    words = masked
    log_total = math.log(sum(f for _, f in seeds))
    pieces = {p: math.log(f) - log_total for p, f in seeds}
    stop_size = vocab_size if stop_size is None else stop_size
    while True:
        for _ in range(num_sub_iterations):
            pieces, objective = em_step(words, pieces, required)
            if trace is not None:
                trace.append(objective)
        if len(pieces) <= stop_size:
            break
        smaller = prune(words, pieces, required, shrinking_factor=shrinking_factor, stop_size=stop_size)
        if len(smaller) == len(pieces):
            break
        pieces = smaller
    others = sorted(((s, p) for p, s in pieces.items() if p not in required), key=lambda x: (-x[0], x[1]))
    final = [(s, p) for p, s in pieces.items() if p in required] + others[:max(0, vocab_size - len(required))]
    return [(p, s) for s, p in sorted(final, key=lambda x: (-x[0], x[1]))]
