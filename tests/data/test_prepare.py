"""Training parquet: pixel budget, prepare -> parquet, and verl's own RLHFDataset reading it."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from soft_spatial.data import load_benchmark
from soft_spatial.data.fixtures import FixtureSet, write_fixtures
from soft_spatial.data.images import TRAIN_MAX_PIXELS, budget_size, fit_budget, open_rgb
from soft_spatial.data.prepare import SYSTEM_PROMPT, main, prompt_tokens, write_parquet
from soft_spatial.data.prompt import question_text
from soft_spatial.data.reward import compute_score

# --- pixel budget ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, expected",
    [
        ((640, 480), (364, 252)),  # scaled by sqrt(100352 / 307200), then floored to 28s
        ((280, 280), (280, 280)),  # within budget and already on the grid: unchanged
        ((300, 200), (280, 196)),  # within budget: only floored, never upscaled
        ((100, 50), (84, 28)),
        ((16, 16), (28, 28)),  # below one patch: the only growth allowed
        ((28, 100_000), (28, 3584)),  # extreme aspect: long side cut so the budget still holds
        ((6000, 184), (1792, 28)),
    ],
)
def test_budget_size_cases(size, expected):
    assert budget_size(*size) == expected


def test_budget_size_properties():
    rng = random.Random(0)
    for _ in range(2000):
        w, h = rng.randint(1, 7000), rng.randint(1, 7000)
        nw, nh = budget_size(w, h)
        assert nw % 28 == 0 and nh % 28 == 0 and nw >= 28 and nh >= 28
        assert nw * nh <= TRAIN_MAX_PIXELS
        assert nw <= max(w, 28) and nh <= max(h, 28)  # never upscaled (beyond one patch)
        scale = min(1.0, (TRAIN_MAX_PIXELS / (w * h)) ** 0.5)
        if w * scale >= 28 and h * scale >= 28:  # no clamp: each side is its scaled length floored
            assert w * scale - 28 < nw <= w * scale + 1e-9
            assert h * scale - 28 < nh <= h * scale + 1e-9


def test_budget_size_custom_and_errors():
    assert budget_size(1000, 1000, max_pixels=64 * 64, factor=32) == (64, 64)
    with pytest.raises(ValueError):
        budget_size(0, 10)
    with pytest.raises(ValueError):
        budget_size(10, 10, max_pixels=100)


def test_fit_budget_and_open_rgb():
    image = Image.new("RGBA", (640, 480), (10, 20, 30, 0))
    rgb = open_rgb(image)
    assert rgb.mode == "RGB" and rgb.getpixel((0, 0)) == (255, 255, 255)  # transparent -> white
    assert fit_budget(rgb).size == (364, 252)
    assert fit_budget(rgb, None) is rgb


# --- prepare ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from soft_spatial.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3-vl"), family="qwen3_vl", vocab="small")


@pytest.fixture(scope="module")
def processor(model_dir: Path):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(model_dir), local_files_only=True)


@pytest.fixture()
def fx(tmp_path: Path) -> FixtureSet:
    fixtures = write_fixtures(tmp_path / "fixtures")
    # one large image, so the training budget really resizes something
    Image.new("RGB", (640, 480), (200, 30, 60)).save(fixtures.omnispatial_test / "Complex_Logic" / "7.png")
    return fixtures


def _decode(image_struct: dict) -> Image.Image:
    return Image.open(io.BytesIO(image_struct["bytes"]))


def test_write_parquet_rows(fx: FixtureSet, processor, tmp_path: Path):
    records = load_benchmark("omnispatial", fx.omnispatial)
    out = tmp_path / "train.parquet"
    stats = write_parquet(records, out, processor, progress=False)
    assert (stats.total, stats.written, stats.dropped_overlong) == (10, 10, 0)
    rows = pq.read_table(out).to_pylist()
    assert [r["extra_info"]["id"] for r in rows] == [r.id for r in records]
    for row, record in zip(rows, records):
        assert row["data_source"] == "omnispatial" and row["ability"] == "spatial_reasoning"
        assert row["reward_model"] == {"style": "rule", "ground_truth": record.answer}
        system, user = row["prompt"]
        assert system == {"role": "system", "content": SYSTEM_PROMPT}
        assert user == {"role": "user", "content": "<image>" + question_text(record)}
        assert row["extra_info"] == {
            "index": records.index(record),
            "id": record.id,
            "question": record.question,
            "options": record.options,
            "answer": record.answer,
            "task_type": record.category,
            "sub_task_type": record.subcategory,
            "benchmark": "omnispatial",
        }
        # the stored ground truth and options are what the reward needs
        response = f"<think>...</think>{record.answer}"
        assert compute_score(row["data_source"], response, row["reward_model"]["ground_truth"], row["extra_info"])[
            "score"
        ] == pytest.approx(1.2)
    big = next(r for r in rows if r["extra_info"]["id"] == "7_0")
    image = _decode(big["images"][0])
    assert image.format == "PNG" and image.size == (364, 252) and image.getpixel((5, 5)) == (200, 30, 60)
    small = _decode(rows[0]["images"][0])
    assert small.size == (28, 28) and small.getpixel((0, 0)) == fx.colours[records[0].images[0]]


def test_write_parquet_drops_overlong_prompts(fx: FixtureSet, processor, tmp_path: Path):
    records = load_benchmark("omnispatial", fx.omnispatial)
    lengths = [prompt_tokens(processor, r, [fit_budget(open_rgb(i)) for i in r.images]) for r in records]
    limit = sorted(lengths)[4]
    expected_drop = [r.id for r, n in zip(records, lengths) if n > limit]
    assert 0 < len(expected_drop) < len(records)
    stats = write_parquet(records, tmp_path / "short.parquet", processor, max_prompt_length=limit, progress=False)
    assert stats.dropped_overlong == len(expected_drop) and stats.dropped_ids == expected_drop
    assert stats.written == len(records) - len(expected_drop)
    assert stats.max_prompt_tokens == max(n for n in lengths if n <= limit)
    assert pq.read_table(tmp_path / "short.parquet").num_rows == stats.written
    # the big image costs more tokens than a 28x28 one: the count includes image tokens
    assert lengths[8] > prompt_tokens(processor, records[8], [Image.new("RGB", (28, 28))])


def test_cli(fx: FixtureSet, model_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "cli.parquet"
    stats = main(
        ["--benchmark", "mindcube", "--root", str(fx.mindcube), "--out", str(out), "--processor", str(model_dir),
         "--limit", "3"]
    )
    assert (stats.total, stats.written) == (3, 3)
    assert "3 of 3 records written; 0 dropped" in capsys.readouterr().out
    rows = pq.read_table(out).to_pylist()
    assert [len(r["images"]) for r in rows] == [2, 4, 3]
    assert [r["prompt"][1]["content"].count("<image>") for r in rows] == [2, 4, 3]


def test_cli_writes_another_split_in_the_same_process(fx: FixtureSet, model_dir: Path, tmp_path: Path,
                                                      capsys):
    """``--also SPLIT OUT`` (the learning runner's train and test parquets in one process): each
    output as if written by a command of its own, the first one's stats returned."""
    alone, first, also = tmp_path / "alone.parquet", tmp_path / "first.parquet", tmp_path / "also.parquet"
    common = ["--benchmark", "mindcube", "--root", str(fx.mindcube), "--processor", str(model_dir),
              "--limit", "3"]
    main([*common, "--out", str(alone)])
    stats = main([*common, "--out", str(first), "--also", "tinybench", str(also)])
    assert (stats.total, stats.written) == (3, 3)
    out = capsys.readouterr().out
    assert f"{first}: 3 of 3" in out and f"{also}: 3 of 3" in out
    assert pq.read_table(also).to_pylist() == pq.read_table(alone).to_pylist()
    assert pq.read_table(first).to_pylist() == pq.read_table(alone).to_pylist()


def _rlhf_dataset(path: Path, processor, tmp_path: Path, monkeypatch):
    import datasets
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    config = OmegaConf.create(
        {
            "cache_dir": str(tmp_path / "verl-cache"),
            "prompt_key": "prompt",
            "image_key": "images",
            "max_prompt_length": 10240,
            "filter_overlong_prompts": True,
            # None: filter in-process (datasets starts a worker pool for any num_proc, which hangs here)
            "filter_overlong_prompts_workers": None,
            "truncation": "error",
        }
    )
    return RLHFDataset(str(path), tokenizer=processor.tokenizer, config=config, processor=processor), config


def test_verl_rlhf_dataset_reads_the_parquet(fx: FixtureSet, processor, tmp_path: Path, monkeypatch):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    records = load_benchmark("mindcube", fx.mindcube)
    out = tmp_path / "mindcube.parquet"
    write_parquet(records, out, processor, progress=False)
    dataset, config = _rlhf_dataset(out, processor, tmp_path, monkeypatch)
    assert len(dataset) == len(records)  # verl's own length filter keeps everything
    item = dataset[1]  # four views
    assert item["data_source"] == "mindcube"
    assert item["reward_model"]["ground_truth"] == records[1].answer
    assert item["extra_info"]["options"] == records[1].options and item["index"] == 1
    system, user = item["raw_prompt"]
    assert system["content"][0]["text"] == SYSTEM_PROMPT
    kinds = [c["type"] for c in user["content"]]
    assert kinds == ["image"] * 4 + ["text"]
    assert user["content"][-1]["text"] == question_text(records[1])
    colours = [c["image"].convert("RGB").getpixel((0, 0)) for c in user["content"][:4]]
    assert colours == [fx.colours[p] for p in records[1].images]  # views in list order
    # the agent loop's next steps: vision extraction, chat template, processor
    patch = processor.image_processor.patch_size
    images, videos, _ = RLHFDataset._process_multi_modal_info(item["raw_prompt"], patch, config)
    assert len(images) == 4 and videos is None
    text = processor.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=images, return_tensors="pt")
    assert inputs["image_grid_thw"].shape == (4, 3)
    assert text.count("<|vision_start|>") == 4


def test_verl_rlhf_dataset_filters_like_prepare(fx: FixtureSet, processor, tmp_path: Path, monkeypatch):
    records = load_benchmark("omnispatial", fx.omnispatial)
    out = tmp_path / "omni.parquet"
    stats = write_parquet(records, out, processor, progress=False)
    dataset, _ = _rlhf_dataset(out, processor, tmp_path, monkeypatch)
    assert len(dataset) == stats.written
    big = next(dataset[i] for i in range(len(dataset)) if dataset[i]["extra_info"]["id"] == "7_0")
    assert big["raw_prompt"][1]["content"][0]["image"].size == (364, 252)


# --- atomic outputs, image errors with the record, the pre-training check ----------------------


def test_a_failed_prepare_leaves_the_previous_parquet(fx: FixtureSet, processor, tmp_path: Path):
    from soft_spatial.data.prepare import check_parquet

    out = tmp_path / "data" / "test.parquet"
    records = load_benchmark("omnispatial", fx.omnispatial)
    good = write_parquet(records, out, processor, progress=False)
    before = out.read_bytes()
    path = fx.omnispatial_test / "Complex_Logic" / "8.png"
    path.write_bytes(path.read_bytes()[:40])  # corrupt after loading (check_images=True ran)
    with pytest.raises(ValueError, match=r"record '8_0': image .*8\.png cannot be decoded"):
        write_parquet(records, out, processor, progress=False)
    assert out.read_bytes() == before and check_parquet(out) == good.written
    assert sorted(p.name for p in out.parent.iterdir()) == ["test.parquet"]  # no temporary left
    with pytest.raises(ValueError, match="no record fits --max-prompt-length 5"):
        write_parquet(records[:2], tmp_path / "empty.parquet", processor, max_prompt_length=5,
                      progress=False)
    assert not (tmp_path / "empty.parquet").exists()


def test_check_parquet_rejects_missing_images_and_empty_files(fx: FixtureSet, processor, tmp_path: Path):
    import pyarrow as pa

    from soft_spatial.data.errors import DataFormatError
    from soft_spatial.data.prepare import check_parquet, parquet_schema

    out = tmp_path / "train.parquet"
    write_parquet(load_benchmark("omnispatial", fx.omnispatial), out, processor, progress=False)
    rows = pq.read_table(out).to_pylist()
    rows[3]["images"] = []  # a prompt with an <image> placeholder and no image
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=parquet_schema()), bad)
    with pytest.raises(DataFormatError) as info:
        check_parquet(bad)
    assert (info.value.index, info.value.record_id, info.value.field) == (3, rows[3]["extra_info"]["id"], "images")
    assert "1 <image> placeholder(s) but the row has 0 image(s)" in str(info.value)
    pq.write_table(pa.Table.from_pylist([], schema=parquet_schema()), tmp_path / "none.parquet")
    with pytest.raises(DataFormatError, match="no rows"):
        check_parquet(tmp_path / "none.parquet")
    with pytest.raises(FileNotFoundError, match="soft_spatial.data.prepare"):
        check_parquet(tmp_path / "missing.parquet")


def test_check_parquet_refuses_a_gold_answer_that_names_no_option(fx: FixtureSet, processor, tmp_path: Path):
    # the reward would raise mid-run (or, before, score every response 0): refuse before training
    import pyarrow as pa

    from soft_spatial.data.errors import DataFormatError
    from soft_spatial.data.prepare import check_parquet, parquet_schema

    out = tmp_path / "train.parquet"
    write_parquet(load_benchmark("omnispatial", fx.omnispatial), out, processor, progress=False)
    rows = pq.read_table(out).to_pylist()
    for i, gold in enumerate(["(B)", "b.", "Option A"]):  # unambiguous: accepted as written
        rows[i]["reward_model"]["ground_truth"] = gold
    fine = tmp_path / "fine.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=parquet_schema()), fine)
    assert check_parquet(fine) == len(rows)
    rows[4]["reward_model"]["ground_truth"] = "1"
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=parquet_schema()), bad)
    with pytest.raises(DataFormatError) as info:
        check_parquet(bad)
    assert (info.value.index, info.value.record_id, info.value.field) == (
        4, rows[4]["extra_info"]["id"], "reward_model.ground_truth")
    assert "gold answer '1'" in str(info.value) and str(bad) in str(info.value)


def test_task_types_subset_in_prepare_and_training_parquet(fx: FixtureSet, model_dir: Path, tmp_path: Path,
                                                           capsys):
    """--task-types keeps one task type (indices stay the benchmark's); the training path
    (data.task_types, soft_spatial.train.task_subset_files) filters a prepared parquet to the
    same rows; unknown names are errors that list the available ones."""
    from soft_spatial.data.subsets import filter_parquet
    from soft_spatial.train import task_subset_files

    records = load_benchmark("omnispatial", fx.omnispatial)
    want = [i for i, r in enumerate(records) if r.category == "Perspective_Taking"]
    sub = tmp_path / "pt.parquet"
    stats = main(["--benchmark", "omnispatial", "--root", str(fx.omnispatial), "--out", str(sub),
                  "--processor", str(model_dir), "--task-types", "Perspective_Taking"])
    assert stats.written == len(want) == 3
    rows = pq.read_table(sub).to_pylist()
    assert [r["extra_info"]["index"] for r in rows] == want
    full = tmp_path / "all.parquet"
    main(["--benchmark", "omnispatial", "--root", str(fx.omnispatial), "--out", str(full), "--processor",
          str(model_dir)])
    (path,) = task_subset_files(str(full), ["Perspective_Taking"], tmp_path / "run", "train")
    assert pq.read_table(path).to_pylist() == rows
    (ego,) = task_subset_files([str(full)], ["Egocentric", "Manipulation"], tmp_path / "run", "val")
    assert sorted(r["extra_info"]["sub_task_type"] for r in pq.read_table(ego).to_pylist()) == [
        "Egocentric", "Manipulation"]
    with pytest.raises(ValueError, match="1 train rows, fewer than 2"):
        task_subset_files(str(full), ["Egocentric"], tmp_path / "run", "train", min_rows=2)
    with pytest.raises(ValueError, match=r"no records of task type \['Perspective'\].*Perspective_Taking"):
        main(["--benchmark", "omnispatial", "--root", str(fx.omnispatial), "--out", str(tmp_path / "x.parquet"),
              "--processor", str(model_dir), "--task-types", "Perspective"])
    with pytest.raises(ValueError, match="all.parquet: no records of task type"):
        filter_parquet(full, tmp_path / "y.parquet", ["Nope"])
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        filter_parquet(tmp_path / "missing.parquet", tmp_path / "y.parquet", ["Egocentric"])


def test_train_config_accepts_task_types():
    from hydra import compose, initialize_config_dir

    from soft_spatial.train import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="train", overrides=["model=tiny", "cluster=cpu",
                                                      "data.task_types=[Perspective_Taking]"])
    assert list(cfg.data.task_types) == ["Perspective_Taking"]
