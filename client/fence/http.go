package fence

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
)

// The request headers that carry a holder's task and token to an HTTP
// resource. Every leasehold client sets them the same way (SetHeaders).
const (
	HeaderTask  = "Leasehold-Task"
	HeaderToken = "Leasehold-Token"
)

// The problem types (RFC 9457) the middleware answers with.
const (
	// ProblemStaleToken (409): the token is lower than the highest seen for
	// the task. The body also has task, token and highest_token.
	ProblemStaleToken = "urn:leasehold:problem:stale-token"
	// ProblemFenceRequired (428): a header is missing.
	ProblemFenceRequired = "urn:leasehold:problem:fence-required"
	// ProblemInvalidFence (400): a header breaks its rule.
	ProblemInvalidFence = "urn:leasehold:problem:invalid-fence"
	// ProblemFenceUnavailable (503): the check could not run.
	ProblemFenceUnavailable = "urn:leasehold:problem:fence-unavailable"
)

// SetHeaders sets the Leasehold-Task and Leasehold-Token headers of a
// request to a resource that fences with Middleware.
func SetHeaders(h http.Header, task string, token int64) {
	h.Set(HeaderTask, task)
	h.Set(HeaderToken, strconv.FormatInt(token, 10))
}

// MiddlewareOption changes how Middleware works.
type MiddlewareOption func(*guard)

// WithLogger has the middleware log why a check could not run (the answer,
// a 503, says only that it could not) to log rather than slog.Default().
func WithLogger(log *slog.Logger) MiddlewareOption {
	return func(g *guard) { g.log = log }
}

// Middleware fences every request before next sees it: it reads the
// Leasehold-Task and Leasehold-Token headers, runs Check in a short
// transaction of its own on db (committed, so the token is recorded), and
// only when the token is accepted runs next, with the task and token in the
// request's context (FromContext). Otherwise it answers a problem document
// (application/problem+json) and next does not run:
//
//	409 ProblemStaleToken        the token is lower than the highest seen (task, token, highest_token)
//	428 ProblemFenceRequired     a header is missing
//	400 ProblemInvalidFence      the task is empty, or the token is not a decimal integer of at least 1
//	503 ProblemFenceUnavailable  the database failed, or has no fence (the cause is logged, not answered)
//
// The middleware alone refuses a holder that was already superseded when
// its request came. A holder superseded after the check, while next runs,
// is refused only by a fence inside next's own write transaction: call
// Check there with the task and token from FromContext (an equal token is
// accepted), on the same database.
//
// It panics when db or next is nil, or d is not Postgres or SQLite.
func Middleware(db *sql.DB, d Dialect, next http.Handler, opts ...MiddlewareOption) http.Handler {
	if _, err := ParseDialect(string(d)); err != nil {
		panic(fmt.Sprintf("fence.Middleware: %v", err))
	}
	if db == nil || next == nil {
		panic("fence.Middleware: a nil database or handler")
	}
	g := &guard{db: db, dialect: d, next: next}
	for _, o := range opts {
		o(g)
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	return g
}

type guard struct {
	db      *sql.DB
	dialect Dialect
	next    http.Handler
	log     *slog.Logger
}

type fenceKey struct{}

type fenced struct {
	task  string
	token int64
}

// FromContext returns the task and token that Middleware checked for the
// request whose context ctx is; ok is false outside the middleware.
func FromContext(ctx context.Context) (task string, token int64, ok bool) {
	f, ok := ctx.Value(fenceKey{}).(fenced)
	return f.task, f.token, ok
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	task, token, refusal := readHeaders(r.Header)
	if refusal != nil {
		writeProblem(w, *refusal)
		return
	}
	err := g.check(r.Context(), task, token)
	var stale *StaleTokenError
	switch {
	case errors.As(err, &stale):
		writeProblem(w, problem{
			Type: ProblemStaleToken, Title: "Stale fencing token", Status: http.StatusConflict,
			Detail: stale.Error(), Task: stale.Task, Token: stale.Token, HighestToken: stale.Highest,
		})
		return
	case err != nil:
		g.log.ErrorContext(r.Context(), "fence check failed", "task", task, "token", token, "err", err)
		detail := "the fence check could not run on the resource database"
		if errors.Is(err, ErrNotInstalled) {
			detail = "the resource database has no fence installed"
		}
		writeProblem(w, problem{Type: ProblemFenceUnavailable, Title: "Fence unavailable", Status: http.StatusServiceUnavailable, Detail: detail})
		return
	}
	g.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), fenceKey{}, fenced{task: task, token: token})))
}

// check runs Check in a transaction of its own, and commits it.
func (g *guard) check(ctx context.Context, task string, token int64) (err error) {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := Check(ctx, tx, g.dialect, task, token); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// readHeaders reads the task and token, or the problem that refuses them:
// a missing header before a malformed one.
func readHeaders(h http.Header) (string, int64, *problem) {
	tasks, tokens := h.Values(HeaderTask), h.Values(HeaderToken)
	var missing []string
	if len(tasks) == 0 {
		missing = append(missing, HeaderTask)
	}
	if len(tokens) == 0 {
		missing = append(missing, HeaderToken)
	}
	switch len(missing) {
	case 1:
		return "", 0, &problem{Type: ProblemFenceRequired, Title: "Fencing token required", Status: http.StatusPreconditionRequired,
			Detail: missing[0] + " header is required"}
	case 2:
		return "", 0, &problem{Type: ProblemFenceRequired, Title: "Fencing token required", Status: http.StatusPreconditionRequired,
			Detail: HeaderTask + " and " + HeaderToken + " headers are required"}
	}
	invalid := func(detail string) (string, int64, *problem) {
		return "", 0, &problem{Type: ProblemInvalidFence, Title: "Invalid fencing header", Status: http.StatusBadRequest, Detail: detail}
	}
	switch {
	case len(tasks) > 1:
		return invalid(HeaderTask + " header must be given once")
	case len(tokens) > 1:
		return invalid(HeaderToken + " header must be given once")
	case strings.TrimSpace(tasks[0]) == "":
		return invalid(HeaderTask + " header must not be empty")
	}
	token, ok := parseToken(strings.TrimSpace(tokens[0]))
	if !ok {
		return invalid(HeaderToken + " header must be a decimal integer of at least 1")
	}
	return tasks[0], token, nil
}

// parseToken reads a decimal integer of at least 1: digits only (no sign,
// no space), within int64.
func parseToken(s string) (int64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 1
}

// problem is an RFC 9457 problem document, in the order the fence
// contract shows its members.
type problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail"`
	Task         string `json:"task,omitempty"`
	Token        int64  `json:"token,omitempty"`
	HighestToken int64  `json:"highest_token,omitempty"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, err := json.Marshal(p)
	if err != nil {
		panic(err) // strings and integers always marshal
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
