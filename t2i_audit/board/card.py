"""The board as the Hugging Face ecosystem reads it: the dataset card (``README.md`` whose YAML ``configs:``
lets ``datasets.load_dataset(BOARD, "<table>", split="latest")`` read each table) and, per run, the
``.eval_results/*.yaml`` a model repo carries.

Configs follow lm-evaluation-harness' details datasets (lm_eval/loggers/evaluation_tracker.py
``recreate_metadata_card``): one config per table, one split per run of the tool named by its timestamp,
and ``latest``. The eval results follow the Hub's format (https://huggingface.co/docs/hub/eval-results):
a list of ``{dataset: {id, task_id}, value, date, source: {url, name}, notes}``; they show on the Hub only
once the dataset is registered as a benchmark (an ``eval.yaml`` and the Hub's allow-list).
"""

from __future__ import annotations

import re

import yaml

from .settings import RULE, shown

TABLES = {
    "runs": "one row per run: its model, variant and every setting that changes scores (`settings`: the model's "
            "own, ranked with it), its group, the settings study it belongs to (`settings_study`), its overall "
            "success and rank interval, whether its files changed since it was added",
    "categories": "one row per run × category (and `overall`): success with a 95% Wilson CI on the prompts its "
                  "group shares, rank and rank interval, failure counts by type, the deciding judge and why",
    "comparisons": "one row per pair of runs of a group × category: paired difference with a 95% bootstrap CI, "
                   "p and Holm-adjusted p, how the images were paired",
    "questions": "one row per run × prompt × sample × question (slot) × judge: the run's own "
                 "`report/results.parquet` in long form, with judge id, model, revision and protocol; "
                 "`deciding` marks the judge its report used for the row's category",
    "images": "one row per run × prompt × sample × judge: image verdict and failure types",
    "probes": "one row per fitted probe of a run: failure-prediction AUROC with CI and prompt-only baseline, "
              "decodability per slot",
}
GALLERY = "gallery"  # the key of a run's ImageFolder metadata among its files (--images folder)


def configs(index: dict) -> list[dict]:
    """YAML ``configs:``: every table, every snapshot as a split, ``latest`` = the last snapshot."""
    out = []
    for name in TABLES:
        files = []
        for snap in index["snapshots"]:
            if name in snap["files"]:
                paths = [snap["files"][name]["path"]]
            else:
                paths = [r[name]["path"] for r in snap["runs"] if name in r]
            files.append({"split": snap["split"], "path": paths})
        if files:
            out.append({"config_name": name, "data_files": files + [{"split": "latest", "path": list(files[-1]["path"])}]})
    return out


def _md(text) -> str:
    """A cell of a Markdown table: no pipes or newlines from a user's model name."""
    return re.sub(r"[|\r\n]+", " ", str(text))


def dataset_card(index: dict, numbers: dict) -> str:
    from ..analysis import rate_text

    meta = {"pretty_name": index["title"], "tags": ["t2i-audit", "text-to-image", "evaluation", "compositionality"],
            "configs": configs(index)}
    repo = index.get("repo") or "BOARD"
    latest = index["snapshots"][-1]["split"] if index["snapshots"] else "latest"
    lines = ["---", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip(), "---", "",
             f"# {_md(index['title'])}", "",
             "Text-to-image models audited by t2i-audit on compositional prompts: "
             "per-slot verdicts, failure types, confidence intervals and probe results, one table per config. "
             "Each build of the board that changed its runs is a split named by its UTC time; `latest` is the newest.",
             "", "```python", "from datasets import load_dataset", "",
             f'categories = load_dataset("{repo}", "categories", split="latest")',
             f'questions = load_dataset("{repo}", "questions", split="latest")  # one row per slot and judge',
             "```", "", "## Tables", ""]
    lines += [f"- **{name}**: {text}." for name, text in TABLES.items()]
    if index.get("images") == "folder":
        lines += ["- The images, in ImageFolder layout (`images/<run>/<prompt>_<sample>.png` beside a `metadata.jsonl` "
                  "holding each image's run, prompt, category, verdict and failure types): "
                  '`load_dataset("imagefolder", data_dir="images")` from this folder. (One dataset repo reads with one '
                  "builder, so the images are not a config beside the Parquet tables.)"]
    elif index.get("images") == "embed":
        lines.append("- The `images` table embeds each image (column `image`).")
    lines += ["", f"## Ranked groups (snapshot {latest})", "",
              RULE + (" (With `--strict-settings`, as this board was made, differing model settings set runs apart "
                      "as well.)" if index.get("strict_settings") else "") + " Runs whose protocol differs form "
              "their own group, with the difference named. Success is on the prompts all runs of a group share; "
              "rank intervals come from a bootstrap over prompt groups (prompts showing one scene, with swap twins).", ""]
    for g in numbers["groups"]:
        lines += [f"### {g['name']}: {_md(g['conditions_text'])}", ""]
        if g.get("apart"):
            lines += [f"Set apart from {numbers['groups'][0]['name']}: {_md('; '.join(g['apart']))}.", ""]
        lines += ["| rank [95% interval] | run | settings | success [95% CI] | images |", "|---|---|---|---|---|"]
        for r in sorted(g["rows"], key=lambda r: (r["overall"]["rank"] is None, r["overall"]["rank"] or 0)):
            o = r["overall"]
            rank = "—" if o["rank"] is None else f"{o['rank']} [{o['rank_lo']}–{o['rank_hi']}]"
            rate = "—" if o["n"] == 0 else rate_text(o["rate"], o["lo"], o["hi"])
            study = f" (settings study {r['study']})" if r.get("study") else ""
            lines.append(f"| {rank} | {_md(r['label'])}{study} | {_md(r.get('settings') or '—')} | {rate} | {o['n']} |")
        lines.append("")
        for st in g.get("studies") or []:
            lines += [f"Settings study {st['name']}: {_md(st['model'])} at {st['n_settings']} settings "
                      f"(varied: {', '.join(st['varies'])}): {_md('; '.join(st['labels']))}.", ""]
    where = ("`eval_results/<model>/.eval_results/*.yaml` holds" if index.get("repo") else
             "Once the board has a Hub repo (`t2i-audit board --out BOARD --push-to-hub REPO`, with `--dry-run` to "
             "prepare it without sending), `eval_results/<model>/.eval_results/*.yaml` holds")
    lines += ["## Evaluation results for model repos", "",
              f"{where} each run's results in the Hub's format "
              "(https://huggingface.co/docs/hub/eval-results), one entry per category (`task_id`). Copy a model's "
              "folder into its model repo (or open a pull request with it): the results show on the model page and "
              "the leaderboard once this dataset is registered as a benchmark on the Hub (an `eval.yaml` and the "
              "Hub's allow-list); until then the Hub does not display them.", ""]
    return "\n".join(lines) + "\n"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip(".-")[:80] or "model"


def eval_results(index: dict, numbers: dict, date: str) -> dict:
    """``{relative path: YAML text}``: per run, its categories and overall in the Hub's format."""
    from ..analysis import ci_text

    repo = index.get("repo")
    if not repo:
        return {}
    out = {}
    for g in numbers["groups"]:
        for r in g["rows"]:
            entries = []
            for cat, c in [("overall", r["overall"]), *r["categories"].items()]:
                if c["n"] == 0:
                    continue
                notes = (f"success % of {c['n']} images (95% CI {ci_text(c['lo'], c['hi'])}) on the "
                         f"{g['shared']} prompts of board group {g['name']}; {g['conditions_text']}; "
                         f"model settings {r.get('settings') or '—'}; "
                         f"judge {c.get('judge') or '—'}; run {r['run_id']}")
                entries.append({"dataset": {"id": repo, "task_id": str(cat)}, "value": round(100 * c["rate"], 2),
                                "date": date, "source": {"url": f"https://huggingface.co/datasets/{repo}",
                                                         "name": "t2i-audit board"}, "notes": notes})
            if entries:
                path = f"eval_results/{slug(r['model'])}/.eval_results/{slug(index['title'])}__{slug(r['run_id'])}.yaml"
                out[path] = yaml.safe_dump(entries, sort_keys=False, allow_unicode=True)
    return out


def conditions_text(conditions: dict) -> str:
    return ", ".join(f"{k} {shown(v)}" for k, v in conditions.items()) or "no recorded settings"
