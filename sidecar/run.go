package sidecar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/endpoint"
	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// ShutdownTimeout bounds how long Serve waits for in-flight requests after
// it is asked to stop.
const ShutdownTimeout = 15 * time.Second

// StartupMigrateTimeout bounds Serve's one migration before it listens: an
// SQLite file locked by another process (BusyTimeout, 10 s) or a first
// PostgreSQL connection (its connect timeout, 5 s), with time to run.
const StartupMigrateTimeout = 15 * time.Second

// Serve runs `leasehold serve` until ctx ends: it checks cfg, opens the
// store, migrates it once (bounded by StartupMigrateTimeout), listens
// (logging the actual address, useful with port 0), and serves. A store that
// answers is thus migrated before the first request, and readyz says ready
// from the start. A store that cannot be used and will not heal by waiting
// (an SQLite file in a missing directory, not writable, or not a database;
// see storeurl.Unrecoverable) fails Serve at once with that error. Any other
// failure, a store that is down for now, is logged and migrated in the
// background, retrying until it succeeds; readyz and lease operations answer
// 503 meanwhile. When ctx ends Serve stops accepting connections, lets
// in-flight requests finish, and closes the store. A clean stop returns nil.
// On a Unix socket (cfg.Listen unix:PATH) it first removes a stale socket
// file that a sidecar which did not stop cleanly left at PATH (never
// anything else), publishes the socket with cfg.ListenMode already set, and
// removes it as it stops.
// No credential in cfg.Store reaches the log or the error.
//
// With cfg.ProbeListen, Serve also listens there, before it logs, and serves
// Server.ProbeHandler (the probe routes only) until it stops, after the
// streams have released their leases.
//
// Before it opens anything, Serve raises the soft open-file limit to the
// hard one and fits the stream caps to it, with FileReserve descriptors to
// spare: a cap given that does not fit fails Serve, naming its flag and the
// limit; a cap left at its default is lowered to fit, with a warning.
// Connections that arrive when no descriptor is left anyway are answered
// 503 at once.
func Serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	maxStreams, maxWatchers, err := fitFileLimit(cfg, log)
	if err != nil {
		return err
	}
	var book *auth.Book
	switch opts := (auth.BookOptions{Grace: cfg.TokenGrace}); {
	case cfg.TokenFile != "":
		b, err := auth.OpenTokenFile(cfg.TokenFile, opts)
		if err != nil {
			return fmt.Errorf("token file (--token-file): %w", err)
		}
		book = b
	case cfg.CredentialsFile != "":
		b, err := auth.OpenCredentialsFile(cfg.CredentialsFile, opts)
		if err != nil {
			return fmt.Errorf("credentials file (--credentials-file): %w", err)
		}
		book = b
	}
	storeName, err := storeurl.Parse(cfg.Store)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	if cfg.WatchStore != "" {
		// Its value may hold a password: name the flag, not what it says.
		log.Warn("--watch-store (LEASEHOLD_WATCH_STORE) is ignored and deprecated: the watch follows the store through --store, PgBouncer included; remove it")
	}
	store, err := storeurl.Open(ctx, storeName)
	if err != nil {
		return fmt.Errorf("open store %s: %w", storeName, err)
	}
	defer func() {
		if err := store.Close(); err != nil {
			log.Warn("closing the store", "store", storeName, "err", err)
		}
	}()
	// A Unix socket answers every Host: no browser reaches it.
	socketPath, _ := endpoint.SocketPath(cfg.Listen)
	var hosts *HostPolicy
	if socketPath == "" {
		p, err := NewHostPolicy(cfg.Listen, cfg.AllowHosts)
		if err != nil {
			return err
		}
		hosts = &p
	}
	srv, err := New(Options{Store: store, Credentials: book, Hosts: hosts, Logger: log, MaxStreams: maxStreams, MaxWatchers: maxWatchers, RequireDeclared: cfg.RequireDeclared,
		UnixSocket: socketPath, WatchPoll: cmp.Or(cfg.WatchPoll, -1)})
	if err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, StartupMigrateTimeout)
	err = srv.Migrate(startCtx)
	cancel()
	migrated := err == nil
	switch {
	case migrated:
		log.Info("store migrated", "store", storeName)
		cli.LogNewerSchema(ctx, store, storeName, log)
	case ctx.Err() != nil:
		log.Info("stopped before serving")
		return nil
	case storeurl.Unrecoverable(err):
		return fmt.Errorf("store %s cannot be used: %w", storeName, err)
	default:
		log.Error("store unavailable at start; serving 503 until a migration in the background succeeds",
			"store", storeName, "err", err)
	}

	ln, where, unpublish, err := listen(cfg, log)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer unpublish() // whatever ends Serve; once done, a second call finds nothing
	// Connections that arrive when the process has no descriptor left are
	// answered 503 instead of waiting in the backlog (fdListener).
	if ln, err = newFDListener(ln, log, srv.metrics.shed); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The probe listener, when asked for: the probe routes only, no token
	// (probe.go). Its address is the listening line's probe=, after addr=,
	// the one tools read the sidecar's address from.
	servers := []served{{srv.HTTPServer(), ln}}
	if cfg.ProbeListen != "" {
		pln, err := net.Listen("tcp", cfg.ProbeListen)
		if err == nil {
			pln, err = newFDListener(pln, log, srv.metrics.shed)
		}
		if err != nil {
			ln.Close()
			return fmt.Errorf("probe listener (--probe-listen): %w", err)
		}
		servers = append(servers, served{srv.ProbeHTTPServer(), pln})
		where = append(where, "probe", pln.Addr().String())
	}
	log.Info("leasehold listening", append(where, "store", storeName, "auth", authMode(cfg), "version", version.String())...)

	bgCtx, stopBackground := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if book != nil {
		wg.Go(func() { book.Watch(bgCtx, log) })
	}
	wg.Go(func() {
		if !migrated {
			if err := srv.MigrateUntilDone(bgCtx, storeName); err != nil {
				return
			}
		}
		if cfg.PruneInterval == 0 {
			return
		}
		// The pruner starts once the schema is in place, on the server's
		// Service, so that its store calls are timed with the API's (its
		// claims of leasehold:prune are counted by no handler: they are not
		// the API's).
		leasecore.NewPruner(srv.svc, cfg.PruneInterval, leasecore.NewOwner(), log).Run(bgCtx)
	})
	defer wg.Wait()
	defer stopBackground()

	ended := make(chan error, len(servers))
	for _, s := range servers {
		go func() { ended <- s.hs.Serve(s.ln) }()
	}

	select {
	case err := <-ended:
		for _, s := range servers {
			_ = s.hs.Close()
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// The socket file goes first: new clients find no sidecar there, and a
	// successor may listen on the path while this one finishes.
	unpublish()
	log.Info("shutting down: finishing in-flight requests", "timeout", ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.CloseStreams(shutdownCtx); err != nil { // streams release their leases and say so
		log.Warn("shutdown", "err", err)
	}
	// The probe listener, like the API's, answers until here: held-here
	// says 503 as soon as the streams have released their leases.
	var stopped []error
	for _, s := range servers {
		stopped = append(stopped, s.hs.Shutdown(shutdownCtx))
	}
	if err := errors.Join(stopped...); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	for range servers {
		if err := <-ended; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
	}
	log.Info("stopped")
	return nil
}

// served is an HTTP server and the listener it serves.
type served struct {
	hs *http.Server
	ln net.Listener
}

// authMode says in the start-up log how callers are authenticated.
func authMode(cfg Config) string {
	switch {
	case cfg.CredentialsFile != "":
		return "credentials-file"
	case cfg.TokenFile != "":
		return "token-file"
	}
	return "none"
}
