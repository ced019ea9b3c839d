#!/usr/bin/env bash
# The slime contract-test interpreter (.venv-slime): slime v0.2.2's and v0.3.1's light modules (Sample, DataSource,
# mask_utils, call_rollout_fn, v0.3.1's plugin contract tests) need transformers < 5, which .venv cannot have.
# tests/contracts/test_run_in_slime_venv.py runs the contract suite in it, once per vendored release.
#  - An overlay, not a second copy: the venv holds only requirements-slime.txt (exact pins, --no-deps), and a .pth
#    appends .venv's site-packages after its own, so torch, ray, numpy, swebench, docker and pytest are .venv's exact
#    pins (requirements.txt) and are not installed twice (a standalone venv with torch and ray alone took 93 s from
#    a warm cache; this takes about 15 s).
#  - Created without pip (uv installs into it), so no bundled setuptools shadows .venv's newer one.
#  - Rebuilt from scratch when an input changes (its pins, .venv's pins, this file), so nothing stale stays.
set -euo pipefail
venv=.venv-slime
inputs=(requirements-slime.txt requirements.txt requirements-nodeps.txt "$0" scripts/setup/pip_install.sh)
stamp="$venv/.stamp-$(cat "${inputs[@]}" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && { echo "$venv up to date"; exit 0; }
rm -rf "$venv"
python3 -m venv --without-pip "$venv"
bash scripts/setup/pip_install.sh "$venv/bin/python" --no-deps -r requirements-slime.txt
purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
echo "import site; site.addsitedir('$(.venv/bin/python -c "$purelib")')" \
  > "$("$venv/bin/python" -c "$purelib")/zz_qwen_swe_venv.pth"
# Smoke check: the overlay's versions win, .venv's packages resolve around them, and no requirement of an overlay
# package, nor any requirement on one, is unmet (the closure --no-deps relies on).
"$venv/bin/python" - requirements-slime.txt <<'PY'
import importlib.metadata as md, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canon
import datasets, httpx, pylatexenc, ray, swebench, torch, transformers  # noqa: F401
first = {}
for dist in md.distributions():
    first.setdefault(canon(dist.metadata["Name"]), dist)
pins = {canon(line.split("==")[0]) for line in open(sys.argv[1]) if "==" in line.split("#")[0]}
bad = [f"{name} {first[name].version} is not the overlay's" for name in sorted(pins)
       if not str(first[name].locate_file("")).startswith(sys.prefix)]
for name, dist in first.items():
    if name == "qwen-swe":  # the project (25_package.sh): the overlay runs its code under slime's pins on purpose
        continue
    for req in map(Requirement, dist.requires or []):
        if (req.marker and not req.marker.evaluate({"extra": ""})) or not pins & {name, canon(req.name)}:
            continue
        found = first.get(canon(req.name))
        if found is None or not req.specifier.contains(found.version, prereleases=True):
            bad.append(f"{name} requires {req}, finds {found.version if found else 'nothing'}")
assert transformers.__version__.startswith("4.") and not bad, bad
PY
touch "$stamp"
echo "$venv: transformers $("$venv/bin/python" -c 'import transformers; print(transformers.__version__)') over .venv"
