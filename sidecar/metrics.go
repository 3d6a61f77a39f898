package sidecar

import (
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// metrics are one server's Prometheus collectors, on a registry of its own so
// that several servers in one process (tests) never share counters.
type metrics struct {
	registry *prometheus.Registry
	handler  http.Handler

	claims          *prometheus.CounterVec
	renewals        *prometheus.CounterVec
	releases        *prometheus.CounterVec
	runs            *prometheus.CounterVec
	storeDuration   *prometheus.HistogramVec
	storeErrors     *prometheus.CounterVec
	storeSeries     map[string]storeSeries // storeOps' series, resolved once; read-only
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	refusals        *prometheus.CounterVec
	shed            prometheus.Counter // connections fdListener answered for want of a descriptor
}

// Label values of the lease outcome counters.
const (
	resultAcquired    = "acquired"  // a new grant, with a new token
	resultRefreshed   = "refreshed" // the owner's own live lease, extended
	resultHeld        = "held"
	resultRenewed     = "renewed"
	resultUnavailable = "unavailable"
	resultInvalid     = "invalid"
	resultUndeclared  = "undeclared" // refused: --require-declared and no declaration
	resultForbidden   = "forbidden"  // refused: the task is outside the scope of the store's role
)

// storeOps are the store operations whose series start at zero: those the
// sidecar performs. (The other catalog operations are timed too, under
// their own names, if anything calls them.)
var storeOps = []string{leasecore.OpClaim, leasecore.OpRenew, leasecore.OpRenewBatch, leasecore.OpRelease,
	leasecore.OpGet, leasecore.OpList, leasecore.OpPing, leasecore.OpMigrate,
	leasecore.OpGetTask, leasecore.OpListTasks, leasecore.OpListPolicies, leasecore.OpHistory, leasecore.OpPrune,
	leasecore.OpFollowHistory, leasecore.OpReadHistory, leasecore.OpRecordExpiries, leasecore.OpScope}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		registry: reg,
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_claims_total",
			Help: "Claims answered, by result: acquired (new token), refreshed (own live lease), held, unavailable, invalid, undeclared (refused by --require-declared), forbidden (outside the scope of the store's database role).",
		}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_renewals_total",
			Help: "Renewals answered, by result: renewed, not_held, expired, held_by_other, token_mismatch, unavailable, invalid, forbidden.",
		}, []string{"result"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_releases_total",
			Help: "Releases answered by the store, by whether they ended a live lease (released=\"true\") or were no-ops.",
		}, []string{"released"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_runs_total",
			Help: "Runs of jobs under a lease (leasehold run, the clients' run helpers) whose release this sidecar answered, by outcome: succeeded (exit status 0), failed, lost (the lease was lost while the job ran). A run whose lease was lost is counted although its release ended nothing.",
		}, []string{"outcome"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasehold_store_operation_duration_seconds",
			Help:    "Latency of lease store operations, by operation, whatever their outcome.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"operation"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_store_errors_total",
			Help: "Lease store operations that failed (the store was unavailable), by operation. Held and lost are outcomes, not errors.",
		}, []string{"operation"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_http_requests_total",
			Help: "HTTP requests answered, by method, route and code, each from a fixed set: method GET, POST, PUT, DELETE or HEAD (HEAD on a GET route counts as GET), \"other\" for any other; " +
				"route a path template of openapi.yaml (/v1/leases/:task/claim), \"unmatched\" for a request routed to none and for every 404 and 405; " +
				"code a status code openapi.yaml lists, or 405, any other as its class (\"2xx\").",
		}, []string{"method", "route", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasehold_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by method and route, folded as in leasehold_http_requests_total.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_http_refused_total",
		Help: "Requests refused before routing, by reason: host (a Host header this sidecar does not answer for, 421), cross_site (a browser request from another origin to /v1, 403).",
	}, []string{"reason"})
	for _, r := range []string{refusedHost, refusedCrossSite} {
		m.refusals.WithLabelValues(r)
	}
	m.shed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_connections_shed_total",
		Help: "Connections answered 503 unavailable and closed, unserved, because the process had no file descriptor left (its open-file limit, RLIMIT_NOFILE, was reached).",
	})
	reg.MustRegister(m.claims, m.renewals, m.releases, m.runs, m.storeDuration, m.storeErrors, m.requests, m.requestDuration, m.refusals, m.shed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Start every known series at zero so that rates work from the first scrape.
	for _, r := range []string{resultAcquired, resultRefreshed, resultHeld, resultUnavailable, resultInvalid, resultUndeclared, resultForbidden} {
		m.claims.WithLabelValues(r)
	}
	for _, r := range []string{resultRenewed, string(leasecore.LostNotHeld), string(leasecore.LostExpired),
		string(leasecore.LostHeldByOther), string(leasecore.LostTokenMismatch), resultUnavailable, resultInvalid, resultForbidden} {
		m.renewals.WithLabelValues(r)
	}
	m.releases.WithLabelValues("true")
	m.releases.WithLabelValues("false")
	for _, r := range []leasecore.RunResult{leasecore.RunSucceeded, leasecore.RunFailed, leasecore.RunLost} {
		m.runs.WithLabelValues(string(r))
	}
	m.storeSeries = make(map[string]storeSeries, len(storeOps))
	for _, op := range storeOps {
		m.storeSeries[op] = storeSeries{duration: m.storeDuration.WithLabelValues(op), errors: m.storeErrors.WithLabelValues(op)}
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	return m
}

// registerStoreCounts exports the store's own write counts, when it keeps
// them: statements (PostgreSQL) or transactions (SQLite) per operation, and
// the operations they carried. Their ratio is how well the store batches.
func (m *metrics) registerStoreCounts(svc *leasecore.Service) {
	for _, c := range svc.WriteCounts() {
		op := c.Op
		count := func(pick func(leasecore.WriteCount) uint64) func() float64 {
			return func() float64 {
				for _, c := range svc.WriteCounts() {
					if c.Op == op {
						return float64(pick(c))
					}
				}
				return 0
			}
		}
		m.registry.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "leasehold_store_write_statements_total",
				Help:        "Write statements (PostgreSQL) or transactions (SQLite) the store sent, by the operation they carried.",
				ConstLabels: prometheus.Labels{"operation": op},
			}, count(func(c leasecore.WriteCount) uint64 { return c.Statements })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "leasehold_store_write_operations_total",
				Help:        "Operations the store's write statements carried, by operation: divided by leasehold_store_write_statements_total, the batching factor.",
				ConstLabels: prometheus.Labels{"operation": op},
			}, count(func(c leasecore.WriteCount) uint64 { return c.Operations })),
		)
	}
}

// registerStreams exports the number of open keepalive streams.
func (m *metrics) registerStreams(s *streams) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasehold_keepalive_streams",
		Help: "Keepalive streams open now (each holds or waits for a lease).",
	}, func() float64 { return float64(s.active.Load()) }))
}

// outcomeLabel classifies the errors every operation shares.
func outcomeLabel(err error) string {
	switch {
	case errors.Is(err, leasecore.ErrInvalid):
		return resultInvalid
	case errors.Is(err, leasecore.ErrForbidden):
		return resultForbidden
	}
	return resultUnavailable
}

func (m *metrics) claimed(lease *leasecore.Lease, err error) {
	result := resultAcquired
	switch {
	case err == nil && lease.RenewCount > 0:
		result = resultRefreshed
	case err == nil:
	case errors.Is(err, leasecore.ErrHeld):
		result = resultHeld
	case errors.Is(err, leasecore.ErrUndeclared):
		result = resultUndeclared
	default:
		result = outcomeLabel(err)
	}
	m.claims.WithLabelValues(result).Inc()
}

func (m *metrics) renewed(err error) {
	var lost *leasecore.LostError
	result := resultRenewed
	switch {
	case err == nil:
	case errors.As(err, &lost):
		result = string(lost.Reason)
	default:
		result = outcomeLabel(err)
	}
	m.renewals.WithLabelValues(result).Inc()
}

func (m *metrics) released(released bool, err error) {
	if err != nil {
		return // counted by leasehold_store_errors_total, or refused before the store
	}
	m.releases.WithLabelValues(strconv.FormatBool(released)).Inc()
}

// ran counts a run whose release was answered (ended a lease or not).
func (m *metrics) ran(run *leasecore.RunOutcome, err error) {
	if run == nil || err != nil {
		return
	}
	m.runs.WithLabelValues(string(run.Result())).Inc()
}

// Label values of the request metrics that stand for everything outside
// their fixed sets, so that nothing a client sends (a made-up method, a
// path no route has) adds a series.
const (
	labelOther     = "other"     // a method no operation takes; a status outside 100–599
	routeUnmatched = "unmatched" // routed to no operation, or answered 404 or 405
)

// httpLabels are the fixed label sets of the request metrics, taken from
// openapi.yaml once: the methods its operations take (and HEAD, answered on
// every GET route), and the status codes it lists (and 405, which echo
// answers for a method a path does not take).
type httpLabels struct {
	methods map[string]bool
	codes   map[int]bool
}

func newHTTPLabels(ops map[routeKey]*operation) httpLabels {
	l := httpLabels{methods: map[string]bool{http.MethodHead: true}, codes: map[int]bool{http.StatusMethodNotAllowed: true}}
	for k, op := range ops {
		l.methods[k.method] = true
		if op.route.Operation.Responses == nil {
			continue
		}
		for code := range op.route.Operation.Responses.Map() {
			if n, err := strconv.Atoi(code); err == nil {
				l.codes[n] = true
			}
		}
	}
	return l
}

// method is the label of a request's method.
func (l httpLabels) method(m string) string {
	if l.methods[m] {
		return m
	}
	return labelOther
}

// code is the label of a status: itself when listed, else its class.
func (l httpLabels) code(status int) string {
	switch {
	case l.codes[status]:
		return strconv.Itoa(status)
	case status >= 100 && status <= 599:
		return strconv.Itoa(status/100) + "xx"
	default:
		return labelOther
	}
}

// routeMetrics are the request metrics of one route (method and route
// template), resolved from their vectors on the route's first request and
// then used without a label lookup: the duration's observer, and a counter
// per code label answered so far.
type routeMetrics struct {
	method, route string
	once          sync.Once
	duration      prometheus.Observer
	codes         atomic.Pointer[map[string]prometheus.Counter] // copied on write
	mu            sync.Mutex                                    // serialises writers of codes
}

// httpRoutes returns a routeMetrics for each route, for middleware.
func httpRoutes[V any](routes map[routeKey]V) map[routeKey]*routeMetrics {
	out := make(map[routeKey]*routeMetrics, len(routes))
	for k := range routes {
		rm := &routeMetrics{method: k.method, route: k.path}
		rm.codes.Store(&map[string]prometheus.Counter{})
		out[k] = rm
	}
	return out
}

func (m *metrics) observe(rm *routeMetrics, code string, elapsed time.Duration) {
	rm.once.Do(func() { rm.duration = m.requestDuration.WithLabelValues(rm.method, rm.route) })
	codes := rm.codes.Load()
	counter, ok := (*codes)[code]
	if !ok {
		rm.mu.Lock()
		codes = rm.codes.Load()
		if counter, ok = (*codes)[code]; !ok {
			counter = m.requests.WithLabelValues(rm.method, rm.route, code)
			grown := maps.Clone(*codes)
			grown[code] = counter
			rm.codes.Store(&grown)
		}
		rm.mu.Unlock()
	}
	counter.Inc()
	rm.duration.Observe(elapsed.Seconds())
}

// middleware counts and times every request, and renders its error (through
// the error handler) first so that the status recorded is the one sent.
// routes are the operations' routes, whose metrics are resolved once
// (httpRoutes); every other request, and every 404 or 405, is counted under
// the route "unmatched", its method and code folded into labels' sets.
func (m *metrics) middleware(routes map[routeKey]*routeMetrics, labels httpLabels) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			if err := next(c); err != nil {
				c.Error(err)
			}
			status := c.Response().Status
			// c.Path() is a route template, or a prefix of one for a path
			// no route has; the method is the client's own. Only an
			// operation's pair of them is a label.
			rm := routes[routeKey{c.Request().Method, c.Path()}]
			if rm != nil && status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
				m.observe(rm, labels.code(status), time.Since(start))
				return nil
			}
			method := labels.method(c.Request().Method)
			m.requests.WithLabelValues(method, routeUnmatched, labels.code(status)).Inc()
			m.requestDuration.WithLabelValues(method, routeUnmatched).Observe(time.Since(start).Seconds())
			return nil
		}
	}
}

// storeCall times one store operation and counts and logs its failure: a
// lease or catalog operation's once, where it happens (ping and migrate
// failures are reported by readyz and the migration loop).
func (m *metrics) storeCall(log *slog.Logger, op string, start time.Time, err error) {
	series, ok := m.storeSeries[op]
	if !ok {
		series = storeSeries{duration: m.storeDuration.WithLabelValues(op), errors: m.storeErrors.WithLabelValues(op)}
	}
	series.duration.Observe(time.Since(start).Seconds())
	if err != nil && !isOutcome(err) {
		series.errors.Inc()
		if op != leasecore.OpPing && op != leasecore.OpMigrate {
			log.Warn("lease store operation failed", "operation", op, "err", err)
		}
	}
}

// storeSeries are one store operation's series: resolving them from their
// label on every call would hash and lock on the hot path.
type storeSeries struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

// isOutcome says whether a store's error is an answer of the model rather
// than a failure.
func isOutcome(err error) bool {
	for _, o := range []error{leasecore.ErrHeld, leasecore.ErrLost, leasecore.ErrNotFound, leasecore.ErrExists, leasecore.ErrInUse, leasecore.ErrForbidden} {
		if errors.Is(err, o) {
			return true
		}
	}
	return false
}

// Label values of leasehold_http_refused_total.
const (
	refusedHost      = "host"
	refusedCrossSite = "cross_site"
)

// refused counts a request refused before routing (guardOrigin).
func (m *metrics) refused(reason string) { m.refusals.WithLabelValues(reason).Inc() }

// registerCredentials exports what the server's credentials book holds and
// how its reloads went.
func (m *metrics) registerCredentials(b *auth.Book) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasehold_credentials",
			Help: "Credentials the sidecar accepts now (its --credentials-file's entries, or 1 for a --token-file).",
		}, func() float64 { return float64(b.Count()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "leasehold_credentials_reloads_total",
			Help:        "Reloads of the credentials or token file after a change, by result: ok, or error (the sidecar kept the credentials it had).",
			ConstLabels: prometheus.Labels{"result": "ok"},
		}, func() float64 { ok, _ := b.Reloads(); return float64(ok) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "leasehold_credentials_reloads_total",
			Help:        "Reloads of the credentials or token file after a change, by result: ok, or error (the sidecar kept the credentials it had).",
			ConstLabels: prometheus.Labels{"result": "error"},
		}, func() float64 { _, failed := b.Reloads(); return float64(failed) }),
	)
}
