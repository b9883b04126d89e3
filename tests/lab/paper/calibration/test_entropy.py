"""python -m soft_spatial.stats entropy: μ_H/σ_H of the initial policy, against a direct
computation from teacher-forced logits, the config file it writes and its composition."""
import math

import numpy as np
import pytest

from soft_spatial.data import load_benchmark
from soft_spatial.data.fixtures import write_fixtures


@pytest.fixture(scope="module")
def train_parquet(tmp_path_factory, tiny_qwen3_vl_small):
    from transformers import AutoProcessor

    from soft_spatial.data.prepare import write_parquet

    root = tmp_path_factory.mktemp("stats")
    fx = write_fixtures(root / "fixtures")
    out = root / "train.parquet"
    proc = AutoProcessor.from_pretrained(str(tiny_qwen3_vl_small), local_files_only=True)
    write_parquet(load_benchmark("omnispatial", fx.omnispatial), out, proc, progress=False)
    return out


def direct_entropy(logits, k, temperature):
    """Ĥ per row in float64 python: top-K of softmax(ℓ/T), renormalised, −Σ p log p / log K."""
    out = []
    for row in logits.double().tolist():
        top = sorted((x / temperature for x in row), reverse=True)[:k]
        m = top[0]
        z = sum(math.exp(x - m) for x in top)
        p = [math.exp(x - m) / z for x in top]
        out.append(-sum(q * math.log(q) for q in p if q > 0) / math.log(k))
    return np.array(out)


def test_estimate_equals_direct_computation_from_replayed_logits(tiny_qwen3_vl_small,
                                                                 train_parquet):
    from soft_spatial.engines import LocalEngine
    from soft_spatial.engines.replay import replay_completion
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig
    from soft_spatial.lab.paper.calibration.entropy import estimate, parquet_prompts, soft_step_entropies

    prompts = parquet_prompts([train_parquet], 3, seed=1)
    assert len(prompts) == 3 and prompts[0][1]["content"][0]["type"] == "image"
    engine = LocalEngine.from_pretrained(tiny_qwen3_vl_small)
    seen = []
    real = engine.generate

    def recording(batch, **kw):
        outs = real(batch, **kw)
        seen.extend((batch[o.prompt_index], o) for o in outs)
        return outs

    engine.generate = recording
    soft_thinking = SoftThinkingConfig(mode="fixed", fixed_tau=0.5, top_k=4)
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=8)
    ent = soft_step_entropies(engine, prompts, soft_thinking, sampling, samples=2, batch_prompts=2,
                              progress=False)
    direct = {}
    for prompt, o in seen:
        logits = replay_completion(engine, prompt, o, temperature=0.8)["logits"]
        h = direct_entropy(logits[o.trace.soft], 4, 0.8)
        direct.setdefault(prompts.index(prompt), []).append(h)
    assert set(ent) == set(direct) == {0, 1, 2}
    for i in ent:
        np.testing.assert_allclose(ent[i], np.concatenate(direct[i]), rtol=1e-4, atol=1e-5)
    values = np.concatenate([np.concatenate(direct[i]) for i in sorted(direct)])
    assert values.size > 20 and values.std() > 0
    est = estimate(ent, bins=10)
    assert est.entropy_mean == pytest.approx(values.mean(), abs=1e-5)
    assert est.entropy_std == pytest.approx(values.std(), abs=1e-5)
    assert sum(est.histogram_counts) == values.size == est.soft_steps
    assert est.histogram_counts == np.histogram(values, bins=10, range=(0, 1))[0].tolist()


def test_cli_writes_a_config_that_training_composes_and_resumes(tiny_qwen3_vl_small,
                                                                train_parquet, tmp_path, capsys):
    import yaml
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from soft_spatial.lab.paper.calibration.cli import main
    from soft_spatial.lab.paper.calibration.entropy import read_partial
    from soft_spatial.train import CONFIG_DIR

    out = tmp_path / "conf" / "entropy" / "tinyx.yaml"
    args = ["entropy", "--prompts", "2", "--max-new-tokens", "6", "--out", str(out),
            "--work-dir", str(tmp_path / "work"), "--no-progress", "--name", "tinyx",
            "model=tiny", f"model.path={tiny_qwen3_vl_small}",
            f"data.train_files={train_parquet}", "actor_rollout_ref.rollout.temperature=1.0"]
    main(args)
    text = out.read_text()
    assert text.startswith("# @package _global_")
    conf = yaml.safe_load(text)
    parts = read_partial(tmp_path / "work" / "entropies.jsonl")
    values = np.concatenate([parts[i] for i in sorted(parts)])
    assert conf["adaptsoft"]["entropy_mean"] == pytest.approx(values.mean(), abs=1e-6)
    assert conf["adaptsoft"]["entropy_std"] == pytest.approx(values.std(), abs=1e-6)
    s = conf["entropy_estimate"]["settings"]
    assert (s["top_k"], s["temperature"], s["tau"], s["noise_scale"]) == (5, 1.0, 0.5, 1.0)
    assert (tmp_path / "work" / "histogram.png").stat().st_size > 1000
    # the file is outside configs/entropy/: the printed way names its config dir
    # (the instruction composed as printed: tests/e2e/test_stats_entropy_usage.py)
    assert f"--config-dir {tmp_path / 'conf'} entropy=tinyx" in capsys.readouterr().out
    # training composes it (entropy=<name> from a config dir on the search path)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="train", overrides=[
            "model=tiny", "cluster=cpu", "entropy=tinyx",
            f"hydra.searchpath=[pkg://verl.trainer.config,file://{tmp_path / 'conf'}]"])
    custom = OmegaConf.to_container(cfg.actor_rollout_ref.rollout.custom, resolve=True)
    assert custom["adaptsoft"]["entropy_mean"] == conf["adaptsoft"]["entropy_mean"] != 0.173
    # an existing estimate is kept unless --force; a forced rerun resumes from the work dir
    with pytest.raises(SystemExit, match="--force"):
        main(args)
    main(args + ["--force"])
    assert "(2 done earlier)" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["adaptsoft"] == conf["adaptsoft"]
    with pytest.raises(SystemExit, match="other settings"):
        main(args[:-1] + ["actor_rollout_ref.rollout.temperature=0.7", "--force"])
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        main(["entropy", "--out", str(tmp_path / "z.yaml"), "--work-dir", str(tmp_path / "w2"),
              "model=tiny", f"model.path={tiny_qwen3_vl_small}",
              f"data.train_files={tmp_path / 'missing.parquet'}"])


def test_help(capsys):
    from soft_spatial.lab.paper.calibration.cli import main

    with pytest.raises(SystemExit) as e:
        main(["entropy", "--help"])
    assert e.value.code == 0 and "--prompts" in capsys.readouterr().out
