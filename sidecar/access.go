package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// Who may act: every /v1 request is authenticated (authenticate: the bearer
// token names a credential of the server's auth.Book, or, with no book, the
// caller is auth.Anonymous), then authorised once its operation is known
// (authorize: the route's right, on the path's task when it names one).
// Routes that list or follow many tasks answer only the caller's tasks
// (ListLeases, ListTasks, WatchLeases filter by the credential).

// callerKey keys the caller's credential in a request's context.
type callerKey struct{}

// caller is the credential a request acts for: Anonymous on a server that
// requires no token.
func caller(c echo.Context) *auth.Credential {
	if cred, ok := c.Request().Context().Value(callerKey{}).(*auth.Credential); ok {
		return cred
	}
	return auth.Anonymous
}

// grantKey keys, in a request's context, the grant its token came with.
type grantKey struct{}

// grant is how a request's caller was let in: the book that holds its
// token and the token's digest, which a stream asks the book about again
// whenever the book changes (the zero grant: no book, nothing to ask).
type grant struct {
	book   *auth.Book
	digest auth.Digest
	// seen is the book's Changed channel as it was before the token was
	// looked up: closed if the book has changed since.
	seen <-chan struct{}
}

// grantOf is the grant of a request.
func grantOf(c echo.Context) grant {
	g, _ := c.Request().Context().Value(grantKey{}).(grant)
	return g
}

// changed is closed when the book next changes; nil (never) with no book.
func (g grant) changed() <-chan struct{} {
	if g.book == nil {
		return nil
	}
	return g.book.Changed()
}

// stale reports whether the book has changed since the token was let in.
func (g grant) stale() bool {
	select {
	case <-g.seen:
		return true
	default:
		return false
	}
}

// current is the credential the grant's token acts as now: false once the
// token is removed from the file, revoked, or past its grace.
func (g grant) current() (*auth.Credential, bool) {
	if g.book == nil {
		return auth.Anonymous, true
	}
	return g.book.Lookup(g.digest)
}

// credentialName is what the history records of the caller: its name, or
// nothing for the anonymous caller.
func credentialName(c echo.Context) string { return caller(c).Name }

// authenticate refuses /v1/* requests that carry no token of the book (401)
// and hands the others on with their credential. A nil book authenticates
// nobody: every caller is Anonymous.
func authenticate(book *auth.Book) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if book == nil || !isAPIPath(c.Request().URL.Path) || isProbeRequest(c) {
				return next(c) // the probe listener's held-here needs no token (probe.go)
			}
			got, ok := bearerToken(c.Request().Header.Get(echo.HeaderAuthorization))
			seen := book.Changed() // before the lookup: a stream notices a change after it
			cred, known := book.Authenticate([]byte(got))
			if !ok || !known {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="leasehold"`)
				return newProblem(http.StatusUnauthorized, problemBlank, "",
					"this sidecar requires Authorization: Bearer <token>, with a token of its token file or credentials file")
			}
			req := c.Request()
			ctx := context.WithValue(req.Context(), callerKey{}, cred)
			ctx = context.WithValue(ctx, grantKey{}, grant{book: book, digest: auth.DigestOf([]byte(got)), seen: seen})
			c.SetRequest(req.WithContext(ctx))
			return next(c)
		}
	}
}

// bearerToken extracts the credentials of an "Authorization: Bearer" header.
func bearerToken(header string) (string, bool) {
	scheme, cred, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

// routeRights is the right each /v1 route needs: on the path's task when
// the route has one, else on some tasks (the answer then holds only the
// caller's). Every /v1 operation of openapi.yaml must be here (New checks).
var routeRights = map[routeKey]auth.Right{
	{http.MethodGet, "/v1/leases"}:                 auth.Read,
	{http.MethodGet, "/v1/leases/:task"}:           auth.Read,
	{http.MethodGet, heldHereRoute}:                auth.Read,
	{http.MethodPost, "/v1/leases/:task/claim"}:    auth.Hold,
	{http.MethodPost, "/v1/leases/:task/renew"}:    auth.Hold,
	{http.MethodPost, "/v1/leases/:task/release"}:  auth.Hold,
	{http.MethodGet, "/v1/leases/:task/keepalive"}: auth.Hold,
	{http.MethodPost, "/v1/leases/:task/revoke"}:   auth.Admin,
	{http.MethodGet, "/v1/leases/:task/history"}:   auth.Read,
	{http.MethodGet, "/v1/watch"}:                  auth.Read,
	{http.MethodGet, "/v1/tasks"}:                  auth.Read,
	{http.MethodGet, "/v1/tasks/:task"}:            auth.Read,
	{http.MethodPut, "/v1/tasks/:task"}:            auth.Admin,
	{http.MethodDelete, "/v1/tasks/:task"}:         auth.Admin,
	{http.MethodGet, "/v1/policies"}:               auth.Read,
	{http.MethodGet, "/v1/policies/:policy"}:       auth.Read,
	{http.MethodPut, "/v1/policies/:policy"}:       auth.Admin, // and on every task: everyTask
	{http.MethodDelete, "/v1/policies/:policy"}:    auth.Admin, // and on every task: everyTask
	{http.MethodGet, "/v1/status"}:                 auth.Read,
}

// checkRights says whether routeRights names every /v1 operation and
// nothing else, so that no /v1 route is left unauthorised.
func checkRights(ops map[routeKey]*operation) error {
	for k := range ops {
		if _, ok := routeRights[k]; isAPIPath(k.path) && !ok {
			return fmt.Errorf("sidecar: route %s %s has no right in routeRights", k.method, k.path)
		}
	}
	for k := range routeRights {
		if ops[k] == nil {
			return fmt.Errorf("sidecar: routeRights names %s %s, which openapi.yaml does not have", k.method, k.path)
		}
	}
	return nil
}

// authorize refuses a request whose credential lacks the route's right, on
// the path's task when the route names one (403 naming the credential and
// the task). It runs after validation, so the task is a valid name.
func authorize() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			right, ok := routeRights[routeKey{c.Request().Method, c.Path()}]
			if !ok {
				return next(c) // not /v1, or no route: echo answers
			}
			cred := caller(c)
			task, hasTask := pathTask(c)
			switch {
			case hasTask && !cred.Allows(right, task):
				return forbidden(cred, right, task)
			case !hasTask && !cred.Has(right):
				return forbidden(cred, right, "")
			}
			return next(c)
		}
	}
}

// pathTask is the route's {task}, percent-decoded.
func pathTask(c echo.Context) (string, bool) {
	for i, name := range c.ParamNames() {
		if name != "task" || i >= len(c.ParamValues()) {
			continue
		}
		v := c.ParamValues()[i]
		if c.Request().URL.RawPath != "" {
			if dec, err := url.PathUnescape(v); err == nil {
				v = dec
			}
		}
		return v, true
	}
	return "", false
}

// everyTask refuses a credential that lacks right on some task: a
// retention policy applies to every task that names it, and the default
// policy to every undeclared task, so a credential scoped to some prefixes
// may not change one.
func everyTask(cred *auth.Credential, right auth.Right) error {
	if cred.Has(right) && slices.Contains(cred.Prefixes, auth.AllPrefixes) {
		return nil
	}
	return &leasecore.ForbiddenError{Principal: cred.Principal(), Right: string(right) + " every task",
		Scope: cred.Scope() + "; a retention policy applies to every task that names it, so changing one needs " + string(right) + " on every task (prefix \"*\")"}
}

// forbidden is the 403 of a request outside its credential's scope.
func forbidden(cred *auth.Credential, right auth.Right, task string) error {
	return &leasecore.ForbiddenError{Principal: cred.Principal(), Right: string(right), Task: task, Scope: cred.Scope()}
}

// scopedPage answers a page of a list (leases, declarations) for cred:
// the store's page for a credential that covers every task; otherwise the
// pages of each of its prefixes in name order (ListParams.Prefix, a range
// of the store's key), until the page is full. Neither the page nor the
// next name then names a task outside the credential's scope, and a page
// costs at most one store call per prefix. The next name, when the page
// is full and further prefixes follow, is the page's last: the page after
// it may be empty.
func scopedPage[T any](ctx context.Context, cred *auth.Credential, p leasecore.ListParams,
	list func(context.Context, leasecore.ListParams) ([]T, string, error), name func(T) string) ([]T, string, error) {
	prefixes := cred.ListPrefixes()
	if prefixes == nil {
		return list(ctx, p)
	}
	if err := p.Validate(); err != nil {
		return nil, "", err // even when no prefix is left to ask
	}
	var out []T
	for i, prefix := range prefixes {
		if end := leasecore.PrefixEnd(prefix); p.After >= end {
			continue // the page starts after every task of this prefix
		}
		q := p
		q.Prefix = prefix
		if p.Limit > 0 {
			q.Limit = p.Limit - len(out)
		}
		items, next, err := list(ctx, q)
		if err != nil {
			return nil, "", err
		}
		out = append(out, items...)
		if next != "" {
			return out, next, nil // more of this prefix follow
		}
		if p.Limit > 0 && len(out) == p.Limit && i < len(prefixes)-1 {
			return out, name(out[len(out)-1]), nil
		}
	}
	if out == nil {
		out = []T{}
	}
	return out, "", nil
}
