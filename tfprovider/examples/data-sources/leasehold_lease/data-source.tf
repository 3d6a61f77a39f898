data "leasehold_lease" "prune" {
  task = "telescope:prune"
}

output "prune_holder" {
  value = data.leasehold_lease.prune.held ? data.leasehold_lease.prune.owner : "nobody"
}
