"""Image helpers for the training parquet: the pixel budget, decoding and PNG encoding."""

from __future__ import annotations

import io
import math
from pathlib import Path

from PIL import Image

from soft_spatial.data.record import ImageRef

PATCH_FACTOR = 28
#: training budget: 128 merged patches of 28x28 pixels
TRAIN_MAX_PIXELS = 128 * PATCH_FACTOR * PATCH_FACTOR


def budget_size(
    width: int, height: int, max_pixels: int = TRAIN_MAX_PIXELS, factor: int = PATCH_FACTOR
) -> tuple[int, int]:
    """(width, height) for the training budget.

    The image is scaled down (never up) so that its area is at most ``max_pixels``, keeping the
    aspect ratio, and each side is then floored to a multiple of ``factor``. A side shorter than
    ``factor`` becomes ``factor``: the only case where a side grows, because the vision encoder
    needs at least one patch. If that clamp pushes the area over the budget (extreme aspect
    ratios), the long side is floored further so the budget still holds.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max_pixels < factor * factor:
        raise ValueError(f"max_pixels={max_pixels} is below one {factor}x{factor} patch")
    scale = min(1.0, math.sqrt(max_pixels / (width * height)))
    new_w = max(factor, math.floor(width * scale / factor) * factor)
    new_h = max(factor, math.floor(height * scale / factor) * factor)
    if new_w * new_h > max_pixels:
        if new_w >= new_h:
            new_w = max(factor, (max_pixels // new_h) // factor * factor)
        else:
            new_h = max(factor, (max_pixels // new_w) // factor * factor)
    return new_w, new_h


def open_rgb(image: ImageRef) -> Image.Image:
    """The image as RGB pixels (a path is read; transparency is composited on white)."""
    if isinstance(image, (str, Path)):
        with Image.open(image) as f:
            img = f.copy()
    else:
        img = image
    if img.mode in ("RGBA", "LA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.split()[3])
        return background
    return img.convert("RGB")


def fit_budget(
    image: Image.Image, max_pixels: int | None = TRAIN_MAX_PIXELS, factor: int = PATCH_FACTOR
) -> Image.Image:
    """``image`` resized by `budget_size` (bicubic); returned unchanged when ``max_pixels`` is None."""
    if max_pixels is None:
        return image
    size = budget_size(image.width, image.height, max_pixels, factor)
    return image if size == image.size else image.resize(size, Image.Resampling.BICUBIC)


def png_bytes(image: Image.Image) -> bytes:
    """Lossless PNG encoding."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
