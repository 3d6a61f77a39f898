package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/leasecore/watch"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
	"github.com/leasehold/leasehold/sidecar/console"
)

// Options configure a Server.
type Options struct {
	// Store is the lease store. The Server calls it only through its
	// leasecore.Service, whose one interceptor gates and times every call
	// (Server.interceptStore); it never closes it (whoever opened it does).
	Store leasecore.Store
	// Credentials are the bearer tokens /v1/* requests must carry, each
	// naming a credential with its scope; nil, with no Token, disables
	// authentication (every caller may do everything).
	Credentials *auth.Book
	// Token, when non-empty and Credentials is nil, is the one bearer
	// token every /v1/* request must carry (auth.SingleToken).
	Token []byte
	// Hosts says which Host headers the server answers; nil means
	// loopback names and IP addresses only (NewHostPolicy("", nil)), or
	// any Host on a UnixSocket.
	Hosts *HostPolicy
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// MaxStreams caps concurrent keepalive streams; 0 means DefaultMaxStreams.
	MaxStreams int
	// MaxWatchers caps concurrent watch streams; 0 means DefaultMaxWatchers.
	MaxWatchers int
	// WatchPoll is how often the watch asks the store for other processes'
	// commits (watch.WithPoll); zero means
	// leasecore.DefaultWatchPoll, and a negative value turns the signal
	// off (the watch reads once a second).
	WatchPoll time.Duration
	// RequireDeclared refuses claims (and keepalive streams) of tasks that
	// have no declaration, with a 404 undeclared-task problem.
	RequireDeclared bool
	// DeclarationsMaxAge bounds how stale the declarations applied to claims
	// may be: a declaration changed elsewhere is honoured by the claims that
	// start this long after the change. Zero or less means
	// leasecore.DefaultDeclarationsMaxAge.
	DeclarationsMaxAge time.Duration
	// UnixSocket, when set, is the path of the Unix socket the server is
	// served on (serve --listen unix:PATH) rather than a TCP address. Only
	// local processes that the socket file's mode and directory admit can
	// reach it, and no browser can: checks meant for callers over the
	// network (the Host names answered, a token required off loopback)
	// need not apply to it.
	UnixSocket string
}

// Server is the sidecar's HTTP API over one lease store: the routes of
// openapi.yaml, requests validated against it, errors as RFC 9457 problems,
// and its own Prometheus registry.
type Server struct {
	echo     *echo.Echo
	svc      *leasecore.Service // every store call of the Server goes through it
	metrics  *metrics
	log      *slog.Logger
	migrated atomic.Bool
	streams  *streams
	watches  *watches
	hub      *watch.Hub // follows the store's history for the watch streams
	started  time.Time
	hosts    *HostPolicy

	// migrateErr is why the last migration failed, until one succeeds.
	migrateErr atomic.Pointer[error]
}

// New builds a Server. It is not ready (readyz answers 503) until Migrate or
// MigrateUntilDone succeeds.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("sidecar: Options.Store is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sp, err := spec()
	if err != nil {
		return nil, err
	}
	m := newMetrics()
	s := &Server{
		metrics: m,
		log:     log,
		streams: newStreams(opts.MaxStreams),
		watches: newWatches(opts.MaxWatchers),
		started: time.Now(),
		hosts:   opts.Hosts,
	}
	if s.hosts == nil {
		var allow []string
		if opts.UnixSocket != "" {
			allow = []string{"*"} // no browser reaches a Unix socket
		}
		p, _ := NewHostPolicy("", allow) // these policies have nothing to refuse
		s.hosts = &p
	}
	svc := leasecore.New(opts.Store, leasecore.WithInterceptor(s.interceptStore), leasecore.WithInterceptor(cli.MigrateHint),
		leasecore.WithDeclarations(opts.DeclarationsMaxAge, opts.RequireDeclared))
	s.svc = svc
	m.registerStoreCounts(svc)
	m.registerStreams(s.streams)
	// The coalescer has goroutines only while renewals wait in it, so it
	// needs no Close of its own.
	renewals := leasecore.NewCoalescer(svc, leasecore.DefaultCoalesceWindow, nil)
	// The watch's one ring carries each event's SSE frame, encoded once for
	// all the streams.
	hub := watch.New(svc, watchPoll(opts.WatchPoll), watch.WithEncoding(eventFrame))
	s.hub = hub
	h := &handlers{svc: svc, hub: hub, renewals: renewals, metrics: m, ready: s.ready, streams: s.streams, watches: s.watches, log: log,
		status: statusSource{started: s.started, storeKind: storeurl.Kind(opts.Store), watchers: &s.watches.active}}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = errorHandler(log)
	// Order: count every request (and render its error), turn panics into
	// 500s, refuse unauthenticated /v1 calls, validate what is left, then
	// refuse what the caller's credential does not cover.
	ops := operations(sp.doc)
	e.Use(m.middleware(httpRoutes(ops), newHTTPLabels(ops)), recoverPanics(log))
	book := opts.Credentials
	if book == nil && len(opts.Token) > 0 {
		book = auth.SingleToken(opts.Token)
	}
	if err := checkRights(ops); err != nil {
		return nil, err
	}
	if book != nil {
		m.registerCredentials(book)
		s.streams.shareAmong(book)
		s.watches.shareAmong(book)
		go s.streams.enforce(book)
	}
	e.Use(authenticate(book), validateRequests(sp, ops), authorize())
	api.RegisterHandlers(e, h)
	if err := checkRoutes(ops, e.Routes()); err != nil {
		return nil, err
	}
	s.echo = e
	return s, nil
}

// CloseStreams tells every keepalive stream to release its lease, send its
// `released` event and end, and waits for them until ctx ends; streams still
// waiting for a lease give up. Call it before http.Server.Shutdown: streams
// that hold a lease are hijacked connections, which Shutdown does not track.
// Watch streams are told to send their `end` event and close; then the
// watch stops following the store (no call of it is left in the store, which
// may then be closed), and a watch asked afterwards answers 503.
func (s *Server) CloseStreams(ctx context.Context) error {
	err := errors.Join(s.streams.shutdown(ctx), s.watches.shutdown(ctx))
	s.hub.Close()
	return err
}

// Handler returns the HTTP handler serving every route: the web console
// under /ui/ (package console), and the API through echo, behind the checks
// that keep other web pages out (guardOrigin).
func (s *Server) Handler() http.Handler {
	return guardOrigin(withConsole(headAsGet(s.echo)), s.hosts, s.metrics)
}

// withConsole hands /ui and /ui/… to the console before echo routes the
// request. The console's static files are not operations of openapi.yaml;
// keeping them out of echo keeps echo's routes the document's operations
// (checkRoutes), and their answers out of the request validator and the
// per-route metrics. They need no bearer token: they hold no data, and the
// page sends the token with every /v1 call it makes.
func withConsole(api http.Handler) http.Handler {
	ui := console.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if console.Owns(r.URL.Path) {
			ui.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// headAsGet answers HEAD on every GET route (health checks send it) as the
// GET would be answered, without the body: the handler, the validator and
// the metrics see a GET, and net/http, which still sees the HEAD of its own
// request, drops what the handler writes after the headers. The keepalive
// stream is left out, so HEAD never claims a lease there: it stays a HEAD,
// and echo answers 405, as it does for HEAD on a POST route.
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead || isKeepalivePath(r.URL.EscapedPath()) {
			next.ServeHTTP(w, r)
			return
		}
		get := r.WithContext(context.WithValue(r.Context(), headRequestKey{}, true))
		get.Method = http.MethodGet
		next.ServeHTTP(w, get)
	})
}

// headRequestKey marks, in a request's context, a HEAD served as a GET.
type headRequestKey struct{}

// requestMethod is the method the client sent.
func requestMethod(r *http.Request) string {
	if head, _ := r.Context().Value(headRequestKey{}).(bool); head {
		return http.MethodHead
	}
	return r.Method
}

// isKeepalivePath reports whether an escaped path is /v1/leases/{task}/keepalive.
func isKeepalivePath(path string) bool {
	parts := strings.Split(path, "/")
	return len(parts) == 5 && parts[0] == "" && parts[1] == "v1" && parts[2] == "leases" && parts[4] == "keepalive"
}

// The server's read timeouts. A client that sends its headers slower than
// readHeaderTimeout is disconnected (net/http answers nothing); one whose
// body has not arrived readTimeout after the request began is answered 408.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
)

// HTTPServer returns an *http.Server for Handler with the sidecar's timeouts.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       2 * time.Minute,
		// WriteTimeout stays 0 on purpose: keepalive streams (a later
		// endpoint) hold a response open for as long as the lease is held.
		// Each store operation is bounded by the Service's op timeout instead.
		WriteTimeout:   0,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Migrate applies the store's migrations once and, on success, marks the
// server ready.
func (s *Server) Migrate(ctx context.Context) error {
	if err := s.svc.Migrate(ctx); err != nil {
		s.migrateErr.Store(&err)
		return err
	}
	s.migrated.Store(true)
	return nil
}

// MigrateUntilDone calls Migrate until it succeeds or ctx ends, waiting
// between attempts (from 250 ms, doubling up to 10 s) and logging each
// failure with storeName (which masks its password). Meanwhile readyz
// answers 503 and lease operations answer unavailable.
func (s *Server) MigrateUntilDone(ctx context.Context, storeName storeurl.URL) error {
	const firstRetry, maxRetry = 250 * time.Millisecond, 10 * time.Second
	retry := backoff.New(firstRetry, maxRetry)
	for attempt := 1; ; attempt++ {
		err := s.Migrate(ctx)
		if err == nil {
			s.log.Info("store migrated", "store", storeName, "attempts", attempt)
			return nil
		}
		wait := retry.Next()
		s.log.Error("store migration failed; retrying", "store", storeName, "attempt", attempt, "retry_in", wait.String(), "err", err)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// readyTimeout bounds the store ping of one readiness probe.
const readyTimeout = 2 * time.Second

// ready reports why the server cannot serve leases, or nil.
func (s *Server) ready(ctx context.Context) error {
	if !s.migrated.Load() {
		return leasecore.Unavailable("ping", s.notMigrated())
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := s.svc.Ping(ctx); err != nil {
		return leasecore.Unavailable("ping", err)
	}
	return nil
}

// recoverPanics turns a panic in a handler into a 500 problem; the panic and
// its stack go to the log, never to the client.
func recoverPanics(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				r := recover()
				if r == nil {
					return
				}
				if r == http.ErrAbortHandler { //nolint:errorlint // a sentinel panic value, compared as net/http does
					panic(r)
				}
				log.Error("panic in handler", "method", c.Request().Method, "path", c.Request().URL.EscapedPath(),
					"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = errInternal
			}()
			return next(c)
		}
	}
}

// errNotMigrated is the cause of every lease operation refused before the
// start-up migration succeeded (errors.Is; notMigrated says more).
var errNotMigrated = errors.New("the store's schema is not migrated yet")

// notMigrated is the cause of an operation refused before the migration
// succeeded: errNotMigrated, with why the last attempt failed once one has.
// That cause, not the missing schema, is what an operator acts on: a store
// that is down, a role without the privileges, PgBouncer in transaction mode
// without the query mode the store URL needs.
func (s *Server) notMigrated() error {
	last := s.migrateErr.Load()
	if last == nil {
		return errNotMigrated
	}
	cause := *last
	// The driver's detail, without the "migrate: lease store unavailable"
	// the operation's own answer says again.
	var u *leasecore.UnavailableError
	if errors.As(cause, &u) && u.Err != nil {
		cause = u.Err
	}
	return &notMigratedError{cause: cause}
}

// notMigratedError is errNotMigrated with the last migration's failure.
type notMigratedError struct{ cause error }

func (e *notMigratedError) Error() string {
	return "the sidecar cannot migrate the store's schema (it keeps trying; see its log): " + e.cause.Error()
}

func (e *notMigratedError) Is(target error) bool { return target == errNotMigrated }
func (e *notMigratedError) Unwrap() error        { return e.cause }

// interceptStore is the Server's one hook on the store: every call its
// Service makes passes here. Until the server's migration has succeeded it
// answers unavailable without asking the store, so a half-migrated or old
// schema is never used for a lease (the migration itself passes); every
// call that reaches the store is timed, and its failure counted and logged
// (metrics.storeCall).
func (s *Server) interceptStore(ctx context.Context, op string, call func(context.Context) error) error {
	if op != leasecore.OpMigrate && !s.migrated.Load() {
		return leasecore.Unavailable(op, s.notMigrated())
	}
	start := time.Now()
	err := call(ctx)
	s.metrics.storeCall(s.log, op, start, err)
	return err
}

// watchPoll is Options.WatchPoll as a watch option.
func watchPoll(d time.Duration) watch.Option {
	switch {
	case d == 0:
		return watch.WithPoll(leasecore.DefaultWatchPoll)
	case d < 0:
		return watch.WithPoll(0)
	}
	return watch.WithPoll(d)
}
