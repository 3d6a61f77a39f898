package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/internal/notify"
	"github.com/leasehold/leasehold/leasecore/internal/redact"
	"github.com/leasehold/leasehold/leasecore/internal/runjson"
	"github.com/leasehold/leasehold/leasecore/internal/snapcache"
)

// checkUserinfo refuses a URL whose user name or password holds a raw '@'
// or '/'. pgx, like libpq, ends the userinfo at the first '@' before the
// first '/', so the rest of such a password would be read as a host or a
// database name, and quoted as one in connection errors ("lookup
// cret@host: no such host"), where no pattern can tell it is a password.
func checkUserinfo(url, what string) error {
	p, ok := strings.CutPrefix(url, "postgres://")
	if !ok {
		p, ok = strings.CutPrefix(url, "postgresql://")
	}
	if !ok {
		return nil
	}
	auth, path, _ := strings.Cut(p, "/")
	path, _, _ = strings.Cut(path, "?")
	if strings.Count(auth, "@") > 1 || strings.Contains(path, "@") {
		return fmt.Errorf("%s: a raw '@' or '/' in the user name or password (or an '@' in the database name): percent-encode them as %%40 and %%2F", what)
	}
	// The query starts at the first '?' after the userinfo, as libpq
	// reads it (a '?' in the password is the password's).
	rest := p
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		rest = p[i+1:]
	}
	if _, query, ok := strings.Cut(rest, "?"); ok && badKey(query) {
		return fmt.Errorf("%s: a parameter name may hold only letters, digits, '_', '.' and '-' (a raw '&', '=', '@' or '/' in a password splits it: percent-encode them as %%26, %%3D, %%40 and %%2F)", what)
	}
	return nil
}

// badKey reports whether a parameter name in query, percent-decoded, holds
// anything but letters, digits, '_', '.' and '-', as no libpq, pgx or
// server parameter does. A raw '&' in a password (?password=se&(x)=cret)
// or "/?" followed by an '@' (postgres://u:se@x//?cret@h?…) makes one of
// the password's halves a parameter: pgx would send it to the server,
// whose error quotes it, and no mask could tell it is a password.
func badKey(query string) bool {
	if query == "" {
		return false
	}
	for p := range strings.SplitSeq(query, "&") {
		k, _, _ := strings.Cut(p, "=")
		if d, err := url.PathUnescape(k); err == nil {
			k = d
		}
		if k == "" {
			continue // pgx names the missing key itself
		}
		for _, c := range k {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
				return true
			}
		}
	}
	return false
}

// parseError is err, from pgxpool.ParseConfig, with the connection string
// a pgconn.ParseConfigError quotes masked by redact rather than by pgx.
// Where url may hold a credential (a userinfo password, a parameter named
// like one), pgx's own words are left out too: they may quote a value
// ("unexpected spaces found in \"se cret\"") that no mask can tell is a
// password, and err is not kept for errors.As to find.
func parseError(url string, err error) error {
	if mayHoldCredential(url) {
		return errors.New("cannot parse it as postgres://USER@HOST:PORT/DB?NAME=VALUE&…; its text is not shown, since it holds a password: " +
			"percent-encode any space, '%', '@', '/', '?', '#', '&' or '=' in the user name, password or a value, and check that every port is a number")
	}
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err
	}
	bare := *pe
	bare.ConnString = ""
	msg := strings.TrimPrefix(bare.Error(), "cannot parse ``: ")
	return &maskedParseError{err: err, msg: fmt.Sprintf("cannot parse `%s`: %s", redact.String(pe.ConnString), msg)}
}

// mayHoldCredential reports whether a connection URL may hold a password:
// a ':' before an '@' after the scheme (a userinfo password, wherever a
// malformed URL ends its userinfo), or "pass" in it, percent-decoded, in
// any case (a password or sslpassword parameter).
func mayHoldCredential(s string) bool {
	if d, err := url.PathUnescape(s); err == nil {
		s = d
	}
	if strings.Contains(strings.ToLower(s), "pass") {
		return true
	}
	_, rest, _ := strings.Cut(s, "://")
	at := strings.LastIndexByte(rest, '@')
	return at >= 0 && strings.Contains(rest[:at], ":")
}

type maskedParseError struct {
	err error
	msg string
}

func (e *maskedParseError) Error() string { return e.msg }
func (e *maskedParseError) Unwrap() error { return e.err }

// DefaultMaxConns is the pool size when the URL has no pool_max_conns.
//
// Why 4: claims, renewals and releases go out in batches (batch.go), each
// kind on at most batchFlushers connections at once, so a sidecar's writes
// need few connections however many clients it serves, and the server's CPUs
// and WAL flushes, not connections, limit them (BenchmarkPoolSize compares
// pools of 1 to 8 connections; docs/design.md, "Measurements behind the
// constants"). A larger pool would only add up across a fleet: every
// sidecar opens its own pool against one server, whose max_connections is
// 100 by default. Connections open on demand and close after
// DefaultMaxConnIdleTime idle, so a quiet sidecar holds fewer. A fleet
// larger than the server's connection slots allow goes through PgBouncer in
// transaction mode (docs/stores.md, "A fleet on one PostgreSQL").
const DefaultMaxConns = 4

// DefaultConnectTimeout bounds opening one connection when the URL has no
// connect_timeout (and PGCONNECT_TIMEOUT is unset), so that an unreachable
// server answers "unavailable" even to a caller whose context has no deadline.
// It matches leasecore.DefaultOpTimeout.
const DefaultConnectTimeout = 5 * time.Second

// DefaultMaxConnIdleTime closes connections that sat idle this long.
const DefaultMaxConnIdleTime = 5 * time.Minute

// maxClaimAttempts bounds how often Claim retries when its claim was refused
// but the lease was free again by the time it read the holder. The bound
// only stops a livelock, so it must leave room for real churn: on a task
// whose holders release it as soon as they get it, a refused claim often
// finds the lease free again when it reads the holder, and more often since
// claims are batched (claims of one task go one per statement, so their
// refusals spread over each holder's tenure instead of all following its
// grant at once). TestTokensUniqueUnderChurn exercises exactly that churn;
// docs/design.md ("Measurements behind the constants") says how 4 attempts
// fared there and why 8 were chosen.
const maxClaimAttempts = 8

// Store is a leasecore.Store over a PostgreSQL database, through a pgx pool.
// It is safe for concurrent use.
type Store struct {
	pool    pool
	closed  atomic.Bool
	closing chan struct{} // closed by Close: connections waiting out a given-up statement hang up

	// The batchers send concurrent claims, renewals and releases together
	// (batch.go). A nil answer from claims or renewals is a refusal.
	claims   *batcher[claimReq, *leasecore.Lease]
	renewals *batcher[renewReq, *leasecore.Lease]
	releases *batcher[releaseReq, leasecore.ReleaseResult]

	// readOnly is the last read-only answer that emptied the pool (nil if
	// none); for readOnlyBackoff after it, writes are refused with its
	// error without a round trip (see sawReadOnly).
	readOnly        atomic.Pointer[readOnlyNote]
	readOnlyBackoff time.Duration

	// committed is notified after this Store commits history, which its
	// HistoryChanges then signal at once; changesPoll is how often they ask
	// for other processes' commits (ChangesPoll). changesCtx ends when the
	// store closes, which stops them, and changes counts their goroutines
	// for Close to wait on.
	committed   notify.Notifier
	changesPoll time.Duration
	changesMu   sync.Mutex // orders HistoryChanges' changes.Go before Close's Wait
	changesCtx  context.Context
	stopChanges context.CancelFunc
	changes     sync.WaitGroup

	// scope is the copy of the scope of the role the store runs as
	// (scope.go), by which calls of tasks outside it are refused up front.
	scope snapcache.Cache[leasecore.Scope]
}

// readOnlyNote is a read-only answer and when it was seen.
type readOnlyNote struct {
	at  time.Time
	err error
}

// defaultReadOnlyBackoff is how long, after PostgreSQL answered that it is
// read-only, writes are refused as unavailable without asking it again, and
// the longest the pool stays empty of connections to it. Without it every
// write would open a new connection (a backend fork) to a read-only server,
// across the whole fleet, for as long as the server stays read-only; with
// it a promotion is picked up within about this long (at once by Ping).
const defaultReadOnlyBackoff = time.Second

// The requests the batchers queue: the parameters as the statements take them.
type (
	claimReq struct {
		task, owner      string
		ttlMS, minHoldMS int64
		note, credential string
	}
	renewReq struct {
		task, owner  string
		ttlMS, token int64
		note         *string // nil keeps the lease's
	}
	releaseReq struct {
		task, owner        string
		token              int64
		credential, detail string
		run                *string // runjson's text, nil for none
	}
)

var (
	_ leasecore.Store        = (*Store)(nil)
	_ leasecore.BatchRenewer = (*Store)(nil)
	_ leasecore.WriteCounter = (*Store)(nil)
	_ leasecore.HistoryFeed  = (*Store)(nil)

	_ leasecore.RoleScopeStore = (*Store)(nil)
)

// Failures the driver finds itself, reported as unavailable with their own text.
var (
	errClosed        = errors.New("the store is closed")
	errUndecided     = errors.New("cannot tell held from free")
	errUsersChanging = errors.New("cannot tell whether tasks use the retention policy")
	errManagerFlips  = errors.New("cannot tell who manages the declaration")
	errReadOnly      = errors.New("PostgreSQL is read-only")
)

// Open returns a Store for the PostgreSQL database at url
// (postgres://USER[:PASSWORD]@HOST:PORT/DB?PARAMS, or any connection string
// pgx accepts). It fails only when url cannot be parsed: connections are
// opened on first use, so a server that is down makes the operations
// unavailable, not Open. It does not migrate; call Migrate. It starts the
// goroutines that send batched claims, renewals and releases; Close stops
// them.
//
// pool_max_conns in url sets the pool size (default DefaultMaxConns),
// connect_timeout the connection timeout (default DefaultConnectTimeout) and
// pool_max_conn_idle_time how long an idle connection stays open (default
// DefaultMaxConnIdleTime); the other pgx and libpq parameters apply as pgx
// documents them.
func Open(ctx context.Context, url string) (*Store, error) {
	return OpenWith(ctx, url, Options{})
}

// CheckURL reports whether Open would accept url as a connection URL,
// without connecting: its error is the one Open would return, and like
// Open's holds no credential from url.
func CheckURL(url string) error {
	_, err := parseConfig(url)
	return err
}

func parseConfig(url string) (*pgxpool.Config, error) {
	if err := checkUserinfo(url, "postgres store URL"); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx masks the passwords it recognises in the URL it quotes, but
		// not all of them (password=se\ cret shows "cret"), nor in the
		// errors it wraps: quote the URL masked our way, and mask the rest.
		return nil, redact.Error(fmt.Errorf("postgres store URL: %w", parseError(url, err)))
	}
	return cfg, nil
}

// Options are the settings of a Store besides its URL.
type Options struct {
	// ScopeMaxAge bounds how stale the driver's copy of its role's scope
	// (leasecore.RoleScope) may be; zero or less means DefaultScopeMaxAge.
	ScopeMaxAge time.Duration
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
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
	// A connection found read-only (a standby, or read-only by default) is
	// not put back in the pool, so that the next one is made afresh: to
	// the new primary, after a failover, when the URL lists every host
	// with target_session_attrs=read-write.
	cfg.AfterRelease = func(c *pgx.Conn) bool { return !readOnlyConn(c) }
	// A statement given up by its caller is cancelled, not hung up on
	// (pool.go).
	closing := make(chan struct{})
	cfg.ConnConfig.BuildContextWatcherHandler = newContextWatcher(closing)
	cfg.ConnConfig.DialFunc = dialNotifying(cfg.ConnConfig.DialFunc)
	pgxPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("postgres store: %w", err))
	}
	s := &Store{pool: pool{pgxPool}, closing: closing, readOnlyBackoff: defaultReadOnlyBackoff, changesPoll: ChangesPoll}
	s.scope.MaxAge = opts.ScopeMaxAge
	if s.scope.MaxAge <= 0 {
		s.scope.MaxAge = DefaultScopeMaxAge
	}
	s.changesCtx, s.stopChanges = context.WithCancel(context.Background())
	s.claims = newBatcher("claim", func(r claimReq) string { return r.task }, watchScope(s, watchReadOnly(s, tellChanges(s, granted, s.sendClaims))))
	s.renewals = newBatcher("renew", func(r renewReq) string { return r.task }, watchScope(s, watchReadOnly(s, s.sendRenewals)))
	s.releases = newBatcher("release", func(r releaseReq) string { return r.task }, watchScope(s, watchReadOnly(s, tellChanges(s, released, s.sendReleases))))
	for _, b := range []interface{ readmitWith(*Store, string) }{s.claims, s.renewals, s.releases} {
		b.readmitWith(s, leasecore.RightHold)
	}
	return s, nil
}

// Claim acquires a free, released or expired lease with the next token,
// refreshes the owner's own live lease (same token), or returns
// *leasecore.HeldError naming the live holder. A new grant is recorded in
// the task's history by the statement that makes it ("acquired", after the
// end of the expired lease it replaced, unless that end is recorded
// already). docs/design.md ("Why a claim is correct at READ COMMITTED")
// argues why one statement decides it.
func (s *Store) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	const op = "claim"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	ttlMS := p.TTL.Milliseconds()
	if ttlMS <= 0 { // Service never sends one; a direct caller gets the model's default
		ttlMS = leasecore.DefaultTTL.Milliseconds()
	}
	if err := s.checkScope(ctx, op, leasecore.RightHold, p.Task); err != nil {
		return nil, err
	}
	req := claimReq{task: p.Task, owner: p.Owner, ttlMS: ttlMS, minHoldMS: p.MinHold.Milliseconds(), note: p.Note, credential: p.Credential}
	for range maxClaimAttempts {
		lease, err := s.claims.do(ctx, req)
		if err != nil {
			return nil, err
		}
		if lease != nil {
			return lease, nil
		}
		// Refused: another owner's lease was live when the claim locked the
		// row, or a lease rested. Read who holds it now, in a new statement
		// that sees the winner.
		var h leasecore.Holder
		var remainingUS int64
		var hold *time.Time
		err = s.pool.QueryRow(ctx, holderSQL, p.Task).Scan(&h.Owner, &h.ExpiresAt, &remainingUS, &h.AcquiredAt, &hold, &h.Resting)
		switch {
		case err == nil && (h.Owner != p.Owner || h.Resting):
			h.ExpiresAt, h.AcquiredAt = h.ExpiresAt.UTC(), h.AcquiredAt.UTC()
			if hold != nil {
				h.HoldUntil = hold.UTC()
			}
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

// granted: a claim that was not refused, which wrote history when it
// granted a new lease (a holder's own claim only refreshes its lease).
func granted(l *leasecore.Lease) bool { return l != nil }

// released: a release that ended a lease, and wrote its history.
func released(r leasecore.ReleaseResult) bool { return r.Released }

// sendClaims runs one batch of claims of distinct tasks; a nil lease is a
// refused claim.
func (s *Store) sendClaims(ctx context.Context, reqs []claimReq) ([]*leasecore.Lease, error) {
	if len(reqs) == 1 {
		r := reqs[0]
		lease, err := refusedIfNoRow(scanLease(s.pool.QueryRow(ctx, claimSQL, r.task, r.owner, r.ttlMS, r.note, r.credential, r.minHoldMS)))
		return []*leasecore.Lease{lease}, err
	}
	tasks, owners := make([]string, len(reqs)), make([]string, len(reqs))
	ttls, notes := make([]int64, len(reqs)), make([]string, len(reqs))
	credentials, minHolds := make([]string, len(reqs)), make([]int64, len(reqs))
	for i, r := range reqs {
		tasks[i], owners[i], ttls[i], notes[i], credentials[i], minHolds[i] = r.task, r.owner, r.ttlMS, r.note, r.credential, r.minHoldMS
	}
	rows, err := s.pool.Query(ctx, claimBatchSQL, tasks, owners, ttls, notes, credentials, minHolds)
	if err != nil {
		return nil, err
	}
	return leasesByTask(rows, tasks)
}

// Renew extends the owner's live lease, or returns *leasecore.LostError with
// the reason it could not. A renewal refused because the owner's own lease
// expired records the lease's loss in the history, once per lease.
func (s *Store) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	const op = "renew"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	if err := s.checkScope(ctx, op, leasecore.RightHold, p.Task); err != nil {
		return nil, err
	}
	lease, err := s.renewals.do(ctx, renewReq{task: p.Task, owner: p.Owner, ttlMS: p.TTL.Milliseconds(), token: p.Token, note: p.Note})
	if err != nil {
		return nil, err
	}
	if lease != nil {
		return lease, nil
	}
	var (
		owner          string
		token          int64
		released, live bool
	)
	err = s.pool.QueryRow(ctx, renewStateSQL, p.Task, p.Owner, p.Credential).Scan(&owner, &token, &released, &live)
	s.committed.Notify() // the read records the loss of an expired lease
	if errors.Is(err, pgx.ErrNoRows) {
		// No row, or one row-level security hides: the role's scope may
		// have lost the task since the copy was read. Ask afresh rather
		// than answer "never claimed" for a task the role may not see.
		s.scope.Invalidate(false)
		if err := s.checkScope(ctx, op, leasecore.RightHold, p.Task); err != nil {
			return nil, err
		}
		return nil, leasecore.RenewLost(p, leasecore.LeaseState{})
	}
	if err != nil {
		return nil, interpretError(op, err)
	}
	return nil, leasecore.RenewLost(p, leasecore.LeaseState{Exists: true, Owner: owner, Token: token, Released: released, Live: live})
}

// sendRenewals runs one batch of renewals of distinct tasks; a nil lease is
// a refused renewal.
func (s *Store) sendRenewals(ctx context.Context, reqs []renewReq) ([]*leasecore.Lease, error) {
	if len(reqs) == 1 {
		r := reqs[0]
		lease, err := refusedIfNoRow(scanLease(s.pool.QueryRow(ctx, renewSQL, r.task, r.owner, r.ttlMS, r.token, r.note)))
		return []*leasecore.Lease{lease}, err
	}
	tasks, owners := make([]string, len(reqs)), make([]string, len(reqs))
	ttls, tokens := make([]int64, len(reqs)), make([]int64, len(reqs))
	notes := make([]*string, len(reqs)) // a nil element is a NULL: the lease's note kept
	for i, r := range reqs {
		tasks[i], owners[i], ttls[i], tokens[i], notes[i] = r.task, r.owner, r.ttlMS, r.token, r.note
	}
	rows, err := s.pool.Query(ctx, renewBatchSQL, tasks, owners, ttls, tokens, notes)
	if err != nil {
		return nil, err
	}
	return leasesByTask(rows, tasks)
}

// maxRenewBatch bounds the renewals in one RenewBatch statement: the
// model's bound (see leasecore.MaxRenewBatch for why it exceeds maxBatch).
const maxRenewBatch = leasecore.MaxRenewBatch

// RenewBatch renews many leases in as few statements as it can: up to
// maxRenewBatch renewals of distinct tasks per statement (a task named twice
// goes in a later statement), one after another. Each refused renewal gets
// its reason from one statement for all of them, which records the losses
// as Renew does. It is leasecore.BatchRenewer.
func (s *Store) RenewBatch(ctx context.Context, ps []leasecore.RenewParams) ([]leasecore.RenewResult, error) {
	const op = "renew"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	results := make([]leasecore.RenewResult, len(ps))
	var refused, admitted []int
	for i, p := range ps {
		err := s.checkScope(ctx, op, leasecore.RightHold, p.Task)
		switch {
		case errors.Is(err, leasecore.ErrForbidden):
			results[i].Err = err
			continue
		case err != nil:
			// The scope could not be read: the batch fails, as its
			// statement would have.
			return nil, err
		}
		admitted = append(admitted, i)
	}
	for rest := admitted; len(rest) > 0; {
		var chunk []int
		chunk, rest = distinctTasks(ps, rest, maxRenewBatch)
		reqs := make([]renewReq, len(chunk))
		for j, i := range chunk {
			p := ps[i]
			reqs[j] = renewReq{task: p.Task, owner: p.Owner, ttlMS: p.TTL.Milliseconds(), token: p.Token, note: p.Note}
		}
		leases, err := s.renewals.send(ctx, reqs)
		s.renewals.count(len(reqs))
		if err != nil {
			return nil, interpretError(op, err)
		}
		for j, i := range chunk {
			if leases[j] == nil {
				refused = append(refused, i)
			}
			results[i].Lease = leases[j]
		}
	}
	if len(refused) == 0 {
		return results, nil
	}
	if err := s.lostReasons(ctx, ps, refused, results); err != nil {
		return nil, interpretError(op, err)
	}
	return results, nil
}

// lostReasons fills in the *LostError of each refused renewal ps[i], i in
// refused, from one read of their rows (which records the losses of expired
// leases, as Renew's read does).
func (s *Store) lostReasons(ctx context.Context, ps []leasecore.RenewParams, refused []int, results []leasecore.RenewResult) error {
	type state struct {
		owner          string
		token          int64
		released, live bool
	}
	tasks, owners, credentials := make([]string, len(refused)), make([]string, len(refused)), make([]string, len(refused))
	for j, i := range refused {
		tasks[j], owners[j], credentials[j] = ps[i].Task, ps[i].Owner, ps[i].Credential
	}
	rows, err := s.pool.Query(ctx, renewStatesSQL, tasks, owners, credentials)
	defer s.committed.Notify() // the read records the losses of expired leases
	if err != nil {
		return err
	}
	found := make(map[string]state, len(tasks))
	for rows.Next() {
		var task string
		var st state
		if err := rows.Scan(&task, &st.owner, &st.token, &st.released, &st.live); err != nil {
			rows.Close()
			return err
		}
		found[task] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	invalidated := false
	for _, i := range refused {
		p := ps[i]
		st, ok := found[p.Task]
		if !ok {
			// No row, or one row-level security hides: as in Renew, ask
			// the role's scope afresh (once for the batch).
			if !invalidated {
				s.scope.Invalidate(false)
				invalidated = true
			}
			if err := s.checkScope(ctx, "renew", leasecore.RightHold, p.Task); err != nil {
				results[i].Err = err
				continue
			}
		}
		results[i].Err = leasecore.RenewLost(p, leasecore.LeaseState{Exists: ok, Owner: st.owner, Token: st.token, Released: st.released, Live: st.live})
	}
	return nil
}

// distinctTasks splits the indexes of ps in order into a chunk of at most
// limit whose tasks are distinct (one statement cannot change a row twice),
// and the rest, in their order.
func distinctTasks(ps []leasecore.RenewParams, order []int, limit int) (chunk, rest []int) {
	seen := make(map[string]struct{}, min(len(order), limit))
	for n, i := range order {
		if len(chunk) == limit {
			rest = append(rest, order[n:]...)
			break
		}
		if _, dup := seen[ps[i].Task]; dup {
			rest = append(rest, i)
			continue
		}
		seen[ps[i].Task] = struct{}{}
		chunk = append(chunk, i)
	}
	return chunk, rest
}

// WriteCounts reports, per operation, the statements sent so far and the
// calls they carried (batched or alone, whatever their outcome). It is
// leasecore.WriteCounter.
func (s *Store) WriteCounts() []leasecore.WriteCount {
	return []leasecore.WriteCount{
		{Op: "claim", Statements: s.claims.statements.Load(), Operations: s.claims.operations.Load()},
		{Op: "renew", Statements: s.renewals.statements.Load(), Operations: s.renewals.operations.Load()},
		{Op: "release", Statements: s.releases.statements.Load(), Operations: s.releases.operations.Load()},
	}
}

// refusedIfNoRow is the answer of a single-row statement: its lease, or nil
// (refused) when it returned no row.
func refusedIfNoRow(lease *leasecore.Lease, err error) (*leasecore.Lease, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return lease, err
}

// leasesByTask reads a batch statement's leases and lines them up with the
// batch's tasks: element i is task i's lease, or nil when the statement
// returned no row for it.
func leasesByTask(rows pgx.Rows, tasks []string) ([]*leasecore.Lease, error) {
	defer rows.Close()
	byTask := make(map[string]*leasecore.Lease, len(tasks))
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, err
		}
		byTask[l.Task] = l
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	leases := make([]*leasecore.Lease, len(tasks))
	for i, t := range tasks {
		leases[i] = byTask[t]
	}
	return leases, nil
}

// Release ends the owner's live lease (checking the token when given) and
// reports whether it did, recording "released" in the task's history in the
// same statement. Not holding it is (false, nil).
func (s *Store) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	res, err := s.ReleaseHold(ctx, p)
	return res.Released, err
}

// ReleaseHold is Release, answering also the end of the released lease's
// minimum hold when it has not passed. It is leasecore.HoldReleaser.
func (s *Store) ReleaseHold(ctx context.Context, p leasecore.ReleaseParams) (leasecore.ReleaseResult, error) {
	const op = "release"
	if s.closed.Load() {
		return leasecore.ReleaseResult{}, interpretError(op, errClosed)
	}
	if err := s.checkScope(ctx, op, leasecore.RightHold, p.Task); err != nil {
		return leasecore.ReleaseResult{}, err
	}
	return s.releases.do(ctx, releaseReq{task: p.Task, owner: p.Owner, token: p.Token, credential: p.Credential, detail: p.Detail,
		run: runjson.Encode(p.Run)})
}

// sendReleases runs one batch of releases of distinct tasks and reports which
// ended a lease, and until when each one's minimum hold rests its task.
func (s *Store) sendReleases(ctx context.Context, reqs []releaseReq) ([]leasecore.ReleaseResult, error) {
	if len(reqs) == 1 {
		r := reqs[0]
		rows, err := s.pool.Query(ctx, releaseSQL, r.task, r.owner, r.token, r.credential, r.detail, r.run)
		if err != nil {
			return nil, err
		}
		holds, err := pgx.CollectRows(rows, pgx.RowTo[*time.Time])
		if err != nil || len(holds) == 0 {
			return []leasecore.ReleaseResult{{}}, err
		}
		return []leasecore.ReleaseResult{releaseResult(holds[0])}, nil
	}
	tasks, owners, tokens := make([]string, len(reqs)), make([]string, len(reqs)), make([]int64, len(reqs))
	credentials, details, runs := make([]string, len(reqs)), make([]string, len(reqs)), make([]*string, len(reqs))
	for i, r := range reqs {
		tasks[i], owners[i], tokens[i], credentials[i], details[i], runs[i] = r.task, r.owner, r.token, r.credential, r.detail, r.run
	}
	rows, err := s.pool.Query(ctx, releaseBatchSQL, tasks, owners, tokens, credentials, details, runs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ended := make(map[string]leasecore.ReleaseResult, len(reqs))
	for rows.Next() {
		var task string
		var hold *time.Time
		if err := rows.Scan(&task, &hold); err != nil {
			return nil, err
		}
		ended[task] = releaseResult(hold)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	released := make([]leasecore.ReleaseResult, len(reqs))
	for i, t := range tasks {
		released[i] = ended[t]
	}
	return released, nil
}

// eventExtras completes e with a released event's hold and run, as read
// (nil: NULL).
func eventExtras(e *leasecore.Event, hold *time.Time, run *string) error {
	if hold != nil {
		e.HoldUntil = hold.UTC()
	}
	var err error
	e.Run, err = runjson.Decode(run)
	return err
}

// releaseResult is a release that ended a lease, whose minimum hold rests
// the task until hold (nil: it does not).
func releaseResult(hold *time.Time) leasecore.ReleaseResult {
	r := leasecore.ReleaseResult{Released: true}
	if hold != nil {
		r.HoldUntil = hold.UTC()
	}
	return r
}

// Get returns the task's live lease, or nil when there is none.
func (s *Store) Get(ctx context.Context, task string) (*leasecore.Lease, error) {
	const op = "get"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	if err := s.checkScope(ctx, op, leasecore.RightRead, task); err != nil {
		return nil, err
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

// List returns a page of the live leases, ordered by task name bytewise.
func (s *Store) List(ctx context.Context, p leasecore.ListParams) ([]leasecore.Lease, error) {
	const op = "list"
	if s.closed.Load() {
		return nil, interpretError(op, errClosed)
	}
	rows, err := s.pool.Query(ctx, listSQL, p.After, pgLimit(p.Limit), p.Prefix, leasecore.PrefixEnd(p.Prefix))
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
	// Read-only is asked first, in a statement of its own, so that a
	// standby is reported as one even before it has replayed the schema (a
	// batch would not do: pgx prepares every statement of a batch before
	// running the first). Ping serves readiness probes, not leases, so the
	// second round trip costs nothing that matters.
	var standby, readOnly bool
	if err := s.pool.QueryRow(ctx, writableSQL).Scan(&standby, &readOnly); err != nil {
		s.noteReadOnly(err)
		return interpretError(op, err)
	}
	if standby || readOnly {
		what := "default_transaction_read_only is on"
		if standby {
			what = "it is a standby, in recovery"
		}
		err := fmt.Errorf("%w (%s): it cannot grant leases. Point the store URL at the primary, or list every host with target_session_attrs=read-write", errReadOnly, what)
		s.sawReadOnly(err)
		return interpretError(op, err)
	}
	// Writable (again): writes need not wait for the backoff to end.
	s.readOnly.Store(nil)
	var version, leases int64
	if err := s.pool.QueryRow(ctx, schemaSQL).Scan(&version, &leases); err != nil {
		return interpretError(op, err)
	}
	if need := want[len(want)-1].Version; int(version) < need {
		return interpretError(op, fmt.Errorf("%w (version %d, needs %d)", leasecore.ErrSchemaBehind, version, need))
	}
	return nil
}

// readOnlyConn reports whether a connection is to a standby or runs
// read-only transactions by default, as the server reports it (PostgreSQL
// 14 and later report in_hot_standby and default_transaction_read_only to
// every session, and again when they change, as at a promotion).
func readOnlyConn(c *pgx.Conn) bool {
	pc := c.PgConn()
	return pc.ParameterStatus("in_hot_standby") == "on" || pc.ParameterStatus("default_transaction_read_only") == "on"
}

// noteReadOnly calls sawReadOnly when err says the server refused a write
// because it is read-only (SQLSTATE 25006, read_only_sql_transaction).
func (s *Store) noteReadOnly(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "25006" {
		s.sawReadOnly(err)
	}
}

// sawReadOnly records err, an answer that the server is read-only, and
// empties the pool: its other connections are no better, and new ones go to
// the read-write host of a multi-host URL with
// target_session_attrs=read-write. It does so at most once per
// readOnlyBackoff: within it writes do not reach the server (recentReadOnly),
// and an answer from a write already in flight changes nothing.
func (s *Store) sawReadOnly(err error) {
	prev := s.readOnly.Load()
	if prev != nil && time.Since(prev.at) < s.readOnlyBackoff {
		return
	}
	if s.readOnly.CompareAndSwap(prev, &readOnlyNote{at: time.Now(), err: err}) {
		s.pool.Reset()
	}
}

// recentReadOnly is the read-only answer seen less than readOnlyBackoff ago,
// or nil.
func (s *Store) recentReadOnly() error {
	if n := s.readOnly.Load(); n != nil && time.Since(n.at) < s.readOnlyBackoff {
		return n.err
	}
	return nil
}

// tellChanges is send, followed by a signal to this Store's HistoryChanges
// (Store.committed) when wrote says that the batch may have written history,
// or the batch failed: a statement cut off may have committed all the same.
func tellChanges[Q, R any](s *Store, wrote func(R) bool, send func(context.Context, []Q) ([]R, error)) func(context.Context, []Q) ([]R, error) {
	return func(ctx context.Context, reqs []Q) ([]R, error) {
		res, err := send(ctx, reqs)
		if err != nil || slices.ContainsFunc(res, wrote) {
			s.committed.Notify()
		}
		return res, err
	}
}

// watchReadOnly is send, refused with the recent read-only answer without a
// round trip (recentReadOnly), calling noteReadOnly with its error.
func watchReadOnly[Q, R any](s *Store, send func(context.Context, []Q) ([]R, error)) func(context.Context, []Q) ([]R, error) {
	return func(ctx context.Context, reqs []Q) ([]R, error) {
		if err := s.recentReadOnly(); err != nil {
			return nil, err
		}
		res, err := send(ctx, reqs)
		if err != nil {
			s.noteReadOnly(err)
		}
		return res, err
	}
}

// Close ends the store: claims, renewals and releases still queued for a
// batch fail as unavailable, the statements in flight finish and answer
// their callers (connections still waiting for a statement its caller gave
// up on hang up: pool.go), and the pool closes, waiting for connections in
// use to be returned. HistoryChanges channels are closed. Operations after Close
// report unavailable. Close is idempotent.
func (s *Store) Close() error {
	if !s.closed.Swap(true) {
		close(s.closing)
	}
	var wg sync.WaitGroup
	for _, stop := range []func(){s.claims.stop, s.renewals.stop, s.releases.stop} {
		wg.Go(stop)
	}
	wg.Wait()
	s.changesMu.Lock()
	s.stopChanges()
	s.changesMu.Unlock()
	s.changes.Wait()
	s.pool.Close()
	return nil
}

// scanLease reads leaseColumns.
func scanLease(row pgx.Row) (*leasecore.Lease, error) {
	var (
		l                  leasecore.Lease
		ttlMS, remainingUS int64
		hold               *time.Time
	)
	err := row.Scan(&l.Task, &l.Owner, &l.Token, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt,
		&ttlMS, &l.RenewCount, &l.Note, &remainingUS, &hold)
	if err != nil {
		return nil, err
	}
	if hold != nil {
		l.HoldUntil = hold.UTC()
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = l.AcquiredAt.UTC(), l.RenewedAt.UTC(), l.ExpiresAt.UTC()
	l.TTL = time.Duration(ttlMS) * time.Millisecond
	l.TTLRemaining = time.Duration(remainingUS) * time.Microsecond
	return &l, nil
}

// pgLimit is a ListParams limit for a LIMIT parameter: NULL, no limit, for 0.
func pgLimit(limit int) *int64 {
	if limit <= 0 {
		return nil
	}
	n := int64(limit)
	return &n
}
