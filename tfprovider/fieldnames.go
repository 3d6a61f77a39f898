package tfprovider

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/leasecore"
)

// attributeNames maps the Go names leasecore's errors give fields
// (leasecore.ValidationError.Field) to the provider's names for them, which
// its diagnostics use.
var attributeNames = map[string]string{
	"Name":            "name",
	"Task":            "task",
	"TTL":             "ttl",
	"MaxTTL":          "max_ttl",
	"Description":     "description",
	"RetentionPolicy": "retention_policy",
	"KeepFor":         "keep_for",
	"KeepLast":        "keep_last",
	"TTLSpelling":     "ttl",
	"MaxTTLSpelling":  "max_ttl",
	"MinHold":         "min_hold",
	"MinHoldSpelling": "min_hold",
	"KeepForSpelling": "keep_for",
	"Limit":           "limit",
	"After":           "after",
	"Role":            "role",
	"Prefixes":        "prefixes",
}

// errorText is err's text for a diagnostic: a validation error names the
// field as the provider's attribute ("invalid max_ttl: …").
func errorText(err error) string {
	var ve *leasecore.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	name, ok := attributeNames[ve.Field]
	if !ok {
		name = ve.Field
	}
	return fmt.Sprintf("invalid %s: %s", name, ve.Rule)
}
