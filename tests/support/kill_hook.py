"""A deterministic crash for the training tests, loaded in every verl process through
``VERL_USE_EXTERNAL_MODULES=kill_hook`` (with ``tests/support/`` on ``PYTHONPATH``).

``SOFT_SPATIAL_TEST_KILL_AFTER_SAVE=N`` SIGKILLs the process that wrote step N's checkpoint (the
TaskRunner, where verl's trainer loop runs) as soon as verl's ``_save_checkpoint`` returns: the
run dies with that checkpoint on disk, whatever else the step still had to do. Nothing happens
without the variable."""
import os
import signal

STEP = os.environ.get("SOFT_SPATIAL_TEST_KILL_AFTER_SAVE")

if STEP:
    from soft_spatial.plugin import register

    register()  # the CPU platform before verl's trainer imports
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    _save = RayPPOTrainer._save_checkpoint

    def _save_then_die(self):
        _save(self)
        if self.global_steps == int(STEP):
            os.kill(os.getpid(), signal.SIGKILL)

    RayPPOTrainer._save_checkpoint = _save_then_die
