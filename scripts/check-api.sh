#!/usr/bin/env bash
# Fails when openapi.yaml breaks the HTTP API of the latest release (docs/compatibility.md):
# compares the release's openapi.yaml, read from the commit RELEASES records for it, with the
# tree's, using oasdiff's breaking-change checks (run as a go tool). Any change of severity ERR
# (a removed path, a new required field, a narrowed type…) fails; WARN-level changes are shown.
#   scripts/check-api.sh                 the latest release against the tree
#   scripts/check-api.sh BASE REVISION   two files (how the tests show the check can fail)
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
if [[ $# -eq 2 ]]; then
  base=$1 revision=$2
else
  latest=$(grep -Ev '^[[:space:]]*(#|$)' RELEASES 2>/dev/null | tail -n 1 || true)
  if [[ -z "$latest" ]]; then
    echo "check-api: RELEASES records no release yet: nothing to compare with"
    exit 0
  fi
  read -r version commit _ <<<"$latest"
  if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "check-api: release $version's commit $commit is not in this clone (a shallow clone?): run git fetch --unshallow" >&2
    exit 1
  fi
  mkdir -p bin
  base="bin/openapi-$version.yaml"
  git show "$commit:openapi.yaml" >"$base"
  revision=openapi.yaml
  echo "check-api: openapi.yaml against $version ($commit)"
fi
$go tool oasdiff breaking --fail-on ERR --color never "$base" "$revision"
