package sidecar

// wireNames maps the Go names leasecore's validation errors give fields
// (leasecore.ValidationError.Field) to the names the HTTP API gives them in
// a problem's invalid_params: the one place the two vocabularies meet: the
// fields of leases and pages (claims, renewals, releases, reads, lists) and
// of the declarations and policies operators write. A declaration's or
// policy's Name is the path's, which the validator checks first.
var wireNames = map[string]string{
	"Task":    "task",
	"Owner":   "owner",
	"TTL":     "ttl_ms",
	"Note":    "note",
	"Token":   "token",
	"MinHold": "min_hold_ms",
	// A release's run.
	"Run.ExitCode": "run.exit_code",
	"Run.Error":    "run.error",
	"Run.Duration": "run.duration_ms",
	"Limit":        "limit",
	"After":        "after",
	// Declarations' and policies'.
	"MaxTTL":          "max_ttl_ms",
	"Description":     "description",
	"RetentionPolicy": "retention_policy",
	"KeepFor":         "keep_for_ms",
	"KeepLast":        "keep_last",
	"ManagedBy":       "take_over",
	// The watch's.
	"Prefix": "prefix",
	"Since":  "since",
}

// wireName is the HTTP API's name for a leasecore field; a field the table
// does not know keeps its Go name (TestWireNames keeps the table whole).
func wireName(field string) string {
	if name, ok := wireNames[field]; ok {
		return name
	}
	return field
}
