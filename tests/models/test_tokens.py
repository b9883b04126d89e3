"""Token ids the method depends on (`soft_spatial.models.tokens`): `<think>` / `</think>` as single
tokens, the end-of-sequence ids in their order, and the ids a policy must never emit."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from soft_spatial.models import eos_token_ids, think_end_id, think_start_id
from soft_spatial.models import tiny
from soft_spatial.models.tokens import stop_token_ids, unusable_token_ids


def test_think_ids_and_eos(tiny_qwen3_vl_small, tiny_qwen3_text_small):
    from transformers import AutoConfig, PreTrainedTokenizerFast

    tok = tiny.build_tokenizer("small")
    for path in (tiny_qwen3_vl_small, tiny_qwen3_text_small):
        assert eos_token_ids(path) == [tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    config = AutoConfig.from_pretrained(tiny_qwen3_vl_small)
    assert eos_token_ids(config) == [tok.eos_token_id]  # from text_config
    with pytest.raises(ValueError, match="no eos_token_id"):
        eos_token_ids(None)

    bare = PreTrainedTokenizerFast(tokenizer_object=_without_added_tokens(tiny.small_tokenizer_backend()),
                                   name_or_path="bare-bpe")
    with pytest.raises(ValueError, match=r"'</think>' is not a single token in tokenizer 'bare-bpe'"):
        think_end_id(bare)
    with pytest.raises(ValueError, match="<think>"):
        think_start_id(bare)


def _without_added_tokens(backend):
    """The same BPE with no added tokens (so `</think>` splits into pieces)."""
    from tokenizers import Tokenizer

    data = json.loads(backend.to_str())
    data["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(data))


def test_stop_ids_take_the_generation_configs_first_then_the_models_and_the_tokenizers():
    generation = SimpleNamespace(eos_token_id=[5, 7])
    config = SimpleNamespace(eos_token_id=7, text_config=SimpleNamespace(eos_token_id=[9, 5]))
    tokenizer = SimpleNamespace(eos_token_id=11, name_or_path="t")
    assert stop_token_ids(config, tokenizer, generation) == [5, 7, 9, 11]
    assert stop_token_ids(config, tokenizer) == [7, 9, 5, 11]
    assert stop_token_ids(config, tokenizer, SimpleNamespace(eos_token_id=None)) == [7, 9, 5, 11]


def test_unusable_ids_are_the_vision_placeholders_and_the_rows_without_a_token(tiny_qwen3_vl_small):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny_qwen3_vl_small)
    tok = AutoTokenizer.from_pretrained(tiny_qwen3_vl_small)
    placeholders = tok.convert_tokens_to_ids(["<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                              "<|vision_end|>"])
    rows = config.text_config.vocab_size  # 576 logit rows; the tokenizer has 538 tokens
    assert len(tok) == 538 and rows == 576
    assert unusable_token_ids(config, tok, rows) == sorted(placeholders) + list(range(538, 576))
    assert unusable_token_ids(config, tok, 523) == [i for i in sorted(placeholders) if i < 523]
    assert unusable_token_ids(SimpleNamespace(), tok, 540) == [538, 539]  # a text model: no placeholders
