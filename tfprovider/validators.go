package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/leasehold/leasehold/leasecore"
)

// durationRule is what a duration attribute accepts: a whole number of
// units (the precision the store keeps) between min and max.
type durationRule struct {
	min, max time.Duration
	unit     time.Duration
	unitName string
}

// The duration attributes' rules, from the model's bounds.
var (
	ttlRule     = durationRule{min: leasecore.MinTTL, max: leasecore.MaxTTL, unit: time.Millisecond, unitName: "milliseconds"}
	keepForRule = durationRule{min: 0, max: leasecore.MaxKeepFor, unit: time.Second, unitName: "seconds"}
	minHoldRule = durationRule{min: time.Millisecond, max: leasecore.MaxMinHold, unit: time.Millisecond, unitName: "milliseconds"}
)

// check returns why d breaks the rule, or "".
func (r durationRule) check(d time.Duration) string {
	if d%r.unit != 0 {
		return fmt.Sprintf("must be a whole number of %s, as the store keeps no finer; %s is not", r.unitName, formatDuration(d))
	}
	if d < r.min || d > r.max {
		return fmt.Sprintf("must be between %s and %s; %s is not", formatDuration(r.min), formatDuration(r.max), formatDuration(d))
	}
	return ""
}

func (r durationRule) Description(context.Context) string {
	return fmt.Sprintf("a whole number of %s between %s and %s", r.unitName, formatDuration(r.min), formatDuration(r.max))
}

func (r durationRule) MarkdownDescription(ctx context.Context) string { return r.Description(ctx) }

// ValidateString checks a duration attribute's bounds. A string that is no
// duration at all was already refused by its type (durationType),
// which the framework checks first.
func (r durationRule) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	d, err := time.ParseDuration(req.ConfigValue.ValueString())
	if err != nil {
		return
	}
	if why := r.check(d); why != "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(), req.Path.String()+" "+why+".")
	}
}

// nameRule checks a name with a leasecore rule, so that Terraform refuses
// at plan time exactly the names the store would refuse at apply.
type nameRule struct {
	what     string // "task name" or "retention policy name"
	validate func(string) error
}

var (
	taskNameRule   = nameRule{what: "task name", validate: leasecore.ValidateTask}
	policyNameRule = nameRule{what: "retention policy name", validate: func(s string) error { return leasecore.ValidatePolicyName("Name", s) }}
)

func (r nameRule) Description(context.Context) string {
	return "a " + r.what + " by leasehold's rules"
}

func (r nameRule) MarkdownDescription(ctx context.Context) string { return r.Description(ctx) }

func (r nameRule) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	err := r.validate(req.ConfigValue.ValueString())
	if err == nil {
		return
	}
	rule := err.Error()
	var verr *leasecore.ValidationError
	if errors.As(err, &verr) {
		rule = verr.Rule
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(),
		fmt.Sprintf("%s is not a valid %s: it %s.", req.Path, r.what, rule))
}

// reservedTaskNote warns, at plan time, about a declaration of one of
// leasehold's own tasks (leasehold:…, such as the pruner's lease). It is
// allowed, not refused: it is how an operator chooses the retention policy
// of that task's history. But leasehold takes the task's ttls from itself,
// not from the declaration, and no client may claim it, so its ttl and
// max_ttl have no effect: the warning says so rather than letting a
// configuration suggest otherwise.
type reservedTaskNote struct{}

func (reservedTaskNote) Description(context.Context) string {
	return "a warning when the task is one of leasehold's own"
}

func (r reservedTaskNote) MarkdownDescription(ctx context.Context) string { return r.Description(ctx) }

func (reservedTaskNote) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || !leasecore.IsReserved(req.ConfigValue.ValueString()) {
		return
	}
	resp.Diagnostics.AddAttributeWarning(req.Path, "Reserved task",
		fmt.Sprintf("%q is one of leasehold's own tasks (names starting %q, such as the pruner's lease %s): "+
			"clients cannot claim it, and leasehold takes its ttls from itself, so this declaration's ttl and "+
			"max_ttl have no effect; only its retention_policy and description apply.",
			req.ConfigValue.ValueString(), leasecore.ReservedPrefix, leasecore.PruneTask))
}

// descriptionRule checks a task's description as leasecore does: bytes,
// not characters, are counted.
type descriptionRule struct{}

func (descriptionRule) Description(context.Context) string {
	return fmt.Sprintf("valid UTF-8 without NUL, at most %d bytes", leasecore.MaxDescriptionLen)
}

func (r descriptionRule) MarkdownDescription(ctx context.Context) string { return r.Description(ctx) }

func (r descriptionRule) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	if len(s) > leasecore.MaxDescriptionLen || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(),
			fmt.Sprintf("%s must be %s; it has %d bytes.", req.Path, r.Description(ctx), len(s)))
	}
}

// formatDuration prints a duration as Go does, without the zero units Go
// leaves at the end: 10m rather than 10m0s, 720h rather than 720h0m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// durationValue is d as an attribute value.
func durationValue(d time.Duration) duration {
	return durationText(formatDuration(d))
}

// spelling is a duration attribute's text for the store to keep. A text
// longer than the store keeps (leasecore.MaxSpellingLen, far more than a
// duration needs) is not kept: the store then gives Go's spelling back.
func spelling(v duration) string {
	if s := v.ValueString(); len(s) <= leasecore.MaxSpellingLen {
		return s
	}
	return ""
}

// spelledDuration is d as an attribute value, as spelled when a spelling
// was kept.
func spelledDuration(d time.Duration, spelling string) duration {
	if spelling == "" {
		return durationValue(d)
	}
	return durationText(spelling)
}

// optionalSpelledDuration is spelledDuration, null for zero.
func optionalSpelledDuration(d time.Duration, spelling string) duration {
	if d == 0 {
		return nullDuration()
	}
	return spelledDuration(d, spelling)
}

// timestampLayout is RFC 3339 with milliseconds, as the HTTP API prints
// times.
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// timestampValue is t as an RFC 3339 attribute value, in UTC.
func timestampValue(t time.Time) timetypes.RFC3339 {
	return timetypes.NewRFC3339ValueMust(t.UTC().Format(timestampLayout))
}
