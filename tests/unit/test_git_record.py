"""What a cell's provenance says of the code that made it (anyjev.run.provenance.git_commit): whether the code (the
package, the workflow, the configs) had uncommitted changes, not the outputs a run rewrites (issue 46, 6: README
command 1 rewrites the committed results/, and every cell said `dirty: true`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from anyjev.run.provenance import git_commit


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_rewritten_results_leave_the_code_clean_and_an_edited_module_does_not(tmp_path) -> None:
    repo = tmp_path / "checkout"
    for path in ("anyjev/cli.py", "config/config.yaml", "results/tables/summary.csv", "docs/x.md"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("one\n")
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert git_commit(repo)["dirty"] is False
    (repo / "results/tables/summary.csv").write_text("two\n")
    (repo / "docs/x.md").write_text("two\n")
    assert git_commit(repo)["dirty"] is False, "the outputs a run rewrites are not its code"
    (repo / "config/config.yaml").write_text("two\n")
    assert git_commit(repo)["dirty"] is True
    git(repo, "checkout", "--", "config")
    (repo / "anyjev/cli.py").write_text("two\n")
    assert git_commit(repo)["dirty"] is True


def test_a_jobs_cells_record_the_package_versions_found_once(monkeypatch) -> None:
    """Each cell's provenance records the installed versions; a job with many cells looks each package up once
    (importlib.metadata scans every folder of sys.path), and records a package that is not installed as None."""
    import importlib.metadata

    from anyjev.run import provenance

    looked_up: list[str] = []
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: looked_up.append(name) or real(name))
    provenance.installed_version.cache_clear()
    try:
        first = provenance.versions("numpy", "no-such-package-anyjev")
        assert provenance.versions("numpy", "no-such-package-anyjev") == first
        assert first["numpy"] == real("numpy") and first["no-such-package-anyjev"] is None
        assert looked_up == ["numpy", "no-such-package-anyjev"]
    finally:
        provenance.installed_version.cache_clear()
