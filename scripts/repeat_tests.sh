#!/usr/bin/env bash
# Find timing-dependent tests: the tests that start containers, servers or the agent (markers docker, vllm, agent,
# slow), PASSES times in a row on the test command's workers, each pass's JUnit XML kept, then every test that failed
# in any pass listed with its passes. BUSY_PASS=K runs two busy loops (one per core) beside pass K only.
#   PASSES=5 BUSY_PASS=5 bash scripts/repeat_tests.sh OUT_DIR [pytest args]
# Run it once under each Docker storage driver (DOCKER_STORAGE_DRIVER=vfs|overlay2 when the set-up starts dockerd).
# Leave this file alone while it runs: bash reads a script as it goes, and an edit lands mid-command.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: PASSES=5 BUSY_PASS=5 bash scripts/repeat_tests.sh OUT_DIR [pytest args]}"
shift
passes="${PASSES:-5}" busy_pass="${BUSY_PASS:-0}"
mkdir -p "$out"
busy=()
stop_busy() {
  for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
  busy=()
}
trap stop_busy EXIT
trap 'stop_busy; exit 130' INT
trap 'stop_busy; exit 143' TERM
driver=$(docker info --format '{{.Driver}}' 2>/dev/null) || {
  echo "repeat_tests: Docker is not running; start it as the set-up does: bash scripts/setup/10_system.sh" >&2
  exit 1
}
echo "repeat_tests: $passes passes, busy loops beside pass ${busy_pass:-none}, storage $driver"
for k in $(seq "$passes"); do
  if [[ "$k" == "$busy_pass" ]]; then
    for _ in 1 2; do
      (while :; do :; done) &
      busy+=($!)
    done
  fi
  start=$(date +%s)
  set +e
  .venv/bin/python -m pytest -n "${TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder -p no:cacheprovider \
    -m "docker or vllm or agent or slow" --junitxml="$out/pass_$k.xml" -q "$@" >"$out/pass_$k.log" 2>&1
  rc=$?
  set -e
  stop_busy
  echo "pass $k: exit $rc, $(($(date +%s) - start)) s, $(tail -1 "$out/pass_$k.log")"
done
.venv/bin/python - "$out" <<'EOF'
import sys
from collections import defaultdict
from pathlib import Path
from xml.etree import ElementTree

failed = defaultdict(list)
for xml in sorted(Path(sys.argv[1]).glob("pass_*.xml")):
    for case in ElementTree.parse(xml).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed[f"{case.get('classname')}::{case.get('name')}"].append(xml.stem)
print("failed in some pass:" if failed else "no test failed in any pass")
for name, where in sorted(failed.items()):
    print(f"  {name}: {', '.join(where)}")
EOF
