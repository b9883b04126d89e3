"""The SGLang server arguments soft decoding needs and the scheduler's settings
(:mod:`soft_spatial.engines.sglang.server_args`): the settings' round trip through the
environment, what is required, what is the user's choice, what is refused (naming the setting and
why), ``density.fp32_logits`` driving SGLang's fp32 head, and the Hydra config ``rollout=sglang``."""
from __future__ import annotations

import pytest

from soft_spatial.engines.sglang import SchedulerSetup, required_server_args
from soft_spatial.softthink.settings import SoftSettings
from soft_spatial.softthink import AdaptSoftConfig, SoftThinkingConfig


def test_settings_roundtrip_and_required_server_args(monkeypatch):
    s = SchedulerSetup(soft=SoftSettings(soft_thinking=SoftThinkingConfig(top_k=3), adaptsoft=AdaptSoftConfig(width=8),
                                         seed=5), hidden_size=32, think_end_id=7, banned_ids=[1, 2])
    s.export()
    assert SchedulerSetup.from_env() == s
    with pytest.raises(ValueError, match="think_end_id"):
        SchedulerSetup(soft=SoftSettings(), hidden_size=8)
    args = required_server_args({"custom_weight_loader": ["x.y"], "mem_fraction_static": 0.4})
    assert args["sampling_backend"] == "soft_gumbel" and "disable_radix_cache" not in args
    assert args["disable_overlap_schedule"] and "disable_cuda_graph" not in args  # graphs on
    for graphs_off in (True, False):  # the user's choice, e.g. to compare
        assert required_server_args({"disable_cuda_graph": graphs_off})["disable_cuda_graph"] \
            is graphs_off
    assert args["custom_weight_loader"] == ["x.y", "soft_spatial.engines.sglang.hooks.load_weights"]
    for radix_off in (True, False):  # prefix caching is the user's choice (protect_soft_kv)
        assert required_server_args({"disable_radix_cache": radix_off})["disable_radix_cache"] \
            is radix_off
    for overlap_off in (True, False):  # the user's choice (docs/sglang.md, "Overlap scheduling")
        assert required_server_args({"disable_overlap_schedule": overlap_off})[
            "disable_overlap_schedule"] is overlap_off
    for bad in ({"enable_mixed_chunk": True}, {"sampling_backend": "flashinfer"},
                {"enable_dp_attention": True}):
        with pytest.raises(ValueError):
            required_server_args(bad)


def test_rollout_sglang_config_composes():
    from hydra import compose, initialize_config_dir
    from soft_spatial.train import CONFIG_DIR
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="train", overrides=["rollout=sglang", "cluster=paper"])
    r = cfg.actor_rollout_ref.rollout
    assert r.name == "sglang_soft" and not r.enforce_eager and r.gpu_memory_utilization == 0.4
    ek = dict(r.engine_kwargs.sglang)
    assert ek["disable_cuda_graph"] is False  # soft decoding runs in SGLang's decode graphs
    assert required_server_args(ek)["sampling_backend"] == "soft_gumbel"
    assert SoftSettings.from_dict(r.custom).soft_thinking.mode == "adaptsoft"


@pytest.mark.parametrize("key,value,why", [
    ("enable_deterministic_inference", True, "pytorch backend"),
    ("rl_on_policy_target", "fsdp", "pytorch backend"),
    ("enable_dp_attention", True, "not supported"),
    ("speculative_algorithm", "EAGLE", "speculative decoding"),
    ("enable_return_hidden_states", True, "every decode step would run eagerly"),
    ("enable_mixed_chunk", True, "")])
def test_required_server_args_refuse_settings_that_break_soft_decoding(key, value, why):
    """Deterministic inference makes SGLang fall back to its pytorch sampler (no soft records);
    returning hidden states holds SGLang's graphs at FULL, which no soft decode batch (LAST)
    replays; the other flags contradict what the plugin needs. Each must raise, naming the
    setting and why, never be overridden."""
    from soft_spatial.engines.sglang.server_args import required_server_args
    with pytest.raises(ValueError, match=f"engine_kwargs.sglang.{key}.*{why}"):
        required_server_args({key: value})
    required_server_args({key: False if isinstance(value, bool) else None})  # off is fine
    ok = required_server_args({})
    assert ok["sampling_backend"] == "soft_gumbel" and ok["disable_overlap_schedule"] is True


def test_the_soft_settings_fp32_logits_drive_sglangs_fp32_head():
    """density.fp32_logits is the one setting: required_server_args sets SGLang's
    enable_fp32_lm_head from it (off by default), a contradicting engine argument is refused
    naming both, an agreeing one is kept."""
    from soft_spatial.engines.sglang.server_args import FP32_LM_HEAD, required_server_args
    assert required_server_args({})[FP32_LM_HEAD] is False
    assert required_server_args({}, fp32_logits=True)[FP32_LM_HEAD] is True
    assert required_server_args({FP32_LM_HEAD: True}, fp32_logits=True)[FP32_LM_HEAD] is True
    for given, setting in ((True, False), (False, True)):
        with pytest.raises(ValueError, match=rf"engine_kwargs.sglang.enable_fp32_lm_head={given} "
                                             rf"contradicts the soft settings' "
                                             rf"density.fp32_logits={setting}"):
            required_server_args({FP32_LM_HEAD: given}, fp32_logits=setting)
