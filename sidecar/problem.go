package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// This file is the one place where outcomes become HTTP: the lease model's
// results and errors (acquired, held, lost, unavailable, invalid,
// undeclared), the catalog's (not found, exists, in use) and every error echo
// or a middleware raises. Handlers and middleware return errors;
// they never choose a status code for a domain error themselves.

// Problem types (RFC 9457 "type" URIs), from their one list in package api.
// Problems whose HTTP status says it all use about:blank, as the RFC
// recommends.
const (
	problemMalformed   = api.ProblemMalformed
	problemInvalid     = api.ProblemInvalid
	problemUnavailable = api.ProblemUnavailable
	problemUndeclared  = api.ProblemUndeclared
	problemReserved    = api.ProblemReserved
	problemForbidden   = api.ProblemForbidden
	problemBlank       = api.ProblemBlank
	problemNotFound    = api.ProblemNotFound
	problemExists      = api.ProblemExists
	problemInUse       = api.ProblemInUse
	problemManaged     = api.ProblemManaged
)

const contentTypeProblem = "application/problem+json"

// problemError is an error that renders as an application/problem+json body.
type problemError struct {
	api.Problem
}

func (p *problemError) Error() string {
	return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail)
}

// newProblem builds a problem; typ about:blank takes the status text as title.
func newProblem(status int, typ, title, detail string) *problemError {
	if title == "" {
		title = http.StatusText(status)
	}
	return &problemError{api.Problem{Type: typ, Title: title, Status: status, Detail: detail}}
}

// malformed is the 400 problem: the body could not be read as JSON at all.
func malformed(detail string) *problemError {
	return newProblem(http.StatusBadRequest, problemMalformed, "Malformed request", detail)
}

// invalid is the 422 problem: the request was decoded but breaks a rule.
// Its detail lists every field so that a reader of the detail alone knows
// what to fix.
func invalid(params []api.InvalidParam) *problemError {
	parts := make([]string, len(params))
	for i, p := range params {
		parts[i] = p.Name + ": " + p.Reason
	}
	detail := "invalid request: " + strings.Join(parts, "; ")
	p := newProblem(http.StatusUnprocessableEntity, problemInvalid, "Invalid request", detail)
	p.InvalidParams = &params
	return p
}

// unavailable is the 503 problem of the read-only endpoints.
func unavailable(detail string) *problemError {
	return newProblem(http.StatusServiceUnavailable, problemUnavailable, "Store unavailable", detail)
}

// undeclared is the 404 problem of a task without a declaration: asked for
// (GET /v1/tasks/{task}), or claimed in --require-declared mode.
func undeclared(detail string) *problemError {
	return newProblem(http.StatusNotFound, problemUndeclared, "Task not declared", detail)
}

// reserved is the 403 problem of a client's claim, renewal, release or
// keepalive of one of leasehold's own tasks (leasehold:…).
func reserved(re *leasecore.ReservedError) *problemError {
	p := newProblem(http.StatusForbidden, problemReserved, "Reserved task", re.Error())
	p.InvalidParams = &[]api.InvalidParam{{Name: "task", Reason: leasecore.ReservedRule}}
	return p
}

// errInternal is what a client sees of a bug; the cause goes to the log only.
var errInternal = newProblem(http.StatusInternalServerError, problemBlank, "", "internal server error; the cause is in the sidecar's log")

// toProblem maps any error that reached the error handler to the problem the
// client sees, and says whether it is a bug worth logging. (Store failures
// are logged where they happen, by the instrumented store.)
func toProblem(err error, c echo.Context) (p *problemError, bug bool) {
	var (
		pe  *problemError
		ve  *leasecore.ValidationError
		ue  *leasecore.UndeclaredError
		nfe *leasecore.NotFoundError
		re  *leasecore.ReservedError
		he  *echo.HTTPError
		req = c.Request()
	)
	switch {
	case errors.As(err, &pe):
		return pe, false // deliberate; a recovered panic was logged with its stack

	case errors.As(err, &ve):
		return invalid([]api.InvalidParam{{Name: wireName(ve.Field), Reason: ve.Rule}}), false
	case errors.Is(err, leasecore.ErrUnavailable):
		// Before the catalog outcomes: an unavailable error may wrap
		// anything a driver returned.
		return unavailable(err.Error()), false

	case errors.As(err, &re):
		return reserved(re), false
	case errors.Is(err, leasecore.ErrForbidden):
		return newProblem(http.StatusForbidden, problemForbidden, "Forbidden", err.Error()), false
	case errors.As(err, &ue):
		return undeclared(fmt.Sprintf("task %q is not declared, and this sidecar requires declared tasks (--require-declared); "+
			"declare it (Terraform resource leasehold_task) or run the sidecar without --require-declared", ue.Task)), false
	case errors.As(err, &nfe) && nfe.Kind == "task":
		return undeclared(fmt.Sprintf("task %q is not declared", nfe.Name)), false
	case errors.Is(err, leasecore.ErrNotFound):
		return newProblem(http.StatusNotFound, problemNotFound, "Not found", err.Error()), false
	case errors.Is(err, leasecore.ErrExists):
		return newProblem(http.StatusConflict, problemExists, "Already exists", err.Error()), false
	case errors.Is(err, leasecore.ErrInUse):
		return newProblem(http.StatusConflict, problemInUse, "In use", err.Error()), false
	case errors.Is(err, leasecore.ErrManaged):
		// The store's words, and how to take it over here.
		return newProblem(http.StatusConflict, problemManaged, "Managed by Terraform", err.Error()+" (take_over=true)"), false

	case errors.As(err, &he):
		switch he.Code {
		case http.StatusNotFound:
			return newProblem(he.Code, problemBlank, "", fmt.Sprintf("no route matches %s %s", req.Method, req.URL.EscapedPath())), false
		case http.StatusMethodNotAllowed:
			return newProblem(he.Code, problemBlank, "", fmt.Sprintf("%s is not allowed on %s", requestMethod(req), req.URL.EscapedPath())), false
		case http.StatusRequestEntityTooLarge:
			return tooLarge(), false
		}
		if he.Code >= 500 || he.Code < 400 {
			return errInternal, true
		}
		msg, ok := he.Message.(string)
		if !ok {
			msg = http.StatusText(he.Code)
		}
		// The generated parameter binding says "Invalid format for
		// parameter X: " and a Go error; the validator runs first and
		// refuses such values, but name the parameter without the error.
		if rest, ok := strings.CutPrefix(msg, "Invalid format for parameter "); ok && he.Code == http.StatusBadRequest {
			name, _, _ := strings.Cut(rest, ":")
			return invalid([]api.InvalidParam{{Name: name, Reason: "has an invalid format"}}), false
		}
		return newProblem(he.Code, problemBlank, "", msg), false
	default:
		return errInternal, true
	}
}

func tooLarge() *problemError {
	return newProblem(http.StatusRequestEntityTooLarge, problemBlank, "",
		fmt.Sprintf("request body is larger than %d bytes (64 KiB)", maxBodyBytes))
}

// errorHandler is echo's HTTPErrorHandler: every error any route, middleware
// or recovered panic returns is rendered here, as application/problem+json.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		p, bug := toProblem(err, c)
		if bug {
			log.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.EscapedPath(), "status", p.Status, "err", err)
		}
		if c.Response().Committed {
			return
		}
		writeProblem(c, p)
	}
}

func writeProblem(c echo.Context, p *problemError) {
	_ = c.Blob(p.Status, contentTypeProblem, problemBody(p))
}

// problemBody is p's JSON.
func problemBody(p *problemError) []byte {
	body, err := json.Marshal(p.Problem)
	if err != nil { // cannot happen: api.Problem has only strings and ints
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"internal server error"}`)
	}
	return body
}

// writeProblemHTTP answers p outside echo (the checks that run before it).
func writeProblemHTTP(w http.ResponseWriter, p *problemError) {
	body := problemBody(p)
	w.Header().Set(echo.HeaderContentType, contentTypeProblem)
	w.Header().Set(echo.HeaderXContentTypeOptions, "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// jsonEncoder is an encoder writing into its own buffer; jsonEncoders
// keeps them between answers.
type jsonEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonEncoders = sync.Pool{New: func() any {
	e := new(jsonEncoder)
	e.enc = json.NewEncoder(&e.buf)
	return e
}}

// writeJSON answers v as JSON with status code: the bytes echo's c.JSON
// writes (encoding/json, then a newline), without its per-answer
// allocations. Unlike c.JSON it never indents: echo's "pretty" query
// parameter is not one of the API's, and is refused like any other
// unknown parameter.
func writeJSON(c echo.Context, code int, v any) error {
	e := jsonEncoders.Get().(*jsonEncoder)
	defer func() {
		if e.buf.Cap() <= 64<<10 { // a long list's buffer is left to the GC
			jsonEncoders.Put(e)
		}
	}()
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return err
	}
	resp := c.Response()
	if resp.Header().Get(echo.HeaderContentType) == "" {
		resp.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	resp.WriteHeader(code)
	_, err := resp.Write(e.buf.Bytes())
	return err
}

// The lease model's outcomes. Each function answers one operation from what
// the Service returned; an error it does not recognise (a *ValidationError)
// goes on to the error handler.

func respondClaim(c echo.Context, lease *leasecore.Lease, err error) error {
	var held *leasecore.HeldError
	switch {
	case err == nil:
		return writeJSON(c, http.StatusOK, api.ClaimAcquired{Acquired: api.ClaimAcquiredAcquiredTrue, Lease: api.FromLease(lease)})
	case errors.As(err, &held):
		return writeJSON(c, http.StatusConflict, api.ClaimHeld{
			Acquired: api.ClaimHeldAcquiredFalse,
			Reason:   api.Held,
			Holder:   api.FromHolder(&held.Holder),
			Detail:   err.Error(),
		})
	case errors.Is(err, leasecore.ErrUnavailable):
		return writeJSON(c, http.StatusServiceUnavailable, api.ClaimUnavailable{
			Acquired: api.ClaimUnavailableAcquiredFalse,
			Reason:   api.ClaimUnavailableReasonUnavailable,
			Detail:   err.Error(),
		})
	default:
		return err
	}
}

func respondRenew(c echo.Context, lease *leasecore.Lease, err error) error {
	var lost *leasecore.LostError
	switch {
	case err == nil:
		return writeJSON(c, http.StatusOK, api.Renewed{Renewed: api.RenewedRenewedTrue, Lease: api.FromLease(lease)})
	case errors.As(err, &lost):
		return writeJSON(c, http.StatusConflict, api.RenewLost{
			Renewed: api.RenewLostRenewedFalse,
			Reason:  api.RenewLostReason(lost.Reason),
			Detail:  err.Error(),
		})
	case errors.Is(err, leasecore.ErrUnavailable):
		return writeJSON(c, http.StatusServiceUnavailable, api.RenewUnavailable{
			Renewed: api.RenewUnavailableRenewedFalse,
			Reason:  api.RenewUnavailableReasonUnavailable,
			Detail:  err.Error(),
		})
	default:
		return err
	}
}

func respondRelease(c echo.Context, released leasecore.ReleaseResult, err error) error {
	switch {
	case err == nil:
		return writeJSON(c, http.StatusOK, api.FromRelease(released))
	case errors.Is(err, leasecore.ErrUnavailable):
		return writeJSON(c, http.StatusServiceUnavailable, api.ReleaseUnavailable{
			Released: api.ReleaseUnavailableReleasedFalse,
			Reason:   api.ReleaseUnavailableReasonUnavailable,
			Detail:   err.Error(),
		})
	default:
		return err
	}
}

// respondRevoke answers a revoke: the lease it ended, or none.
func respondRevoke(c echo.Context, ended *leasecore.Lease, err error) error {
	if err != nil {
		return respondRelease(c, leasecore.ReleaseResult{}, err)
	}
	res := api.RevokeResult{Released: ended != nil}
	if ended != nil {
		l := api.FromLease(ended)
		res.Lease = &l
	}
	return writeJSON(c, http.StatusOK, res)
}

func respondGet(c echo.Context, lease *leasecore.Lease, err error) error {
	switch {
	case err != nil:
		return err // unavailable or invalid: a problem
	case lease == nil:
		return writeJSON(c, http.StatusOK, api.LeaseState{Held: false})
	default:
		l := api.FromLease(lease)
		return writeJSON(c, http.StatusOK, api.LeaseState{Held: true, Lease: &l})
	}
}

func respondList(c echo.Context, leases []leasecore.Lease, next string, err error) error {
	if err != nil {
		return err
	}
	out := make([]api.Lease, len(leases))
	for i := range leases {
		out[i] = api.FromLease(&leases[i])
	}
	return writeJSON(c, http.StatusOK, api.LeaseList{Leases: out, NextAfter: nonEmpty(next)})
}

// nonEmpty is s, or nil (left out of the answer) when it is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// The read-only catalog views. An error (unavailable, invalid, a task that is
// not declared) goes on to the error handler.

func respondTasks(c echo.Context, decls []leasecore.TaskDecl, next string, err error) error {
	if err != nil {
		return err
	}
	out := make([]api.TaskDeclaration, len(decls))
	for i := range decls {
		out[i] = api.FromTask(&decls[i])
	}
	return writeJSON(c, http.StatusOK, api.TaskList{Tasks: out, NextAfter: nonEmpty(next)})
}

func respondTask(c echo.Context, decl *leasecore.TaskDecl, err error) error {
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, api.FromTask(decl))
}

func respondPolicies(c echo.Context, policies []leasecore.RetentionPolicy, err error) error {
	if err != nil {
		return err
	}
	out := make([]api.RetentionPolicy, len(policies))
	for i := range policies {
		out[i] = api.FromPolicy(&policies[i])
	}
	return writeJSON(c, http.StatusOK, api.PolicyList{Policies: out})
}

func respondHistory(c echo.Context, events []leasecore.Event, err error) error {
	if err != nil {
		return err
	}
	out := make([]api.Event, len(events))
	for i := range events {
		out[i] = api.FromEvent(&events[i])
	}
	return writeJSON(c, http.StatusOK, api.EventList{Events: out})
}
