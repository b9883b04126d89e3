"""The cluster launcher: Ray on every node of a Slurm allocation (or on this machine), then the training
command on the head (``python -m soft_spatial.launch``; docs/launch.md).

The flow of ``launch``, one module per step:

* ``__main__``: the command line (flags, each with its environment variable) into ``plan.Options``,
  and one function per subcommand;
* ``plan``: the node plan, with no process of its own: the allocation's nodes (Slurm hostlists such as
  ``gpu[01-03,07]`` expanded by ``hostlist``, as ``scontrol show hostnames`` does), CPUs and GPUs per node,
  ports, the head's address, the ``ray start`` command of each node and the driver command with its
  Hydra overrides (``plan_launch``);
* ``cluster``: the Ray processes of one run directory: start them, wait until every node is alive,
  run the driver, and tear everything down on exit, INT, TERM or HUP (the tether's reaper: each
  process's session and the run's marker).
"""
