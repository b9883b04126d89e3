"""Build verl training parquet from a benchmark: ``python -m soft_spatial.data.prepare``.

Each row has the columns verl's ``RLHFDataset`` reads (``data.prompt_key=prompt``,
``data.image_key=images``):

* ``data_source``: benchmark name;
* ``prompt``: ``[system, user]`` chat messages with our system prompt; the user text starts with
  one ``<image>`` placeholder per image, in image order, then the question and lettered options;
* ``images``: ``[{"bytes": <PNG>}, ...]``, resized to the training pixel budget (`budget_size`);
* ``ability``: ``"spatial_reasoning"``;
* ``reward_model``: ``{"style": "rule", "ground_truth": <letter>}``;
* ``extra_info``: ``{index, id, question, options, answer, task_type, sub_task_type, benchmark}``;
  ``index`` is the record's position in the loaded benchmark (kept when earlier rows are dropped),
  ``options`` a list of strings (the reward also accepts a JSON string), ``answer`` the letter;
  ``task_type``/``sub_task_type`` hold the record's category/subcategory for every benchmark (""
  when there is none), so parquets of different benchmarks share one schema.

``--task-types Perspective_Taking`` (one or more task types or sub-types, see
:mod:`soft_spatial.data.subsets`) keeps only those records (the paper's Table 4 protocol); the
``index`` stays the record's position in the full benchmark.

Prompts longer than ``--max-prompt-length`` tokens (chat template applied, image tokens expanded
by the processor) are dropped and counted. verl filters again with its own
``filter_overlong_prompts``; counting here makes the drop visible before training.

The parquet is written to a temporary file and renamed into place at the end, so a failure (a
corrupt image, an interruption) leaves the previous output, never a partial or empty one; an
output with no rows is an error. SIGTERM (Slurm, ``timeout``, ``kill``) interrupts as Ctrl-C does:
the temporary is removed and the command exits 143 (130 for SIGINT). `check_parquet` re-checks a
parquet before training: rows, and one image per ``<image>`` placeholder in every prompt.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Sequence

from tqdm import tqdm

from soft_spatial.infra.atomic import atomic_path
from soft_spatial.infra.signals import command

from soft_spatial.data.benchmarks import BENCHMARKS, load_benchmark
from soft_spatial.data.errors import DataFormatError
from soft_spatial.data.gold import gold_letter, options_from_extra_info
from soft_spatial.data.images import TRAIN_MAX_PIXELS, fit_budget, open_rgb, png_bytes
from soft_spatial.data.prompt import SYSTEM_PROMPT, build_messages, question_text
from soft_spatial.data.record import QuestionRecord
from soft_spatial.data.subsets import subset_indices

ABILITY = "spatial_reasoning"
IMAGE_PLACEHOLDER = "<image>"
_ROWS_PER_GROUP = 256


@dataclass
class PrepareStats:
    """What `write_parquet` did."""

    total: int = 0
    written: int = 0
    dropped_overlong: int = 0
    max_prompt_tokens: int = 0
    dropped_ids: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.written} of {self.total} records written; {self.dropped_overlong} dropped as longer than "
            f"the prompt limit; longest kept prompt {self.max_prompt_tokens} tokens"
        )


def parquet_schema() -> Any:
    """The arrow schema of the output (explicit, so every benchmark writes the same columns)."""
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    extra = pa.struct(
        [
            ("index", pa.int64()),
            ("id", pa.string()),
            ("question", pa.string()),
            ("options", pa.list_(pa.string())),
            ("answer", pa.string()),
            ("task_type", pa.string()),
            ("sub_task_type", pa.string()),
            ("benchmark", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("images", pa.list_(pa.struct([("bytes", pa.binary())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra),
        ]
    )


def verl_prompt(record: QuestionRecord) -> list[dict[str, str]]:
    """``[system, user]`` messages with one ``<image>`` placeholder per image before the text."""
    text = question_text(record)
    if IMAGE_PLACEHOLDER in text:
        raise ValueError(f"record {record.id!r}: question text contains the placeholder {IMAGE_PLACEHOLDER!r}")
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": IMAGE_PLACEHOLDER * len(record.images) + text},
    ]


def parquet_row(record: QuestionRecord, index: int, images: Sequence[Any]) -> dict[str, Any]:
    """One output row; ``images`` are the already-resized PIL images of ``record``."""
    return {
        "data_source": record.benchmark,
        "prompt": verl_prompt(record),
        "images": [{"bytes": png_bytes(image)} for image in images],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": record.answer},
        "extra_info": {
            "index": index,
            "id": record.id,
            "question": record.question,
            "options": list(record.options),
            "answer": record.answer,
            "task_type": record.category,
            "sub_task_type": record.subcategory or "",
            "benchmark": record.benchmark,
        },
    }


def prompt_tokens(processor: Any, record: QuestionRecord, images: Sequence[Any]) -> int:
    """Prompt length in tokens as the policy sees it: chat template, generation prompt, image tokens."""
    messages = build_messages(dataclasses.replace(record, images=list(images)))
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=list(images) or None)
    return len(inputs["input_ids"][0])


def write_parquet(
    records: Iterable[QuestionRecord],
    out: str | Path,
    processor: Any,
    *,
    max_prompt_length: int = 10240,
    max_pixels: int | None = TRAIN_MAX_PIXELS,
    limit: int | None = None,
    task_types: Sequence[str] | None = None,
    progress: bool = True,
) -> PrepareStats:
    """Write ``records`` as verl parquet to ``out``; ``max_pixels=None`` keeps native resolution;
    ``task_types`` keeps a subset (before ``limit``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = list(records)
    selected = subset_indices(records, task_types, where="--task-types")
    if limit is not None:
        selected = selected[:limit]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stats = PrepareStats(total=len(selected))
    schema = parquet_schema()
    pending: list[dict[str, Any]] = []
    with atomic_path(out) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        for index in tqdm(selected, desc=f"prepare {out.name}", disable=not progress):
            record = records[index]
            images = [fit_budget(_decode(image, record), max_pixels) for image in record.images]
            length = prompt_tokens(processor, record, images)
            if length > max_prompt_length:
                stats.dropped_overlong += 1
                stats.dropped_ids.append(record.id)
                continue
            stats.max_prompt_tokens = max(stats.max_prompt_tokens, length)
            pending.append(parquet_row(record, index, images))
            if len(pending) >= _ROWS_PER_GROUP:
                writer.write_table(pa.Table.from_pylist(pending, schema=schema))
                stats.written += len(pending)
                pending = []
        if pending:
            writer.write_table(pa.Table.from_pylist(pending, schema=schema))
            stats.written += len(pending)
        if not stats.written:
            raise ValueError(f"{out}: no record fits --max-prompt-length {max_prompt_length} "
                             f"({stats.dropped_overlong} of {stats.total} dropped); nothing written")
    return stats


def _decode(image: Any, record: QuestionRecord) -> Any:
    """The image's RGB pixels; a decoding failure names the record."""
    try:
        return open_rgb(image)
    except Exception as exc:  # PIL raises OSError, SyntaxError, ... for a bad file
        where = "" if hasattr(image, "size") else f" {image}"
        raise ValueError(f"{record.benchmark} record {record.id!r}: image{where} cannot be decoded: "
                         f"{exc}") from exc


def check_parquet(path: str | Path) -> int:
    """Number of rows of a training parquet, after checking that it has rows, that every
    prompt has as many ``<image>`` placeholders as the row has images (a mismatch would train on
    a prompt whose image is missing) and that every gold answer names one option
    (`gold.gold_letter`: the reward would otherwise refuse it mid-run). Raises `DataFormatError`
    naming the file, the row and the field."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training data {path} does not exist (build it with "
                                f"python -m soft_spatial.data.prepare)")
    columns = pq.read_schema(path).names
    for name in ("prompt", "images"):
        if name not in columns:
            raise DataFormatError(path, f"no {name!r} column (columns: {columns})")
    wanted = ["prompt", "images"] + [c for c in ("extra_info", "reward_model") if c in columns]
    table = pq.read_table(path, columns=wanted)
    if table.num_rows == 0:
        raise DataFormatError(path, "no rows")
    n_images = pc.fill_null(pc.list_value_length(table["images"]), 0).to_pylist()
    extra = table["extra_info"].to_pylist() if "extra_info" in columns else [None] * table.num_rows
    for row, (prompt, n, info) in enumerate(zip(table["prompt"].to_pylist(), n_images, extra)):
        placeholders = sum(str(m.get("content") or "").count(IMAGE_PLACEHOLDER) for m in prompt or [])
        if placeholders != n:
            raise DataFormatError(path, f"the prompt has {placeholders} {IMAGE_PLACEHOLDER} placeholder(s) "
                                  f"but the row has {n} image(s)", index=row,
                                  record_id=(info or {}).get("id"), field="images")
    if "reward_model" in columns:
        for row, (reward, info) in enumerate(zip(table["reward_model"].to_pylist(), extra)):
            try:
                gold_letter((reward or {}).get("ground_truth"), options_from_extra_info(info))
            except ValueError as e:
                raise DataFormatError(path, str(e), index=row, record_id=(info or {}).get("id"),
                                      field="reward_model.ground_truth") from None
    return table.num_rows


def load_processor(path: str | Path) -> Any:
    """A local processor directory (never downloads)."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(path), local_files_only=True)


def _at_least_one(text: str) -> int:
    """An argparse type: an integer >= 1 (``--limit 0`` would write nothing and blame the prompt
    length; a negative one would drop records from the end)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer of at least 1 (leave it out for every record), "
                                         f"got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m soft_spatial.data.prepare", description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", required=True, choices=BENCHMARKS)
    parser.add_argument("--root", required=True, type=Path,
                        help="the benchmark as downloaded: a release directory, a table file (JSONL, parquet, "
                             "arrow, TSV, ...) or a Hugging Face snapshot; see python -m soft_spatial.data.inspect")
    parser.add_argument("--image-root", type=Path, default=None,
                        help="where relative image paths start, when the table is kept apart from the images")
    parser.add_argument("--split", default=None, help="benchmark split (default: its evaluation set)")
    parser.add_argument("--out", required=True, type=Path, help="output .parquet file")
    parser.add_argument("--also", nargs=2, action="append", default=[], metavar=("SPLIT", "OUT"),
                        help="another split of the same benchmark to OUT, in this process (the "
                             "processor and the imports once; repeatable; each output its own, "
                             "written as --out is)")
    parser.add_argument("--processor", required=True, type=Path, help="local model/processor directory")
    parser.add_argument("--max-prompt-length", type=int, default=10240)
    parser.add_argument(
        "--max-pixels", type=int, default=TRAIN_MAX_PIXELS, help="per-image pixel budget; 0 keeps native resolution"
    )
    parser.add_argument("--limit", type=_at_least_one, default=None, metavar="N",
                        help="only the first N records (N >= 1)")
    parser.add_argument(
        "--task-types", nargs="+", default=None, metavar="NAME",
        help="keep only these task types or sub-types (e.g. Perspective_Taking)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> PrepareStats:
    """Write ``--out`` (and each ``--also`` output); returns the first output's stats."""
    args = parse_args(argv)
    processor = load_processor(args.processor)
    first = None
    for split, out in [(args.split, args.out), *((s, Path(o)) for s, o in args.also)]:
        records = load_benchmark(args.benchmark, args.root, split, image_root=args.image_root)
        stats = write_parquet(
            records,
            out,
            processor,
            max_prompt_length=args.max_prompt_length,
            max_pixels=args.max_pixels or None,
            limit=args.limit,
            task_types=args.task_types,
        )
        print(f"{out}: {stats.summary()}")
        if stats.dropped_ids:
            shown = ", ".join(stats.dropped_ids[:20])
            print(f"dropped ids: {shown}{' ...' if len(stats.dropped_ids) > 20 else ''}")
        first = first or stats
    return first


if __name__ == "__main__":
    # SIGTERM (Slurm, timeout, kill) as Ctrl-C: the temporary is removed, exit 143 (130)
    with command("python -m soft_spatial.data.prepare", "no partial output was left; a previous one is kept"):
        main()
