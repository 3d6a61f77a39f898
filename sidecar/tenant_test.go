package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// tenantFile is a credentials file a test edits under a running server:
// entries are name → (token, prefixes JSON, right).
type tenantFile struct {
	t    *testing.T
	path string
	book *auth.Book
}

type tenantEntry struct{ name, token, prefixes, right string }

func (f *tenantFile) render(extra string, entries ...tenantEntry) string {
	var parts []string
	for _, e := range entries {
		parts = append(parts, fmt.Sprintf(`{"name": %q, "token_sha256": %q, "prefixes": %s, "rights": [%q]}`, e.name, auth.TokenHash([]byte(e.token)), e.prefixes, e.right))
	}
	return `{"credentials": [` + strings.Join(parts, ",") + `]` + extra + `}`
}

// write replaces the file with entries (and extra top-level members).
func (f *tenantFile) write(extra string, entries ...tenantEntry) {
	f.t.Helper()
	if err := os.WriteFile(f.path+".tmp", []byte(f.render(extra, entries...)), 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(f.path+".tmp", f.path); err != nil {
		f.t.Fatal(err)
	}
}

// reload writes entries and has the book read them, as its Watch would
// within auth.ReloadInterval.
func (f *tenantFile) reload(extra string, entries ...tenantEntry) {
	f.t.Helper()
	f.write(extra, entries...)
	if changed, err := f.book.Reload(); !changed || err != nil {
		f.t.Fatalf("Reload: changed %v, err %v", changed, err)
	}
}

var (
	billingHold = tenantEntry{"billing", billingToken, `["billing/", "reports:"]`, "hold"}
	dashRead    = tenantEntry{"dash", dashToken, `["*"]`, "read"}
	opsAdmin    = tenantEntry{"ops", opsToken, `["*"]`, "admin"}
)

func newTenantFile(t *testing.T, o auth.BookOptions, entries ...tenantEntry) *tenantFile {
	t.Helper()
	f := &tenantFile{t: t, path: filepath.Join(t.TempDir(), "credentials.json")}
	f.write("", entries...)
	b, err := auth.OpenCredentialsFile(f.path, o)
	if err != nil {
		t.Fatal(err)
	}
	f.book = b
	return f
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// untilEvent returns the stream's first event that is not one of skip,
// failing the test after 10 skipped (a stream that renews on where it
// should have ended).
func untilEvent(s *sseStream, skip ...string) sseEvent {
	s.t.Helper()
	for range 10 {
		ev := s.next()
		if !strings.Contains(" "+strings.Join(skip, " ")+" ", " "+ev.name+" ") {
			return ev
		}
	}
	s.t.Fatalf("10 events of %q and nothing else: the stream goes on", skip)
	return sseEvent{}
}

// TestRemovedCredentialEndsItsStreams: a keepalive stream and a watch
// opened with a credential end when the credential is removed from the
// file, within one re-read: the keepalive says lost (forbidden) and stops
// renewing, leaving its lease to run out at its expiry (no release: a
// holder stopping its job by its local deadline is not overlapped), and
// the watch says end (forbidden). Another credential's streams go on.
func TestRemovedCredentialEndsItsStreams(t *testing.T) {
	t.Parallel()
	f := newTenantFile(t, auth.BookOptions{}, billingHold, dashRead, opsAdmin)
	ts := newTestServer(t, withCredentials(f.book))
	billing, ops := ts.as(billingToken), ts.as(opsToken)

	keep, r := billing.openStreamWith("/v1/leases/billing%2Fnightly/keepalive?owner=b1&ttl_ms=3000", bearer(billingToken), keepaliveSchemas)
	if keep == nil {
		t.Fatalf("keepalive: %d %s", r.status, r.body)
	}
	var acquired api.Lease
	if ev := untilEvent(keep); ev.name != "acquired" || json.Unmarshal([]byte(ev.data), &acquired) != nil {
		t.Fatalf("first event %s %s, want acquired", ev.name, ev.data)
	}
	watch := ts.openWatch("/v1/watch?since=0", bearer(dashToken))
	opsWatch := ts.openWatch("/v1/watch?since=0", bearer(opsToken))
	if ev := untilEvent(watch, "acquired"); ev.name != "ready" {
		t.Fatalf("dash's watch: %s before ready", ev.name)
	}

	f.reload("", opsAdmin) // billing and dash removed
	ev := untilEvent(keep, "renewed")
	if ev.name != "lost" || !strings.Contains(ev.data, `"reason":"forbidden"`) || !strings.Contains(ev.data, `credential \"billing\"`) {
		t.Fatalf("keepalive after its credential was removed: %s %s, want lost (forbidden) naming the credential", ev.name, ev.data)
	}
	if ev := untilEvent(watch, "acquired", "renewed"); ev.name != "end" || !strings.Contains(ev.data, `"reason":"forbidden"`) {
		t.Fatalf("dash's watch after its credential was removed: %s %s, want end (forbidden)", ev.name, ev.data)
	}
	// The lease was not released: it is still the stream's, until it expires.
	l := decode[api.LeaseState](t, ops.get("/v1/leases/billing%2Fnightly"))
	if !l.Held || l.Lease == nil || l.Lease.Token != acquired.Token {
		t.Errorf("after the stream ended: %+v, want the lease still held under token %d until its expiry", l, acquired.Token)
	}
	// And the revoked token is refused on a new request.
	expect(t, billing.post("/v1/leases/billing%2Fnightly/renew", map[string]any{"owner": "b1", "token": acquired.Token}), http.StatusUnauthorized)
	// ops's watch is untouched: it receives the next event.
	expect(t, ops.post("/v1/leases/ops%2Fafter/claim", map[string]any{"owner": "o"}), http.StatusOK)
	for {
		ev := opsWatch.next()
		if ev.name == "end" {
			t.Fatalf("ops's watch ended: %s", ev.data)
		}
		if ev.name == "acquired" && strings.Contains(ev.data, "ops/after") {
			break
		}
	}
}

// TestNarrowedCredentialEndsItsStreams: narrowing a credential ends the
// streams its new scope no longer allows: a keepalive on a task it lost
// hold on, a watch whose scope shrank; a keepalive on a task it keeps
// hold on goes on.
func TestNarrowedCredentialEndsItsStreams(t *testing.T) {
	t.Parallel()
	f := newTenantFile(t, auth.BookOptions{}, billingHold, dashRead, opsAdmin)
	ts := newTestServer(t, withCredentials(f.book))
	kept, _ := ts.openStreamWith("/v1/leases/billing%2Fa/keepalive?owner=b1&ttl_ms=3000", bearer(billingToken), keepaliveSchemas)
	lost, _ := ts.openStreamWith("/v1/leases/reports:weekly/keepalive?owner=b1&ttl_ms=3000", bearer(billingToken), keepaliveSchemas)
	if kept == nil || lost == nil {
		t.Fatal("keepalive streams refused")
	}
	untilEvent(kept)
	untilEvent(lost)
	watch := ts.openWatch("/v1/watch?since=0", bearer(dashToken))
	untilEvent(watch, "acquired")

	f.reload("", tenantEntry{"billing", billingToken, `["billing/"]`, "hold"}, tenantEntry{"dash", dashToken, `["billing/"]`, "read"}, opsAdmin)
	if ev := untilEvent(lost, "renewed"); ev.name != "lost" || !strings.Contains(ev.data, `"reason":"forbidden"`) {
		t.Fatalf("keepalive on reports:weekly after billing lost reports:: %s %s, want lost (forbidden)", ev.name, ev.data)
	}
	if ev := untilEvent(watch, "acquired", "renewed"); ev.name != "end" || !strings.Contains(ev.data, `"reason":"forbidden"`) {
		t.Fatalf("dash's watch after dash was narrowed: %s %s, want end (forbidden)", ev.name, ev.data)
	}
	// billing/a is still billing's: its stream renews on.
	if ev := untilEvent(kept); ev.name != "renewed" {
		t.Fatalf("keepalive on billing/a: %s %s, want renewed", ev.name, ev.data)
	}
}

// TestRotatedTokenStreamEndsWithItsGrace: a stream opened with a token that
// is then rotated goes on during the grace, and ends when the grace does
// (the book's Watch notices within auth.ReloadInterval).
func TestRotatedTokenStreamEndsWithItsGrace(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newTenantFile(t, auth.BookOptions{Grace: time.Hour, Now: clock}, billingHold, opsAdmin)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go f.book.Watch(ctx, slog.New(slog.DiscardHandler))
	ts := newTestServer(t, withCredentials(f.book))
	keep, _ := ts.openStreamWith("/v1/leases/billing%2Fa/keepalive?owner=b1&ttl_ms=1000", bearer(billingToken), keepaliveSchemas)
	if keep == nil {
		t.Fatal("keepalive refused")
	}
	untilEvent(keep)
	f.reload("", tenantEntry{"billing", "lh_billing-rotated", `["billing/", "reports:"]`, "hold"}, opsAdmin)
	for range 2 { // renewals go on within the grace
		if ev := keep.next(); ev.name != "renewed" {
			t.Fatalf("during the grace: %s %s, want renewed", ev.name, ev.data)
		}
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if ev := untilEvent(keep, "renewed"); ev.name != "lost" || !strings.Contains(ev.data, `"reason":"forbidden"`) {
		t.Fatalf("after the grace: %s %s, want lost (forbidden)", ev.name, ev.data)
	}
}

// TestPagesNameOnlyTheCallersTasks: a scoped credential pages through its
// own tasks only: no page and no next_after names another team's task,
// however small the limit.
func TestPagesNameOnlyTheCallersTasks(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, ts *testServer) {
		ops, billing := ts.as(opsToken), ts.as(billingToken)
		tasks := []string{"a-team/x", "billing/a", "billing/b", "hr/salaries", "payroll/run", "reports:q1", "zz/last"}
		for _, task := range tasks {
			expect(t, ops.post("/v1/leases/"+strings.ReplaceAll(task, "/", "%2F")+"/claim", map[string]any{"owner": "o"}), http.StatusOK)
			expect(t, ops.do(http.MethodPut, "/v1/tasks/"+strings.ReplaceAll(task, "/", "%2F"), "application/json", []byte(`{"ttl_ms": 60000}`)), http.StatusCreated)
		}
		for _, route := range []string{"/v1/leases", "/v1/tasks"} {
			var seen []string
			after := ""
			for page := 0; ; page++ {
				if page > 10 {
					t.Fatalf("%s: more than 10 pages of 1", route)
				}
				path := route + "?limit=1"
				if after != "" {
					path += "&after=" + after
				}
				r := billing.get(path)
				expect(t, r, http.StatusOK)
				for _, other := range []string{"a-team", "hr/", "payroll", "zz/"} {
					if strings.Contains(string(r.body), other) {
						t.Fatalf("%s answered billing a name of another team (%s): %s", path, other, r.body)
					}
				}
				var next *string
				if route == "/v1/leases" {
					l := decode[api.LeaseList](t, r)
					for _, x := range l.Leases {
						seen = append(seen, x.Task)
					}
					next = l.NextAfter
				} else {
					l := decode[api.TaskList](t, r)
					for _, x := range l.Tasks {
						seen = append(seen, x.Name)
					}
					next = l.NextAfter
				}
				if next == nil {
					break
				}
				after = *next
			}
			if got := strings.Join(seen, " "); got != "billing/a billing/b reports:q1" {
				t.Errorf("%s paged by 1 for billing: %q, want billing/a billing/b reports:q1", route, got)
			}
		}
	}, withCredentials(credentialsBook(t)))
}

// TestStreamCapsAreShared: one credential filling the watch or keepalive
// cap cannot take the other credentials' share: past its guaranteed share
// it is refused (503, saying so) while the others still get theirs. With
// the others idle it may borrow what they are not guaranteed.
func TestStreamCapsAreShared(t *testing.T) {
	t.Parallel()
	f := newTenantFile(t, auth.BookOptions{}, billingHold, dashRead, opsAdmin)
	ts := newTestServer(t, withCredentials(f.book), func(o *Options) { o.MaxWatchers = 6; o.MaxStreams = 4 })

	// Watches: three credentials read, so each is guaranteed 2 of 6.
	for i := range 2 {
		if s, r := ts.openStreamWith("/v1/watch", bearer(dashToken), watchSchemas); s == nil {
			t.Fatalf("dash's watch %d: %d %s", i+1, r.status, r.body)
		}
	}
	s, r := ts.openStreamWith("/v1/watch", bearer(dashToken), watchSchemas)
	if s != nil || r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), `credential \"dash\" already has 2 of them, past its guaranteed share of 2`) {
		t.Fatalf("dash's third watch: %d %s, want 503 naming dash's share", r.status, r.body)
	}
	for _, tok := range []string{billingToken, billingToken, opsToken, opsToken} {
		if s, r := ts.openStreamWith("/v1/watch", bearer(tok), watchSchemas); s == nil {
			t.Fatalf("another credential's watch, with dash at its share: %d %s", r.status, r.body)
		}
	}
	// Keepalives: two credentials hold (billing, ops), each guaranteed 2
	// of 4. billing may borrow none while ops uses none of its 2.
	for i := range 2 {
		if s, r := ts.openStreamWith(fmt.Sprintf("/v1/leases/billing%%2F%d/keepalive?owner=b", i), bearer(billingToken), keepaliveSchemas); s == nil {
			t.Fatalf("billing's keepalive %d: %d %s", i+1, r.status, r.body)
		}
	}
	if s, r := ts.openStreamWith("/v1/leases/billing%2F2/keepalive?owner=b", bearer(billingToken), keepaliveSchemas); s != nil || r.status != http.StatusServiceUnavailable {
		t.Fatalf("billing's third keepalive: %d %s, want 503", r.status, r.body)
	}
	for i := range 2 {
		if s, r := ts.openStreamWith(fmt.Sprintf("/v1/leases/ops%%2F%d/keepalive?owner=o", i), bearer(opsToken), keepaliveSchemas); s == nil {
			t.Fatalf("ops's keepalive %d with billing at its share: %d %s", i+1, r.status, r.body)
		}
	}
	// The claim the refused stream would have made was not made.
	if l := decode[api.LeaseState](t, ts.as(opsToken).get("/v1/leases/billing%2F2")); l.Held {
		t.Errorf("a refused keepalive claimed its task: %+v", l)
	}
}

// TestStreamCapBorrowing: a credential alone on a sidecar, or whose peers
// are idle beyond their guarantee, uses what they leave.
func TestStreamCapBorrowing(t *testing.T) {
	t.Parallel()
	f := newTenantFile(t, auth.BookOptions{}, dashRead, tenantEntry{"dash2", "lh_dash2-token", `["*"]`, "read"})
	ts := newTestServer(t, withCredentials(f.book), func(o *Options) { o.MaxWatchers = 5 })
	// Guarantee 2 each; dash may take its 2 and the 1 nobody is guaranteed.
	for i := range 3 {
		if s, r := ts.openStreamWith("/v1/watch", bearer(dashToken), watchSchemas); s == nil {
			t.Fatalf("dash's watch %d: %d %s", i+1, r.status, r.body)
		}
	}
	if s, _ := ts.openStreamWith("/v1/watch", bearer(dashToken), watchSchemas); s != nil {
		t.Fatal("dash took a slot dash2 is guaranteed")
	}
	for range 2 {
		if s, r := ts.openStreamWith("/v1/watch", bearer("lh_dash2-token"), watchSchemas); s == nil {
			t.Fatalf("dash2's guaranteed watch: %d %s", r.status, r.body)
		}
	}
}
