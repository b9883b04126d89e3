"""soft_spatial.softthink.noise: the noise key written and read in one place, the seeds, the
uniforms and the key's wire entry (docs/design.md §2.2).

The references here are independent of the module: the key's text as the trainer wrote it before
the module existed, BLAKE2b and a pure-Python splitmix64 for the seeds and uniforms, and values
recorded from the implementation the module replaced (bit-for-bit reproducibility of rollouts).
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from splitmix_ref import uniform_bits
from soft_spatial.softthink.noise import (NOISE_KEY, NOISE_PARAM, NOISE_ROWS, NoiseKey, noise_param,
                                          noise_uniforms, pop_noise_param, request_row_seed,
                                          request_seed, row_seed, seed_tensor)

COUNTS = st.integers(0, 2 ** 70)


def old_key_text(validate: bool, step: int, call: int, position: int) -> str:
    """The key's text as ``settings.noise_key`` wrote it before this module."""
    return f"{'val' if validate else 'train'}{int(step)}.{int(call)}/{int(position)}"


def old_request_row_seed(base: int, key: str) -> int:
    digest = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
    return ((base * 1_000_003 + digest) % 2 ** 62) * 10_007 + 0




# -- the key --------------------------------------------------------------------------------------
@given(validate=st.booleans(), step=COUNTS, call=COUNTS, position=COUNTS)
@settings(max_examples=300, deadline=None)
def test_key_round_trips_through_its_text(validate, step, call, position):
    key = NoiseKey(validate, step, call, position)
    text = str(key)
    assert text == old_key_text(validate, step, call, position)  # the format did not change
    assert NoiseKey.parse(text) == key
    assert str(NoiseKey.parse(text)) == text
    assert key.batch == text.rpartition("/")[0]  # what the local_soft server grouped by
    assert NoiseKey(validate, step, call, position + 1).batch == key.batch


@given(st.from_regex(r"(train|val)(0|[1-9][0-9]{0,30})\.(0|[1-9][0-9]{0,30})/(0|[1-9][0-9]{0,30})",
                     fullmatch=True))
@settings(max_examples=300, deadline=None)
def test_every_well_formed_text_parses_back_to_itself(text):
    assert str(NoiseKey.parse(text)) == text


def test_keys_are_values():
    a, b = NoiseKey(False, 3, 0, 17), NoiseKey.parse("train3.0/17")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert NoiseKey(False, 3, 0, 17) != NoiseKey(True, 3, 0, 17)
    with pytest.raises(AttributeError):
        a.step = 4  # frozen
    assert NoiseKey(False, np.int64(3), np.int32(0), np.int64(17)) == a  # numpy ints from verl
    assert type(NoiseKey(False, np.int64(3), 0, 0).step) is int


@pytest.mark.parametrize("bad", ["", "train", "train3.0", "train3/17", "train3.0/", "test3.0/17",
                                 "TRAIN3.0/17", "train-1.0/17", "train3.-1/17", "train3.0/-1",
                                 "train03.0/17", "train3.00/17", "train3.0/017", "train3.0/17/2",
                                 " train3.0/17", "train3.0/17\n", "train3.0/x", "train3.0/1e3",
                                 "train3.0/١٧", "val", "r0-prefill", "3f2a9c0e-uuid"])
def test_parse_names_the_bad_key(bad):
    with pytest.raises(ValueError) as e:
        NoiseKey.parse(bad)
    assert repr(bad) in str(e.value) and "train3.0/17" in str(e.value)  # the key and an example


@pytest.mark.parametrize("bad", [None, 17, b"train3.0/17", NoiseKey(False, 3, 0, 17)])
def test_parse_refuses_what_is_not_text(bad):
    with pytest.raises(ValueError, match="bad noise key"):
        NoiseKey.parse(bad)


def test_fields_are_checked():
    with pytest.raises(ValueError, match="NoiseKey.step must be >= 0, got -1"):
        NoiseKey(False, -1, 0, 0)
    with pytest.raises(ValueError, match="NoiseKey.position must be >= 0"):
        NoiseKey(True, 0, 0, -5)
    with pytest.raises(TypeError, match="NoiseKey.call must be an integer, got 1.5"):
        NoiseKey(False, 0, 1.5, 0)
    with pytest.raises(TypeError, match="NoiseKey.step must be an integer, got '3'"):
        NoiseKey(False, "3", 0, 0)
    with pytest.raises(TypeError, match="NoiseKey.validate must be a bool"):
        NoiseKey("val", 0, 0, 0)


# -- the seeds and the uniforms -------------------------------------------------------------------
def test_seeds_are_pure_functions_of_their_inputs():
    assert row_seed(3, 2) == 3 * 10_007 + 2
    assert request_seed(0, "a") == request_seed(0, "a") != request_seed(1, "a")
    assert request_row_seed(5, "rid-1") == row_seed(request_seed(5, "rid-1"), 0)
    assert 0 <= request_seed(2 ** 40, "x") < 2 ** 62
    key = NoiseKey(False, 3, 0, 17)
    assert request_seed(7, key) == request_seed(7, "train3.0/17")  # a key seeds as its text


@given(validate=st.booleans(), step=COUNTS, call=COUNTS, position=COUNTS,
       base=st.integers(0, 2 ** 48))
@settings(max_examples=100, deadline=None)
def test_request_seeds_equal_the_former_formula(validate, step, call, position, base):
    key = NoiseKey(validate, step, call, position)
    want = old_request_row_seed(base, old_key_text(validate, step, call, position))
    assert request_row_seed(base, key) == request_row_seed(base, str(key)) == want


# (base, key, its row seed, U · 2^24 of its block at step 7), recorded from the former
# settings.noise_key / settings.request_row_seed / mixture.noise_uniforms
RECORDED = [
    (0, NoiseKey(False, 1, 0, 0), 6184917849609746806401,
     [1094153, 11206359, 1331204, 3621475, 9146042, 3559655]),
    (0, NoiseKey(True, 0, 1, 5), 36099137681818647787158,
     [6547402, 14007481, 12469373, 16504449, 9587512, 1968140]),
    (3, NoiseKey(False, 12, 2, 255), 43408188695533590378779,
     [3581040, 9096027, 483982, 13104946, 15092156, 667758]),
    (2 ** 40, NoiseKey(False, 100_000, 0, 17), 34850049300317026109256,
     [7970346, 7884152, 15045648, 9404731, 6026330, 153504]),
]


@pytest.mark.parametrize("base,key,seed,block", RECORDED, ids=[str(r[1]) for r in RECORDED])
def test_fixed_keys_draw_the_former_noise(base, key, seed, block):
    assert request_row_seed(base, key) == seed
    assert uniform_bits(seed, 7, 6) == block  # the reference reproduces the record
    u = noise_uniforms(seed_tensor([seed]), 7, 6)[0]
    assert u.dtype == torch.float32
    assert [int(x) for x in (u.double() * 2 ** 24).tolist()] == block
    assert torch.equal(u, torch.tensor(block, dtype=torch.float64).div(2 ** 24).float())


def test_a_batch_of_keys_draws_each_keys_block():
    keys = [NoiseKey(v, s, c, p) for v in (False, True) for s in (0, 5) for c in (0, 1)
            for p in (0, 3, 255)]
    seeds = [request_row_seed(11, k) for k in keys]
    steps = torch.arange(len(keys)) * 3
    u = noise_uniforms(seed_tensor(seeds), steps, 6)
    for r, (seed, t) in enumerate(zip(seeds, steps.tolist())):
        assert [int(x) for x in (u[r].double() * 2 ** 24).tolist()] == uniform_bits(seed, t, 6)


# -- the wire -------------------------------------------------------------------------------------
def test_wire_names_are_unchanged():
    assert (NOISE_KEY, NOISE_ROWS, NOISE_PARAM) == ("soft_noise_key", "soft_noise_rows",
                                                    "soft_noise")


def test_noise_param_round_trip():
    key = NoiseKey(True, 2, 1, 9)
    entry = noise_param(key, np.int64(64))
    assert entry == {NOISE_PARAM: {"key": "val2.1/9", "rows": 64}}
    assert type(entry[NOISE_PARAM]["rows"]) is int
    assert noise_param("val2.1/9", 64) == entry  # the column holds the key's text
    params = {"temperature": 1.0, **entry}
    assert pop_noise_param(params) == (key, 64)
    assert params == {"temperature": 1.0}  # removed: SGLang and the engine never see it
    assert pop_noise_param(params) == (None, 0)
    assert pop_noise_param({NOISE_PARAM: None}) == (None, 0)
    assert pop_noise_param({NOISE_PARAM: {"key": "train0.0/3"}}) == (NoiseKey(False, 0, 0, 3), 0)


def test_a_malformed_key_on_the_wire_is_named():
    with pytest.raises(ValueError, match=r"bad noise key 'train3\.0'"):
        pop_noise_param({NOISE_PARAM: {"key": "train3.0", "rows": 4}})
