package opcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	lhclient "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// client asks a sidecar through the Go client (package client), and
// turns its outcomes into exit statuses and the operator's messages.
type client struct {
	lc    *lhclient.Client
	err   error     // why lc could not be made (a bug: main checked the address)
	name  string    // the sidecar's address as given (--addr), its password masked, for messages
	token bool      // a token was given (--token-file), for the hint on a 401
	notes io.Writer // where watch reports reconnections

	// A watch's bounds when not zero, else the client's defaults (tests
	// shorten them).
	watchAnswer, watchIdle time.Duration
}

// newClient asks the sidecar at ep, over TCP or its Unix socket.
func newClient(ep endpoint.Endpoint, token string, notes io.Writer) *client {
	var opts []lhclient.Option
	if token != "" {
		opts = append(opts, lhclient.WithToken(token))
	}
	lc, err := lhclient.New(ep.String(), append(opts, lhclient.WithTimeout(requestTimeout))...)
	return &client{lc: lc, err: err, name: cli.RedactAddr(ep.String()), token: token != "", notes: notes}
}

// fail is err, an outcome of the Go client, with the exit status it calls
// for and the operator's words.
func (c *client) fail(err error) error {
	var (
		ns *lhclient.NotSidecarError
		pe *lhclient.ProblemError
		ue *leasecore.UnavailableError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ns):
		return &reworded{fmt.Sprintf("the server at %s did not answer like a leasehold sidecar (check --addr): %s %s: %s", ns.Addr, ns.Method, ns.Path, ns.Reason), err}
	case errors.As(err, &pe) && errors.Is(err, lhclient.ErrUnauthorized):
		return &reworded{pe.Error() + "; " + cli.TokenHint(c.token), err}
	case errors.As(err, &pe):
		return &reworded{pe.Error(), err}
	case errors.As(err, &ue):
		return &reworded{ue.Err.Error(), err}
	default:
		return err
	}
}

func (c *client) status(ctx context.Context, o *options) error {
	if c.err != nil {
		return c.err
	}
	st, err := c.lc.Status(ctx)
	if err != nil {
		return c.fail(err)
	}
	if o.json {
		if err := printJSON(o.stdout, st); err != nil {
			return err
		}
	} else {
		printSidecarStatus(o.stdout, c.name, st)
	}
	if !st.Store.Ready {
		return told(exitcode.Unavailable, fmt.Errorf("the sidecar's store is not ready: %s", st.Store.Detail))
	}
	return nil
}

func (c *client) get(ctx context.Context, task string) (*api.Lease, error) {
	if c.err != nil {
		return nil, c.err
	}
	l, err := c.lc.Get(ctx, task)
	if err != nil || l == nil {
		return nil, c.fail(err)
	}
	a := api.FromLease(l)
	return &a, nil
}

func (c *client) list(ctx context.Context, after string) ([]api.Lease, string, error) {
	if c.err != nil {
		return nil, "", c.err
	}
	leases, next, err := c.lc.List(ctx, lhclient.ListParams{After: after, Limit: listPage})
	if err != nil {
		return nil, "", c.fail(err)
	}
	out := make([]api.Lease, len(leases))
	for i := range leases {
		out[i] = api.FromLease(&leases[i])
	}
	return out, next, nil
}

func (c *client) history(ctx context.Context, task string, limit int) ([]api.Event, error) {
	if c.err != nil {
		return nil, c.err
	}
	events, err := c.lc.History(ctx, task, limit)
	if err != nil {
		return nil, c.fail(err)
	}
	out := make([]api.Event, len(events))
	for i := range events {
		out[i] = api.FromEvent(&events[i])
	}
	return out, nil
}

func (c *client) claim(ctx context.Context, v *verbFlags) (*api.Lease, *api.ClaimHeld, error) {
	if c.err != nil {
		return nil, nil, c.err
	}
	l, err := c.lc.Claim(ctx, lhclient.ClaimParams{Task: v.task, Owner: v.owner, TTL: v.ttl, Note: v.note, MinHold: v.minHold})
	var held *leasecore.HeldError
	switch {
	case errors.As(err, &held):
		return nil, &api.ClaimHeld{Acquired: api.ClaimHeldAcquiredFalse, Reason: api.Held, Detail: held.Error(), Holder: api.FromHolder(&held.Holder)}, nil
	case err != nil:
		return nil, nil, c.fail(err)
	}
	a := api.FromLease(l)
	return &a, nil, nil
}

func (c *client) renew(ctx context.Context, v *verbFlags) (*api.Lease, *api.RenewLost, error) {
	if c.err != nil {
		return nil, nil, c.err
	}
	l, err := c.lc.Renew(ctx, lhclient.RenewParams{Task: v.task, Owner: v.owner, TTL: v.ttl, Token: v.token, Note: renewNote(v)})
	var lost *leasecore.LostError
	switch {
	case errors.As(err, &lost):
		return nil, renewLost(lost), nil
	case err != nil:
		return nil, nil, c.fail(err)
	}
	a := api.FromLease(l)
	return &a, nil, nil
}

func (c *client) release(ctx context.Context, v *verbFlags) (bool, error) {
	if c.err != nil {
		return false, c.err
	}
	released, err := c.lc.Release(ctx, lhclient.ReleaseParams{Task: v.task, Owner: v.owner, Token: v.token})
	return released, c.fail(err)
}

func (c *client) revoke(ctx context.Context, v *verbFlags) (*api.Lease, error) {
	if c.err != nil {
		return nil, c.err
	}
	l, err := c.lc.Revoke(ctx, lhclient.RevokeParams{Task: v.task, Token: v.token})
	if err != nil || l == nil {
		return nil, c.fail(err)
	}
	a := api.FromLease(l)
	return &a, nil
}

// emitError is the error of watch's emit, returned as the watch's.
type emitError struct{ err error }

func (e *emitError) Error() string { return e.err.Error() }

// watch follows GET /v1/watch through the Go client, which connects again
// whenever the stream ends, from the last event seen (see the package
// documentation).
func (c *client) watch(ctx context.Context, v *verbFlags, emit func(api.Event) error, ready func(int64), reset func(position, newest int64)) error {
	if c.err != nil {
		return c.err
	}
	err := c.lc.Watch(ctx, lhclient.WatchParams{Prefix: v.prefix, Since: v.since, AnswerTimeout: c.watchAnswer, IdleTimeout: c.watchIdle}, lhclient.WatchHandler{
		Event: func(e leasecore.Event) error {
			if err := emit(api.FromEvent(&e)); err != nil {
				return &emitError{err}
			}
			return nil
		},
		Ready: ready,
		Reset: reset,
		Reconnect: func(err error, wait time.Duration) {
			fmt.Fprintf(c.notes, "watch: %v; reconnecting in %s\n", message(c.watchFail(err)), wait)
		},
	})
	return c.watchFail(err)
}

// watchFail is fail for a watch: an answer that is no watch stream says
// so (69, as any answer that is not a sidecar's; the watch does not retry
// it, since a server that is not a sidecar will not become one), and a
// failure to print is a failure (1).
func (c *client) watchFail(err error) error {
	var (
		ns *lhclient.NotSidecarError
		ee *emitError
	)
	switch {
	case errors.As(err, &ee):
		return exitcode.With(exitcode.Failure, ee.err)
	case errors.As(err, &ns) && ns.Status == http.StatusNotFound:
		return &reworded{fmt.Sprintf("%s is not a leasehold sidecar's watch stream: GET /v1/watch answered 404 Not Found (a sidecar older than the watch, or another server) (check --addr)", c.name), err}
	case errors.As(err, &ns):
		return &reworded{fmt.Sprintf("%s is not a leasehold sidecar's watch stream: %s (check --addr)", c.name, ns.Reason), err}
	default:
		return c.fail(err)
	}
}
