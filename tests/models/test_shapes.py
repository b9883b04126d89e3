"""Every model shape the GPU kit builds (8B, 2B, the tiny dry-run ones) is self-consistent, and an
inconsistent override is refused with the field's name (soft_spatial/models/shapes.py): SGLang
would silently "correct" it and transformers would not (stage d's 2B model once kept the tiny
mrope_section [4, 2, 2] with head_dim 128: 0/8 rows matched even in hard mode)."""

import pytest
import torch

from soft_spatial.models.shapes import check_config, config_problems
from soft_spatial.models.tiny import FAMILIES, build_tokenizer, tiny_config

from soft_spatial.models import shapes as check  # the kit's published shapes


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("qwen")


KIT_SHAPES = {  # (family, overrides) of every model check.py builds
    "a: Qwen3-VL-8B": ("qwen3_vl", check.QWEN3_VL_8B),
    "c: Qwen3-VL-2B language model": ("qwen3", check.QWEN3_VL_2B_TEXT),
    "d: Qwen3-VL-2B": ("qwen3_vl", check.QWEN3_VL_2B),
    **{f"dry run: tiny {f}": (f, {}) for f in FAMILIES},
}


@pytest.mark.parametrize("name", KIT_SHAPES)
def test_every_kit_shape_is_self_consistent(tok, name):
    family, shape = KIT_SHAPES[name]
    config = tiny_config(family, tok, **shape)
    assert config_problems(config) == [] and check_config(config) is config
    assert config_problems(config.to_dict()) == []  # what a saved config.json holds


def test_the_2b_shape_is_qwen3_vl_2b_with_its_language_model_as_stage_c(tok):
    text = tiny_config("qwen3_vl", tok, **check.QWEN3_VL_2B).text_config
    lm = tiny_config("qwen3", tok, **check.QWEN3_VL_2B_TEXT)
    for k in check.QWEN3_VL_2B_TEXT:
        assert getattr(text, k) == getattr(lm, k), k
    assert sum(text.rope_parameters["mrope_section"]) * 2 == text.head_dim


def test_the_old_2b_override_is_refused_naming_the_field(tok):
    broken = dict(check.QWEN3_VL_2B_TEXT, vision_config=check.QWEN3_VL_2B_VISION)  # tiny rope
    config = tiny_config("qwen3_vl", tok, **broken)
    with pytest.raises(ValueError, match=r"stage d.*\n.*mrope_section: \[4, 2, 2\] sums to 8, "
                                         r"not head_dim // 2 = 64"):
        check_config(config, "stage d's model")


@pytest.mark.parametrize("overrides, field", [
    (dict(num_key_value_heads=3), "num_key_value_heads"),
    (dict(head_dim=15), "head_dim"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3],
                           "mrope_interleaved": True}), "mrope_section"),  # h takes 9 of 8 slots
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [8, 0]}),
     "mrope_section"),
    (dict(hidden_size=128), "vision_config.out_hidden_size"),
    (dict(vision_config={"deepstack_visual_indexes": [1]}), "vision_config.deepstack_visual_indexes"),
    (dict(vision_config={"depth": 3, "deepstack_visual_indexes": [1, 1]}),
     "vision_config.deepstack_visual_indexes"),
    (dict(vision_config={"num_heads": 4}), "vision_config.num_heads"),  # 32 / 4 = 8: ok
    (dict(vision_config={"num_position_embeddings": 200}), "vision_config.num_position_embeddings"),
])
def test_each_inconsistency_is_named(tok, overrides, field):
    config = tiny_config("qwen3_vl", tok, **overrides)
    problems = config_problems(config)
    if overrides == dict(vision_config={"num_heads": 4}):
        assert problems == []  # a consistent override passes
        config = tiny_config("qwen3_vl", tok, vision_config={"num_heads": 16})  # 32 / 16 = 2
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        check_config(config)


def test_qwen2_5_vl_full_attention_blocks_must_exist(tok):
    with pytest.raises(ValueError, match="fullatt_block_indexes"):
        check_config(tiny_config("qwen2_5_vl", tok, vision_config={"fullatt_block_indexes": [2]}))


def test_tied_embeddings_share_the_output_layer():
    tok = build_tokenizer("small")
    from transformers import AutoModelForImageTextToText
    for tie in (True, False):
        config = tiny_config("qwen3_vl", tok, tie_word_embeddings=tie)
        assert config.tie_word_embeddings is tie
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(config)
        same = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        assert same is tie


def test_stage_d_parity_init_gives_logits_of_std_4_at_any_width(tmp_path):
    """The output layer's scale the tiny model has at hidden 64 (peaked, not one-hot mixtures)."""
    from soft_spatial.models import build_tiny_model
    from soft_spatial.models.loading import load_model
    for hidden in (64, 512):
        path = build_tiny_model(tmp_path / str(hidden), vocab="small", hidden_size=hidden,
                                intermediate_size=2 * hidden,
                                vision_config={"out_hidden_size": hidden}, **check.parity_init(hidden))
        model = load_model(path)[0]
        ids = torch.randint(0, 512, (4, 16), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            std = model(input_ids=ids).logits[..., :512].std().item()
        assert 3.0 < std < 5.0, (hidden, std)
