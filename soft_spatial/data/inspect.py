"""``python -m soft_spatial.data.inspect PATH``: which layout a download is, and what it holds.

Prints the detected layout (and the source its schema was read from), the table file(s), the
number of records per category (and sub-category) and one parsed record, so a user can check a
download before training or evaluating on it. ``--benchmark`` checks the layout belongs to that
benchmark and picks its default split; ``--image-root`` says where relative image paths start.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from collections.abc import Sequence

from PIL import Image

from soft_spatial.data.benchmarks import BENCHMARKS, DEFAULT_SPLITS
from soft_spatial.data.layouts import detect, load
from soft_spatial.data.record import QuestionRecord


def describe_image(image) -> str:
    if isinstance(image, Image.Image):
        return f"<embedded {image.width}x{image.height} {image.mode} image>"
    return str(image)


def record_lines(record: QuestionRecord) -> list[str]:
    """A parsed record, one field a line."""
    lines = [f"  id: {record.id}", f"  benchmark: {record.benchmark}", f"  category: {record.category}"]
    if record.subcategory is not None:
        lines.append(f"  subcategory: {record.subcategory}")
    lines.append(f"  question: {record.question!r}")
    lines += [f"  option {letter}: {text}" for letter, text in zip(record.letters, record.options)]
    lines.append(f"  answer: {record.answer} ({record.answer_text})")
    lines += [f"  image {i + 1}: {describe_image(image)}" for i, image in enumerate(record.images)]
    return lines


def report(path: str | Path, benchmark: str | None = None, split: str | None = None,
           image_root: str | Path | None = None, check_images: bool = True) -> str:
    """The text `main` prints."""
    if split is None and benchmark is not None:
        split = DEFAULT_SPLITS[benchmark]
    found = detect(path, benchmark, split)
    records = load(path, found.layout.benchmark, split, image_root=image_root, check_images=check_images)
    layout = found.layout
    lines = [
        f"path: {path}",
        f"layout: {layout.name} (benchmark {layout.benchmark}; schema evidence: {layout.evidence}; "
        f"source: {layout.source})",
        "table: " + ", ".join(str(f) for f in found.files),
        f"records: {len(records)}",
        "per category:",
    ]
    categories = Counter(r.category for r in records)
    subcategories = Counter((r.category, r.subcategory) for r in records if r.subcategory is not None)
    for category, count in categories.items():
        lines.append(f"  {category}: {count}")
        lines += [f"    {sub}: {n}" for (cat, sub), n in subcategories.items() if cat == category]
    if records:
        lines += ["first record:", *record_lines(records[0])]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m soft_spatial.data.inspect", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="a benchmark file or directory as downloaded")
    parser.add_argument("--benchmark", choices=BENCHMARKS, default=None)
    parser.add_argument("--split", default=None)
    parser.add_argument("--image-root", type=Path, default=None, help="where relative image paths start")
    parser.add_argument("--no-check-images", action="store_true", help="do not require image files to exist")
    args = parser.parse_args(argv)
    print(report(args.path, args.benchmark, args.split, args.image_root, not args.no_check_images))


if __name__ == "__main__":
    main()
