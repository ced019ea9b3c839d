"""Which slime SLIME_DIR holds, and which of its training backends the launcher drives there.

Two lines of releases are supported, told apart by the checkout itself (its ``setup.py`` version and whether
``slime/backends/fsdp_utils`` exists): v0.2.x up to v0.2.2 keep the FSDP backend (removed on 2026-03-04,
commit e4faf6330, first released in v0.2.3); v0.3.x train with Megatron only. A v0.2.3 .. v0.2.x checkout is
Megatron-only too but untested here, so it is refused with the releases to use instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from qwen_swe.errors import SlimeBackendError
from qwen_swe.paths import REPO_ROOT

SLIME_FSDP_TAG = "v0.2.2"
SLIME_FSDP_COMMIT = "2418a7844abe4d490a1676dcf88fc3401adab362"
SLIME_MEGATRON_TAG = "v0.3.1"
SUPPORTED = f"{SLIME_FSDP_TAG} (FSDP; v0.2.0 to v0.2.2 have it) or v0.3.x (Megatron; tested: {SLIME_MEGATRON_TAG})"
PACKAGE_DIR = REPO_ROOT / "examples" / "qwen_swe"  # the entry points slime imports by path


@dataclass(frozen=True)
class Release:
    """A supported slime checkout: its version string and the training backend the launcher uses there."""

    version: str
    backend: str  # "fsdp" or "megatron"

    @property
    def tested(self) -> bool:
        return f"v{self.version}" in (SLIME_FSDP_TAG, SLIME_MEGATRON_TAG)


def slime_version(slime_dir: Path) -> str | None:
    """The version string in the checkout's setup.py, or None."""
    try:
        m = re.search(r'version\s*=\s*"([^"]+)"', (slime_dir / "setup.py").read_text())
    except OSError:
        return None
    return m.group(1) if m else None


def detect_release(slime_dir: Path) -> Release:
    """The checkout's release and backend; raises naming the supported releases when it is none of them."""
    if not (slime_dir / "train.py").is_file() or not (slime_dir / "slime").is_dir():
        raise SlimeBackendError(
            f"SLIME_DIR={slime_dir} is not a slime checkout (no train.py and slime/); clone "
            f"THUDM/slime and check out {SLIME_FSDP_TAG} or {SLIME_MEGATRON_TAG}"
        )
    version = slime_version(slime_dir) or "unknown"
    major_minor = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    has_fsdp = (slime_dir / "slime" / "backends" / "fsdp_utils").is_dir()
    if major_minor == (0, 2) and has_fsdp:
        return Release(version, "fsdp")
    if major_minor == (0, 3) and (slime_dir / "slime" / "backends" / "megatron_utils").is_dir():
        return Release(version, "megatron")
    why = (
        "it has no FSDP backend (removed on 2026-03-04, commit e4faf6330)"
        if major_minor == (0, 2)
        else "this launcher does not know its command line"
    )
    raise SlimeBackendError(
        f"SLIME_DIR={slime_dir} is slime {version}: {why}. Supported: {SUPPORTED}. Check out one of them "
        f"(git -C {slime_dir} checkout {SLIME_FSDP_TAG}, commit {SLIME_FSDP_COMMIT[:9]}, or {SLIME_MEGATRON_TAG}), "
        "or use the built-in trainer (BACKEND=fsdp)"
    )


def link_problem(slime_dir: Path) -> str | None:
    """Why ``SLIME_DIR/examples/qwen_swe`` cannot point at this package, or None (absent or already ours)."""
    link = slime_dir / "examples" / "qwen_swe"
    if not (link.exists() or link.is_symlink()) or link.resolve() == PACKAGE_DIR:
        return None
    return (
        f"{link} exists and is not this repository's package (the seed's copy?). slime's examples package "
        f"would import it instead of {PACKAGE_DIR}: move it away (mv {link} {link}.old) and run again"
    )


def ensure_link(slime_dir: Path) -> Path:
    """Link ``SLIME_DIR/examples/qwen_swe`` to this package: slime's ``examples`` is a regular package and Ray puts
    the script folder first on every worker's ``sys.path``, so PYTHONPATH alone would not reach ours."""
    link = slime_dir / "examples" / "qwen_swe"
    problem = link_problem(slime_dir)
    if problem:
        raise SlimeBackendError(problem)
    if not link.exists():
        link.symlink_to(PACKAGE_DIR, target_is_directory=True)
    return link
