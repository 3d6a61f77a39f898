package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
)

// DefaultListen is the address `leasehold serve` listens on by default, and
// so the sidecar `leasehold run` asks by default.
const DefaultListen = "127.0.0.1:7411"

// NewLogger returns a logger writing to w in format (text or json). Store
// URLs in its attributes have their credentials masked.
func NewLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{ReplaceAttr: storeurl.RedactAttr})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: storeurl.RedactAttr})), nil
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
	}
}

// Rule is what a validation error says a valid value looks like (its
// rule, without the Go field name), for a message that names the flag.
func Rule(err error) string {
	var v *leasecore.ValidationError
	if errors.As(err, &v) {
		return v.Rule
	}
	return err.Error()
}
