// Package tfprovider is terraform-provider-leasehold: the Terraform provider
// through which infra teams declare leasehold's tasks and retention
// policies, and read who holds a lease (docs/design.md, "Terraform provider").
//
// The provider is glue. It opens the store named by its store attribute (or
// LEASEHOLD_STORE) with storeurl, migrates it as the sidecars do, and hands
// every resource and data source one *leasecore.Service; each CRUD method
// reads the plan or state, calls the Service, and writes state. The rules
// live in leasecore, and the provider checks the same rules at plan time by
// calling them (leasecore.ValidateTask, ValidatePolicyName, the model's ttl
// bounds), so a bad name or duration fails `terraform plan`, not apply.
//
// Durations are Go duration strings ("90s", "1h30m"). The store keeps
// ttls to the millisecond and keep_for to the second, so finer values are
// refused at plan time rather than silently rounded. A value the user
// wrote differently from how the provider prints it ("90s" against
// "1m30s") is the same value: the state keeps the user's spelling and
// the plan stays empty.
//
// The store is the source of truth: a declaration deleted outside
// Terraform disappears from state on refresh (and the plan creates it
// again), a changed one shows as drift.
package tfprovider
