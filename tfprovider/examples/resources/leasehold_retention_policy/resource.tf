# Keep a month of history, and at most the newest 1000 events of each task.
resource "leasehold_retention_policy" "audit" {
  name      = "audit"
  keep_for  = "720h"
  keep_last = 1000
}
