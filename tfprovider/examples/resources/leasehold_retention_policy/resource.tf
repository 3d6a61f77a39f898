# Keep a month of history, and at most the newest 1000 events of each task.
resource "leasehold_retention_policy" "audit" {
  name      = "audit"
  keep_for  = "720h"
  keep_last = 1000

  # A policy that tasks refer to cannot be deleted while they do: with this,
  # renaming it creates the new policy and moves the tasks before the old
  # one is deleted.
  lifecycle {
    create_before_destroy = true
  }
}
