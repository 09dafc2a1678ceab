"""Compare two policies' episodes on the same tasks, pair by pair: success of each, how many tasks only one
of them won, an exact McNemar test on those, and how the failures end (at the turn cap, repeating actions).

Two policies scored on the same 400 held-out tasks share the tasks' difficulty, so the paired difference is
sharper than two independent proportions; the discordant pairs are what tells them apart. The files are
episodes as the evaluation and bench/heldout_policy_checkpoint.py write them (one JSON object a line);
episodes pair by (task_id, sample_index), and both files must hold the same pairs.

    python bench/paired_episodes.py A.jsonl B.jsonl [--names a,b] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path


def read_episodes(path: Path) -> dict[tuple[str, int], dict]:
    if not path.is_file():
        raise SystemExit(f"{path} is not a file")
    episodes: dict[tuple[str, int], dict] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (str(row["task_id"]), int(row.get("sample_index", 0)))
            row["success"], row["steps"] = bool(row["success"]), list(row["steps"])
        except (ValueError, KeyError, TypeError) as error:
            raise SystemExit(f"{path}:{number}: not an episode ({error.__class__.__name__}: {error})") from None
        if key in episodes:
            raise SystemExit(f"{path}:{number}: episode {key} appears twice")
        episodes[key] = row
    if not episodes:
        raise SystemExit(f"{path} holds no episode")
    return episodes


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: the smaller discordant count under Binomial(only_a + only_b, 1/2)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def failure_shape(episodes: list[dict]) -> dict[str, float]:
    """How failed episodes end: their mean length, and the mean number of repeated actions in them."""
    failed = [e for e in episodes if not e["success"]]
    if not failed:
        return {"failed": 0}
    actions = [[s.get("action") for s in e["steps"]] for e in failed]
    return {"failed": len(failed),
            "failed_mean_steps": sum(len(a) for a in actions) / len(failed),
            "failed_repeated_actions": sum(len(a) - len(set(a)) for a in actions) / len(failed)}


def family(goal: str) -> str:
    """The goal's verb ("Your task is to: put a pen on sofa 1." -> "put"), or the whole goal's first word."""
    text = goal.split(":", 1)[-1].strip()
    return text.split(" ", 1)[0].lower() if text else "?"


def compare(a: dict, b: dict, names: tuple[str, str]) -> dict:
    if a.keys() != b.keys():
        missing = sorted(a.keys() ^ b.keys())[:3]
        raise SystemExit(f"the two files hold different episodes ({len(a.keys() ^ b.keys())} unpaired, e.g. {missing})")
    keys = sorted(a)
    both = sum(a[k]["success"] and b[k]["success"] for k in keys)
    only_a = sum(a[k]["success"] and not b[k]["success"] for k in keys)
    only_b = sum(b[k]["success"] and not a[k]["success"] for k in keys)
    n = len(keys)
    # the standard error of the paired difference of success rates
    diff = (only_b - only_a) / n
    se = math.sqrt(max(0.0, (only_a + only_b) / n - diff ** 2) / n)
    families: dict[str, Counter] = {}
    for k in keys:
        counts = families.setdefault(family(str(a[k].get("goal", ""))), Counter())
        counts["tasks"] += 1
        counts[names[0]] += a[k]["success"]
        counts[names[1]] += b[k]["success"]
    return {"episodes": n,
            "success": {names[0]: (both + only_a) / n, names[1]: (both + only_b) / n},
            "both": both, f"only_{names[0]}": only_a, f"only_{names[1]}": only_b, "neither": n - both - only_a - only_b,
            f"difference_{names[1]}_minus_{names[0]}": diff, "difference_se": se,
            "mcnemar_exact_p": mcnemar_exact(only_a, only_b),
            "by_family": {f: dict(c) for f, c in sorted(families.items())},
            "failures": {names[0]: failure_shape([a[k] for k in keys]), names[1]: failure_shape([b[k] for k in keys])}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="episodes of policy A (JSON lines)")
    parser.add_argument("b", type=Path, help="episodes of policy B, on the same tasks")
    parser.add_argument("--names", default="a,b", help="two short names for the table (default a,b)")
    parser.add_argument("--out", type=Path, default=None, help="also write the result here (JSON)")
    args = parser.parse_args(argv)
    names = tuple(s.strip() for s in args.names.split(","))
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise SystemExit(f"--names wants two different names, comma-separated; got {args.names!r}")
    result = {"a": str(args.a), "b": str(args.b), **compare(read_episodes(args.a), read_episodes(args.b), names)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
