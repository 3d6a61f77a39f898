package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	leasehold "github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/watch"
	"github.com/leasehold/leasehold/sidecar/api"
	"github.com/leasehold/leasehold/sidecar/auth"
)

// handlers implements the generated api.ServerInterface. By the time a
// handler runs, the request passed the OpenAPI validator, so each one only
// decodes, calls the Service and hands the outcome to problem.go.
type handlers struct {
	svc      *leasecore.Service
	hub      *watch.Hub           // the watch of svc's store
	renewals *leasecore.Coalescer // gathers the keepalive streams' renewals
	metrics  *metrics
	ready    func(ctx context.Context) error
	streams  *streams
	watches  *watches
	log      *slog.Logger
	status   statusSource
}

var _ api.ServerInterface = (*handlers)(nil)

// ClaimLease answers POST /v1/leases/{task}/claim.
func (h *handlers) ClaimLease(c echo.Context, task api.Task) error {
	if err := leasecore.CheckClientTask(task); err != nil {
		return err // 403: leasehold's own tasks are not the clients'
	}
	req, err := claimRequest(c)
	if err != nil {
		return err
	}
	lease, err := h.svc.Claim(c.Request().Context(), leasecore.ClaimParams{
		Task: task, Owner: req.Owner, TTL: duration(req.TtlMs), Note: deref(req.Note), MinHold: duration(req.MinHoldMs),
		Credential: credentialName(c),
	})
	h.metrics.claimed(lease, err)
	return respondClaim(c, lease, err)
}

// RenewLease answers POST /v1/leases/{task}/renew.
func (h *handlers) RenewLease(c echo.Context, task api.Task) error {
	if err := leasecore.CheckClientTask(task); err != nil {
		return err // 403: leasehold's own tasks are not the clients'
	}
	req, err := renewRequest(c)
	if err != nil {
		return err
	}
	lease, err := h.svc.Renew(c.Request().Context(), leasecore.RenewParams{
		Task: task, Owner: req.Owner, TTL: duration(req.TtlMs), Token: deref(req.Token), Note: req.Note, Credential: credentialName(c),
	})
	h.metrics.renewed(err)
	return respondRenew(c, lease, err)
}

// ReleaseLease answers POST /v1/leases/{task}/release.
func (h *handlers) ReleaseLease(c echo.Context, task api.Task) error {
	if err := leasecore.CheckClientTask(task); err != nil {
		return err // 403: leasehold's own tasks are not the clients'
	}
	req, err := releaseRequest(c)
	if err != nil {
		return err
	}
	run := api.ToRunOutcome(req.Run)
	p := leasecore.ReleaseParams{Task: task, Owner: req.Owner, Token: deref(req.Token), Credential: credentialName(c), Run: run}
	// A lease one of this sidecar's streams holds is handed over first:
	// the stream stops renewing before the store is asked, and ends with
	// its released event once the release is done.
	var handed []*stream
	if p.Validate() == nil {
		handed = h.streams.handOver(task, p.Owner, p.Token)
	}
	released, err := h.svc.ReleaseHold(c.Request().Context(), p)
	for _, st := range handed {
		st.handedOver(handOff{err: err, ended: released.Released, event: releasedByRequest,
			gone: fmt.Sprintf("lease on %q: the lease was not live when %q released it (it had expired, or was ended elsewhere)", task, p.Owner)})
	}
	if released.Released {
		h.streams.noteRelease()
	}
	h.metrics.released(released.Released, err)
	h.metrics.ran(run, err)
	return respondRelease(c, released, err)
}

// releasedByRequest is the last event of a stream whose lease a release
// request of this sidecar ended (ReleaseLease).
var releasedByRequest = mustEvent("released", api.KeepaliveReleased{Reason: api.KeepaliveReleasedReasonRelease})

// RevokeLease answers POST /v1/leases/{task}/revoke: an admin's release of
// whoever's lease (leasecore.Service.Revoke: a revoke never ends a grant
// it did not see, and the history's released event says an operator ended
// it).
func (h *handlers) RevokeLease(c echo.Context, task api.Task) error {
	if err := leasecore.CheckClientTask(task); err != nil {
		return err // 403: leasehold's own tasks are not the clients'
	}
	req, err := revokeRequest(c)
	if err != nil {
		return err
	}
	p := leasecore.RevokeParams{Task: task, Token: deref(req.Token), Credential: credentialName(c)}
	// As for a release, this sidecar's streams holding the lease stop
	// renewing first; for their holder it is a loss, which they report.
	handed := h.streams.handOver(task, "", p.Token)
	lease, err := h.svc.Revoke(c.Request().Context(), p)
	for _, st := range handed {
		l := st.keeper.Lease()
		ended := lease != nil && lease.Owner == l.Owner && lease.Token == l.Token
		st.handedOver(handOff{err: err, ended: ended,
			event: mustEvent("lost", api.KeepaliveLost{Reason: api.KeepaliveLostReasonNotHeld,
				Detail: fmt.Sprintf("lease on %q lost (not_held): %s", task, leasecore.RevokedDetail)}),
			gone: fmt.Sprintf("lease on %q: the lease was not live when an operator ended the task's lease (it had expired, or was ended elsewhere)", task)})
	}
	if lease != nil {
		h.streams.noteRelease()
	}
	h.metrics.released(lease != nil, err)
	return respondRevoke(c, lease, err)
}

// GetLease answers GET /v1/leases/{task}.
func (h *handlers) GetLease(c echo.Context, task api.Task) error {
	lease, err := h.svc.Get(c.Request().Context(), task)
	return respondGet(c, lease, err)
}

// ListLeases answers GET /v1/leases: one page, of at most
// leasecore.DefaultListLimit leases unless the request says otherwise.
func (h *handlers) ListLeases(c echo.Context, params api.ListLeasesParams) error {
	leases, next, err := scopedPage(c.Request().Context(), caller(c), listParams(params.Limit, params.After), h.svc.List,
		func(l leasecore.Lease) string { return l.Task })
	return respondList(c, leases, next, err)
}

// listParams is the page a list request asks for: the default limit when
// it names none. (The validator has checked both against openapi.yaml;
// the Service checks them again.)
func listParams(limit *int, after *string) leasecore.ListParams {
	p := leasecore.ListParams{Limit: leasecore.DefaultListLimit, After: deref(after)}
	if limit != nil {
		p.Limit = *limit
		if p.Limit < 1 {
			// 0 means "every row" to the Service, which a request never
			// asks for: -1 is refused, naming limit.
			p.Limit = -1
		}
	}
	return p
}

// defaultHistoryLimit is the number of events GET …/history answers when
// the request gives no limit, as openapi.yaml documents.
const defaultHistoryLimit = 100

// GetLeaseHistory answers GET /v1/leases/{task}/history.
func (h *handlers) GetLeaseHistory(c echo.Context, task api.Task, params api.GetLeaseHistoryParams) error {
	limit := defaultHistoryLimit
	if params.Limit != nil {
		limit = *params.Limit
	}
	events, err := h.svc.History(c.Request().Context(), task, limit)
	return respondHistory(c, events, err)
}

// ListTasks answers GET /v1/tasks: one page, as ListLeases.
func (h *handlers) ListTasks(c echo.Context, params api.ListTasksParams) error {
	decls, next, err := scopedPage(c.Request().Context(), caller(c), listParams(params.Limit, params.After), h.svc.ListTasks,
		func(d leasecore.TaskDecl) string { return d.Name })
	return respondTasks(c, decls, next, err)
}

// GetTask answers GET /v1/tasks/{task}.
func (h *handlers) GetTask(c echo.Context, task api.Task) error {
	decl, err := h.svc.GetTask(c.Request().Context(), task)
	if err == nil && decl == nil {
		err = &leasecore.NotFoundError{Kind: "task", Name: task}
	}
	return respondTask(c, decl, err)
}

// DeclareTask answers PUT /v1/tasks/{task}: an operator's declaration,
// created (201) or replaced (200); refused when Terraform manages it, unless
// the request takes it over.
func (h *handlers) DeclareTask(c echo.Context, task api.Task, params api.DeclareTaskParams) error {
	req, err := declareTaskRequest(c)
	if err != nil {
		return err
	}
	d := leasecore.TaskDecl{Name: task, TTL: duration(&req.TtlMs), MaxTTL: duration(req.MaxTtlMs), MinHold: duration(req.MinHoldMs),
		Description: deref(req.Description), RetentionPolicy: deref(req.RetentionPolicy)}
	decl, created, err := h.svc.DeclareTask(c.Request().Context(), d, operatorWriter(params.TakeOver))
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(c, status, api.FromTask(decl))
}

// RemoveTask answers DELETE /v1/tasks/{task}: 204, or 404 when the task is
// not declared.
func (h *handlers) RemoveTask(c echo.Context, task api.Task, params api.RemoveTaskParams) error {
	ok, err := h.svc.DeleteTask(c.Request().Context(), task, operatorWriter(params.TakeOver))
	if err == nil && !ok {
		err = &leasecore.NotFoundError{Kind: "task", Name: task}
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// operatorWriter is who the catalog routes write as: an operator, taking
// over what Terraform manages only when the request says take_over=true.
func operatorWriter(takeOver *bool) leasecore.Writer {
	return leasecore.Writer{By: leasecore.ManagedByOperator, TakeOver: deref(takeOver)}
}

// GetPolicy answers GET /v1/policies/{policy}.
func (h *handlers) GetPolicy(c echo.Context, policy api.Policy) error {
	p, err := h.svc.GetPolicy(c.Request().Context(), policy)
	if err == nil && p == nil {
		err = &leasecore.NotFoundError{Kind: "retention policy", Name: policy}
	}
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, api.FromPolicy(p))
}

// DeclarePolicy answers PUT /v1/policies/{policy}, as DeclareTask; the
// credential needs admin on every task.
func (h *handlers) DeclarePolicy(c echo.Context, policy api.Policy, params api.DeclarePolicyParams) error {
	if err := everyTask(caller(c), auth.Admin); err != nil {
		return err
	}
	req, err := declarePolicyRequest(c)
	if err != nil {
		return err
	}
	if ms := deref(req.KeepForMs); ms%1000 != 0 {
		// The store keeps whole seconds: say so rather than cut.
		return invalid([]api.InvalidParam{{Name: "keep_for_ms", Reason: "must be whole seconds (a multiple of 1000)"}})
	}
	p := leasecore.RetentionPolicy{Name: policy, KeepFor: duration(req.KeepForMs), KeepLast: deref(req.KeepLast)}
	out, created, err := h.svc.DeclarePolicy(c.Request().Context(), p, operatorWriter(params.TakeOver))
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(c, status, api.FromPolicy(out))
}

// RemovePolicy answers DELETE /v1/policies/{policy}: 204, or 404 when
// there is none; the credential needs admin on every task.
func (h *handlers) RemovePolicy(c echo.Context, policy api.Policy, params api.RemovePolicyParams) error {
	if err := everyTask(caller(c), auth.Admin); err != nil {
		return err
	}
	ok, err := h.svc.DeletePolicy(c.Request().Context(), policy, operatorWriter(params.TakeOver))
	if err == nil && !ok {
		err = &leasecore.NotFoundError{Kind: "retention policy", Name: policy}
	}
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// ListPolicies answers GET /v1/policies: every retention policy.
func (h *handlers) ListPolicies(c echo.Context) error {
	policies, err := h.svc.ListPolicies(c.Request().Context())
	return respondPolicies(c, policies, err)
}

// GetHealth answers GET /healthz: the process serves HTTP, and its build.
func (h *handlers) GetHealth(c echo.Context) error {
	v := version.String()
	return writeJSON(c, http.StatusOK, api.Status{Status: api.Ok, Version: &v})
}

// GetReadiness answers GET /readyz: the store is migrated and answers.
func (h *handlers) GetReadiness(c echo.Context) error {
	if err := h.ready(c.Request().Context()); err != nil {
		return unavailable(err.Error())
	}
	return writeJSON(c, http.StatusOK, api.Status{Status: api.Ok})
}

// GetMetrics answers GET /metrics from the server's own registry.
func (h *handlers) GetMetrics(c echo.Context) error {
	h.metrics.handler.ServeHTTP(c.Response(), c.Request())
	return nil
}

// GetOpenAPI answers GET /openapi.yaml with the embedded document.
func (h *handlers) GetOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", leasehold.OpenAPI)
}

// The request bodies, from the value validateRequests decoded and checked
// against the operation's schema (no second JSON decode). Every property of
// the schema is read here; bodies_test.go checks that none is missed.

func claimRequest(c echo.Context) (api.ClaimRequest, error) {
	b := bodyFields(c)
	req := api.ClaimRequest{Owner: b.str("owner"), TtlMs: b.optInt("ttl_ms"), Note: b.optStr("note"), MinHoldMs: b.optInt("min_hold_ms")}
	return req, b.err()
}

func renewRequest(c echo.Context) (api.RenewRequest, error) {
	b := bodyFields(c)
	req := api.RenewRequest{Owner: b.str("owner"), TtlMs: b.optInt("ttl_ms"), Token: b.optInt("token"), Note: b.optStr("note")}
	return req, b.err()
}

func releaseRequest(c echo.Context) (api.ReleaseRequest, error) {
	b := bodyFields(c)
	req := api.ReleaseRequest{Owner: b.str("owner"), Token: b.optInt("token")}
	if r, ok := b.optObject("run"); ok {
		run := api.RunOutcome{DurationMs: deref(r.optInt("duration_ms")), Error: r.optStr("error"), Lost: r.optBool("lost")}
		if code := r.optInt("exit_code"); code != nil {
			run.ExitCode = new(int(*code))
		}
		if err := r.err(); err != nil {
			return req, err
		}
		req.Run = &run
	}
	return req, b.err()
}

func revokeRequest(c echo.Context) (api.RevokeRequest, error) {
	b := bodyFields(c)
	req := api.RevokeRequest{Token: b.optInt("token")}
	return req, b.err()
}

func declareTaskRequest(c echo.Context) (api.TaskDeclarationRequest, error) {
	b := bodyFields(c)
	req := api.TaskDeclarationRequest{TtlMs: deref(b.optInt("ttl_ms")), MaxTtlMs: b.optInt("max_ttl_ms"),
		Description: b.optStr("description"), RetentionPolicy: b.optStr("retention_policy"), MinHoldMs: b.optInt("min_hold_ms")}
	return req, b.err()
}

func declarePolicyRequest(c echo.Context) (api.PolicyRequest, error) {
	b := bodyFields(c)
	req := api.PolicyRequest{KeepForMs: b.optInt("keep_for_ms"), KeepLast: b.optInt("keep_last")}
	return req, b.err()
}

// bodyReader takes the fields of a decoded request body. The schema has
// checked their types, so its failures are not reached; they are answered
// all the same, without the decoder's Go types.
type bodyReader struct {
	fields map[string]any
	taken  int
	bad    string // the first field of the wrong type
}

func bodyFields(c echo.Context) bodyReader {
	if bc, ok := c.(*bodyContext); ok {
		if m, ok := bc.body.(map[string]any); ok {
			return bodyReader{fields: m}
		}
	}
	return bodyReader{bad: "body"}
}

func (b *bodyReader) take(name string) (any, bool) {
	v, ok := b.fields[name]
	if ok {
		b.taken++
	}
	return v, ok
}

func (b *bodyReader) wrong(name string) {
	if b.bad == "" {
		b.bad = name
	}
}

func (b *bodyReader) str(name string) string {
	v, _ := b.take(name)
	s, ok := v.(string)
	if !ok {
		b.wrong(name)
	}
	return s
}

func (b *bodyReader) optStr(name string) *string {
	v, ok := b.take(name)
	if !ok {
		return nil
	}
	s, ok := v.(string)
	if !ok {
		b.wrong(name)
	}
	return &s
}

func (b *bodyReader) optInt(name string) *int64 {
	v, ok := b.take(name)
	if !ok {
		return nil
	}
	n, ok := v.(json.Number)
	i, err := n.Int64()
	if !ok || err != nil {
		b.wrong(name)
	}
	return &i
}

// optObject is the object field name as a reader of its own fields;
// false when the body has no such field.
func (b *bodyReader) optObject(name string) (bodyReader, bool) {
	v, ok := b.take(name)
	if !ok {
		return bodyReader{}, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		b.wrong(name)
		return bodyReader{}, false
	}
	return bodyReader{fields: m}, true
}

func (b *bodyReader) optBool(name string) *bool {
	v, ok := b.take(name)
	if !ok {
		return nil
	}
	t, ok := v.(bool)
	if !ok {
		b.wrong(name)
	}
	return &t
}

func (b *bodyReader) err() error {
	switch {
	case b.bad != "":
		return invalid([]api.InvalidParam{{Name: b.bad, Reason: "has a value of the wrong type or range"}})
	case b.taken != len(b.fields):
		return malformed("the request body cannot be decoded as this request")
	}
	return nil
}

func duration(ms *int64) time.Duration {
	if ms == nil {
		return 0
	}
	return time.Duration(*ms) * time.Millisecond
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
