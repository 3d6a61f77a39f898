package opcli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/exitcode"
	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/leasecore/watch"
	"github.com/leasehold/leasehold/sidecar/api"
)

// storeBackend asks a store directly, through a leasecore.Service, and
// answers in the API's shapes.
type storeBackend struct {
	store leasecore.Store
	svc   *leasecore.Service
	name  storeurl.URL
}

// openStore opens the store at raw. For a verb that writes (claim,
// release) it migrates the store first, as leasehold run and serve do, so
// a new SQLite file works at once; the others only read, and refuse an
// SQLite file that does not exist rather than create it.
func openStore(ctx context.Context, raw string, write bool) (*storeBackend, error) {
	name, err := storeurl.Parse(raw)
	if err != nil {
		return nil, leasecore.Unavailable("open", fmt.Errorf("open store: %w", err))
	}
	if path, missing := cli.MissingSQLiteFile(name); missing && !write {
		return nil, withCode(exitcode.Unavailable, "store %s: no database file at %s (check --store, or create it with `leasehold migrate --store URL`)", name, path)
	}
	var store leasecore.Store
	if write {
		store, err = cli.OpenMigrated(ctx, name) // its errors name the store
	} else if store, err = storeurl.Open(ctx, name); err != nil {
		err = fmt.Errorf("store %s: %w", name, err)
	} else if err = cli.RefuseTooNew(ctx, store); err != nil {
		// A reading verb migrates nothing, so it refuses here what
		// Migrate would: a store contracted past this build.
		store.Close()
		err = fmt.Errorf("store %s: %w", name, err)
	}
	if err != nil {
		return nil, leasecore.Unavailable("open", err)
	}
	return &storeBackend{store: store, svc: leasecore.New(store, leasecore.WithInterceptor(cli.MigrateHint)), name: name}, nil
}

func (s *storeBackend) close() { _ = s.store.Close() }

// StoreStatus is what `leasehold status --store` prints with --json: the
// store as GET /v1/status describes it, the state of its schema, and the
// build of this leasehold.
type StoreStatus struct {
	Version string          `json:"version"`
	Store   api.StoreStatus `json:"store"`
	// Schema is current, behind (older than this build: run leasehold
	// migrate), missing (never migrated), or unknown (the store did not
	// answer).
	Schema string `json:"schema"`
}

func (s *storeBackend) status(ctx context.Context, o *options) error {
	st := StoreStatus{Version: version.String(), Store: api.StoreStatus{Kind: api.StoreStatusKind(storeurl.Kind(s.store)), Ready: true}, Schema: "current"}
	err := s.svc.Ping(ctx)
	if err != nil {
		st.Store.Ready, st.Store.Detail = false, storeurl.Redact(err.Error()) // as a sidecar says it; printed through display
		switch {
		case errors.Is(err, leasecore.ErrSchemaMissing):
			st.Schema = "missing"
		case errors.Is(err, leasecore.ErrSchemaBehind):
			st.Schema = "behind"
		default:
			st.Schema = "unknown"
		}
	}
	if o.json {
		if err := printJSON(o.stdout, st); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(o.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "store\t%s\n", display(s.name.String()))
		fmt.Fprintf(tw, "kind\t%s\n", st.Store.Kind)
		fmt.Fprintf(tw, "ready\t%s\n", map[bool]string{true: "yes", false: "no: " + display(st.Store.Detail)}[st.Store.Ready])
		fmt.Fprintf(tw, "schema\t%s\n", st.Schema)
		fmt.Fprintf(tw, "version\t%s (this leasehold)\n", st.Version)
		_ = tw.Flush()
	}
	if err != nil {
		return told(exitcode.Unavailable, errors.New("the store is not ready"))
	}
	return nil
}

func (s *storeBackend) get(ctx context.Context, task string) (*api.Lease, error) {
	l, err := s.svc.Get(ctx, task)
	if err != nil || l == nil {
		return nil, err
	}
	out := api.FromLease(l)
	return &out, nil
}

func (s *storeBackend) list(ctx context.Context, after string) ([]api.Lease, string, error) {
	leases, next, err := s.svc.List(ctx, leasecore.ListParams{Limit: listPage, After: after})
	if err != nil {
		return nil, "", err
	}
	out := make([]api.Lease, len(leases))
	for i := range leases {
		out[i] = api.FromLease(&leases[i])
	}
	return out, next, nil
}

func (s *storeBackend) history(ctx context.Context, task string, limit int) ([]api.Event, error) {
	events, err := s.svc.History(ctx, task, limit)
	if err != nil {
		return nil, err
	}
	out := make([]api.Event, len(events))
	for i := range events {
		out[i] = api.FromEvent(&events[i])
	}
	return out, nil
}

func (s *storeBackend) claim(ctx context.Context, v *verbFlags) (*api.Lease, *api.ClaimHeld, error) {
	if err := leasecore.CheckClientTask(v.task); err != nil {
		return nil, nil, err
	}
	l, err := s.svc.Claim(ctx, leasecore.ClaimParams{Task: v.task, Owner: v.owner, TTL: v.ttl, Note: v.note, MinHold: v.minHold})
	var held *leasecore.HeldError
	if errors.As(err, &held) {
		return nil, &api.ClaimHeld{
			Acquired: api.ClaimHeldAcquiredFalse,
			Reason:   api.Held,
			Holder:   api.FromHolder(&held.Holder),
			Detail:   held.Error(),
		}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	out := api.FromLease(l)
	return &out, nil, nil
}

func (s *storeBackend) renew(ctx context.Context, v *verbFlags) (*api.Lease, *api.RenewLost, error) {
	if err := leasecore.CheckClientTask(v.task); err != nil {
		return nil, nil, err
	}
	l, err := s.svc.Renew(ctx, leasecore.RenewParams{Task: v.task, Owner: v.owner, TTL: v.ttl, Token: v.token, Note: renewNote(v)})
	var lost *leasecore.LostError
	if errors.As(err, &lost) {
		return nil, renewLost(lost), nil
	}
	if err != nil {
		return nil, nil, err
	}
	out := api.FromLease(l)
	return &out, nil, nil
}

func (s *storeBackend) release(ctx context.Context, v *verbFlags) (bool, error) {
	if err := leasecore.CheckClientTask(v.task); err != nil {
		return false, err
	}
	return s.svc.Release(ctx, leasecore.ReleaseParams{Task: v.task, Owner: v.owner, Token: v.token})
}

// revoke ends the task's live lease as an operator. No credential acts
// on a store: the history's event carries none, and
// leasecore.RevokedDetail.
func (s *storeBackend) revoke(ctx context.Context, v *verbFlags) (*api.Lease, error) {
	if err := leasecore.CheckClientTask(v.task); err != nil {
		return nil, err
	}
	l, err := s.svc.Revoke(ctx, leasecore.RevokeParams{Task: v.task, Token: v.token})
	if err != nil || l == nil {
		return nil, err
	}
	out := api.FromLease(l)
	return &out, nil
}

// watch follows the store's history through package watch. A watcher
// cut for falling behind resumes after the last event printed; one whose
// position is ahead of the store's history (it was restored under it)
// starts over from the oldest event.
func (s *storeBackend) watch(ctx context.Context, v *verbFlags, emit func(api.Event) error, ready func(int64), reset func(int64, int64)) error {
	after := v.since
	hub := watch.New(s.svc)
	defer hub.Close() // before the store closes: nothing of the watch is left in it
	for {
		w, err := hub.Watch(ctx, watch.Params{Prefix: v.prefix, Since: after})
		var ahead *leasecore.PositionAheadError
		if errors.As(err, &ahead) {
			reset(ahead.Position, ahead.Newest)
			after = 0
			continue
		}
		if err != nil {
			return err
		}
		for it := range w.Items() {
			if it.Ready {
				ready(it.Position)
				continue
			}
			if err := emit(api.FromEvent(&it.Event)); err != nil {
				w.Close()
				return exitcode.With(exitcode.Failure, err)
			}
			after = it.Event.ID
		}
		err = w.Err()
		w.Close()
		if ctx.Err() == nil && errors.As(err, &ahead) {
			reset(ahead.Position, ahead.Newest)
			after = 0
			continue
		}
		if ctx.Err() != nil || !errors.Is(err, watch.ErrCut) {
			return err
		}
		if p := w.Position(); p > after {
			after = p
		}
	}
}
