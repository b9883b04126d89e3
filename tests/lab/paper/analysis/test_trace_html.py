"""Fig. 4, one chain of thought shaded by τ (soft_spatial/lab/paper/analysis/trace_html.py) through
``python -m soft_spatial.analysis fig4``: one piece per step, soft steps titled with their τ,
discrete ones marked, the pieces spelling the sample's text as the tokenizer decodes it, the τ plot
inlined; an unknown sample is an error naming it."""
import json

import pytest

from soft_spatial.lab.paper.analysis.cli import main


def test_fig4_page_shows_the_spine_shaded_by_tau(eval_dir, tiny_qwen3_vl_small):
    from soft_spatial.models.loading import load_processing

    d, truth = eval_dir
    res = main(["fig4", str(d), "--sample", "omnispatial:2:1"])
    page = (d / "analysis" / "fig4_trace.html").read_text()
    tok = load_processing(tiny_qwen3_vl_small)[2]
    steps = [json.loads(x) for x in (d / "steps.jsonl").read_text().splitlines()]
    from soft_spatial.eval.steps import decode_steps
    st = decode_steps(next(r for r in steps if (r["question_index"], r["sample"]) == (2, 1)))
    n_soft = int(st["soft"].sum())
    assert page.count('title="step ') == st["tau"].size
    assert page.count("τ = ") == n_soft and page.count('class="discrete"') == st["tau"].size - n_soft
    assert f'title="step 0: τ = {st["tau"][0]:.3f}' in page
    assert "data:image/png;base64," in page and res["sample"] == "omnispatial:2:1"
    import html
    import re
    text = html.unescape(re.sub(r"<[^>]+>", "", page.split('<div class="trace">')[1]
                                .split("</div>")[0]))
    assert text == tok.decode(st["token"].tolist())  # the pieces spell the spine text
    with pytest.raises(ValueError, match="no sample 'omnispatial:9:9'"):
        main(["fig4", str(d), "--sample", "omnispatial:9:9"])
