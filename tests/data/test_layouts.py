"""Published benchmark layouts: detection from the files, and round trips against the loaders of
the benchmarks' own releases.

Each converter below rewrites our release fixtures into one harness layout the way that
harness's own code reads or builds it (source cited beside it); the records loaded from the
rewritten files must equal those loaded from the release (same question, options, answer,
category and pixels of every image, in order).
"""

from __future__ import annotations

import base64
import csv
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from soft_spatial.data import DataFormatError, QuestionRecord, load_benchmark
from soft_spatial.data.fixtures import FixtureSet
from soft_spatial.data.layouts import detect
from soft_spatial.data.official_prompts import MINDCUBE_QUESTION_HEADER


def _pixels(image) -> bytes:
    img = image if isinstance(image, Image.Image) else Image.open(image)
    return img.convert("RGB").tobytes()


def _same(got: list[QuestionRecord], want: list[QuestionRecord], ids: bool = True) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        fields = ("question", "options", "answer", "benchmark", "category", "subcategory", "options_inline")
        assert [getattr(g, f) for f in fields] == [getattr(w, f) for f in fields], w.id
        if ids:
            assert g.id == w.id
        assert [_pixels(i) for i in g.images] == [_pixels(i) for i in w.images], w.id


def _b64(path: Path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode()


def _write_tsv(path: Path, rows: list[dict]) -> Path:
    # VLMEvalKit reads TSVs with pandas: tab separated, header row, empty cell = NaN
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _hf_image(path: Path) -> dict:
    """A Hugging Face ``Image`` feature value as stored in parquet/arrow: ``{bytes, path}``."""
    return {"bytes": Path(path).read_bytes(), "path": Path(path).name}


# --- MindCube ---------------------------------------------------------------------------------------

# Three records copied verbatim (first, second, third line) from
# mll-lab-nu/VAGEN (branch MindCube): vagen/env/crossview/MindCube_RL_Data/crossviewQA_tinybench_baseRL.jsonl
_VAGEN_INSTRUCTION = (
    "[Task]\nYour task is to analyze the spatial arrangement of objects in the scene by examining the provided "
    "images, which show the scene from different viewpoints.\n[Answer Instruction]\nPlease do step by step reasoning "
    "first, then give your final answer. For example, if you think the correct answer is 'A. Above' from 'A. Above "
    "B. Under C. Front D. Behind', your response should be this format: '<think>(replace with your reasoning here)"
    "</think><answer>A. Above</answer>'.\n\n[Question]\n"
)
VAGEN_REAL = [
    {"id": "among_group693_q1_5_2", "setting_tag": "among",
     "images": ["other_all_image/among/shoe_216/front_007.jpg", "other_all_image/among/shoe_216/left_084.jpg",
                "other_all_image/among/shoe_216/back_157.jpg", "other_all_image/among/shoe_216/right_246.jpg"],
     "gt_answer": "C",
     "question_str": "<image>\n" * 4 + _VAGEN_INSTRUCTION + "Based on these four images (image 1, 2, 3, and 4) "
     "showing the black sneaker from different viewpoints (front, left, back, and right), with each camera aligned "
     "with room walls and partially capturing the surroundings: From the viewpoint presented in image 2, what is to "
     "the right of the black sneaker? A. TV B. Wooden dining table C. Light purple sofa D. Brown curtains and windows"},
    {"id": "among_group458_q0_2_3", "setting_tag": "among",
     "images": ["other_all_image/among/bottle_211/front_022.jpg", "other_all_image/among/bottle_211/left_083.jpg",
                "other_all_image/among/bottle_211/back_157.jpg", "other_all_image/among/bottle_211/right_256.jpg"],
     "gt_answer": "A",
     "question_str": "<image>\n" * 4 + _VAGEN_INSTRUCTION + "Based on these four images (image 1, 2, 3, and 4) "
     "showing the pink bottle from different viewpoints (front, left, back, and right), with each camera aligned "
     "with room walls and partially capturing the surroundings: If I am standing at the same spot and facing the "
     "same direction as shown in image 1, then I turn right and move forward, will I get closer to the pink plush "
     "toy and headboard? A. Yes B. No"},
    {"id": "among_group603_q1_1_2", "setting_tag": "among",
     "images": ["other_all_image/among/detergent_091/left_172.jpg",
                "other_all_image/among/detergent_091/front_268.jpg"],
     "gt_answer": "B",
     "question_str": "<image>\n" * 2 + _VAGEN_INSTRUCTION + "Based on these two views showing the same scene: in "
     "which direction did I move from the first view to the second view? A. Directly left B. Diagonally forward and "
     "right C. Directly right D. Diagonally forward and left"},
]


def test_vagen_real_records(tmp_path: Path):
    data = tmp_path / "MindCube" / "data"  # images relative to MindCube's data/ directory
    for i, rel in enumerate(sorted({p for r in VAGEN_REAL for p in r["images"]})):
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (i, 0, 0)).save(data / rel, format="PNG")
    path = tmp_path / "crossviewQA_tinybench_baseRL.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in VAGEN_REAL))
    assert detect(path, "mindcube").layout.name == "mindcube-vagen"
    records = load_benchmark("mindcube", path, image_root=data)
    assert [r.id for r in records] == [r["id"] for r in VAGEN_REAL]
    assert [r.answer for r in records] == ["C", "A", "B"]
    assert records[0].options == ["TV", "Wooden dining table", "Light purple sofa", "Brown curtains and windows"]
    assert records[1].options == ["Yes", "No"]
    assert records[0].question.startswith("Based on these four images") and "[Task]" not in records[0].question
    assert all(r.category == "among" and r.options_inline for r in records)
    assert records[2].images == [data / p for p in VAGEN_REAL[2]["images"]]  # list order kept
    # a JSONL placed inside MindCube's data/ finds its images without image_root
    inside = data / path.name
    shutil.copy(path, inside)
    assert [r.images for r in load_benchmark("mindcube", inside)] == [r.images for r in records]


def _mindcube_rows(fx: FixtureSet) -> list[dict]:
    return [json.loads(line) for line in (fx.mindcube / "raw" / "MindCube_tinybench.jsonl").read_text().splitlines()]


def test_mindcube_vagen_round_trip(fx: FixtureSet, tmp_path: Path):
    # VAGEN's preprocess_jsonl.py: question_str = "<image>\n" * n + instruction + "[Question]\n" + question;
    # setting_tag = setting with aroundnew -> around
    rows = [{"id": r["id"], "setting_tag": r["id"].split("_")[0].replace("aroundnew", "around"),
             "images": r["images"], "gt_answer": r["gt_answer"],
             "question_str": "<image>\n" * len(r["images"]) + _VAGEN_INSTRUCTION + r["question"]}
            for r in _mindcube_rows(fx)]
    path = fx.mindcube / "vagen.jsonl"  # beside raw/, i.e. in MindCube's data/
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _same(load_benchmark("mindcube", path), load_benchmark("mindcube", fx.mindcube))


def _lmms_mindcube_rows(fx: FixtureSet) -> list[dict]:
    # lmms-eval mindcube utils.py: doc["input_prompt"] (with <image> placeholders), doc["images"] (HF images,
    # decoded to PIL by datasets), doc["gt_answer"], doc["id"], doc["question"] (neo_ov prompt only)
    return [{"id": r["id"], "question": r["question"],
             "input_prompt": "<image>" * len(r["images"]) + _VAGEN_INSTRUCTION.split(MINDCUBE_QUESTION_HEADER)[0]
             + MINDCUBE_QUESTION_HEADER + r["question"],
             "images": [_hf_image(fx.mindcube / p) for p in r["images"]], "gt_answer": r["gt_answer"]}
            for r in _mindcube_rows(fx)]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_mindcube_lmms_eval_snapshot_round_trip(fx: FixtureSet, tmp_path: Path, fmt: str):
    rows = _lmms_mindcube_rows(fx)
    snapshot = tmp_path / "MindCube_lmmseval"
    (snapshot / "tiny").mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    for split in ("combined", "among"):  # the config's splits; the default split picks combined
        part = table if split == "combined" else table.slice(0, 2)
        if fmt == "parquet":
            pq.write_table(part, snapshot / "tiny" / f"{split}-00000-of-00001.parquet")
        else:  # datasets' cache / save_to_disk files: Arrow IPC stream
            with pa.OSFile(str(snapshot / "tiny" / f"{split}-00000-of-00001.arrow"), "wb") as sink:
                with pa.ipc.new_stream(sink, part.schema) as writer:
                    writer.write_table(part)
    (snapshot / "README.md").write_text("card")
    found = detect(snapshot, "mindcube", "tinybench")
    assert found.layout.name == "mindcube-lmms-eval" and found.files[0].name.startswith("combined")
    records = load_benchmark("mindcube", snapshot)
    assert all(isinstance(i, Image.Image) for r in records for i in r.images)
    _same(records, load_benchmark("mindcube", fx.mindcube))
    assert len(load_benchmark("mindcube", snapshot, split="among")) == 2
    # without the raw question the one in input_prompt is used
    without = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "question"} for r in rows])
    pq.write_table(without, tmp_path / "no_question.parquet")
    _same(load_benchmark("mindcube", tmp_path / "no_question.parquet"), load_benchmark("mindcube", fx.mindcube))


@pytest.mark.parametrize("images", ["image_path", "base64"])
def test_mindcube_vlmevalkit_tsv_round_trip(fx: FixtureSet, tmp_path: Path, images: str):
    # VLMEvalKit mindcubebench.py: index, input_prompt (<image> markers), image_path (list written as a Python
    # list, relative to the MindCube snapshot's data/), answer (letter), category (rotation/among/around);
    # image_base.py: or an `image` column of base64 strings (a list literal for several images)
    rows = []
    for i, r in enumerate(_mindcube_rows(fx)):
        row = {"index": i, "category": r["id"].split("_")[0].replace("aroundnew", "around"),
               "input_prompt": ("<image>" * len(r["images"]) + "[Task]\n...\n" + MINDCUBE_QUESTION_HEADER
                                + r["question"]),
               "answer": r["gt_answer"]}
        if images == "image_path":
            row["image_path"] = str(list(r["images"]))
        else:
            row["image"] = str([_b64(fx.mindcube / p) for p in r["images"]])
        rows.append(row)
    root = tmp_path / "LMUData"
    root.mkdir()
    _write_tsv(root / "MindCubeBench_tiny_raw_qa.tsv", rows)
    _write_tsv(root / "MindCubeBench_raw_qa.tsv", rows[:1])
    if images == "image_path":  # the snapshot's data/ directory beside the TSVs
        shutil.copytree(fx.mindcube / "other_all_image", root / "data" / "other_all_image")
    found = detect(root, "mindcube", "tinybench")
    assert found.layout.name == "mindcube-vlmevalkit" and found.files[0].name == "MindCubeBench_tiny_raw_qa.tsv"
    records = load_benchmark("mindcube", root)
    _same(records, load_benchmark("mindcube", fx.mindcube), ids=False)
    assert [r.id for r in records] == [str(i) for i in range(len(rows))]


# --- OmniSpatial ------------------------------------------------------------------------------------


def _omni_rows(fx: FixtureSet) -> list[dict]:
    return json.loads((fx.omnispatial_test / "data.json").read_text())


def _omni_image(row: dict) -> str:
    # the release's convention: <task_type>/<image number>.png (api_eval.py)
    return f"{row['task_type']}/{row['id'].split('_')[0]}.png"


def test_omnispatial_lmms_eval_snapshot_round_trip(fx: FixtureSet, tmp_path: Path):
    # lmms-eval omnispatial utils.py: doc["question"], doc["options"], doc["gt"] (letter compared with the
    # predicted letter), doc["task_type"], doc["sub_task_type"], doc["id"], and
    # os.path.join(snapshot_download(...), doc["image_path"]) for the image
    snapshot = tmp_path / "OmniSpatial"
    rows = []
    for r in _omni_rows(fx):
        rel = "images/" + _omni_image(r)
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(fx.omnispatial_test / _omni_image(r), snapshot / rel)
        rows.append({"id": r["id"], "question": r["question"], "options": r["options"],
                     "gt": "ABCD"[r["answer"]], "task_type": r["task_type"], "sub_task_type": r["sub_task_type"],
                     "image_path": rel})
    (snapshot / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), snapshot / "data" / "test-00000-of-00001.parquet")
    assert detect(snapshot, "omnispatial", "test").layout.name == "omnispatial-lmms-eval"
    _same(load_benchmark("omnispatial", snapshot), load_benchmark("omnispatial", fx.omnispatial))


@pytest.mark.parametrize("images", ["image_path", "base64"])
def test_omnispatial_vlmevalkit_tsv_round_trip(fx: FixtureSet, tmp_path: Path, images: str):
    # VLMEvalKit omnispatialbench.py: question, one column per option letter (NaN when absent), answer (letter),
    # task_type, sub_task_type, image_path relative to <qizekun/OmniSpatial snapshot>/OmniSpatial-test/;
    # image_base.py: or base64 in `image`, where a value of <= 64 characters names the row holding the image
    rows, first_row_of_image = [], {}
    for i, r in enumerate(_omni_rows(fx)):
        row = {"index": i, "question": r["question"],
               **{letter: (r["options"][k] if k < len(r["options"]) else "") for k, letter in enumerate("ABCD")},
               "answer": "ABCD"[r["answer"]], "task_type": r["task_type"], "sub_task_type": r["sub_task_type"]}
        if images == "image_path":
            row["image_path"] = _omni_image(r)
        else:
            key = _omni_image(r)
            row["image"] = str(first_row_of_image[key]) if key in first_row_of_image else _b64(
                fx.omnispatial_test / key)
            first_row_of_image.setdefault(key, i)
        rows.append(row)
    assert images == "image_path" or rows[1]["image"] == "0"  # "0_1" shares the image of "0_0"
    root = tmp_path / "LMUData"
    root.mkdir()
    _write_tsv(root / "OmniSpatialBench.tsv", rows)
    if images == "image_path":
        shutil.copytree(fx.omnispatial_test, root / "OmniSpatial-test", ignore=shutil.ignore_patterns("*.json"))
    assert detect(root / "OmniSpatialBench.tsv").layout.name == "omnispatial-vlmevalkit"
    _same(load_benchmark("omnispatial", root), load_benchmark("omnispatial", fx.omnispatial), ids=False)


def test_vlmevalkit_option_gap_is_an_error(fx: FixtureSet, tmp_path: Path):
    row = {"index": 0, "question": "Q?", "A": "x", "B": "", "C": "z", "D": "", "answer": "A",
           "task_type": "Complex_Logic", "sub_task_type": "Pattern_Recognition", "image_path": "a.png"}
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    path = _write_tsv(tmp_path / "OmniSpatialBench.tsv", [row])
    with pytest.raises(DataFormatError, match="filled from A on") as info:
        load_benchmark("omnispatial", path)
    assert str(path) in str(info.value) and info.value.index == 0 and info.value.field == "A/B/C/D"


# --- SpatiaLab --------------------------------------------------------------------------------------


def test_spatialab_one_based_numbers_and_nan_options(tmp_path: Path):
    # SpatiaLab paper App. J: options numbered 1-4, gold = the option number, a missing option printed `nan`
    Image.new("RGB", (4, 4), (9, 9, 9)).save(tmp_path / "a.png")
    rows = [
        {"id": "s0", "question": "Q0?", "A": "one", "B": "two", "C": "three", "D": "nan", "answer": "3",
         "category": "Orientation", "subcategory": "Facing Direction", "image": "a.png"},
        {"id": "s1", "question": "Q1?", "A": "one", "B": "", "C": "three", "D": "four", "answer": "4",
         "category": "Orientation", "subcategory": "Facing Direction", "image": "a.png"},
        {"id": "s2", "question": "Q2?", "options": json.dumps(["x", "y", None, "nan"]), "answer": 2,
         "category": "Size & Scale", "subcategory": "Scale Consistency", "image": "a.png"},
    ]
    path = tmp_path / "spatialab.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = load_benchmark("spatialab", path)
    assert [(r.options, r.answer, r.answer_text) for r in records] == [
        (["one", "two", "three"], "C", "three"),
        (["one", "three", "four"], "C", "four"),  # number 4 is the third option left
        (["x", "y"], "B", "y"),
    ]
    rows[0]["answer"] = "4"  # the missing option
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataFormatError, match="missing option") as info:
        load_benchmark("spatialab", path)
    assert (info.value.index, info.value.record_id, info.value.field) == (0, "s0", "answer")


# --- detection and inspect --------------------------------------------------------------------------


def test_detect_every_release_layout(fx: FixtureSet):
    assert detect(fx.omnispatial).layout.name == "omnispatial-release"
    assert detect(fx.mindcube).layout.name == "mindcube-raw"
    assert detect(fx.spatialab / "spatialab.jsonl").layout.name == "spatialab"


def test_wrong_benchmark_and_unknown_columns(fx: FixtureSet, tmp_path: Path):
    with pytest.raises(DataFormatError, match="holds mindcube data"):
        load_benchmark("omnispatial", fx.mindcube / "raw" / "MindCube_tinybench.jsonl")
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps({"prompt": "x", "label": 1}) + "\n")
    with pytest.raises(DataFormatError, match="match no known layout") as info:
        load_benchmark("mindcube", path)
    assert str(path) in str(info.value)


# --- preparation and evaluation take any layout ------------------------------------------------------


def _vagen_copy(fx: FixtureSet, tmp_path: Path) -> Path:
    rows = [{"id": r["id"], "setting_tag": r["id"].split("_")[0].replace("aroundnew", "around"),
             "images": r["images"], "gt_answer": r["gt_answer"],
             "question_str": "<image>\n" * len(r["images"]) + _VAGEN_INSTRUCTION + r["question"]}
            for r in _mindcube_rows(fx)]
    path = tmp_path / "elsewhere" / "crossviewQA_tinybench_baseRL.jsonl"  # apart from the images
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prepare_reads_the_vagen_layout(fx: FixtureSet, tiny_qwen3_vl_small: Path, tmp_path: Path, capsys):
    from soft_spatial.data.prepare import main as prepare_main

    vagen = _vagen_copy(fx, tmp_path)
    common = ["--benchmark", "mindcube", "--processor", str(tiny_qwen3_vl_small), "--limit", "3"]
    prepare_main(common + ["--root", str(fx.mindcube), "--out", str(tmp_path / "raw.parquet")])
    prepare_main(common + ["--root", str(vagen), "--image-root", str(fx.mindcube),
                           "--out", str(tmp_path / "vagen.parquet")])
    capsys.readouterr()
    raw, from_vagen = (pq.read_table(tmp_path / f"{n}.parquet").to_pylist() for n in ("raw", "vagen"))
    assert len(raw) == 3 and from_vagen == raw  # prompts, images (PNG bytes), answers, extra_info


def test_evaluation_reads_an_lmms_eval_snapshot(fx: FixtureSet, tiny_qwen3_vl_small: Path, tmp_path: Path):
    from hydra import compose, initialize_config_dir

    from soft_spatial.eval import evaluate, read_results
    from soft_spatial.eval.__main__ import CONFIG_DIR, build_config

    snapshot = tmp_path / "MindCube_lmmseval"
    snapshot.mkdir()
    pq.write_table(pa.Table.from_pylist(_lmms_mindcube_rows(fx)), snapshot / "tiny-00000-of-00001.parquet")
    texts = {}
    for name, root in (("release", fx.mindcube), ("lmms", snapshot)):
        overrides = ["benchmarks=[mindcube]", f"data.mindcube={root}", f"model.path={tiny_qwen3_vl_small}",
                     f"output_dir={tmp_path / name}", "mode=hard", "samples=1", "max_new_tokens=6", "limit=3"]
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            evaluate(build_config(compose(config_name="eval", overrides=overrides)), progress=False)
        texts[name] = [(r["question_id"], r["text"], r["answer"])
                       for r in read_results(tmp_path / name / "samples.jsonl")]
    # same prompts and pixels, same seeds: the same generations
    assert len(texts["release"]) == 3 and texts["lmms"] == texts["release"]
