"""The GPU kit's SGLang server arguments (soft_spatial_bench/gpu/sglang_args.py): a backend left to
SGLang's default, or one the kit does not carry, is named; torch_native attention with graphs, and
parity outside fp32, are refused; configs/cluster/gpu1.yaml names every backend as verl starts
SGLang. (Every engine of the headline plan: tests/bench/gpu/test_headline.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from soft_spatial_bench.gpu.sglang_args import BACKENDS, cuda_args, unset_backends

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"


@pytest.mark.parametrize("drop", BACKENDS)
def test_a_backend_left_to_the_default_is_named(drop):
    args = cuda_args("bfloat16", graphs=True, plugin=False)
    args.pop(drop)
    assert unset_backends(args, plugin=False) == [f"{drop}=None"]
    args = cuda_args("bfloat16", graphs=True, plugin=False, **{})
    args[drop] = "fa3"  # a backend the kit does not carry
    assert unset_backends(args, plugin=False) == [f"{drop}='fa3'"]


def test_torch_native_attention_with_graphs_is_refused():
    with pytest.raises(ValueError, match="turns CUDA graphs off"):
        cuda_args("float32", graphs=True, plugin=True, parity=True, attention="torch_native")
    with pytest.raises(ValueError, match="float32"):
        cuda_args("bfloat16", graphs=False, plugin=True, parity=True)


def test_gpu1_cluster_names_every_backend_as_verl_starts_sglang():
    """configs/cluster/gpu1.yaml composed as training composes it, then the plugin's required
    arguments: what verl 0.9.1's SGLang server passes to ServerArgs (it pops attention_backend
    and mm_attention_backend from engine_kwargs and defaults them when absent)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import soft_spatial.train  # noqa: F401 - its config's resolvers (verl_config_dir), as training has them
    from soft_spatial.engines.sglang.server_args import required_server_args
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(config_name="train", overrides=["cluster=gpu1", "rollout=sglang"])
    kwargs = OmegaConf.to_container(cfg.actor_rollout_ref.rollout.engine_kwargs.sglang)
    args = required_server_args(kwargs)
    assert unset_backends(args, plugin=True) == [], args
    assert args["sampling_backend"] == "soft_gumbel"
