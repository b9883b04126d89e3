# shellcheck shell=bash
# Environment for soft_spatial Slurm jobs, sourced by slurm/*.sbatch after ROOT is set: the checkout's
# virtualenv (python -m soft_spatial.launch runs from it) and the plugin module. The launcher forwards
# the variables listed in soft_spatial/infra/ray_env.py to every `ray start` and to the training command.
# Export a variable before `sbatch` to override a default here (sbatch passes the submitting shell's
# environment on by default).

VENV="${SOFT_SPATIAL_VENV:-$ROOT/.venv}"
if [[ ! -f "$ROOT/soft_spatial/launch/__main__.py" ]]; then
  echo "slurm/env.sh: $ROOT is not a soft_spatial checkout; submit from it or set SOFT_SPATIAL_ROOT" >&2
  exit 1
fi
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
export PYTHONUNBUFFERED=1
