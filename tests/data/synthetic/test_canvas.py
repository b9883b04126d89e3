"""Scene placement (soft_spatial/data/synthetic/canvas.py): on a grid, one object inside each used
cell, read from the pixels."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from soft_spatial.data.synthetic import SyntheticConfig, generate_split


def test_grid_layout_puts_one_object_in_each_used_cell():
    items = generate_split(60, 2, "train", SyntheticConfig(size=96, cell=32))
    for it in items:
        pixels = np.asarray(it.image.convert("RGB"))
        objects, n = ndimage.label(np.any(pixels != np.array([225, 225, 225]), axis=-1))
        cells = []
        for k in range(1, n + 1):
            ys, xs = np.nonzero(objects == k)
            cell = {(x // 32, y // 32) for x, y in zip(xs, ys)}
            assert len(cell) == 1, (it.task, it.question)  # inside one 32-pixel cell
            cells += cell
        if it.task != "depth_order" or len(it.options) > 1:
            assert len(cells) == len(set(cells))  # and no cell holds two objects
    with pytest.raises(ValueError, match="3x3 cells"):
        SyntheticConfig(size=64)
