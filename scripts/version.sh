#!/usr/bin/env bash
# Prints the version that make build, make install and make dist stamp into leasehold, from
# RELEASES (the in-tree record of releases) and git:
#   - at a commit RELEASES records for a release (here or on any branch), with a clean tree:
#     that release's version (v0.1.0);
#   - anywhere else: a pre-release of the next patch, counting the commits since the latest
#     release, with the commit as build metadata (v0.1.1-dev.3+0123456789ab, and .dirty for a
#     changed tree), which sorts after the release and before the next one;
#   - before the first release: v0.1.0-dev+COMMIT; outside a git checkout: devel.
# With --commit it prints the full commit instead (or nothing outside git).
set -euo pipefail
cd "$(dirname "$0")/.."
head=$(git rev-parse HEAD 2>/dev/null) || { [[ "${1:-}" == --commit ]] || echo devel; exit 0; }
if [[ "${1:-}" == --commit ]]; then echo "$head"; exit 0; fi
dirty=
git diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
# A release's commit predates the line that records it, so a checkout of the commit itself
# finds it in the RELEASES of the branches that came after (main, origin/main…).
if [[ -z "$dirty" ]]; then
  for ref in HEAD $(git for-each-ref --format='%(refname)' refs/heads refs/remotes 2>/dev/null); do
    released=$(git show "$ref:RELEASES" 2>/dev/null | awk -v c="$head" '$2 == c { print $1; exit }' || true)
    if [[ -n "$released" ]]; then
      echo "$released"
      exit 0
    fi
  done
fi
latest=$(grep -Ev '^[[:space:]]*(#|$)' RELEASES 2>/dev/null | tail -n 1 || true)
if [[ -z "$latest" ]]; then
  echo "v0.1.0-dev+${head:0:12}${dirty}"
  exit 0
fi
read -r version commit _ <<<"$latest"
IFS=. read -r major minor patch <<<"${version#v}"
since=$(git rev-list --count "$commit..HEAD" 2>/dev/null || echo 0)
echo "v${major}.${minor}.$((patch + 1))-dev.${since}+${head:0:12}${dirty}"
