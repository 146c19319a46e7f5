"""llama.cpp's pre-tokenizers: how it splits text into words before BPE, per
``tokenizer.ggml.pre`` value of a GGUF file.

llama.cpp applies a *list* of regexes in turn, each splitting every piece the previous ones
left into its matches and the text between them. Most regexes run on a "collapsed" copy of the
text where every non-ASCII character is replaced by one code standing for its Unicode
category (and non-ASCII whitespace by a vertical tab), ``\\p{L}`` and friends becoming classes
of those codes plus their ASCII members; the GPT-2, Llama 3 and Qwen 2 regexes have hand-written
matchers instead. Both are reproduced here, with llama.cpp's own character categories (Unicode
15.1: Python's ``unicodedata`` plus the code points assigned since its version).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._char_table import TABLE_LIMIT, CharTable
from ..errors import EncodeError, FormatError

# Character categories as llama.cpp flags them (one general category each, plus whitespace).
UNDEFINED, NUMBER, LETTER, SEPARATOR, MARK, PUNCTUATION, SYMBOL, CONTROL = 1, 2, 4, 8, 16, 32, 64, 128
WHITESPACE = 256
_BY_CATEGORY = {"C": CONTROL, "L": LETTER, "M": MARK, "N": NUMBER, "P": PUNCTUATION, "S": SYMBOL, "Z": SEPARATOR}
# llama.cpp's whitespace set.
_WHITESPACE = frozenset([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
                         0x202F, 0x205F, 0x3000])
# Code points assigned in Unicode 15.0 and 15.1 (llama.cpp's tables are 15.1; Python 3.11's are 14.0).
_UNICODE_15 = (
    (0x00CF3, 0x00CF3, 'M'), (0x00ECE, 0x00ECE, 'M'), (0x02FFC, 0x02FFF, 'S'), (0x031EF, 0x031EF, 'S'),
    (0x10EFD, 0x10EFF, 'M'), (0x1123F, 0x11240, 'L'), (0x11241, 0x11241, 'M'), (0x11B00, 0x11B09, 'P'),
    (0x11F00, 0x11F01, 'M'), (0x11F02, 0x11F02, 'L'), (0x11F03, 0x11F03, 'M'), (0x11F04, 0x11F10, 'L'),
    (0x11F12, 0x11F33, 'L'), (0x11F34, 0x11F3A, 'M'), (0x11F3E, 0x11F42, 'M'), (0x11F43, 0x11F4F, 'P'),
    (0x11F50, 0x11F59, 'N'), (0x1342F, 0x1342F, 'L'), (0x13439, 0x1343F, 'C'), (0x13440, 0x13440, 'M'),
    (0x13441, 0x13446, 'L'), (0x13447, 0x13455, 'M'), (0x1B132, 0x1B132, 'L'), (0x1B155, 0x1B155, 'L'),
    (0x1D2C0, 0x1D2D3, 'N'), (0x1DF25, 0x1DF2A, 'L'), (0x1E030, 0x1E06D, 'L'), (0x1E08F, 0x1E08F, 'M'),
    (0x1E4D0, 0x1E4EB, 'L'), (0x1E4EC, 0x1E4EF, 'M'), (0x1E4F0, 0x1E4F9, 'N'), (0x1F6DC, 0x1F6DC, 'S'),
    (0x1F774, 0x1F776, 'S'), (0x1F77B, 0x1F77F, 'S'), (0x1F7D9, 0x1F7D9, 'S'), (0x1FA75, 0x1FA77, 'S'),
    (0x1FA87, 0x1FA88, 'S'), (0x1FAAD, 0x1FAAF, 'S'), (0x1FABB, 0x1FABD, 'S'), (0x1FABF, 0x1FABF, 'S'),
    (0x1FACE, 0x1FACF, 'S'), (0x1FADA, 0x1FADB, 'S'), (0x1FAE8, 0x1FAE8, 'S'), (0x1FAF7, 0x1FAF8, 'S'),
    (0x2B739, 0x2B739, 'L'), (0x2EBF0, 0x2EE5D, 'L'), (0x31350, 0x323AF, 'L'),
)

_flag_cache: dict[str, int] = {}


def flags(char: str) -> int:
    """llama.cpp's flags of one character: its category, plus WHITESPACE."""
    f = _flag_cache.get(char)
    if f is None:
        cat = unicodedata.category(char)
        if cat == "Cn":
            cp = ord(char)
            f = next((_BY_CATEGORY[c] for lo, hi, c in _UNICODE_15 if lo <= cp <= hi), UNDEFINED)
        else:
            f = _BY_CATEGORY[cat[0]]
        if ord(char) in _WHITESPACE:
            f |= WHITESPACE
        if len(_flag_cache) < TABLE_LIMIT:  # (see CharTable)
            _flag_cache[char] = f
    return f


# The regexes of each llama.cpp pre-tokenizer type (facts of llama.cpp's llm_tokenizer_bpe).
# Types llama.cpp handles with code of their own that is not reproduced here are left out.
REGEXES: dict[str, tuple[str, ...]] = {
    'llama3': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'jais2': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",),
    'dbrx': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'smaug': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'deepseek_llm': ('[\r\n]', '\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+', '\\s?[!-/:-~！-／：-～‘-‟\u3000-。]+', '\\s+$', '[一-龥ࠀ-一가-\ud7ff]+', '\\p{N}+',),
    'deepseek3_llm': ('\\p{N}{1,3}', '[一-龥\u3040-ゟ゠-ヿ]+', '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',),
    'hunyuan_dense': ('\\p{N}{1,3}', '[一-龥\u3040-ゟ゠-ヿ]+', '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',),
    'joyai_llm': ('\\p{N}{1,3}', '[一-龥\u3040-ゟ゠-ヿ]+', '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',),
    'hy_v4': ('\\p{N}{1,3}', '[一-龥\u3040-ゟ゠-ヿ]+', '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',),
    'spark2_5': ('\\p{N}{1,3}', '[一-龥\u3040-ゟ゠-ヿ]+', '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+', '\\p{N}',),
    'youtu': ('[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥\u3040-ゟ゠-ヿ]+', "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'deepseek_coder': ('[\r\n]', '\\s?\\p{L}+', '\\s?\\p{P}+', '[一-龥ࠀ-一가-\ud7ff]+', '\\p{N}',),
    'falcon': ('[\\p{P}\\$\\+<=>\\^~\\|`]+', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", '[0-9][0-9][0-9]',),
    'starcoder': ('\\p{N}', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'refact': ('\\p{N}', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'command_r': ('\\p{N}', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'smollm': ('\\p{N}', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'codeshell': ('\\p{N}', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'exaone': ('\\p{N}', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'minerva': ('\\p{N}', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'mellum2': ('\\p{N}', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'gpt2': ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'mpt': ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'olmo': ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'jais': ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'trillion': ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'granite_docling': ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'stablelm2': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'qwen2': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'hunyuan': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'solar_open': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'poro': (' ?[^(\\s|.,!?…。，、।۔،)]+',),
    'bloom': (' ?[^(\\s|.,!?…。，、।۔،)]+',),
    'gpt3_finnish': (' ?[^(\\s|.,!?…。，、।۔،)]+',),
    'chatglm4': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'viking': (' ?[^(\\s|.,!?…。，、।۔،)]+', '\\p{N}',),
    'tekken': ('[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',),
    'chameleon': ('<sentinel:[0-9]+>', '(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z', '([\\t\\n]|    |  )', '\\p{N}', '[\\p{P}!-/:-@\\[-`{-~]', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    'gpt4o': ("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'minimax_m2': ("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'granite_emb_multi': ("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'bailingmoe': ("'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",),
    'seed_coder': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'ufakzeka': ('[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',),
    'grok_2': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'laguna': ('[^\\n]+|[\\n]+', "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'exaone_moe': ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",),
    'gemma4': ('[^\\n]+|[\\n]+',),  # raw UTF-8
    'sarvam_moe': ('[^\\n]+|[\\n]+',),  # raw UTF-8
    'minicpm5': ('\\p{N}{1,3}', "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",),
    'default': ('[\\p{P}\\$\\+<=>\\^~\\|]+', "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", '\\p{N}+', '[0-9][0-9][0-9]',),
}

# Types whose words stay raw UTF-8 (with ▁ for spaces) instead of GPT-2's byte characters.
RAW_UTF8 = frozenset({"gemma4", "sarvam_moe"})


@dataclass(frozen=True)
class PreOptions:
    """What a ``tokenizer.ggml.pre`` value sets besides the regexes (llama.cpp's defaults for BPE)."""

    type: str
    clean_spaces: bool = True
    ignore_merges: bool = False
    add_bos: bool | None = None  # None: llama.cpp leaves it to the file
    escape_whitespaces: bool = False
    add_sep: bool = False
    no_bos_token: bool = False


def _names(type_: str, names: str, **options) -> dict[str, PreOptions]:
    return {n: PreOptions(type_, **options) for n in names.split()}


#: ``tokenizer.ggml.pre`` value -> pre-tokenizer type and options, as llama.cpp reads them.
PRE_NAMES: dict[str, PreOptions] = {
    **_names("default", "default"),
    **_names("llama3", "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
             ignore_merges=True, add_bos=True),
    **_names("deepseek_llm", "deepseek-llm", clean_spaces=False),
    **_names("deepseek_coder", "deepseek-coder", clean_spaces=False),
    **_names("deepseek3_llm", "deepseek-v3", clean_spaces=False),
    **_names("spark2_5", "spark2_5", clean_spaces=False),
    **_names("youtu", "youtu", clean_spaces=False, ignore_merges=True),
    **_names("falcon", "falcon"),
    **_names("mpt", "mpt"),
    **_names("starcoder", "starcoder"),
    **_names("gpt2", "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert exaone4"),
    **_names("jais2", "jais-2"),
    **_names("gemma4", "gemma4 granite-embed-multi-311m", escape_whitespaces=True),
    **_names("sarvam_moe", "sarvam-moe", escape_whitespaces=True, clean_spaces=False),
    **_names("gpt2", "jina-v1-en jina-v2-code roberta-bpe", add_sep=True),
    **_names("refact", "refact"),
    **_names("command_r", "command-r", clean_spaces=False),
    **_names("qwen2", "qwen2 deepseek-r1-qwen kormo f2llmv2", clean_spaces=False),
    **_names("stablelm2", "stablelm2"),
    **_names("olmo", "olmo"),
    **_names("dbrx", "dbrx"),
    **_names("smaug", "smaug-bpe"),
    **_names("poro", "poro-chat", clean_spaces=False),
    **_names("chatglm4", "chatglm-bpe", no_bos_token=True),
    **_names("chatglm4", "glm4 glm5", no_bos_token=True, ignore_merges=True),
    **_names("viking", "viking", clean_spaces=False),
    **_names("jais", "jais"),
    **_names("tekken", "tekken", clean_spaces=False, ignore_merges=True, add_bos=True),
    **_names("smollm", "smollm", clean_spaces=False),
    **_names("codeshell", "codeshell"),
    **_names("bloom", "bloom"),
    **_names("gpt3_finnish", "gpt3-finnish"),
    **_names("exaone", "exaone"),
    **_names("exaone_moe", "exaone-moe"),
    **_names("chameleon", "chameleon", add_bos=True, clean_spaces=False),
    **_names("minerva", "minerva-7b"),
    **_names("qwen2", "megrez"),
    **_names("gpt4o", "gpt-4o llama4 kanana2 talkie", clean_spaces=False),
    **_names("granite_emb_multi", "granite-embed-multi-97m", clean_spaces=False, ignore_merges=True),
    **_names("trillion", "trillion", clean_spaces=False),
    **_names("granite_docling", "granite-docling", clean_spaces=False),
    **_names("bailingmoe", "bailingmoe bailingmoe2 llada-moe", clean_spaces=False),
    **_names("seed_coder", "seed-coder", clean_spaces=False),
    **_names("hunyuan", "hunyuan", clean_spaces=False),
    **_names("hunyuan_dense", "hunyuan-dense", clean_spaces=False),
    **_names("hy_v4", "hy_v4", clean_spaces=False),
    **_names("joyai_llm", "joyai-llm", clean_spaces=False),
    **_names("ufakzeka", "ufakzeka", clean_spaces=False),
    **_names("grok_2", "grok-2", clean_spaces=False),
    **_names("laguna", "laguna", clean_spaces=False),
    **_names("minimax_m2", "minimax-m2", clean_spaces=False),
    **_names("solar_open", "solar-open", clean_spaces=False),
    **_names("mellum2", "mellum2"),
    **_names("minicpm5", "minicpm5", ignore_merges=True),
}

#: Values llama.cpp knows but whose splitting is its own code, not reproduced here.
UNSUPPORTED = frozenset({"kimi-k2", "afmoe", "tiny_aya", "cohere2moe", "superbpe", "qwen35", "whitespace"})


def pre_options(name: str | None, source: str) -> PreOptions:
    """The options of a ``tokenizer.ggml.pre`` value; FormatError for one toksmith cannot reproduce."""
    if name is None or name == "":
        return PRE_NAMES["default"]
    if name in UNSUPPORTED:
        raise FormatError(f"{source}: tokenizer.ggml.pre {name!r} is not supported (llama.cpp splits it with "
                          f"code of its own that toksmith does not reproduce)")
    options = PRE_NAMES.get(name)
    if options is None:
        raise FormatError(f"{source}: unknown tokenizer.ggml.pre {name!r}; known values: {', '.join(sorted(PRE_NAMES))}")
    return options


# ---------------------------------------------------------------------------- splitting


def split(text: str, regexes: Sequence[str]) -> list[str]:
    """Splits ``text`` into words as llama.cpp's ``unicode_regex_split`` does (without the
    byte encoding): each regex in turn splits every piece into matches and the text between.
    In Rust (`rust_splitter`) where all of the regexes translate; else `split_in_python`."""
    splitter = rust_splitter(regexes)
    if splitter is not None and text:
        spaced, collapsed = copies(text, regexes)
        try:
            b = splitter.split(spaced, collapsed)
        except (UnicodeEncodeError, EncodeError):
            # Lone surrogates (no UTF-8 for Rust), or a regex with lookaround over a run of
            # about a million characters (fancy-regex's backtracking stack): Python's `re`.
            return split_in_python(text, regexes)
        return [text[b[i]:b[i + 1]] for i in range(0, len(b), 2)]
    return split_in_python(text, regexes)


def copies(text: str, regexes: Sequence[str]) -> tuple[str, str]:
    """The two copies of ``text`` a `rust_splitter` works on: non-ASCII whitespace as \\v (for
    regexes without categories), and the collapsed text (for the others and the hand-written
    matchers). One that no regex needs is the other, to save making it."""
    if text.isascii():
        return text, text
    need_spaced = any(regex not in _CUSTOM and not _compile(regex)[1] for regex in regexes)
    # (The newline splitter needs neither: it only looks for "\n".)
    need_collapsed = any(_CUSTOM_KINDS[regex] != "newlines" if regex in _CUSTOM else _compile(regex)[1] for regex in regexes)
    collapsed = _collapse(text) if need_collapsed else None
    spaced = _spaces_to_vt(text) if need_spaced else None
    return spaced or collapsed or text, collapsed or spaced or text


def split_in_python(text: str, regexes: Sequence[str]) -> list[str]:
    """`split` in Python: the reference the Rust splitter is tested against."""
    if not text:
        return []
    bounds = [(0, len(text))]
    collapsed: str | None = None
    spaced: str | None = None
    for regex in regexes:
        custom = _CUSTOM.get(regex)
        if custom is not None:
            bounds = [piece for start, end in bounds for piece in custom(text, start, end)]
            continue
        pattern, use_collapsed = _compile(regex)
        if use_collapsed:
            if collapsed is None:
                collapsed = _collapse(text)
            subject = collapsed
        else:
            if spaced is None:  # (made once for all the regexes that need it)
                spaced = _spaces_to_vt(text)
            subject = spaced
        new = []
        for start, end in bounds:
            prev = start
            for m in pattern.finditer(subject[start:end]):
                s, e = start + m.start(), start + m.end()
                if s > prev:
                    new.append((prev, s))
                if e > s:
                    new.append((s, e))
                prev = e
            if prev < end:
                new.append((prev, end))
        bounds = new
    return [text[s:e] for s, e in bounds]


# Codes of the collapsed text, and the ASCII members of each class.
_CODES = {NUMBER: "\xd1", LETTER: "\xd2", PUNCTUATION: "\xd3", MARK: "\xd4", SYMBOL: "\xd5"}
_ASCII = {NUMBER: "0-9", LETTER: "A-Za-z", PUNCTUATION: r"!-#%-*,-/:-;?-@\[-\]_\{\}", MARK: "",
          SYMBOL: r"\$\+<->\^`\|~"}
_CLASSES = {"N": NUMBER, "L": LETTER, "P": PUNCTUATION, "M": MARK, "S": SYMBOL,
            "Lu": LETTER, "Ll": LETTER, "Lt": LETTER, "Lm": LETTER, "Lo": LETTER}


def _collapsed_char(cp: int) -> str:
    """ASCII stays, other whitespace -> \\v, other characters -> the code of their category
    (\\xd0 for categories no regex names)."""
    if cp < 0x80:
        return chr(cp)
    f = flags(chr(cp))
    return "\x0b" if f & WHITESPACE else _CODES.get(f & 0xFF, "\xd0")


_COLLAPSE = CharTable(_collapsed_char)


def _collapse(text: str) -> str:
    return text.translate(_COLLAPSE)


def _spaces_to_vt(text: str) -> str:
    """Non-ASCII whitespace as \\v, so that ``\\s`` matches it (llama.cpp does this for regexes
    without categories)."""
    if text.isascii():
        return text
    return text.translate(_SPACES_TO_VT)


_SPACES_TO_VT = CharTable(lambda cp: "\x0b" if cp > 0x7F and flags(chr(cp)) & WHITESPACE else chr(cp))


_compiled: dict[str, tuple[re.Pattern[str], bool]] = {}
_PROPERTY = re.compile(r"\\p\{(\w+)\}")


def _compile(regex: str) -> tuple[re.Pattern[str], bool]:
    """The Python form of one of llama.cpp's regexes, and whether it runs on the collapsed text.
    ``\\s``/``\\d`` are ASCII there (C++ std::regex), hence re.ASCII."""
    if regex in _compiled:
        return _compiled[regex]
    names = _PROPERTY.findall(regex)
    if names and any(n not in _CLASSES for n in names):
        raise FormatError(f"pre-tokenizer regex uses an unsupported class: {regex!r}")
    use_collapsed = bool(names)
    if use_collapsed:
        if not regex.isascii():
            raise FormatError(f"pre-tokenizer regex mixes categories and non-ASCII characters: {regex!r}")
        out, i, inside = [], 0, False
        while i < len(regex):
            c = regex[i]
            if c == "[" and (i == 0 or regex[i - 1] != "\\"):
                inside = True
            elif c == "]" and inside and regex[i - 1] != "\\":
                inside = False
            m = _PROPERTY.match(regex, i)
            if m:
                flag = _CLASSES[m.group(1)]
                members = _CODES[flag] + _ASCII[flag]
                out.append(members if inside else f"[{members}]")
                i = m.end()
                continue
            out.append(c)
            i += 1
        regex_py = "".join(out)
    else:
        regex_py = regex
    try:
        pattern = re.compile(regex_py, re.ASCII)
    except re.error as e:
        raise FormatError(f"pre-tokenizer regex {regex!r} does not compile: {e}") from None
    _compiled[regex] = (pattern, use_collapsed)
    return _compiled[regex]


# ---------------------------------------------------------------------------- hand-written matchers
# llama.cpp matches these regexes with code of its own, whose corner cases the regexes do not
# quite say (e.g. an unassigned character counts as "other", text ends count as nothing).


def _gpt2(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"""
    def f(i: int) -> int:
        return flags(text[i]) if start <= i < end else 0

    out, pos = [], start
    while pos < end:
        c = text[pos]
        if c == "'" and pos + 1 < end:
            n = text[pos + 1]
            if n in "stmd":
                out.append((pos, pos + 2))
                pos += 2
                continue
            if pos + 2 < end and n + text[pos + 2] in ("re", "ve", "ll"):
                out.append((pos, pos + 3))
                pos += 3
                continue
        f2 = f(pos + 1) if c == " " else f(pos)
        if f2 & (LETTER | NUMBER):
            kind = f2 & (LETTER | NUMBER)
            s = pos
            pos += c == " "
            while f(pos) & kind:
                pos += 1
            out.append((s, pos))
            continue
        if f2 and not f2 & (WHITESPACE | LETTER | NUMBER):
            s = pos
            pos += c == " "
            while (g := f(pos)) and not g & (WHITESPACE | LETTER | NUMBER):
                pos += 1
            out.append((s, pos))
            continue
        n_ws = 0
        while f(pos + n_ws) & WHITESPACE:
            n_ws += 1
        if n_ws > 1 and pos + n_ws < end:  # \s+(?!\S): leave the last space to the next word
            out.append((pos, pos + n_ws - 1))
            pos += n_ws - 1
        elif n_ws > 0:
            out.append((pos, pos + n_ws))
            pos += n_ws
        else:
            out.append((pos, pos + 1))
            pos += 1
    return out


def _llama3_like(max_digits: int) -> Callable[[str, int, int], list[tuple[int, int]]]:
    """Llama 3 (digits in threes) and Qwen 2 (single digits):
    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,k}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"""

    def split_piece(text: str, start: int, end: int) -> list[tuple[int, int]]:
        def f(i: int) -> int:
            return flags(text[i]) if start <= i < end else 0

        def ch(i: int) -> str:
            return text[i] if start <= i < end else ""

        out, pos = [], start
        while pos < end:
            c = text[pos]
            fc = f(pos)
            if c == "'" and pos + 1 < end:
                n = _lower(text[pos + 1])
                if n in ("s", "t", "m", "d"):
                    out.append((pos, pos + 2))
                    pos += 2
                    continue
                if pos + 2 < end and n + _lower(text[pos + 2]) in ("re", "ve", "ll"):
                    out.append((pos, pos + 3))
                    pos += 3
                    continue
            if not (c in "\r\n" or fc & NUMBER) and (fc & LETTER or f(pos + 1) & LETTER):
                s = pos
                pos += 1
                while f(pos) & LETTER:
                    pos += 1
                out.append((s, pos))
                continue
            if fc & NUMBER:
                s = pos
                while f(pos) & NUMBER and pos - s < max_digits:
                    pos += 1
                out.append((s, pos))
                continue
            f2 = f(pos + 1) if c == " " else fc
            if fc and not f2 & (WHITESPACE | LETTER | NUMBER):
                s = pos
                pos += c == " "
                while (g := f(pos)) and not g & (WHITESPACE | LETTER | NUMBER):
                    pos += 1
                while ch(pos) in ("\r", "\n"):
                    pos += 1
                out.append((s, pos))
                continue
            n_ws, last_newline = 0, 0
            while f(pos + n_ws) & WHITESPACE:
                if text[pos + n_ws] in "\r\n":
                    last_newline = pos + n_ws + 1
                n_ws += 1
            if last_newline:  # \s*[\r\n]+
                out.append((pos, last_newline))
                pos = last_newline
            elif n_ws > 1 and pos + n_ws < end:
                out.append((pos, pos + n_ws - 1))
                pos += n_ws - 1
            elif n_ws > 0:
                out.append((pos, pos + n_ws))
                pos += n_ws
            else:
                out.append((pos, pos + 1))
                pos += 1
        return out

    return split_piece


def _lower(c: str) -> str:
    low = c.lower()
    return low if len(low) == 1 else c


def _newlines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """[^\\n]+|[\\n]+: runs of newlines and runs of everything else."""
    return [(m.start() + start, m.end() + start) for m in re.finditer(r"\n+|[^\n]+", text[start:end])]


_GPT2_RE = REGEXES["gpt2"][0]
_CUSTOM: dict[str, Callable[[str, int, int], list[tuple[int, int]]]] = {
    _GPT2_RE: _gpt2,
    REGEXES["llama3"][0]: _llama3_like(3),
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": _llama3_like(3),
    REGEXES["qwen2"][0]: _llama3_like(1),
    "[^\\n]+|[\\n]+": _newlines,
}
# The Rust splitter's names for the hand-written matchers (`rust/pretokenize/llama.rs`).
_CUSTOM_KINDS: dict[str, str] = {}
_CUSTOM_KINDS.update({regex: {_gpt2: "gpt2", _newlines: "newlines"}.get(f, "") for regex, f in _CUSTOM.items()})
_CUSTOM_KINDS.update({REGEXES["llama3"][0]: "llama3", REGEXES["qwen2"][0]: "qwen2",
                      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "llama3"})


# ---------------------------------------------------------------------------- the Rust splitter

# Python's ASCII classes (re.ASCII), spelled out for Rust, whose are Unicode's.
_ASCII_SHORTHANDS = {"s": "\\t\\n\\x0B\\x0C\\r ", "d": "0-9", "w": "0-9A-Za-z_"}
_splitters: dict[tuple[str, ...], object] = {}


def rust_splitter(regexes: Sequence[str]):
    """A ``_core.LlamaSplitter`` for these regexes (made once), or None where one of them does
    not translate to Rust's syntax or does not compile there (then `split_in_python` runs)."""
    key = tuple(regexes)
    if key not in _splitters:
        from .. import _core

        stages = []
        for regex in key:
            kind = _CUSTOM_KINDS.get(regex)
            if kind is not None:
                stages.append((kind, "", True))
                continue
            pattern, use_collapsed = _compile(regex)
            # (After an empty match Python's finditer may still match at the same place, and
            # Rust's moves on: regexes that can match nothing stay in Python.)
            translated = rust_regex(pattern.pattern) if _never_empty(pattern.pattern) else None
            if translated is None:
                stages = None
                break
            stages.append(("regex", translated, use_collapsed))
        splitter = None
        if stages is not None:
            try:
                splitter = _core.LlamaSplitter(stages)
            except ValueError:  # a construct Rust's regex engine does not take
                splitter = None
        _splitters[key] = splitter
    return _splitters[key]


def _never_empty(pattern: str) -> bool:
    """Whether every match of ``pattern`` has a character at least (its shortest width, from
    Python's own regex parser)."""
    try:
        from re import _parser  # Python 3.11+
    except ImportError:  # pragma: no cover
        import sre_parse as _parser
    try:
        return _parser.parse(pattern, re.ASCII).getwidth()[0] > 0
    except Exception:  # noqa: BLE001 - an unparsable pattern is not translated
        return False


def rust_regex(pattern: str) -> str | None:
    """``pattern`` (Python ``re`` syntax with ASCII classes, as `_compile` gives it) in the syntax
    of Rust's regex crate; None for constructs left untranslated (case folding, word
    boundaries, back references, named groups). ``$`` is Python's: the end, or before a final
    newline."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            atom = _escape(pattern, i, in_class=False)
            if atom is None:
                return None
            text, _, i = atom
            out.append(text)
        elif c == "[":
            cls = _class(pattern, i)
            if cls is None:
                return None
            text, i = cls
            out.append(text)
        elif c == "$":
            out.append("(?:\\z|(?=\\n\\z))")
            i += 1
        elif c == "(" and pattern.startswith("(?", i):
            if not any(pattern.startswith(g, i) for g in ("(?:", "(?=", "(?!", "(?<=", "(?<!")):
                return None
            out.append("(")
            i += 1
        else:
            out.append(_literal(c) if not c.isascii() or not c.isprintable() else c)
            i += 1
    return "".join(out)


def _literal(c: str) -> str:
    """One character as a Rust regex literal (in or out of a class). ``\\<`` and ``\\>`` are word
    boundaries in fancy-regex, so those two are written by their code."""
    if c in "<>":
        return f"\\x{{{ord(c):X}}}"
    if c.isascii() and not c.isalnum() and c != " " and c.isprintable():
        return "\\" + c
    if not c.isprintable() or c.isspace():
        return f"\\x{{{ord(c):X}}}"
    return c


def _escape(pattern: str, i: int, *, in_class: bool) -> tuple[str, str | None, int] | None:
    """The escape at ``pattern[i]`` (a backslash): (Rust text, the character it stands for if
    it is one, index after it), or None if not translated."""
    if i + 1 >= len(pattern):
        return None
    e = pattern[i + 1]
    if e in _ASCII_SHORTHANDS:
        members = _ASCII_SHORTHANDS[e]
        return (members if in_class else f"[{members}]"), None, i + 2
    if e.lower() in _ASCII_SHORTHANDS:
        return f"[^{_ASCII_SHORTHANDS[e.lower()]}]", None, i + 2
    simple = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
    if e in simple:
        return _literal(simple[e]), simple[e], i + 2
    if e == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", pattern[i + 2:i + 4]):
        ch = chr(int(pattern[i + 2:i + 4], 16))
        return _literal(ch), ch, i + 4
    if e in "uU":
        width = 4 if e == "u" else 8
        digits = pattern[i + 2:i + 2 + width]
        if not re.fullmatch(f"[0-9a-fA-F]{{{width}}}", digits):
            return None
        ch = chr(int(digits, 16))
        return _literal(ch), ch, i + 2 + width
    if not in_class and e in "AZ":
        return ("\\A" if e == "A" else "\\z"), None, i + 2
    if e.isascii() and not e.isalnum():
        return _literal(e), e, i + 2
    return None


def _class(pattern: str, i: int) -> tuple[str, int] | None:
    """The class at ``pattern[i]`` (a ``[``) in Rust's syntax, every literal escaped (there
    ``[`` opens a nested class and ``--``, ``&&``, ``~~`` are set operations), and the index
    after it."""
    n = len(pattern)
    j = i + 1
    parts = ["["]
    if j < n and pattern[j] == "^":
        parts.append("^")
        j += 1
    first = True

    def atom(k: int) -> tuple[str, str | None, int] | None:
        if pattern[k] == "\\":
            return _escape(pattern, k, in_class=True)
        return _literal(pattern[k]), pattern[k], k + 1

    while True:
        if j >= n:
            return None
        if pattern[j] == "]" and not first:
            parts.append("]")
            return "".join(parts), j + 1
        a = atom(j)
        if a is None:
            return None
        text, char, j = a
        if char is not None and j + 1 < n and pattern[j] == "-" and pattern[j + 1] != "]":
            b = atom(j + 1)
            if b is None or b[1] is None:
                return None
            parts.append(f"{_literal(char)}-{_literal(b[1])}")
            j = b[2]
        else:
            parts.append(text)
        first = False
