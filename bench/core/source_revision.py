"""The source a run ran: the commit of bench's checkout, the files under bench/ and models/ that differ from it
(uncommitted), and, for two revisions, the files under bench/ and models/ that differ between them.

`bench run` records it with every run (runs.source_json), and `bench ab` for each side (a git=REF side runs a clean
worktree of REF), so "what changed" can name the code first: a side B that adds work to the step in models/ is a
change of source, and the file that holds it is what a reader needs to see. Outside a git checkout (an installed
bench, an image without .git) nothing is known and nothing is claimed.
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2]
# Where the code that decides throughput lives: the control plane and what runs on the workers.
WATCHED = ("bench", "models")
_GIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class SourceRevision:
    commit: str | None                  # None: not a git checkout (or git could not say)
    uncommitted: tuple[str, ...] = ()   # files under WATCHED that differ from the commit (edited, added, deleted)

    def text(self) -> str:
        if self.commit is None:
            return "unknown (not a git checkout)"
        if not self.uncommitted:
            return self.commit[:12]
        n = len(self.uncommitted)
        return f"{self.commit[:12]} + uncommitted changes in {n} file{'s' * (n != 1)}"

    def to_json(self) -> str:
        return json.dumps({"commit": self.commit, "uncommitted": list(self.uncommitted)})

    @classmethod
    def from_json(cls, text: str | None) -> "SourceRevision | None":
        """The recorded revision; None for a run recorded before bench kept it (or by a bench outside git)."""
        if not text:
            return None
        try:
            doc = json.loads(text)
            return cls(doc.get("commit"), tuple(doc.get("uncommitted") or ()))
        except (ValueError, AttributeError, TypeError):
            return None


def source_text(run: dict) -> str:
    """A runs-table row's source revision as text; "" when it is not known (a run before schema 11, a bench
    outside a git checkout), which "what changed" leaves out rather than calling a change."""
    revision = SourceRevision.from_json(run.get("source_json"))
    return revision.text() if revision and revision.commit else ""


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=_GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def of_checkout(root: Path = SOURCE_ROOT) -> SourceRevision:
    """The commit checked out at `root` and its uncommitted files under bench/ and models/ (untracked ones too:
    a new module is a change; ignored files such as __pycache__ are not)."""
    # Only bench's own checkout counts: an installed bench sits in site-packages, which may lie inside some other
    # repository (a project's .venv), whose commit says nothing about this code.
    top = _git(root, "rev-parse", "--show-toplevel")
    if not top or Path(top.strip()).resolve() != Path(root).resolve():
        return SourceRevision(None)
    head = _git(root, "rev-parse", "--verify", "--quiet", "HEAD")
    if not head or not head.strip():
        return SourceRevision(None)
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *WATCHED) or ""
    # -z: entries are "XY path\0" (a rename adds "\0old path", which is skipped as its own entry's second half).
    files, entries, i = [], status.split("\0"), 0
    while i < len(entries):
        entry = entries[i]
        if len(entry) > 3:
            files.append(entry[3:])
            if entry[0] in "RC":
                i += 1
        i += 1
    return SourceRevision(head.strip(), tuple(sorted(files)))


def differing_files(a: SourceRevision | None, b: SourceRevision | None, root: Path | None = None) -> list[str] | None:
    """Files under bench/ and models/ that differ between two revisions: those the commits differ in, and those
    either side had uncommitted. None when a side's commit is unknown or not in the repository at `root` (default:
    this checkout, which made both sides' worktrees)."""
    root = root or SOURCE_ROOT
    if a is None or b is None or a.commit is None or b.commit is None:
        return None
    if a.commit == b.commit:
        between: set[str] = set()
    else:
        out = _git(root, "diff", "--name-only", "-z", a.commit, b.commit, "--", *WATCHED)
        if out is None:
            return None
        between = {f for f in out.split("\0") if f}
    return sorted(between | set(a.uncommitted) | set(b.uncommitted))
