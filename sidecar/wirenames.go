package sidecar

// wireNames maps the Go names leasecore's validation errors give fields
// (leasecore.ValidationError.Field) to the names the HTTP API gives them in
// a problem's invalid_params: the one place the two vocabularies meet. The
// sidecar asks leasecore only about leases and pages (claims, renewals,
// releases, reads, lists), so these are the fields it can be told about.
var wireNames = map[string]string{
	"Task":  "task",
	"Owner": "owner",
	"TTL":   "ttl_ms",
	"Note":  "note",
	"Token": "token",
	"Limit": "limit",
	"After": "after",
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
