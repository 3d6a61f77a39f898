package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// ClaimParams are the inputs of a claim.
type ClaimParams struct {
	Task string
	// Owner to claim as; empty means the client's (Client.Owner).
	Owner string
	// TTL of the lease, whole milliseconds; zero means the task's declared
	// ttl, else the sidecar's default (leasecore.DefaultTTL).
	TTL  time.Duration
	Note string
	// MinHold, when not zero, keeps the task from every claimant until the
	// lease's acquisition plus MinHold, even after a release or an expiry
	// (leasecore.ClaimParams.MinHold). Whole milliseconds.
	MinHold time.Duration
}

// RenewParams are the inputs of a renewal.
type RenewParams struct {
	Task string
	// Owner that holds the lease; empty means the client's.
	Owner string
	// TTL of the renewed lease; zero keeps its TTL.
	TTL time.Duration
	// Token, when non-zero, must be the lease's.
	Token int64
	// Note, when not nil, replaces the lease's note, as a refresh claim's
	// does (new("") clears it); nil keeps the note the lease has. The
	// rules are a claim's note's (leasecore.RenewParams.Note).
	Note *string
}

// ReleaseParams are the inputs of a release.
type ReleaseParams struct {
	Task string
	// Owner that holds the lease; empty means the client's.
	Owner string
	// Token, when non-zero, must be the lease's.
	Token int64
	// Run, when not nil, is what the job run under the lease did: the
	// history's released event keeps it (leasecore.ReleaseParams.Run).
	Run *leasecore.RunOutcome
}

func (c *Client) ownerOr(owner string) string {
	if owner == "" {
		return c.owner
	}
	return owner
}

func millis(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// Claim asks for the task's lease. It returns the lease when acquired;
// otherwise a *leasecore.HeldError (another owner holds it, with the
// holder and its expiry), a *leasecore.UnavailableError (the store, the
// sidecar or the network failed: never reported as held), or another
// refusal of the table (undeclared, reserved, forbidden, invalid).
func (c *Client) Claim(ctx context.Context, p ClaimParams) (*leasecore.Lease, error) {
	req := api.ClaimRequest{Owner: c.ownerOr(p.Owner), TtlMs: millis(p.TTL), MinHoldMs: millis(p.MinHold)}
	if p.Note != "" {
		req.Note = &p.Note
	}
	x, err := c.do(ctx, "claim", http.MethodPost, "/v1/leases/{task}/claim", taskPath(p.Task)+"/claim", req)
	if err != nil {
		return nil, err
	}
	return c.granted("claim", p.Task, req.Owner, x)
}

// granted is the lease a claim's or renewal's answer grants, checked to
// be of the task and owner asked for (a sidecar grants no other), or the
// outcome of its refusal.
func (c *Client) granted(op, task, owner string, x *exchange) (*leasecore.Lease, error) {
	lease, _, err := outcome(op, task, x, c.scrub, func(why string) error { return c.notSidecar(op, x, &notTheAPI{why}) })
	if err != nil {
		return nil, err
	}
	if lease.Task != task || lease.Owner != owner {
		return nil, c.notSidecar(op, x, &notTheAPI{fmt.Sprintf("the lease granted is of task %q to owner %q", lease.Task, lease.Owner)})
	}
	return lease, nil
}

// Renew extends the owner's live lease, with p.Note as its note when given.
// When it cannot, a
// *leasecore.LostError says why (not_held, expired, held_by_other,
// token_mismatch); a store or transport failure is unavailable.
func (c *Client) Renew(ctx context.Context, p RenewParams) (*leasecore.Lease, error) {
	req := api.RenewRequest{Owner: c.ownerOr(p.Owner), TtlMs: millis(p.TTL), Note: p.Note}
	if p.Token != 0 {
		req.Token = &p.Token
	}
	x, err := c.do(ctx, "renew", http.MethodPost, "/v1/leases/{task}/renew", taskPath(p.Task)+"/renew", req)
	if err != nil {
		return nil, err
	}
	return c.granted("renew", p.Task, req.Owner, x)
}

// Release ends the owner's live lease (with Token, only that lease) and
// reports whether there was one to end; releasing a lease not held is no
// error.
func (c *Client) Release(ctx context.Context, p ReleaseParams) (bool, error) {
	res, err := c.ReleaseHold(ctx, p)
	return res.Released, err
}

// ReleaseHold is Release, answering also the end of the released lease's
// minimum hold when it has not passed: the task rests until then.
func (c *Client) ReleaseHold(ctx context.Context, p ReleaseParams) (leasecore.ReleaseResult, error) {
	req := api.ReleaseRequest{Owner: c.ownerOr(p.Owner), Run: api.FromRunOutcome(p.Run)}
	if p.Token != 0 {
		req.Token = &p.Token
	}
	x, err := c.do(ctx, "release", http.MethodPost, "/v1/leases/{task}/release", taskPath(p.Task)+"/release", req)
	if err != nil {
		return leasecore.ReleaseResult{}, err
	}
	_, res, err := outcome("release", p.Task, x, c.scrub, func(why string) error { return c.notSidecar("release", x, &notTheAPI{why}) })
	return res, err
}

// RevokeParams are the inputs of a revoke.
type RevokeParams struct {
	Task string
	// Token, when non-zero, must be the live lease's: only that grant is
	// ended.
	Token int64
}

// Revoke ends the task's live lease whoever holds it (POST
// /v1/leases/{task}/revoke, which needs the admin right on the task), and
// returns the lease it ended, or nil when there was none (or it had
// another token than p.Token). The history records a released event with
// the holder as owner, this client's credential, and
// leasecore.RevokedDetail. A credential without the admin right is
// refused with leasecore.ErrForbidden; a store or transport failure is
// unavailable.
func (c *Client) Revoke(ctx context.Context, p RevokeParams) (*leasecore.Lease, error) {
	req := api.RevokeRequest{}
	if p.Token != 0 {
		req.Token = &p.Token
	}
	x, err := c.do(ctx, "revoke", http.MethodPost, "/v1/leases/{task}/revoke", taskPath(p.Task)+"/revoke", req)
	if err != nil {
		return nil, err
	}
	if x.status != http.StatusOK {
		return nil, c.refusal("revoke", p.Task, x)
	}
	var r api.RevokeResult
	if err := c.decode("revoke", x, &r); err != nil {
		return nil, err
	}
	// What the schema cannot say: a lease exactly when released, and of
	// the task (and token) asked about.
	switch {
	case r.Released != (r.Lease != nil):
		return nil, c.notSidecar("revoke", x, &notTheAPI{fmt.Sprintf("released is %v, but the answer has %s lease", r.Released, map[bool]string{true: "a", false: "no"}[r.Lease != nil])})
	case r.Lease == nil:
		return nil, nil
	case r.Lease.Task != p.Task || (p.Token != 0 && r.Lease.Token != p.Token):
		return nil, c.notSidecar("revoke", x, &notTheAPI{fmt.Sprintf("the lease ended is of task %q under token %d", r.Lease.Task, r.Lease.Token)})
	}
	lease, err := api.ToLease(r.Lease)
	if err != nil {
		return nil, c.notSidecar("revoke", x, &notTheAPI{err.Error()})
	}
	return &lease, nil
}

// Get returns the task's live lease, or nil when nobody holds it.
func (c *Client) Get(ctx context.Context, task string) (*leasecore.Lease, error) {
	x, err := c.do(ctx, "get", http.MethodGet, "/v1/leases/{task}", taskPath(task), nil)
	if err != nil {
		return nil, err
	}
	if x.status != http.StatusOK {
		return nil, c.refusal("get", task, x)
	}
	var st api.LeaseState
	if err := c.decode("get", x, &st); err != nil {
		return nil, err
	}
	// What the schema cannot say: a lease exactly when held, and of the task asked about.
	switch {
	case st.Held != (st.Lease != nil):
		return nil, c.notSidecar("get", x, &notTheAPI{fmt.Sprintf("held is %v, but the answer has %s lease", st.Held, map[bool]string{true: "a", false: "no"}[st.Lease != nil])})
	case st.Lease == nil:
		return nil, nil
	case st.Lease.Task != task:
		return nil, c.notSidecar("get", x, &notTheAPI{fmt.Sprintf("the lease is of task %q", st.Lease.Task)})
	}
	lease, err := api.ToLease(st.Lease)
	if err != nil {
		return nil, c.notSidecar("get", x, &notTheAPI{err.Error()})
	}
	return &lease, nil
}

// ListParams choose a page of List.
type ListParams struct {
	// After starts the page after this task (exclusive): the previous
	// page's next.
	After string
	// Limit is the page's size; zero means the sidecar's default.
	Limit int
}

// path is base with p's page as its query.
func (p ListParams) path(base string) string {
	q := url.Values{}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	if len(q) > 0 {
		return base + "?" + q.Encode()
	}
	return base
}

// nextAfter checks a page's next_after (nil on the last page) against the
// after it was asked for: pages walk forward by name, and a next_after
// that does not would have a caller ask for the same page for ever.
func (c *Client) nextAfter(op string, x *exchange, next *string, after string) (string, error) {
	if next == nil {
		return "", nil
	}
	if *next <= after {
		return "", c.notSidecar(op, x, &notTheAPI{fmt.Sprintf("next_after %q does not come after %q", *next, after)})
	}
	return *next, nil
}

// List returns one page of live leases, by task, and the task to continue
// after ("" on the last page).
func (c *Client) List(ctx context.Context, p ListParams) ([]leasecore.Lease, string, error) {
	x, err := c.do(ctx, "list", http.MethodGet, "/v1/leases", p.path("/v1/leases"), nil)
	if err != nil {
		return nil, "", err
	}
	if x.status != http.StatusOK {
		return nil, "", c.refusal("list", "", x)
	}
	var l api.LeaseList
	if err := c.decode("list", x, &l); err != nil {
		return nil, "", err
	}
	next, err := c.nextAfter("list", x, l.NextAfter, p.After)
	if err != nil {
		return nil, "", err
	}
	leases := make([]leasecore.Lease, len(l.Leases))
	for i := range l.Leases {
		if leases[i], err = api.ToLease(&l.Leases[i]); err != nil {
			return nil, "", c.notSidecar("list", x, &notTheAPI{err.Error()})
		}
	}
	return leases, next, nil
}

// History returns the task's most recent history events, newest first, at
// most limit of them (zero: the sidecar's default).
func (c *Client) History(ctx context.Context, task string, limit int) ([]leasecore.Event, error) {
	path := taskPath(task) + "/history"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	x, err := c.do(ctx, "history", http.MethodGet, "/v1/leases/{task}/history", path, nil)
	if err != nil {
		return nil, err
	}
	if x.status != http.StatusOK {
		return nil, c.refusal("history", task, x)
	}
	var l api.EventList
	if err := c.decode("history", x, &l); err != nil {
		return nil, err
	}
	events := make([]leasecore.Event, len(l.Events))
	for i := range l.Events {
		if events[i], err = api.ToEvent(&l.Events[i]); err != nil {
			return nil, c.notSidecar("history", x, &notTheAPI{err.Error()})
		}
	}
	return events, nil
}

// Status is the sidecar's own status (GET /v1/status): its version, its
// store's readiness, its streams and watchers, the caller's credential.
func (c *Client) Status(ctx context.Context) (*api.SidecarStatus, error) {
	x, err := c.do(ctx, "status", http.MethodGet, "/v1/status", "/v1/status", nil)
	if err != nil {
		return nil, err
	}
	if x.status != http.StatusOK {
		return nil, c.refusal("status", "", x)
	}
	var st api.SidecarStatus
	if err := c.decode("status", x, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
