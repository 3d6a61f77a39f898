package opcli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/leasehold/leasehold/sidecar/api"
)

// printSidecarStatus prints GET /v1/status for people, its strings escaped
// for a terminal (display); addr is the sidecar's address, its password
// masked.
func printSidecarStatus(w io.Writer, addr string, st *api.SidecarStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "sidecar\t%s\n", display(addr))
	fmt.Fprintf(tw, "version\t%s\n", display(st.Version))
	fmt.Fprintf(tw, "started\t%s\n", display(st.StartedAt))
	fmt.Fprintf(tw, "store\t%s\n", storeText(&st.Store))
	fmt.Fprintf(tw, "streams\t%d open of %d\n", st.Streams.Open, st.Streams.Max)
	fmt.Fprintf(tw, "watchers\t%d\n", st.Watchers)
	if c := st.Caller; c != nil {
		fmt.Fprintf(tw, "caller\t%s\n", callerText(c))
	}
	label := "batching"
	for _, b := range st.Batching {
		fmt.Fprintf(tw, "%s\t%s: %d operations in %d round trips%s\n", label, display(b.Op), b.Operations, b.Statements, factor(b.Operations, b.Statements))
		label = ""
	}
	_ = tw.Flush()
}

// callerText is the credential a request was made with and its scope, in
// a few words, escaped for a terminal.
func callerText(c *api.Caller) string {
	name := "anonymous (no token required)"
	if c.Name != "" {
		name = "credential " + display(c.Name)
	}
	prefixes := make([]string, len(c.Prefixes))
	for i, p := range c.Prefixes {
		prefixes[i] = display(p)
	}
	return fmt.Sprintf("%s: %s on %s", name, display(string(c.Right)), strings.Join(prefixes, " "))
}

// storeText is a store's kind and readiness in a few words, escaped for a
// terminal.
func storeText(s *api.StoreStatus) string {
	if s.Ready {
		return display(string(s.Kind)) + ", ready"
	}
	return fmt.Sprintf("%s, not ready: %s", display(string(s.Kind)), display(s.Detail))
}

// factor is the batching factor, when there is one.
func factor(ops, trips int64) string {
	if trips == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f per trip)", float64(ops)/float64(trips))
}
