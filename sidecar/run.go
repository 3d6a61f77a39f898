package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
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
// No credential in cfg.Store reaches the log or the error.
func Serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	var token []byte
	if cfg.TokenFile != "" {
		var err error
		if token, err = ReadTokenFile(cfg.TokenFile); err != nil {
			return err
		}
	}
	storeName := storeurl.Redact(cfg.Store)
	store, err := storeurl.Open(ctx, cfg.Store)
	if err != nil {
		return fmt.Errorf("open store %s: %w", storeName, err)
	}
	defer func() {
		if err := store.Close(); err != nil {
			log.Warn("closing the store", "store", storeName, "err", err)
		}
	}()
	srv, err := New(Options{Store: store, Token: token, Logger: log, MaxStreams: cfg.MaxStreams, RequireDeclared: cfg.RequireDeclared})
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
	case ctx.Err() != nil:
		log.Info("stopped before serving")
		return nil
	case storeurl.Unrecoverable(err):
		return fmt.Errorf("store %s cannot be used: %w", storeName, storeurl.RedactError(err))
	default:
		log.Error("store unavailable at start; serving 503 until a migration in the background succeeds",
			"store", storeName, "err", err)
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("leasehold listening", "addr", ln.Addr().String(), "store", storeName, "auth", len(token) > 0)

	bgCtx, stopBackground := context.WithCancel(ctx)
	var wg sync.WaitGroup
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
		leasecore.NewPruner(srv.svc, cfg.PruneInterval, newOwner(), log).Run(bgCtx)
	})
	defer wg.Wait()
	defer stopBackground()

	hs := srv.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.CloseStreams(shutdownCtx); err != nil { // streams release their leases and say so
		log.Warn("shutdown", "err", err)
	}
	if err := hs.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}

// PruneTimeout bounds `leasehold prune`.
const PruneTimeout = 10 * time.Minute

// Prune runs `leasehold prune`: it opens the store at storeURL, migrates it,
// and runs one pruning pass guarded by the prune lease (skipped when another
// pruner holds it), then closes the store.
func Prune(ctx context.Context, storeURL string, log *slog.Logger) error {
	storeName := storeurl.Redact(storeURL)
	ctx, cancel := context.WithTimeout(ctx, PruneTimeout)
	defer cancel()
	store, err := openMigrated(ctx, storeURL)
	if err != nil {
		return err
	}
	defer store.Close()
	result, n, err := leasecore.NewPruner(leasecore.New(store), 0, newOwner(), log).Once(ctx)
	if err != nil {
		return fmt.Errorf("prune store %s: %w", storeName, err)
	}
	switch result {
	case leasecore.PruneSkipped:
		log.Info("another pruner holds the prune lease; it prunes this round", "lease", leasecore.PruneTask, "store", storeName)
	default:
		log.Info("pruned lease history", "result", string(result), "deleted", n, "store", storeName)
	}
	return nil
}

// openMigrated opens the store at storeURL and applies its migrations once
// (no retry); the caller closes it.
func openMigrated(ctx context.Context, storeURL string) (leasecore.Store, error) {
	storeName := storeurl.Redact(storeURL)
	store, err := storeurl.Open(ctx, storeURL)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", storeName, err)
	}
	// Straight to the store, on purpose: the CLI verbs run no Server, so
	// there is no gate to pass and no metric to time the call with.
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("migrate store %s: %w", storeName, err)
	}
	return store, nil
}

// MigrateTimeout bounds `leasehold migrate`.
const MigrateTimeout = time.Minute

// Migrate runs `leasehold migrate`: it opens the store at storeURL, applies
// its migrations once (no retry) and closes it.
func Migrate(ctx context.Context, storeURL string, log *slog.Logger) error {
	storeName := storeurl.Redact(storeURL)
	ctx, cancel := context.WithTimeout(ctx, MigrateTimeout)
	defer cancel()
	store, err := openMigrated(ctx, storeURL)
	if err != nil {
		return err
	}
	store.Close()
	log.Info("store migrated", "store", storeName)
	return nil
}
