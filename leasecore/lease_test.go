package leasecore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// TestValidParamsDoNotAllocate: checking valid parameters, which every
// claim, renewal and release does, allocates nothing; only a refusal builds
// its error.
func TestValidParamsDoNotAllocate(t *testing.T) {
	claim := leasecore.ClaimParams{Task: "jobs/nightly.report@eu-1", Owner: "worker 7 — höst", TTL: time.Minute, Note: "n", Credential: "deploy-bot"}
	renew := leasecore.RenewParams{Task: claim.Task, Owner: claim.Owner, TTL: time.Minute, Token: 3, Credential: "deploy-bot"}
	release := leasecore.ReleaseParams{Task: claim.Task, Owner: claim.Owner, Token: 3, Credential: "deploy-bot"}
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

// TestValidateCredential: a credential's name is 1 to 64 characters of the
// task names' charset; an operation's Credential may also be empty (none).
// A refusal names the field Credential and states the rule.
func TestValidateCredential(t *testing.T) {
	t.Parallel()
	if !strings.Contains(leasecore.CredentialRule, fmt.Sprint(leasecore.MaxCredentialLen)) {
		t.Errorf("CredentialRule %q does not state MaxCredentialLen %d", leasecore.CredentialRule, leasecore.MaxCredentialLen)
	}
	for _, c := range []struct {
		name  string
		valid bool
	}{
		{"ci", true},
		{"x", true},
		{"team-a/deploy_bot.v2:eu@prod", true},
		{strings.Repeat("c", leasecore.MaxCredentialLen), true},
		{"", false},
		{strings.Repeat("c", leasecore.MaxCredentialLen+1), false},
		{"deploy bot", false},
		{"ci\n", false},
		{"ci\x00", false},
		{"ci\x7f", false},
		{"crédit", false},
		{"ci?x=1", false},
		{"ci#1", false},
		{"ci%20", false},
		{`ci"x`, false},
		{"ci<script>", false},
		{"ci\xff", false},
	} {
		err := leasecore.ValidateCredential(c.name)
		if (err == nil) != c.valid {
			t.Errorf("ValidateCredential(%q) = %v, want valid %v", c.name, err, c.valid)
			continue
		}
		if !c.valid {
			mustNameCredential(t, err)
		}
		// The operations' Credential: the same rule, and empty is none.
		errs := []error{
			leasecore.ClaimParams{Task: "t", Owner: "o", Credential: c.name}.Validate(),
			leasecore.RenewParams{Task: "t", Owner: "o", Credential: c.name}.Validate(),
			leasecore.ReleaseParams{Task: "t", Owner: "o", Credential: c.name}.Validate(),
		}
		for i, err := range errs {
			if want := c.valid || c.name == ""; (err == nil) != want {
				t.Errorf("params %d with Credential %q: Validate() = %v, want valid %v", i, c.name, err, want)
			} else if !want {
				mustNameCredential(t, err)
			}
		}
	}
}

func mustNameCredential(t *testing.T, err error) {
	t.Helper()
	var ve *leasecore.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, leasecore.ErrInvalid) || ve.Field != "Credential" || !strings.HasPrefix(ve.Rule, leasecore.CredentialRule) {
		t.Errorf("refusal %v (%T): want a *ValidationError naming Credential and stating %q", err, err, leasecore.CredentialRule)
	}
}
