"""One image cell of a benchmark table → an `ImageRef` (a file path or a decoded image).

Published layouts store images four ways, all handled here:

* a path relative to some directory (OmniSpatial release, MindCube, lmms-eval's OmniSpatial
  ``image_path``, VLMEvalKit ``image_path``), tried against a list of base directories;
* raw bytes, or a Hugging Face ``Image`` feature struct ``{"bytes": ..., "path": ...}`` (parquet
  and arrow snapshots, lmms-eval's MindCube ``images``);
* a base64 string (VLMEvalKit's ``image`` column);
* a list of any of these, written as a real list or as a Python list literal in a TSV cell
  (``"['a.jpg', 'b.jpg']"``, what VLMEvalKit's ``toliststr`` reads).
"""

from __future__ import annotations

import ast
import base64
import binascii
import io
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from PIL import Image, UnidentifiedImageError

from soft_spatial.data.checks import RecordContext, inside, verified_image
from soft_spatial.data.errors import DataFormatError
from soft_spatial.data.record import ImageRef

#: a string this long that is no path is taken for base64 (VLMEvalKit: "len(image) > 64")
_BASE64_MIN = 65


def cell_list(value: Any) -> list[Any]:
    """A list cell: lists stay, ``"[...]"`` strings are parsed as Python literals, a scalar becomes
    a one-item list, None an empty list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str) and value.strip().startswith("[") and value.strip().endswith("]"):
        try:
            parsed = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            return [value]
        if isinstance(parsed, list):
            return parsed
    return [value]


def resolve_path(relative: str, bases: Sequence[Path], field: str, ctx: RecordContext, check: bool) -> Path:
    """``relative`` under the first base where it exists; only paths that stay inside a base
    (read lexically, ``..`` and absolute paths included: :func:`~soft_spatial.data.checks.inside`)
    are candidates, and a path inside none of them is refused, naming the record and the path."""
    if not bases:
        raise ctx.error(field, f"image path {relative!r} has no dataset directory to resolve in")
    candidates, refused = [], None
    for base in bases:
        try:
            candidates.append(inside(Path(base), relative, field, ctx))
        except DataFormatError as exc:
            refused = exc
    if not candidates:
        raise refused
    if not check:
        return next((c for c in candidates if c.is_file()), candidates[0])
    for candidate in candidates:
        if candidate.is_file():
            return verified_image(candidate, field, ctx)  # a truncated file fails here, not mid-run
    tried = ", ".join(str(c) for c in candidates)
    raise ctx.error(field, f"image file not found: {relative} (tried {tried})")


def decode_bytes(data: bytes, field: str, ctx: RecordContext) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        return image
    except (UnidentifiedImageError, OSError) as exc:
        raise ctx.image_error(field, "(embedded bytes)", exc) from exc


def image_ref(item: Any, bases: Sequence[Path], field: str, ctx: RecordContext, check: bool) -> ImageRef:
    """One image: a path (resolved against ``bases``), bytes, an HF struct or a base64 string."""
    if isinstance(item, Image.Image):
        return item
    if isinstance(item, dict):
        if item.get("bytes"):
            item = item["bytes"]
        elif item.get("path"):
            item = item["path"]
        else:
            raise ctx.error(field, "image struct has neither bytes nor path")
    if isinstance(item, (bytes, bytearray)):
        return decode_bytes(bytes(item), field, ctx)
    if isinstance(item, str) and item.strip():
        text = item.strip()
        # base64 has no '.', a file name has one (its suffix)
        if len(text) >= _BASE64_MIN and "." not in text:
            try:
                return decode_bytes(base64.b64decode(text, validate=True), field, ctx)
            except binascii.Error as exc:
                raise ctx.error(field, "neither a file name nor valid base64") from exc
        return resolve_path(text, bases, field, ctx, check)
    raise ctx.error(field, f"expected a path, bytes, base64 or an image struct, got {type(item).__name__}")


def image_refs(value: Any, bases: Sequence[Path], field: str, ctx: RecordContext, check: bool) -> list[ImageRef]:
    """All images of a cell (a list, a list literal or one item), in order; at least one."""
    items = cell_list(value)
    if not items:
        raise ctx.error(field, "missing" if value is None else "empty image list")
    return [image_ref(item, bases, field, ctx, check) for item in items]
