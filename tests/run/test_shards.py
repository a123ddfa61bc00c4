"""Splitting a run into shards (``--shard i/n``) and joining them (``evalbench merge``): the
shards hold every item once, and the merged run equals the run that was not split."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.dataset.shard import group_assignment, item_shard, parse_shard

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def test_parse_shard() -> None:
    assert str(parse_shard(" 2/4 ")) == "2/4"
    for bad in ("0/2", "3/2", "1-2", "a/b", "1/0"):
        with pytest.raises(ValueError, match="shard"):
            parse_shard(bad)


def test_whole_databases_go_to_the_least_loaded_shard() -> None:
    groups = Counter({("postgres", "a"): 50, ("postgres", "b"): 30, ("postgres", "c"): 20, ("sqlite", "d"): 10})
    assignment = group_assignment(groups, 2)
    assert assignment is not None
    loads = Counter()
    for group, shard in assignment.items():
        loads[shard] += groups[group]
    assert sorted(loads.values()) == [50, 60]  # a | b + c + d
    assert group_assignment(groups, 5) is None  # fewer databases than shards: items by hash


def test_items_by_hash_fall_in_exactly_one_shard() -> None:
    keys = [("postgres", f"item_{i}") for i in range(2000)]
    shards = Counter(item_shard(dialect, item, 4) for dialect, item in keys)
    assert set(shards) == {1, 2, 3, 4} and all(400 < count < 600 for count in shards.values())


def _run(out: Path, run_id: str, *extra: str) -> int:
    return main(["run", "--config", str(QUICKSTART), "--output-dir", str(out), "--run-id", run_id, "--no-progress", *extra])


def _verdicts(run_dir: Path) -> dict[str, list]:
    out = {}
    with (run_dir / "conversations.jsonl").open() as journal:
        for line in journal:
            record = json.loads(line)
            out[record["item_id"]] = [(p["phase"], p["passed"], p["outcome"]) for p in record["phases"]]
    return out


@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_shards_merged_equal_the_run_that_was_not_split(tmp_path: Path, pgdata: Path, capsys) -> None:
    assert _run(tmp_path, "full") == 0
    assert _run(tmp_path, "s1", "--shard", "1/2") == 0
    assert _run(tmp_path, "s2", "--shard", "2/2") == 0
    one, two = _verdicts(tmp_path / "s1"), _verdicts(tmp_path / "s2")
    assert one and two and not set(one) & set(two)
    assert main(["merge", str(tmp_path / "merged"), str(tmp_path / "s2"), str(tmp_path / "s1")]) == 0
    merged = tmp_path / "merged"
    assert _verdicts(merged) == _verdicts(tmp_path / "full")
    summary = json.loads((merged / "summary.json").read_text())
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert summary["complete"] and summary["total_items"] == 43
    assert summary["scorers"] == full["scorers"] and summary["outcomes"] == full["outcomes"]
    manifest = json.loads((merged / "manifest.json").read_text())
    assert sorted(s["shard"] for s in manifest["sessions"]) == ["1/2", "2/2"]
    assert (merged / "report.html").is_file() and (merged / "junit.xml").is_file()
    capsys.readouterr()

    # what merge refuses, naming the problem (exit 2)
    assert main(["merge", str(tmp_path / "m2"), str(tmp_path / "s1")]) == 2
    assert "shard(s) 2/2 missing" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "m3"), str(tmp_path / "s1"), str(tmp_path / "s1")]) == 2
    assert "both shard 1/2" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "m4"), str(tmp_path / "full"), str(tmp_path / "s1")]) == 2
    assert "is not a shard" in capsys.readouterr().err
    assert _run(tmp_path, "other", "--shard", "2/2", "--set", "seed=7") == 0
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "m5"), str(tmp_path / "s1"), str(tmp_path / "other")]) == 2
    assert "config_fingerprint differs" in capsys.readouterr().err
    assert main(["merge", str(merged), str(tmp_path / "s1"), str(tmp_path / "s2")]) == 2  # never over a run
    capsys.readouterr()
    edited = json.loads((tmp_path / "s2" / "manifest.json").read_text())
    del edited["dataset"]["items"]  # a hand-edited manifest: an error naming it, not a traceback
    (tmp_path / "s2" / "manifest.json").write_text(json.dumps(edited))
    assert main(["merge", str(tmp_path / "m6"), str(tmp_path / "s1"), str(tmp_path / "s2")]) == 2
    assert "s2/manifest.json does not say how many items" in capsys.readouterr().err


def test_a_bad_shard_is_a_config_error(tmp_path: Path, capsys) -> None:
    assert _run(tmp_path, "x", "--shard", "3/2") == 2
    assert "shard" in capsys.readouterr().err


def test_a_shard_without_items_is_an_empty_run(tmp_path: Path, pgdata: Path) -> None:
    """More shards than items (a wide CI matrix): a shard that holds nothing runs nothing, and
    says so, rather than failing."""
    from evalbench.dataset.shard import item_shard

    empty = next(i for i in range(1, 51) if all(item_shard("postgres", f"greenleaf_{k}", 50) != i for k in range(1, 44)))
    assert main(["run", "--config", str(QUICKSTART), "--shard", f"{empty}/50", "--output-dir", str(tmp_path),
                 "--run-id", "empty", "--no-progress"]) == 0
    summary = json.loads((tmp_path / "empty" / "summary.json").read_text())
    assert summary["total_items"] == 0 and summary["complete"]
