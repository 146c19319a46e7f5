"""Textbook WordPiece: training by likelihood and greedy longest-match-first encoding.

Training starts from the characters of each word: the first as itself, the others with the
continuation prefix ``##`` (``"low"`` -> ``l ##o ##w``). Each step counts, over the corpus
(weighted by word frequency), every symbol and every adjacent pair of symbols, and merges the
pair with the highest

    score(a, b) = count(ab) / (count(a) * count(b))

which is how much more often the two appear together than if they were independent (the gain
in likelihood of a unigram model, Schuster & Nakajima 2012). Unlike BPE's raw pair count, this
prefers pairs whose parts are rare on their own. The new token is ``a`` followed by ``b``
without its prefix (``##o`` + ``##w`` -> ``##ow``); two pairs that spell the same string give
the same token.

Encoding takes, at each position of a word, the longest token in the vocabulary (with the prefix
after the first piece); a word with no full segmentation, or too long, becomes ``[UNK]``.

``criterion="likelihood"`` scores ``count(ab) * log(count(ab) * N / (count(a) * count(b)))`` instead
(N: the number of symbols before training), the first-order gain in log-likelihood itself: the
ratio weighted by how often the merge applies.

This follows ``rust/train/wordpiece.rs`` rule for rule (ids, tie rule), so both give the same
vocabulary. It imports nothing else from toksmith.

>>> tokens = train_wordpiece({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, max_tokens=20)
>>> tokens[14:]
['##gs', 'pu', 'hu', 'bu', 'hugs', 'hug']
>>> encode_word("hugs", {t: i for i, t in enumerate(tokens)})
['hugs']
"""
import math


def alphabet(words, limit=None):
    """The characters of the words, the ``limit`` most frequent ones if given, in code point order."""
    counts = {}
    for w, n in words.items():
        for c in w:
            counts[c] = counts.get(c, 0) + n
    chosen = sorted(counts, key=lambda c: (-counts[c], c))
    return sorted(chosen[:limit] if limit is not None else chosen)


def gain(count, left, right, log_total):
    """The likelihood criterion's score."""
    return count * (math.log(count) + log_total - math.log(left) - math.log(right))


def better(x, y):
    """Whether candidate ``x`` beats ``y``; each is (gain, pair count, left count, right count,
    pair). Highest gain (0 for the ratio criterion), then highest ratio (compared as fractions,
    exactly), then highest pair count, then the smaller (left id, right id)."""
    gx, cx, ax, bx, px = x
    gy, cy, ay, by, py = y
    if gx != gy:
        return gx > gy
    if cx * ay * by != cy * ax * bx:
        return cx * ay * by > cy * ax * bx
    if cx != cy:
        return cx > cy
    return px < py


def train_wordpiece(words, max_tokens, *, min_frequency=1, limit_alphabet=None, prefix="##", criterion="ratio"):
    """Trains on ``{word: count}``; returns the tokens in id order (alphabet, then the same
    characters with the prefix, then merged tokens as they are created), at most ``max_tokens``.
    Words holding a character outside the alphabet are left out."""
    chars = alphabet(words, limit_alphabet)
    tokens = chars + [prefix + c for c in chars]
    if len(tokens) > max_tokens:
        raise ValueError(f"{len(chars)} characters need {len(tokens)} tokens, more than {max_tokens}")
    id_of = {t: i for i, t in enumerate(tokens)}
    corpus = []  # [symbol ids, count]
    for w, n in sorted(words.items()):
        if w and all(c in id_of for c in w):
            corpus.append([[id_of[w[0]]] + [id_of[prefix + c] for c in w[1:]], n])
    log_total = math.log(max(1, sum(len(ids) * n for ids, n in corpus)))
    while len(tokens) < max_tokens:
        units, pairs = {}, {}
        for ids, n in corpus:
            for s in ids:
                units[s] = units.get(s, 0) + n
            for pair in zip(ids, ids[1:]):
                pairs[pair] = pairs.get(pair, 0) + n
        best = None
        for pair, count in pairs.items():
            if count < min_frequency:
                continue
            left, right = units[pair[0]], units[pair[1]]
            g = gain(count, left, right, log_total) if criterion == "likelihood" else 0.0
            candidate = (g, count, left, right, pair)
            if best is None or better(candidate, best):
                best = candidate
        if best is None:
            break
        a, b = best[4]
        right = tokens[b][len(prefix):] if tokens[b].startswith(prefix) else tokens[b]
        merged = tokens[a] + right
        if merged not in id_of:
            id_of[merged] = len(tokens)
            tokens.append(merged)
        new = id_of[merged]
        for entry in corpus:
            ids, out, i = entry[0], [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == (a, b):
                    out.append(new)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            entry[0] = out
    return tokens


def encode_word(word, vocab, *, unk="[UNK]", prefix="##", max_input_chars_per_word=100):
    """Greedy longest-match-first: the tokens of one word, or ``[unk]``."""
    if len(word) > max_input_chars_per_word:
        return [unk]
    out, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = (prefix if start > 0 else "") + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            return [unk]
        out.append(piece)
        start = end
    return out
