#!/usr/bin/env bash
# with-postgres.sh CMD [ARG...]: run CMD with LEASEHOLD_TEST_POSTGRES_URL pointing at a
# PostgreSQL 15 server.
#
# If LEASEHOLD_TEST_POSTGRES_URL is already set, CMD runs against that server. Otherwise a
# throwaway server is started (initdb + pg_ctl, trust auth, 127.0.0.1 on a free port, data
# under /tmp), CMD runs, and the server is stopped and its data removed, whatever CMD did.
# Without PostgreSQL binaries, CMD runs without the variable: outside CI the PostgreSQL tests
# then skip with a message; with CI set they fail.
set -euo pipefail

if [[ -n "${LEASEHOLD_TEST_POSTGRES_URL:-}" ]]; then
  exec "$@"
fi

PGBIN="${PGBIN:-}"
if [[ -z "$PGBIN" ]]; then
  for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
    if [[ -x "$d/initdb" ]]; then PGBIN="$d"; break; fi
  done
fi
if [[ -z "$PGBIN" ]] && command -v initdb >/dev/null 2>&1; then
  PGBIN="$(dirname "$(command -v initdb)")"
fi
if [[ -z "$PGBIN" ]]; then
  echo "with-postgres: no PostgreSQL binaries found (install postgresql-15); running without PostgreSQL" >&2
  exec "$@"
fi

# initdb refuses to run as root: run the server as the postgres user then.
as_pg=()
if [[ "$(id -u)" == 0 ]]; then
  if ! id postgres >/dev/null 2>&1; then
    echo "with-postgres: running as root and there is no postgres user to run the server as" >&2
    exit 1
  fi
  as_pg=(runuser -u postgres --)
fi

dir="$(mktemp -d /tmp/leasehold-pg.XXXXXX)"
chmod 0755 "$dir"
[[ ${#as_pg[@]} -gt 0 ]] && chown postgres "$dir"
data="$dir/data"
log="$dir/server.log"

cleanup() {
  "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"${as_pg[@]}" "$PGBIN/initdb" -D "$data" --auth=trust --username=postgres --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
  cat "$dir/initdb.log" >&2
  exit 1
}

# Pick a port nobody listens on; if the server still fails to bind (a race with another
# process on this shared machine), try another.
started=""
for attempt in 1 2 3 4 5 6 7 8; do
  port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    continue # taken
  fi
  if "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$data" -l "$log" -w -t 30 \
      -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c max_connections=300" \
      start >/dev/null 2>&1; then
    started=1
    break
  fi
done
if [[ -z "$started" ]]; then
  echo "with-postgres: could not start PostgreSQL; server log:" >&2
  cat "$log" >&2 || true
  exit 1
fi

export LEASEHOLD_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
echo "with-postgres: PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (data in $dir)" >&2
set +e
"$@"
rc=$?
set -e
exit $rc
