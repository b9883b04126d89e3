# shellcheck shell=bash
# Environment for soft_spatial Slurm jobs, sourced by slurm/*.sbatch after ROOT is set: the checkout's
# virtualenv and the plugin variables that every Ray process needs. scripts/ray_cluster.sh forwards them
# to every `ray start` and, as ++ray_kwargs.ray_init.runtime_env.env_vars.*, to the training command.
# Export a variable before `sbatch` to override a default here (sbatch passes the submitting shell's
# environment on by default).

VENV="${SOFT_SPATIAL_VENV:-$ROOT/.venv}"
if [[ -f "$VENV/bin/activate" ]]; then
  # The activate script reads unset variables.
  set +u
  # shellcheck source=/dev/null
  source "$VENV/bin/activate"
  set -u
else
  echo "slurm/env.sh: no virtualenv at $VENV (run scripts/setup.sh, or set SOFT_SPATIAL_VENV)" >&2
fi

# verl imports this module in every process at `import verl` (plugin registration).
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-soft_spatial.plugin}"
# SGLang rollout plugins (SGLANG_PLUGINS, SGLANG_EXTERNAL_MODEL_PACKAGE), VERL_PLATFORM, HF_HUB_OFFLINE
# and PYTHONPATH are forwarded when set; name more variables in SOFT_SPATIAL_FORWARD_ENV.
export PYTHONUNBUFFERED=1
