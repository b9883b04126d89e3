"""Slurm hostlist expansion (soft_spatial/launch/hostlist.py) and the launcher's node list built on it.

The table is written by hand from Slurm's semantics (`scontrol show hostnames`, src/common/hostlist.c):
commas and whitespace separate host expressions, except inside brackets; a bracket group is a list of
numbers and lo-hi ranges, zero-padded to the width of the lower bound as written; several groups in one
name give every combination, the leftmost varying slowest; order and duplicates are kept. The property
tests compress generated host lists with a small compressor of their own and expand them back.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soft_spatial.launch import __main__ as cli
from soft_spatial.launch import hostlist, plan

EXPANSIONS = [
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),  # issue 34, item 6
    ("gpu01", ["gpu01"]),
    ("gpu-a gpu-b", ["gpu-a", "gpu-b"]),
    ("gpu-a,gpu-b,gpu-c", ["gpu-a", "gpu-b", "gpu-c"]),
    (" gpu-a\ngpu-b\t gpu-c\n", ["gpu-a", "gpu-b", "gpu-c"]),
    ("a,,b,", ["a", "b"]),  # empty entries between separators are skipped
    ("n[7]", ["n7"]),
    ("n[007]", ["n007"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),  # width 1: no padding, 10 and 11 as they are
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("n[1-010]", ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"]),  # the lower bound's width
    ("n[0-0]", ["n0"]),
    ("n[3,1,2]", ["n3", "n1", "n2"]),  # order as written, not sorted
    ("n[1-2,1]", ["n1", "n2", "n1"]),  # duplicates kept
    ("a,a", ["a", "a"]),
    ("gpu[01-02],login,gpu[01]", ["gpu01", "gpu02", "login", "gpu01"]),
    ("gpu[1-2].ib", ["gpu1.ib", "gpu2.ib"]),  # text after the brackets
    ("gpu[1-2]-ib[0]", ["gpu1-ib0", "gpu2-ib0"]),
    ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
    ("r[1-2]c[3,5]n[0-1]", ["r1c3n0", "r1c3n1", "r1c5n0", "r1c5n1",
                            "r2c3n0", "r2c3n1", "r2c5n0", "r2c5n1"]),
    ("[1-2]", ["1", "2"]),
    ("node1[0-2]", ["node10", "node11", "node12"]),
    ("a[1-2],b[3] c", ["a1", "a2", "b3", "c"]),
    ("", []),
    (" , \n", []),
]


@pytest.mark.parametrize("expr, hosts", EXPANSIONS)
def test_expand_follows_slurm(expr, hosts):
    assert hostlist.expand(expr, "SOFT_SPATIAL_NODELIST") == hosts


MALFORMED = [
    ("gpu[01-03", "'\\[' without '\\]'"),
    ("gpu01-03]", "'\\]' without '\\['"),
    ("gpu[01-03,07", "'\\[' without '\\]'"),
    ("a[1]]", "'\\]' without '\\['"),
    ("a[[1]]", "nested"),
    ("a[3-1]", "'3-1'.*backwards"),
    ("gpu[07-03]", "'07-03'.*backwards"),
    ("a[]", "empty brackets"),
    ("a[1,]", "empty item"),
    ("a[,1]", "empty item"),
    ("a[1,,2]", "empty item"),
    ("a[x]", "'x' is not a number"),
    ("a[1-x]", "'1-x' is not a number"),
    ("a[1-]", "'1-' is not a number"),
    ("a[-1]", "'-1' is not a number"),
    ("a[1-2-3]", "'1-2-3' is not a number"),
    ("a[+1]", "'\\+1' is not a number"),
    ("a[1, 2]", "' 2' is not a number"),
    ("a[000x333]", "'000x333' is not a number"),
    ("a[0-70000]", "more than 65536 hosts"),
    ("a[0-300]b[0-300]", "more than 65536 hosts"),
    ("a[1234567890123456789]", "number too long"),
    ("gpu{feature}", "hostlist functions"),
]


@pytest.mark.parametrize("var", plan.NODELIST_VARS)
@pytest.mark.parametrize("expr, why", MALFORMED)
def test_malformed_hostlists_are_refused_naming_the_variable(expr, why, var):
    with pytest.raises(hostlist.HostlistError, match=why) as e:
        hostlist.expand(f"ok1,{expr},ok2", var)
    assert str(e.value).startswith(f"{var}='ok1,{expr},ok2': ")
    with pytest.raises(plan.LaunchError, match=why) as e:  # the launcher's error is the same line
        plan.node_list({var: expr})
    assert str(e.value).startswith(f"{var}={expr!r}: ")


# --- property tests: compress a generated list, expand it back ------------------------------------------
PREFIXES = ["gpu", "n", "node-", "rack1-gpu", "a.b_c", "x9y", ""]
SUFFIXES = ["", ".ib", "-eth0", "z"]
PLAIN = ["login", "head-node", "gpu-a", "a.b"]


def ranges(numbers: list[int], width: int) -> str:
    """A bracket group's text: consecutive runs as lo-hi, each number padded to ``width``."""
    items, i = [], 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        lo, hi = f"{numbers[i]:0{width}d}", f"{numbers[j]:0{width}d}"
        items.append(lo if i == j else f"{lo}-{hi}")
        i = j + 1
    return ",".join(items)


def numbers_in(host: str) -> dict[tuple, int]:
    """Each number of ``host``: (text before it, its width, text after it) -> the number, the last first."""
    return {(host[:m.start()], len(m.group()), host[m.end():]): int(m.group())
            for m in reversed(list(re.finditer(r"[0-9]+", host)))}


def compress(hosts: list[str], seps: list[str], bracket_singles: bool) -> str:
    """One bracket group per run of neighbours that differ in one number (of one width)."""
    groups: list[list] = []  # [(prefix, width, suffix), [numbers], [hosts]], or [host, None, [host]]
    for h in hosts:
        mine = numbers_in(h)
        last = groups[-1] if groups else None
        if last and last[1] is not None and len(last[2]) == 1:  # a group of one may pick its number
            shared = [k for k in mine if k in numbers_in(last[2][0])]
            if shared:
                last[0], last[1] = shared[0], [numbers_in(last[2][0])[shared[0]]]
        if last and last[1] is not None and last[0] in mine:
            last[1].append(mine[last[0]])
            last[2].append(h)
        elif mine:
            key = next(iter(mine))
            groups.append([key, [mine[key]], [h]])
        else:
            groups.append([h, None, [h]])
    exprs = []
    for key, numbers, members in groups:
        if numbers is None:
            exprs.append(key)
        elif len(numbers) == 1 and not bracket_singles:
            exprs.append(members[0])
        else:
            exprs.append(f"{key[0]}[{ranges(numbers, key[1])}]{key[2]}")
    return "".join(e + seps[i % len(seps)] for i, e in enumerate(exprs)).rstrip(" ,\n\t")


numbered = st.builds(
    lambda prefix, start, count, width, suffix: [f"{prefix}{n:0{width}d}{suffix}"
                                                 for n in range(start, start + count)],
    st.sampled_from(PREFIXES), st.integers(0, 1100), st.integers(1, 12), st.integers(1, 4),
    st.sampled_from(SUFFIXES),
)  # a run of consecutive numbers (zero-padded or not, crossing 9/10, 99/100, ... at times)
plain = st.sampled_from(PLAIN).map(lambda h: [h])


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_compressed_lists_expand_back(data):
    hosts = [h for run in data.draw(st.lists(st.one_of(numbered, plain), min_size=1, max_size=8))
             for h in run]
    if data.draw(st.booleans(), label="shuffled"):
        hosts = data.draw(st.permutations(hosts))
    seps = data.draw(st.lists(st.sampled_from([",", " ", "\n", ", "]), min_size=1, max_size=3))
    expr = compress(hosts, seps, data.draw(st.booleans(), label="bracket_singles"))
    assert hostlist.expand(expr, "SOFT_SPATIAL_NODELIST") == hosts, expr


@settings(max_examples=200, deadline=None)
@given(prefix=st.sampled_from(PREFIXES), middle=st.sampled_from(["-gpu", "c", "-"]),
       suffix=st.sampled_from(SUFFIXES),
       outer=st.lists(st.integers(0, 120), min_size=1, max_size=5), outer_width=st.integers(1, 3),
       inner=st.lists(st.integers(0, 120), min_size=1, max_size=5), inner_width=st.integers(1, 3))
def test_two_bracket_groups_expand_to_every_combination(prefix, middle, suffix, outer, outer_width,
                                                       inner, inner_width):
    hosts = []
    for a in outer:
        for b in inner:
            hosts.append(f"{prefix}{a:0{outer_width}d}{middle}{b:0{inner_width}d}{suffix}")
    expr = f"{prefix}[{ranges(outer, outer_width)}]{middle}[{ranges(inner, inner_width)}]{suffix}"
    assert hostlist.expand(f"{expr},login", "SLURM_JOB_NODELIST") == hosts + ["login"], expr


def test_the_compressor_writes_slurm_notation():
    """The test's compressor against hand-written notation (so that the property tests mean something)."""
    assert compress(["gpu01", "gpu02", "gpu03", "gpu07"], [","], False) == "gpu[01-03,07]"
    assert compress(["n9", "n10", "login", "n3"], [" "], False) == "n9 n10 login n3"
    assert compress(["n9", "n10", "n11.ib"], [","], True) == "n[9],n[10],n[11].ib"
    assert compress(["r1-n1-eth0", "r1-n2-eth0", "r2-n2-eth0"], [","], False) == "r1-n[1-2]-eth0,r2-n2-eth0"
    assert compress(["r1-n1-eth0", "r2-n1-eth0", "r2-n2-eth0"], [" "], True) == "r[1-2]-n1-eth0 r2-n2-eth[0]"
    assert ranges([3, 4, 5, 9, 8], 2) == "03-05,09,08"


# --- the launcher's node list ---------------------------------------------------------------------------
@pytest.mark.parametrize("var", plan.NODELIST_VARS)
def test_node_list_expands_a_slurm_hostlist(var, tmp_path):
    env = {var: "gpu[01-03,07]", "SLURM_NNODES": "4", "PATH": str(tmp_path)}  # no scontrol needed
    assert plan.node_list(env) == ["gpu01", "gpu02", "gpu03", "gpu07"]


def test_the_override_comes_before_slurms_list():
    env = {"SOFT_SPATIAL_NODELIST": "b[1-2]", "SLURM_JOB_NODELIST": "a[1-2]", "SLURM_NNODES": "2"}
    assert plan.node_list(env) == ["b1", "b2"]


@pytest.mark.parametrize("var", plan.NODELIST_VARS)
def test_node_count_is_checked_against_slurm_nnodes(var):
    with pytest.raises(plan.LaunchError) as e:
        plan.node_list({var: "gpu[01-03,07]", "SLURM_NNODES": "2"})
    assert f"{var}='gpu[01-03,07]' gives 4 nodes but SLURM_NNODES=2" in str(e.value)


def test_a_bad_slurm_nnodes_is_a_clear_error():
    with pytest.raises(plan.LaunchError, match="SLURM_NNODES='two'"):
        plan.node_list({"SOFT_SPATIAL_NODELIST": "a,b", "SLURM_NNODES": "two"})


@pytest.mark.parametrize("var", plan.NODELIST_VARS)
def test_a_node_named_twice_is_refused(var):
    with pytest.raises(plan.LaunchError, match=f"{var}='gpu\\[1-2\\],gpu1' names gpu1 more than once"):
        plan.node_list({var: "gpu[1-2],gpu1"})


@pytest.mark.parametrize("var", plan.NODELIST_VARS)
def test_a_blank_node_list_is_refused(var):
    with pytest.raises(plan.LaunchError, match=f"{var}=' , ' names no node"):
        plan.node_list({var: " , "})


def test_nodes_subcommand_prints_the_expanded_list(capsys):
    assert cli.main(["nodes"], {"SOFT_SPATIAL_NODELIST": "gpu[01-03,07]", "SLURM_NNODES": "4"}) == 0
    assert capsys.readouterr().out.split() == ["count=4", "node[0]=gpu01", "node[1]=gpu02",
                                               "node[2]=gpu03", "node[3]=gpu07"]


def test_nodes_subcommand_reports_a_malformed_list(capsys):
    assert cli.main(["nodes"], {"SOFT_SPATIAL_NODELIST": "gpu[01-03"}) == 1
    assert "SOFT_SPATIAL_NODELIST='gpu[01-03': '[' without ']'" in capsys.readouterr().err
