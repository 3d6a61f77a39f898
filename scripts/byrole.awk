# byrole.awk: splits the per-role metrics of BenchmarkClaimStatementByRole
# (leasecore/postgres: ROLE-ns/op and ROLE-server-cpu-ns/op on one line)
# into one result line per role, named …/role=ROLE, so that benchstat can
# compare the roles:
#
#   go test -run '^$' -bench ClaimStatementByRole -count 10 ./leasecore/postgres/ |
#     awk -f scripts/byrole.awk > roles.txt && go tool benchstat -col /role roles.txt
#
# Other lines pass through unchanged.
/^BenchmarkClaimStatementByRole\// {
  name = $1; cpu = name
  sub(/-[0-9]+$/, "", name); sub(/^.*-/, "", cpu)
  n = 0; delete line; delete order
  for (i = 3; i < NF; i += 2) {
    split($(i + 1), u, "-"); role = u[1]
    if (role == "ns/op") continue # the iteration's own time, all roles together
    unit = substr($(i + 1), length(role) + 2)
    if (!(role in line)) order[++n] = role
    line[role] = line[role] "\t" $i " " unit
  }
  for (k = 1; k <= n; k++) print name "/role=" order[k] "-" cpu "\t" $2 line[order[k]]
  next
}
{ print }
