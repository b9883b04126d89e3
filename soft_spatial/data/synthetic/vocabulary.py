"""The benchmark's words for a tokenizer: `corpus` (texts a small BPE should know as whole words) and
`path_phrases` (the path board's cell names, to be added as whole tokens)."""
from __future__ import annotations

from collections.abc import Sequence

from soft_spatial.data.prompt import SYSTEM_PROMPT
from soft_spatial.data.synthetic.canvas import COLORS, DIRECTIONS, SHAPES
from soft_spatial.data.synthetic.config import PATH_TASKS, PathKnobs
from soft_spatial.data.synthetic.paths import MOVES, QUARTERS, cell_name
from soft_spatial.data.synthetic.scenes import CELLS, EGO_OPTIONS, TURNS


def corpus(repeat: int = 20, tasks: Sequence[str] = ()) -> list[str]:
    """Texts a tokenizer for this benchmark should know as whole words: our system prompt, every
    question template, option and reasoning word, in the chat layout (``repeat`` times each, so a
    BPE trained on them merges these words first). With a path task among ``tasks``, also the
    path questions' words: the board's cell names, the moves, ``circle``, ``:`` and the quarters
    (without one, the texts are exactly those of the scene tasks)."""

    words = (list(COLORS) + list(SHAPES) + list(DIRECTIONS) + list(EGO_OPTIONS)
             + list(EGO_OPTIONS.values()) + ["above", "below", "facing", "turned", "closest"]
             + [str(k) for k in range(10)] + [f"{c}. " for c in "ABCD"] + list(TURNS)
             + [w for row in CELLS for w in row] + ["Scene:", "at", "pointing", "size", "sizes",
                                                     "largest", "arrow"])
    texts = [SYSTEM_PROMPT, "Where is the red square relative to the blue circle?",
             "Which shape is closest to the camera?",
             "Imagine you stand at the green arrow, facing the way it points. Where is the red "
             "circle?",
             "The blue arrow is turned 90 degrees clockwise in the picture plane. Which way does it "
             "point after the turn?", "How many yellow shapes are in the picture?",
             " ".join(words), "\n".join(words + ["system", "user", "assistant"]),
             "\n".join(f"{c}. {w}" for c, w in zip("ABCD", words)),
             "Scene: red square at northwest; green arrow at center, pointing north; blue "
             "circle at southeast, size 5."]
    if any(t in PATH_TASKS for t in tasks):
        names = [cell_name((x, y)) for y in range(6) for x in range(6)]
        path_words = names + list(MOVES) + list(QUARTERS) + ["circle", ":", "grey", "block", "purple"]
        texts += [" ".join(path_words), "\n".join(path_words),
                  "Scene: red square at d2; green square at b1; purple circle at d1; grey block at "
                  "d4. A robot starts on one of the squares and moves east, north, south, west. "
                  "The border and grey blocks stop it. It passed over the purple circle. In which "
                  "quarter of the board is it now?",
                  "east c1 north c1 circle west b1 south b2 : b2 northwest",
                  "\n".join(f"{c}. {q}" for c, q in zip("ABCD", QUARTERS))]
    return texts * repeat


def path_phrases(tasks: Sequence[str] = (), grid: int = PathKnobs.grid) -> list[str]:
    """With a path task among ``tasks``, the board's cell names, each after a space (`` a1`` ..),
    to be added to a small BPE as whole tokens (``build_tiny_model(phrases=...)``): Qwen's
    pre-tokenizer splits every digit off, so no merge can make a cell one token, and the warm
    start's soft view needs each cell to be one candidate. Empty without a path task."""
    if not any(t in PATH_TASKS for t in tasks):
        return []
    return [" " + cell_name((x, y)) for y in range(grid) for x in range(grid)]
