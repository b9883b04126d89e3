"""A synthetic spatial benchmark in the OmniSpatial release layout: ``python -m soft_spatial.data.synthetic``.

Scenes are rendered with PIL (coloured squares, circles, triangles and arrows on a grey canvas) and
every question is multiple choice with 2-4 options, so the whole pipeline (``data.prepare``,
``soft_spatial.train``, ``soft_spatial.eval``) reads it through the real OmniSpatial loader::

    OUT/OmniSpatial-train/data.json + <task_type>/<image_no>.png
    OUT/OmniSpatial-test/data.json  + <task_type>/<image_no>.png     (held out, disjoint)
    OUT/README.md                                                    (tasks, knobs, chance levels)

Eight tasks, each mapped onto one OmniSpatial (task_type, sub_task_type) so per-sub-task accuracy
is per-task accuracy: five scene tasks (the default task list) and three path tasks (asked for by
name, ``--tasks path_known,path_two,path_three``; always four options, the board's quarters):

============================  ==============================================  =====================
task                          question                                        OmniSpatial type
============================  ==============================================  =====================
``relative_position``         where is the red square relative to the blue    Spatial_Interaction /
                              circle? (left / right / above / below)          Localization
``depth_order``               which shape is closest to the camera? (the      Spatial_Interaction /
                              biggest; closer shapes occlude farther ones)    Geospatial_Strategy
``egocentric``                standing at the green arrow, facing where it    Perspective_Taking /
                              points, is the red square on your left, right,  Egocentric
                              in front or behind?
``mental_rotation``           the arrow is turned 90° clockwise: which way    Dynamic_Reasoning /
                              does it point now?                              Manipulation
``counting``                  how many red shapes are there?                  Complex_Logic /
                                                                              Pattern_Recognition
``path_known``                a robot starts on the square of a 6×6 board     Dynamic_Reasoning /
                              and makes 8 compass moves (the border and grey  Motion_Analysis
                              blocks stop it): in which quarter is it now?
``path_two``                  the same from one of 2 squares; the true start  Spatial_Interaction /
                              is the one whose path passes the purple circle  Traffic_Analysis
``path_three``                the same from one of 3 squares                  Perspective_Taking /
                                                                              Hypothetical
============================  ==============================================  =====================

Every record also carries ``synthetic_task``, ``difficulty`` and ``reasoning`` (a few words that
decide the answer, e.g. ``"up, turned clockwise: right"``; for a path question the true path, move
by move), which the warm start (:mod:`soft_spatial.lab.learning.warmstart`) uses as the text inside
``<think>``; a path record also carries its ground truth (moves, branches, true branch, t*).

Answer letters are balanced: for every option count the correct position cycles through a
shuffled deck of all positions. Scenes use a grid layout by default (one object per 32-pixel
cell, the tiny models' image tokens; ``--layout free`` places objects anywhere). Everything is a
pure function of (split, seed, knobs); the test split draws from its own random stream and any
test item whose image and question also occur in train is redrawn, so the splits are disjoint.

Key files (each imports only those above it):

==================  ==============================================================================
``config.py``       what to generate: the task tables, `Difficulty`, `PathKnobs`,
                    `SyntheticConfig` (each knob's default once, explained; bad knobs refused)
``canvas.py``       drawing: the palette, shapes and arrows, `Canvas` (placement on a grid or free)
``item.py``         one question before it is written (`Item`) and the balanced letter decks
``scenes.py``       the five scene tasks, their description in words, `make_item`
``paths.py``        the three path tasks: the board and its moves, the hard constraints, the
                    audited shortcuts, the rendering and the words, the balancing pool selection
``split.py``        `generate_split` (tasks round-robin, disjoint from train) and chance levels
``release.py``      the OmniSpatial release layout on disk: `write_benchmark`, the README, the
                    readers of a written split (`read_rows`, `read_reasoning`)
``vocabulary.py``   the words a tokenizer should know: `corpus`, `path_phrases`
``cli.py``          the command line (`main`); ``__main__.py`` runs it
==================  ==============================================================================

The path tasks' leak audits (heuristics and learned probes) are ``soft_spatial/data/path_audit.py``.
"""
from __future__ import annotations

from soft_spatial.data.synthetic.canvas import COLORS
from soft_spatial.data.synthetic.cli import main
from soft_spatial.data.synthetic.config import (ALL_TASKS, DIFFICULTIES, PATH_TASKS,
                                                SUB_TASK_TO_TASK, TASKS, Difficulty, PathKnobs,
                                                SyntheticConfig)
from soft_spatial.data.synthetic.item import Item
from soft_spatial.data.synthetic.paths import (MOVES, PATH_CANDIDATES, QUARTERS, cell_name,
                                               path_shortcut_accuracy)
from soft_spatial.data.synthetic.release import (chance_levels_of_release, read_reasoning,
                                                 read_rows, write_benchmark)
from soft_spatial.data.synthetic.split import chance_levels, generate_split
from soft_spatial.data.synthetic.vocabulary import corpus, path_phrases

__all__ = ["TASKS", "PATH_TASKS", "ALL_TASKS", "SUB_TASK_TO_TASK", "PATH_CANDIDATES", "MOVES",
           "QUARTERS", "COLORS", "cell_name", "Difficulty", "DIFFICULTIES", "PathKnobs",
           "SyntheticConfig", "Item", "generate_split", "write_benchmark", "chance_levels",
           "chance_levels_of_release", "corpus", "path_shortcut_accuracy", "read_reasoning",
           "read_rows", "path_phrases", "main"]
