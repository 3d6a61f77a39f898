package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/leasecore"
)

// DefaultMaxConns is the pool size when the URL has no pool_max_conns.
//
// Why 16 for a sidecar serving ~32 concurrent clients: an operation holds a
// connection only for its one short autocommit statement (a refused claim,
// two), about one durable commit, while a client's request cycle also spends
// time in HTTP and on the network; so 16 connections keep up with 32 clients
// with a short queue, and PostgreSQL's group commit still flushes the commits
// of the busy backends together. The server's throughput is bound by WAL
// flushes and its CPUs, not by how many connections wait on them: in
// BenchmarkClaim at 32 clients on a loaded 2-CPU machine, a pool of 8 gave
// ~2.1k claims/s, 16 gave 2.0k–4.3k and 32 gave 2.5k–4.1k (the spread is
// noise from the machine's load), no gain worth doubling the connections for.
// And the connections add up across a fleet: every sidecar opens its own pool
// against one server, whose max_connections is 100 by default; 16 per
// sidecar lets half a dozen sidecars run at full load with slots left for
// administrators and migrations. Connections open on demand and close after
// DefaultMaxConnIdleTime idle, so a quiet sidecar holds few. A sidecar that
// serves more clients sets pool_max_conns in its store URL.
const DefaultMaxConns = 16

// DefaultConnectTimeout bounds opening one connection when the URL has no
// connect_timeout (and PGCONNECT_TIMEOUT is unset), so that an unreachable
// server answers "unavailable" even to a caller whose context has no deadline.
// It matches leasecore.DefaultOpTimeout.
const DefaultConnectTimeout = 5 * time.Second

// DefaultMaxConnIdleTime closes connections that sat idle this long.
const DefaultMaxConnIdleTime = 5 * time.Minute

// maxClaimAttempts bounds how often Claim retries when its claim was refused
// but the lease was free again by the time it read the holder.
const maxClaimAttempts = 4

// Store is a leasecore.Store over a PostgreSQL database, through a pgx pool.
// It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	closed atomic.Bool
}

var _ leasecore.Store = (*Store)(nil)

// Failures the driver finds itself, reported as unavailable with their own text.
var (
	errClosed       = errors.New("the store is closed")
	errUndecided    = errors.New("cannot tell held from free")
	errSchemaBehind = errors.New("the schema is older than this build")
)

// Open returns a Store for the PostgreSQL database at url
// (postgres://USER[:PASSWORD]@HOST:PORT/DB?PARAMS, or any connection string
// pgx accepts). It fails only when url cannot be parsed: connections are
// opened on first use, so a server that is down makes the operations
// unavailable, not Open. It does not migrate; call Migrate.
//
// pool_max_conns in url sets the pool size (default DefaultMaxConns),
// connect_timeout the connection timeout (default DefaultConnectTimeout) and
// pool_max_conn_idle_time how long an idle connection stays open (default
// DefaultMaxConnIdleTime); the other pgx and libpq parameters apply as pgx
// documents them.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx masks the password in the URL it quotes.
		return nil, fmt.Errorf("postgres store URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if !strings.Contains(url, "pool_max_conn_idle_time") {
		cfg.MaxConnIdleTime = DefaultMaxConnIdleTime
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "leasehold"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	return &Store{pool: pool}, nil
}

// Claim acquires a free, released or expired lease with the next token,
// refreshes the owner's own live lease (same token), or returns
// *leasecore.HeldError naming the live holder. See the package doc for why one
// statement decides it.
func (s *Store) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	const op = "claim"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	ttlMS := p.TTL.Milliseconds()
	if ttlMS <= 0 { // Service never sends one; a direct caller gets the model's default
		ttlMS = leasecore.DefaultTTL.Milliseconds()
	}
	for range maxClaimAttempts {
		lease, err := scanLease(s.pool.QueryRow(ctx, claimSQL, p.Task, p.Owner, ttlMS, p.Note))
		if err == nil {
			return lease, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, interpretError(op, err)
		}
		// Refused: another owner's lease was live when the claim locked the
		// row. Read who holds it now, in a new statement that sees the winner.
		var h leasecore.Holder
		var remainingUS int64
		err = s.pool.QueryRow(ctx, holderSQL, p.Task).Scan(&h.Owner, &h.ExpiresAt, &remainingUS)
		switch {
		case err == nil && h.Owner != p.Owner:
			h.ExpiresAt = h.ExpiresAt.UTC()
			h.TTLRemaining = time.Duration(remainingUS) * time.Microsecond
			return nil, &leasecore.HeldError{Task: p.Task, Holder: h}
		case err == nil, errors.Is(err, pgx.ErrNoRows):
			// Released or expired between the two statements (or now ours,
			// through a concurrent claim of the same owner): claim again.
			continue
		default:
			return nil, interpretError(op, err)
		}
	}
	return nil, interpretError(op, fmt.Errorf(
		"%w: %d claims of %q were each refused by a lease that had ended when its holder was read",
		errUndecided, maxClaimAttempts, p.Task))
}

// Renew extends the owner's live lease, or returns *leasecore.LostError with
// the reason it could not.
func (s *Store) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	const op = "renew"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	lease, err := scanLease(s.pool.QueryRow(ctx, renewSQL, p.Task, p.Owner, p.TTL.Milliseconds(), p.Token))
	if err == nil {
		return lease, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, interpretError(op, err)
	}
	var (
		owner          string
		token          int64
		released, live bool
	)
	err = s.pool.QueryRow(ctx, renewStateSQL, p.Task).Scan(&owner, &token, &released, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &leasecore.LostError{Task: p.Task, Reason: leasecore.LostNotHeld, Detail: "the task has never been claimed"}
	}
	if err != nil {
		return nil, interpretError(op, err)
	}
	return nil, lostReason(p, owner, token, released, live)
}

// lostReason classifies a refused renewal from the row read after it.
func lostReason(p leasecore.RenewParams, owner string, token int64, released, live bool) *leasecore.LostError {
	lost := func(r leasecore.LostReason, detail string) *leasecore.LostError {
		return &leasecore.LostError{Task: p.Task, Reason: r, Detail: detail}
	}
	switch {
	case owner != p.Owner && live:
		return lost(leasecore.LostHeldByOther, fmt.Sprintf("%q holds it now", owner))
	case owner != p.Owner:
		return lost(leasecore.LostNotHeld, "another owner held it last and nobody holds it now")
	case released:
		return lost(leasecore.LostNotHeld, "the lease was released")
	case !live:
		return lost(leasecore.LostExpired, "the lease expired; claim it again for a new token")
	case p.Token != 0 && p.Token != token:
		return lost(leasecore.LostTokenMismatch, fmt.Sprintf("the lease now has token %d, not %d", token, p.Token))
	default:
		// The renewal saw no live lease of ours, yet the read after it does:
		// the owner claimed the task again in between. The lease this renewal
		// was meant for is gone.
		return lost(leasecore.LostNotHeld, "the lease changed while it was being renewed")
	}
}

// Release ends the owner's live lease (checking the token when given) and
// reports whether it did. Not holding it is (false, nil).
func (s *Store) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	const op = "release"
	if s.closed.Load() {
		return false, interpretError(op, errClosed)
	}
	tag, err := s.pool.Exec(ctx, releaseSQL, p.Task, p.Owner, p.Token)
	if err != nil {
		return false, interpretError(op, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Get returns the task's live lease, or nil when there is none.
func (s *Store) Get(ctx context.Context, task string) (*leasecore.Lease, error) {
	const op = "get"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	lease, err := scanLease(s.pool.QueryRow(ctx, getSQL, task))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, interpretError(op, err)
	}
	return lease, nil
}

// List returns every live lease, ordered by task name bytewise.
func (s *Store) List(ctx context.Context) ([]leasecore.Lease, error) {
	const op = "list"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	rows, err := s.pool.Query(ctx, listSQL)
	if err != nil {
		return nil, interpretError(op, err)
	}
	leases, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leasecore.Lease, error) {
		l, err := scanLease(row)
		if err != nil {
			return leasecore.Lease{}, err
		}
		return *l, nil
	})
	if err != nil {
		return nil, interpretError(op, err)
	}
	return leases, nil
}

// Ping checks that PostgreSQL answers and that the schema exists at the
// version this build needs; otherwise it reports unavailable, saying to run
// `leasehold migrate` when the schema is missing or behind.
func (s *Store) Ping(ctx context.Context) error {
	const op = "ping"
	if s.closed.Load() {
		return interpretError(op, errClosed)
	}
	want, err := loadMigrations()
	if err != nil {
		return interpretError(op, err)
	}
	var version, leases int64
	if err := s.pool.QueryRow(ctx, pingSQL).Scan(&version, &leases); err != nil {
		return interpretError(op, err)
	}
	if int(version) < len(want) {
		return interpretError(op, fmt.Errorf("%w (version %d, needs %d): run `leasehold migrate`", errSchemaBehind, version, len(want)))
	}
	return nil
}

// Close closes the pool, waiting for connections in use to be returned.
// Operations after Close report unavailable. Close is idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.pool.Close()
	return nil
}

// scanLease reads leaseColumns.
func scanLease(row pgx.Row) (*leasecore.Lease, error) {
	var (
		l                  leasecore.Lease
		ttlMS, remainingUS int64
	)
	err := row.Scan(&l.Task, &l.Owner, &l.Token, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt,
		&ttlMS, &l.RenewCount, &l.Note, &remainingUS)
	if err != nil {
		return nil, err
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = l.AcquiredAt.UTC(), l.RenewedAt.UTC(), l.ExpiresAt.UTC()
	l.TTL = time.Duration(ttlMS) * time.Millisecond
	l.TTLRemaining = time.Duration(remainingUS) * time.Microsecond
	return &l, nil
}
