"""How many true per-condition regressions would a per-condition gate on learned-model rollouts
catch? (session 13 analysis of ``gate_study.jsonl`` against ``bundle_truth.jsonl``)

    python gate_vs_truth.py [GATE_STUDY.jsonl] [BUNDLE_TRUTH.jsonl]

A true regression: the update flies a condition it had met (calm always; wind A when its data
reach past 25 s, wind B past 95 s) more than 20 % and 4 mm worse than its parent on the true
plant. The gate flags a condition when a k-means group of at least 16 rollouts whose most common
condition it is has a candidate cost above the active policy's by the threshold (+ 1 mm).
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    study = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "gate_study.jsonl"
    truth_path = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "bundle_truth.jsonl"
    truth = {}
    for line in truth_path.read_text().splitlines():
        row = json.loads(line)
        truth[(row["run"], row["version"])] = row
    rows = [json.loads(line) for line in study.read_text().splitlines()]
    for design in ("r64", "r256", "r256_steady"):
        for threshold in (0.05, 0.1, 0.2, 0.3):
            counts = {"caught": 0, "false_alarm": 0, "missed": 0, "quiet": 0}
            for g in rows:
                parent = truth[("base", 1)] if g["from"] == 1 else truth[(g["run"], g["from"])]
                child = truth[(g["run"], g["to"])]
                met = (
                    ["calm"] + ["wind_a"] * (g["cutoff_s"] > 25) + ["wind_b"] * (g["cutoff_s"] > 95)
                )
                for c in met:
                    worse = child[c] > parent[c] * 1.2 and child[c] - parent[c] > 0.004
                    groups = [
                        grp
                        for key, grp in g[design].items()
                        if key != "overall"
                        and grp["n"] >= 16
                        and max(grp["conditions"], key=grp["conditions"].get) == c
                    ]
                    if not groups:
                        continue
                    flag = any(grp["cand"] > grp["act"] * (1 + threshold) + 0.001 for grp in groups)
                    key = (
                        ("caught" if flag else "missed")
                        if worse
                        else ("false_alarm" if flag else "quiet")
                    )
                    counts[key] += 1
            print(json.dumps({"design": design, "threshold": threshold, **counts}))


if __name__ == "__main__":
    main()
