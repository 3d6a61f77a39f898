package leasecore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// TestValidParamsDoNotAllocate: checking valid parameters, which every
// claim, renewal and release does, allocates nothing; only a refusal builds
// its error.
func TestValidParamsDoNotAllocate(t *testing.T) {
	claim := leasecore.ClaimParams{Task: "jobs/nightly.report@eu-1", Owner: "worker 7 — höst", TTL: time.Minute, Note: "n"}
	renew := leasecore.RenewParams{Task: claim.Task, Owner: claim.Owner, TTL: time.Minute, Token: 3}
	release := leasecore.ReleaseParams{Task: claim.Task, Owner: claim.Owner, Token: 3}
	allocs := testing.AllocsPerRun(100, func() {
		if claim.Validate() != nil || renew.Validate() != nil || release.Validate() != nil {
			t.Fatal("valid parameters refused")
		}
	})
	if allocs != 0 {
		t.Errorf("validating valid parameters allocates %v times, want 0", allocs)
	}
	// The refusals still name the rule and where it is broken.
	for task, want := range map[string]string{"a//b": "segment 2 is \"\"", "a/..": "segment 2 is \"..\"", "/a": "segment 1 is \"\""} {
		err := leasecore.ValidateTask(task)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateTask(%q) = %v, want an error saying %s", task, err, want)
		}
	}
}
