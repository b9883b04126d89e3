"""The learning experiment's settings (lab/learning/config.py): `LearnConfig` typed and checked,
each bad setting refused naming its key before any stage; the warm start's settings defined once
(issue 45 item 3): each knob's default, constraint and explanation in `WarmStartSettings`;
``configs/learning/warmstart.yaml`` holds no value of its own and ``learn.yaml`` (with its
budgets) only the experiment's deltas, both read by Hydra through the dataclasses; no literal
default of a lab setting appears anywhere else in ``soft_spatial/`` (the AST scan of
``tests/softthink/test_config.py``, over the lab's settings)."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from default_scan import restated_defaults as scan
from soft_spatial.lab.learning.config import (CONFIG_DIR, EVAL_MODE, OUTPUT_NEUTRAL, LearnConfig,  # registers
                                              WarmStartConfig, WarmStartSettings, WarmStartSpec)  # the schemas
from soft_spatial.lab.learning.experiment import BEFORE_MODE

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = CONFIG_DIR
PACKAGE = ROOT / "soft_spatial"
HOME = PACKAGE / "lab" / "learning" / "config.py"
KNOBS = [f.name for f in dataclasses.fields(WarmStartSettings)]

#: the lab's settings (name -> its dataclass default) the scan looks for: the warm start's knobs
#: (but weight_decay and clip_grad, also the controller's and verl's optimizer settings, whose
#: defaults happen to be the same numbers) and the learning experiment's own
LAB_SETTINGS = {
    **{f.name: f.default for f in dataclasses.fields(WarmStartSettings)
       if f.name not in ("weight_decay", "clip_grad")},
    "high_tau": LearnConfig.high_tau, "entropy_prompts": LearnConfig.entropy_prompts,
}
#: names that mean nothing else in the package: any literal default of theirs is one of these
LAB_ONLY = {"answer_weight", "distractor_mass", "min_lr_ratio", "warmup_steps", "high_tau",
            "entropy_prompts"}


def _yaml(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text())


def _compose(config: str, overrides=()) -> dict:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        return compose(config_name=config, overrides=list(overrides))


def _learn(*overrides: str) -> LearnConfig:
    """learn.yaml composed as the command composes it, then checked."""
    return LearnConfig.from_omegaconf(_compose("learn", overrides))


def test_learn_config_is_typed_and_checked():
    demo = _learn()
    full = _learn("budget=full", "seed=3")
    assert demo.modes == ["adaptsoft"] and demo.out.endswith("demo/seed0")
    # the dataclasses' defaults and learn.yaml's one delta
    assert demo == LearnConfig(out=demo.out, warmstart=WarmStartSpec(noise=0.3))
    assert full.modes == ["hard", "soft_fixed", "adaptsoft"] and full.out.endswith("full/seed3")
    assert {BEFORE_MODE[EVAL_MODE[m]] for m in full.modes} == {"hard", "fixed"}
    paths = _learn("budget=paths")
    assert (paths.warmstart.noise, paths.warmstart.steps, paths.warmstart.views) == (
        0.0, 1000, ["mix", "hard", "nochain"])
    with pytest.raises(ValueError, match="modes"):
        LearnConfig(out="x", modes=["greedy"])
    with pytest.raises(ValueError, match="trian"):
        LearnConfig.from_omegaconf({"out": "x", "data": {"trian": 3}})
    with pytest.raises(ValueError, match="data.train"):
        LearnConfig.from_omegaconf({"out": "x", "data": {"train": "abc"}})
    with pytest.raises(Exception, match="data.train"):  # Hydra refuses it while composing
        _learn("data.train=abc")


@pytest.mark.parametrize("override, key", [
    ("eval.samples=0", "eval.samples"), ("train.steps=0", "train.steps"),
    ("data.train=-5", "data.train"), ("data.test=0", "data.test"),
    ("warmstart.steps=0", "warmstart.steps"), ("warmstart.batch_size=-1", "warmstart.batch_size"),
    ("warmstart.noise=1.0", "warmstart.noise"), ("train.save_freq=0", "train.save_freq"),
    ("eval.temperature=0", "eval.temperature"), ("eval.max_new_tokens=0", "eval.max_new_tokens"),
    ("entropy_prompts=-1", "entropy_prompts"), ("model.hidden_size=0", "model.hidden_size"),
    ("warmstart.views=[hard,soft]", "warmstart.views"), ("modes=[adaptsfot]", "modes"),
    ("data.tasks=[counting,nope]", "data.tasks"), ("seed=-1", "seed"),
])
def test_a_bad_setting_is_refused_before_any_stage_naming_its_key(override, key):
    """Issue 44 item 14: a bad count was refused only by the stage that read it, after data, model
    and warm start had run (minutes); the config's check refuses it, naming the key."""
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        _learn(override)


def test_the_knobs_are_documented_beside_their_defaults():
    """Every knob has its explanation (an attribute docstring) in the class."""
    tree = ast.parse(HOME.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WarmStartSettings")
    documented = {a.target.id for a, doc in zip(cls.body, cls.body[1:])
                  if isinstance(a, ast.AnnAssign) and isinstance(doc, ast.Expr)
                  and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)}
    assert documented == set(KNOBS)
    assert set(OUTPUT_NEUTRAL) < set(KNOBS)


def test_warmstart_yaml_holds_no_value_and_composes_to_the_class():
    """configs/learning/warmstart.yaml: Hydra's own settings and the schema only; what Hydra composes is
    the class's defaults (the paths still to be given)."""
    assert set(_yaml("warmstart.yaml")) == {"defaults", "hydra"}
    cfg = _compose("warmstart", ["model_path=m", "data_root=d", "output_dir=o"])
    from omegaconf import OmegaConf

    assert OmegaConf.to_object(cfg) == WarmStartConfig(model_path="m", data_root="d",
                                                       output_dir="o")


def test_learn_yaml_holds_the_experiments_deltas_only():
    """configs/learning/learn.yaml's warm-start block: each value differs from the class default; a
    budget's from what it would be without the budget. Composed, each is the class with them."""
    block = _yaml("learn.yaml")["warmstart"]
    defaults = dataclasses.asdict(WarmStartSpec())
    assert block and all(block[k] != defaults[k] for k in block), block
    base = LearnConfig.from_omegaconf(_compose("learn")).warmstart
    assert base == WarmStartSpec(**block)
    for budget in sorted(p.stem for p in (CONFIGS / "budget").glob("*.yaml")):
        delta = _yaml(f"budget/{budget}.yaml").get("warmstart", {})
        assert all(delta[k] != dataclasses.asdict(base)[k] for k in delta), (budget, delta)
        got = LearnConfig.from_omegaconf(_compose("learn", [f"budget={budget}"])).warmstart
        assert got == dataclasses.replace(base, **delta)


def test_a_changed_default_is_seen():
    """The pin sees a YAML that restates a default: the check above fails on it."""
    block = dict(_yaml("learn.yaml")["warmstart"], answer_weight=WarmStartSettings.answer_weight)
    assert not all(block[k] != dataclasses.asdict(WarmStartSpec())[k] for k in block)


@pytest.mark.parametrize("knob, bad", [
    ("steps", 0), ("batch_size", 0), ("lr", 0.0), ("warmup_steps", -1), ("min_lr_ratio", 0.0),
    ("min_lr_ratio", 1.5), ("weight_decay", -0.1), ("clip_grad", 0.0), ("answer_weight", 0.0),
    ("noise", 1.0), ("noise", -0.1), ("distractor_mass", 0.0), ("distractor_mass", 1.0),
    ("log_every", 0), ("save_every", 0), ("threads", 0),
])
def test_each_constraint_refuses_naming_the_knob(knob, bad):
    with pytest.raises(ValueError, match=rf"warmstart\.{knob} must be"):
        WarmStartSettings(**{knob: bad})
    with pytest.raises(ValueError, match=rf"warmstart\.{knob} must be"):
        WarmStartSpec(**{knob: bad})


def test_no_lab_setting_default_outside_its_dataclass():
    homes = {HOME}  # WarmStartSettings and LearnConfig's own fields
    files = sorted(p for p in PACKAGE.rglob("*.py") if p not in homes)
    found = [hit for p in files for hit in scan(p.read_text(encoding="utf-8"),
                                                  str(p.relative_to(ROOT)), LAB_SETTINGS, LAB_ONLY)]
    assert not found, ("lab setting defaults outside their dataclasses (take the config object, "
                       "or read the dataclass):\n" + "\n".join(found))


def test_the_lab_defaults_live_in_their_dataclasses():
    assert len(scan(HOME.read_text(encoding="utf-8"), "home", LAB_SETTINGS, LAB_ONLY)) >= 6


@pytest.mark.parametrize("snippet", [
    "def collate(examples, pad_id, answer_weight=1.0): ...",
    "class E:\n    distractor_mass: float = 0.05\n",
    "run(cfg, lr=2e-3)\n",
    "cfg = {'warmup_steps': 20}\n",
    "HIGH_TAU = 0.9\n",
])
def test_the_scan_finds_a_restated_lab_default(snippet):
    assert scan(snippet, "<s>", LAB_SETTINGS, LAB_ONLY)


@pytest.mark.parametrize("snippet", [
    "def collate(examples, pad_id, answer_weight=None): ...",
    "run(cfg, lr=1e-4)\n",
    "def f(steps=3): ...",
    "def f(noise=WarmStartSettings.noise): ...",
])
def test_the_scan_allows_other_values_and_reads_of_the_dataclass(snippet):
    assert not scan(snippet, "<s>", LAB_SETTINGS, LAB_ONLY)
