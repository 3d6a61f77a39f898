resource "leasehold_retention_policy" "audit" {
  name      = "audit"
  keep_for  = "720h"
  keep_last = 1000

  # Renaming the policy then creates the new one and moves the task to it
  # before the old one (still in use until then) is deleted.
  lifecycle {
    create_before_destroy = true
  }
}

# Claims of telescope:prune that give no ttl get 90s, and none may ask for
# more than 10m.
resource "leasehold_task" "prune" {
  name             = "telescope:prune"
  ttl              = "90s"
  max_ttl          = "10m"
  description      = "entries pruner"
  retention_policy = leasehold_retention_policy.audit.name
}
