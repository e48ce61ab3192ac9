"""Before/after pairs (``python -m bench --before REV``): the interleaving, the report on
made-up rows, which code a server child of each tree really imports, and the whole
path at token size against HEAD (figures are noise; no timings asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import config, pairs, report, trees
from bench.__main__ import main
from bench.cpu import CpuMeter
from bench.phases import PhaseMeter
from bench.stats import Row
from bench.workloads import deliver
from bench.workloads.common import Contestant, schedule
from tests.support.postgres import free_port
from tests.toolchain.tools import find_tool, tool_env
from uns_server.observability.phases import PHASES

ROOT = trees.ROOT


def _git_checkout() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: --before REV needs git")


def test_rounds_interleave_and_reverse_every_other_round() -> None:
    assert schedule(2, 1) == [(0, 0), (0, 1)]
    assert schedule(2, 3) == [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]
    assert schedule(1, 1) == [(0, 0)]  # a run without pairs: one window per level


def test_flags_that_cannot_pair_are_refused() -> None:
    assert main(["--pairs", "2", "--only", "ghz"]) == 2  # --pairs without --before
    assert main(["--before", "HEAD", "--pairs", "0", "--only", "ghz"]) == 2
    assert main(["--before", "HEAD", "--only", "watch,echo"]) == 2  # nothing to pair


def _window(name: str, c: str, variant: str, ops: int, cpu_s: float, p50: float,
            phases: dict[str, float] | None = None) -> Row:  # fmt: skip
    extra = {"tree_revision": "abc" if variant.startswith("before") else "def"}
    extra |= {"phase_cpu_s": phases} if phases else {}
    extra |= {"intake_calls": float(ops), "intake_transactions": ops / cpu_s / 1000}
    return Row("uns", name, c, ops=ops, seconds=1.0, latencies_ms=[p50], server_cpu_s=cpu_s,
               extra=extra, variant=variant)  # fmt: skip


def test_report_sets_the_trees_side_by_side() -> None:
    settle = dict.fromkeys(PHASES, 0.0)
    rows = [
        Row("baseline", "ghz echo", "c=16", ops=1000, seconds=1.0, server_cpu_s=0.5),
        # before: 2.0, 3.0, 2.2 ms per call; after: 1.0, 1.6, 1.2 (rounds in schedule order)
        _window("ghz accept", "c=16", "before 1", 100, 0.20, 10.0, settle | {"settle": 0.1}),
        _window("ghz accept", "c=16", "after 1", 100, 0.10, 4.0, settle | {"settle": 0.05}),
        _window("ghz accept", "c=16", "after 2", 100, 0.16, 6.0, settle | {"settle": 0.07}),
        _window("ghz accept", "c=16", "before 2", 100, 0.30, 12.0, settle | {"settle": 0.2}),
        _window("ghz accept", "c=16", "before 3", 100, 0.22, 11.0, settle | {"settle": 0.1}),
        _window("ghz accept", "c=16", "after 3", 100, 0.12, 5.0, settle | {"settle": 0.04}),
    ]
    results = report.Results(rows)
    [pair] = pairs.pairs(results)
    assert [r.variant for r in pair.before.windows] == ["before 1", "before 2", "before 3"]
    assert pair.before.cpu_median == pytest.approx(2.2)
    assert pair.after.cpu_median == pytest.approx(1.2)
    assert pair.ratio == pytest.approx(1.2 / 2.2)
    assert pair.round_ratios == pytest.approx([0.5, 1.6 / 3.0, 1.2 / 2.2])
    assert (pair.before.p50, pair.after.p50) == (11.0, 5.0)

    lines = pairs.render(results)
    table = {line.split(" | ")[0]: line for line in lines if line.startswith("| ghz accept")}
    assert table["| ghz accept"] == (
        "| ghz accept | c=16 | 2.200 (2.000-3.000) | 1.200 (1.000-1.600) | 0.55x "
        "| 0.50x, 0.53x, 0.55x | 11.00 | 5.00 | 0.45x |"
    )
    assert "before = abc, after = def; 3 round(s)" in lines[0]
    # issue 24's ratio per tree, against the one echo row: 2.2 / 0.5 and 1.2 / 0.5
    assert "| c=16 | 0.500 | 4.40x | 2.40x | - | - | - | - |" in lines
    assert "| phase | c=16 before | c=16 after |" in lines
    assert "| settle | 1.000 | 0.500 |" in lines  # medians of 1, 2, 1 and 0.5, 0.7, 0.4
    assert "| server CPU (/proc) | 2.200 | 1.200 |" in lines
    # calls per transaction: 1000 x cpu_s, medians of 200, 300, 220 and 100, 160, 120
    assert "| calls per intake transaction | 220.0 | 120.0 |" in lines

    # The table keeps every window; the targets are the after tree's median.
    text = report.render(results)
    assert "c=16 before 2" in text and "c=16 after 3" in text
    assert "srv CPU/accept, dispatch off / echo       2.40x" in text
    merged = report.for_tree(results, "before").get("ghz accept c=16")
    assert merged is not None and merged.ops == 300
    assert report.server_ms(merged) == pytest.approx(2.2)
    assert report.for_tree(results, "before").get("ghz echo c=16") is rows[0]
    assert pairs.to_json(results)[0]["after"]["server_cpu_ms_per_call"] == pytest.approx(
        [1.0, 1.6, 1.2]
    )
    assert pairs.render(report.Results(rows[:1])) == []  # no pairs, no block


async def test_a_tree_without_the_metrics_endpoint_has_no_phases() -> None:
    meter = PhaseMeter(CpuMeter(lambda: None, None), f"http://127.0.0.1:{free_port()}/metrics")
    await meter.start()  # nothing listens there: an older before tree, say
    window, sample = await meter.stop()
    assert sample is None and window.server is None


def _imports(tree: trees.Tree | None, cwd: Path) -> dict[str, str]:
    """What a server child started as the bench starts it imports (``--help``: it
    reports, then exits before serving)."""
    env = dict(os.environ) | (tree.env() if tree else {})
    if tree is None:
        env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-c", trees.LAUNCH, "--help"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return trees.loaded_modules(proc.stderr)


def test_a_child_of_the_before_tree_imports_that_tree(tmp_path: Path) -> None:
    _git_checkout()
    with trees.materialise("HEAD", tmp_path) as before:
        assert before.label == "before" and before.root.parent == tmp_path
        assert (before.root / "uns_server" / "migrations" / "env.py").is_file()  # via the link
        loaded = _imports(before, before.root)
        assert set(loaded) == {"uns_server", "uns"}
        assert all(before.owns(path) and ROOT not in Path(path).parents for path in loaded.values())
        # Either half alone is not enough: without the tree's PYTHONPATH the venv's
        # editable install (this tree) answers; run from this tree's root, the working
        # directory (first on sys.path) does.
        assert not before.owns(_imports(None, tmp_path)["uns_server"])
        assert not before.owns(_imports(before, ROOT)["uns_server"])
        with trees.materialise(str(before.root), tmp_path) as same:  # a directory: used as is
            assert same.root == before.root
        assert before.root.exists()
    assert not before.root.exists()  # an exported revision is removed again
    # The run directory (bench/results) lies inside the current tree: "after" must not
    # take the before tree's files for its own.
    nested = trees.Tree("before", ROOT / "bench" / "results" / "x" / "before-1", "1")
    assert trees.current().owns(str(nested.root / "uns_server" / "__init__.py"))
    assert not trees.current(nested).owns(str(nested.root / "uns_server" / "__init__.py"))
    assert trees.current(nested).owns(str(ROOT / "uns_server" / "__init__.py"))
    unknown = trees.materialise("nonesuch", tmp_path)
    with pytest.raises(RuntimeError, match="git rev-parse"), unknown:
        pass


def _worktrees() -> list[str]:
    listing = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [line for line in listing.splitlines() if line.startswith("worktree ")]


def test_bench_runs_pairs_against_head(tmp_path: Path) -> None:
    """``--smoke --only accept,deliver,ghz --before HEAD --phases``, as a user runs it."""
    _git_checkout()
    find_tool("ghz")
    worktrees = _worktrees()
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", "accept,deliver,ghz",
         "--before", "HEAD",
         "--phases", "--no-install", "--out", str(tmp_path)],
        cwd=ROOT, env=tool_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [run_dir] = tmp_path.iterdir()
    data = json.loads((run_dir / "results.json").read_text())
    before_root = Path(data["meta"]["pairs"]["before"]["root"])
    assert before_root.parent == run_dir and not before_root.exists()  # cleaned up
    windows = [r for r in data["rows"] if r["variant"]]
    levels = [(name, c) for name in ("accept", *report.GHZ_UNS) for c in ("c=1", "c=16")]
    smoke = config.SMOKE
    levels += [("deliver", f"c={smoke.deliver_producers}"),
               ("deliver", f"paced {smoke.paced_rate:g}/s")]  # fmt: skip
    for name, c in levels:
        level = [r for r in windows if (r["name"], r["setting"]) == (name, c)]
        assert [r["variant"] for r in level] == ["before 1", "after 1"], (name, c)
        assert all(r["ops"] > 0 for r in level), (name, c)
        if name.startswith("ghz"):
            assert all(r["extra"]["phase_cpu_s"] for r in level), (name, c)
            # every call went through some intake transaction, at least one per window
            assert all(r["extra"]["intake_calls"] >= r["extra"]["intake_transactions"] >= 1
                       for r in level), (name, c)  # fmt: skip
        # two distinct trees ran: each child reported its own tree's uns_server
        before, after = (Path(r["extra"]["uns_server"]) for r in level)
        assert before.is_relative_to(before_root), before
        assert after == ROOT / "uns_server" / "__init__.py"
    assert len(data["pairs"]) == len(levels)
    assert all(p["after_over_before"] for p in data["pairs"])
    table = (run_dir / "table.txt").read_text()
    assert "| row | level | before ms/call | after ms/call | after ÷ before |" in table
    assert "| phase | c=1 before | c=1 after | c=16 before | c=16 after |" in table
    assert _worktrees() == worktrees  # the revision was exported, no worktree added


@pytest.mark.parametrize("tree", ["", "before", "after"])
def test_deliver_windows_never_share_keys(tree: str) -> None:
    """A key sent in an earlier window is an idempotent replay, delivered once, back then:
    a window that reused it measured nothing (negative latencies, no connections)."""
    contestant = Contestant(target="t", db=None, meter=None, tree=tree)  # type: ignore[arg-type]
    assert len({deliver._suffix(contestant, r) for r in range(3)}) == 3
