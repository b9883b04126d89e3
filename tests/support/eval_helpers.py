"""Helpers of the evaluation tests (tests/eval/): the evaluation config on the fixture benchmarks, and
engine wrappers that crash, refuse, record or must not be called."""
import json

from hydra import compose, initialize_config_dir

from soft_spatial.engines import PromptTooLongError
from soft_spatial.eval.__main__ import CONFIG_DIR, build_config


def make_cfg(fixtures, model, out, **over):
    overrides = [f"data.omnispatial={fixtures.omnispatial}", f"data.mindcube={fixtures.mindcube}",
                 f"data.spatialab={fixtures.spatialab / 'spatialab.parquet'}",
                 f"model.path={model}", f"output_dir={out}", "mode=fixed", "samples=2",
                 "max_new_tokens=12"] + [f"{k}={v}" for k, v in over.items()]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return build_config(compose(config_name="eval", overrides=overrides))


def small(fixtures, model, out, **over):
    """``make_cfg`` for a short run: 2 questions, 1 sample, 4 new tokens (unless ``over`` says)."""
    return make_cfg(fixtures, model, out, **{"limit": 2, "samples": 1, "max_new_tokens": 4, **over})


def tree(directory):
    """Every path under ``directory`` (hidden ones too): file -> bytes, directory -> None."""
    return {p.relative_to(directory).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(directory.rglob("*"))}


# a process that holds the output directory's lock until its stdin closes (or it is killed)
HOLD_LOCK = """
import sys
from soft_spatial.infra.dirlock import DirLock
lock = DirLock(sys.argv[1]).acquire()
print("locked", flush=True)
sys.stdin.read()
"""


class NoEngine:
    """Stands in where nothing may be generated."""

    def generate(self, prompts, **kw):
        raise AssertionError(f"generate() called with {len(prompts)} prompts")


class Interrupting:
    """Engine wrapper that dies after `after` generate calls (a crash mid-run)."""

    def __init__(self, engine, after):
        self.engine, self.after, self.prompts_seen = engine, after, 0

    def generate(self, prompts, **kw):
        if self.after == 0:
            raise KeyboardInterrupt
        self.after -= 1
        self.prompts_seen += len(prompts)
        return self.engine.generate(prompts, **kw)


class TooLong:
    """An engine that finds the prompts of the questions in ``texts`` too long."""

    def __init__(self, engine, texts):
        self.engine, self.texts = engine, texts

    def generate(self, prompts, **kw):
        for i, p in enumerate(prompts):
            if any(t in json.dumps(p, default=str) for t in self.texts):
                raise PromptTooLongError(i, 99_999, 10)
        return self.engine.generate(prompts, **kw)


class Recording:
    """Engine wrapper keeping every completion and the sampling settings it was called with."""

    def __init__(self, engine):
        self.engine, self.completions, self.samplings = engine, [], []

    def generate(self, prompts, **kw):
        outs = self.engine.generate(prompts, **kw)
        self.samplings.append(kw["sampling"])
        self.completions.extend(outs)
        return outs
