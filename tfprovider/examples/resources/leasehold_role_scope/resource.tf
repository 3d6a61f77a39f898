# The payments team's sidecars connect as the PostgreSQL role
# team_payments (made by the DBA, or by a PostgreSQL provider's resource
# this one refers to). Limited to these prefixes, they can claim, renew,
# release and read only payments' tasks, and leasehold's own: the database
# refuses the rest, whatever SQL they send.
resource "leasehold_role_scope" "payments" {
  role     = "team_payments"
  prefixes = ["payments/", "shared/reports/"]
}
