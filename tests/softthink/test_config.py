"""Each default of a method hyperparameter is defined once: in its dataclass of
``soft_spatial/softthink/config.py``, with its explanation beside it (docs/design.md §6).

* ``configs/soft/paper.yaml`` (what Hydra composes) holds exactly the dataclasses' defaults;
* no literal default of a method hyperparameter appears anywhere else in ``soft_spatial/``: not
  as a parameter default, a class attribute or a module constant, and no call or dict restates
  one (``write_report(tau0=0.5)``); code takes the config object, or reads the dataclass
  (``noise_scale: float = SoftThinkingConfig.noise_scale``).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from default_scan import restated_defaults as scan

from soft_spatial.softthink import (AdaptSoftConfig, AlignmentConfig, DensityConfig, KLConfig,
                                    SoftThinkingConfig)
from soft_spatial.softthink.settings import SoftSettings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "soft_spatial"
HOME = PACKAGE / "softthink" / "config.py"  # where the defaults live
PAPER = ROOT / "configs" / "soft" / "paper.yaml"

#: the method hyperparameters (parameter / attribute / key name -> its dataclass default)
HYPERPARAMETERS = {
    "tau0": AdaptSoftConfig.tau0, "delta": AdaptSoftConfig.delta,
    "proj_dim": AdaptSoftConfig.proj_dim, "width": AdaptSoftConfig.width,
    "entropy_mean": AdaptSoftConfig.entropy_mean, "entropy_std": AdaptSoftConfig.entropy_std,
    "top_k": SoftThinkingConfig.top_k, "noise_scale": SoftThinkingConfig.noise_scale,
    "fixed_tau": SoftThinkingConfig.fixed_tau, "noise_clamp": SoftThinkingConfig.noise_clamp,
    "reduce": DensityConfig.reduce, "clamp": DensityConfig.clamp, "min_logp": DensityConfig.min_logp,
    "over": KLConfig.over,
    "beta": AlignmentConfig.beta, "target": AlignmentConfig.target,
    "max_scale": AlignmentConfig.max_scale, "eps": AlignmentConfig.eps,
    "ref_fraction": AlignmentConfig.ref_fraction, "fraction": AlignmentConfig.ref_fraction,
    "vocab_block": AlignmentConfig.vocab_block,
}
#: names that mean nothing else in this package: any literal default of theirs is one of these
#: settings' (the other names, e.g. ``width`` or ``eps``, count where they restate the default)
ONLY_HYPERPARAMETERS = {"tau0", "delta", "proj_dim", "entropy_mean", "entropy_std", "top_k",
                        "noise_scale", "fixed_tau", "noise_clamp", "min_logp", "max_scale",
                        "ref_fraction", "vocab_block"}


def restated_defaults(source: str, where: str = "<string>") -> list[str]:
    """Every place in ``source`` that defines or restates a method hyperparameter's default
    (`default_scan.restated_defaults` over :data:`HYPERPARAMETERS`)."""
    return scan(source, where, HYPERPARAMETERS, ONLY_HYPERPARAMETERS)


def _paper() -> dict:
    """configs/soft/paper.yaml as Hydra reads it (OmegaConf's YAML: ``1.0e6`` is a number)."""
    return OmegaConf.to_container(OmegaConf.load(PAPER))


def test_paper_yaml_holds_the_dataclass_defaults():
    """configs/soft/paper.yaml spells out every settings group, each field at its default."""
    paper = _paper()
    defaults = SoftSettings().to_dict()
    groups = {f.name for f in dataclasses.fields(SoftSettings)
              if f.default_factory is not dataclasses.MISSING}
    assert set(paper) == groups, "paper.yaml must hold exactly the settings groups"
    for group in sorted(groups):
        assert paper[group] == defaults[group], (
            f"configs/soft/paper.yaml:{group} differs from the dataclass defaults "
            f"(soft_spatial/softthink/config.py): {paper[group]} != {defaults[group]}")
    # and the file is what Hydra composes: SoftSettings reads it back as the defaults
    assert SoftSettings.from_dict(paper) == SoftSettings()


def test_paper_yaml_check_sees_a_changed_value():
    paper = _paper()
    paper["adaptsoft"]["tau0"] = 0.6
    assert paper["adaptsoft"] != SoftSettings().to_dict()["adaptsoft"]


def test_no_hyperparameter_default_outside_its_dataclass():
    files = sorted(p for p in PACKAGE.rglob("*.py") if p != HOME)
    assert len(files) > 50
    found = [hit for p in files
             for hit in restated_defaults(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    assert not found, ("method hyperparameter defaults outside soft_spatial/softthink/config.py "
                       "(take the config object, or read the dataclass):\n" + "\n".join(found))


def test_the_defaults_live_in_the_dataclasses():
    """The home of the defaults is what the scan exempts: it does hold them."""
    assert len(restated_defaults(HOME.read_text(encoding="utf-8"))) >= 15


@pytest.mark.parametrize("snippet", [
    "def f(x, tau0=0.5): ...",
    "def f(x, tau0=0.6): ...",
    "def f(x, eps=1e-30): ...",
    "def f(x, *, noise_scale=2.0): ...",
    "class E:\n    noise_scale: float = 1.0\n",
    "class E:\n    density_reduce = 'sum'\n    reduce = 'sum'\n",
    "TAU0 = 0.5\n",
    "write_report(out, runs, tau0=0.5, seed=0)\n",
    "AlignmentScaler(beta=0.99)\n",
    "cfg = {'max_scale': 1e6}\n",
    "def g(logp, noise_clamp=(-1.5, 3.0)): ...",
    "select_reference(8, fraction=0.25)\n",
    "f(top_k=5)\n",
])
def test_the_scan_finds_a_restated_default(snippet):
    assert restated_defaults(snippet)


@pytest.mark.parametrize("snippet", [
    "def f(x, tau0=None): ...",
    "def random_controller(hidden, seed=0, width=32): ...",
    "def wait_device_free(fraction=0.8): ...",
    "def f(x, noise_scale=SoftThinkingConfig.noise_scale): ...",
    "SoftThinkingConfig(mode='fixed', noise_scale=0.0)\n",
    "AdaptSoft(16, width=8, seed=3)\n",
    "f(top_k=-1)\n",
    "layer_norm(h, (d,), eps=1e-5)\n",
])
def test_the_scan_allows_other_values_and_reads_of_the_dataclass(snippet):
    assert not restated_defaults(snippet)
