//go:build leasehold_mutant_waitsidecar

package leaserun

// The chaos checker's mutant: leasehold run stops the command only when the
// sidecar says the lease is lost (or the stream breaks), as it did before
// it killed by its local deadline. e2e's TestChaosRunMutant builds the binary
// with this tag and requires the checker to catch a command outliving its
// lease.
func init() { deadlineKills = false }
