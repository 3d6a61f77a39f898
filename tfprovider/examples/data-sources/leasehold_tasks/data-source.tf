data "leasehold_tasks" "all" {}

output "declared_tasks" {
  value = [for t in data.leasehold_tasks.all.tasks : t.name]
}
