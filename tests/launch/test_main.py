"""``python -m soft_spatial.launch`` (`soft_spatial.launch.__main__`): options anywhere on the line,
the environment as their defaults, clear errors, and the ``nodes`` subcommand."""

from __future__ import annotations

import pytest

from soft_spatial.launch import __main__ as cli
from soft_spatial.launch import plan


def test_options_anywhere_environment_defaults_and_command():
    env = {"SOFT_SPATIAL_RAY_PORT": "7000", "DRY_RUN": "1", "SOFT_SPATIAL_WAIT_TIMEOUT": "12"}
    opts = cli.parse_args(["--num-cpus", "8", "launch", "--nodes", "2", "--no-trainer-args",
                              "--port", "7100", "--", "python", "-m", "x", "--port", "1"], env)
    assert (opts.subcommand, opts.num_cpus, opts.nodes, opts.port) == ("launch", 8, 2, 7100)
    assert opts.cmd == ["python", "-m", "x", "--port", "1"]  # after --: the command's own
    assert opts.dry_run and not opts.trainer_args and opts.timeout == 12.0
    assert cli.parse_args(["wait"], env).port == 7000  # the environment is the default


@pytest.mark.parametrize("argv, message", [
    (["launch"], "needs a command after --"),
    (["--num-gpus", "four", "head"], "--num-gpus must be a number"),
    (["--local-nodes", "0", "launch", "--", "x"], "--local-nodes must be >= 1"),
])
def test_bad_options_are_clear_errors(argv, message):
    with pytest.raises(plan.LaunchError, match=message):
        cli.parse_args(argv, {})


def test_unknown_option_and_two_subcommands_exit_2(capsys):
    for argv in (["--bogus", "head"], ["head", "worker"], []):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(argv, {})
        assert e.value.code == 2


def test_nodes_subcommand_prints_the_list(capsys):
    assert cli.main(["nodes"], {"SOFT_SPATIAL_NODELIST": "a,b"}) == 0
    assert capsys.readouterr().out.split() == ["count=2", "node[0]=a", "node[1]=b"]
