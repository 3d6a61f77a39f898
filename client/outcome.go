package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/sidecar/api"
)

// This file is the one map from a sidecar's answer to an outcome of the
// lease model: the JSON answers of claim, renew and release (held, lost,
// unavailable), and the problem types of every other refusal. What the
// sidecar's sidecar/problem.go writes, this reads back.

// ErrUnauthorized: the sidecar requires a bearer token, and the one sent
// (or none) is not one it knows (401).
var ErrUnauthorized = errors.New("the sidecar refused the credentials")

// ProblemError is a refusal the sidecar answered as an RFC 9457 problem
// (or, from a server that is not quite a sidecar, any other refusal). The
// outcome errors of the table wrap one, so that errors.As finds the status
// and type behind, say, a *leasecore.UndeclaredError.
type ProblemError struct {
	Status        int
	Type          string // the problem type, api.Problem*; empty when the answer was no problem
	Title         string
	Detail        string
	InvalidParams []api.InvalidParam
}

func (e *ProblemError) Error() string {
	detail := e.Detail
	if detail == "" {
		detail = e.Title
	}
	// The sidecar's detail names its invalid params already; a param it
	// does not name (another server's problem) is added.
	for _, ip := range e.InvalidParams {
		if !strings.Contains(detail, ip.Reason) {
			detail += fmt.Sprintf("; %s %s", ip.Name, ip.Reason)
		}
	}
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), detail)
}

// refused is an outcome of the model (a *leasecore.UndeclaredError, say)
// together with the problem that said it.
type refused struct {
	outcome error
	problem *ProblemError
}

// Error is the problem's text when it has a detail, which says what the
// outcome says and more (an undeclared task's says how to declare it);
// repeating the outcome before it would say the same thing twice.
func (e *refused) Error() string {
	if e.problem.Detail != "" {
		return e.problem.Error()
	}
	return fmt.Sprintf("%v (%v)", e.outcome, e.problem)
}
func (e *refused) Unwrap() []error { return []error{e.outcome, e.problem} }

// problemRow turns a problem of its type into the outcome it stands for;
// op is the operation, task its task ("" when none).
type problemRow func(op, task string, p *ProblemError) error

// problemTable has a row for every problem type the sidecar answers
// (api.Problem*): a type without a row fails TestProblemTableCoversServer.
var problemTable = map[string]problemRow{
	api.ProblemMalformed: func(_, _ string, p *ProblemError) error {
		return &refused{&leasecore.ValidationError{Field: "body", Rule: "must be a JSON document the API decodes"}, p}
	},
	api.ProblemInvalid: func(_, _ string, p *ProblemError) error {
		var errs []error
		for _, ip := range p.InvalidParams {
			errs = append(errs, &leasecore.ValidationError{Field: ip.Name, Rule: ip.Reason})
		}
		if len(errs) == 0 {
			errs = append(errs, leasecore.ErrInvalid)
		}
		return &refused{errors.Join(errs...), p}
	},
	api.ProblemUnavailable: func(op, _ string, p *ProblemError) error {
		return leasecore.Unavailable(op, p)
	},
	api.ProblemUndeclared: func(_, task string, p *ProblemError) error {
		if task == "" {
			return p // GET /v1/tasks/{task} of a name the catalog lacks: a read's answer
		}
		return &refused{&leasecore.UndeclaredError{Task: task}, p}
	},
	api.ProblemReserved: func(_, task string, p *ProblemError) error {
		return &refused{&leasecore.ReservedError{Task: task}, p}
	},
	api.ProblemForbidden: func(_, _ string, p *ProblemError) error {
		return &refused{leasecore.ErrForbidden, p}
	},
	api.ProblemCrossSite: func(_, _ string, p *ProblemError) error {
		return &refused{leasecore.ErrForbidden, p}
	},
	// The sidecar does not answer for the Host this client sends: a setting
	// of the sidecar (--allow-host), no outcome of the model.
	api.ProblemHostNotAllowed: func(_, _ string, p *ProblemError) error { return p },
	api.ProblemNotFound: func(_, _ string, p *ProblemError) error {
		return &refused{leasecore.ErrNotFound, p}
	},
	api.ProblemExists: func(_, _ string, p *ProblemError) error {
		return &refused{leasecore.ErrExists, p}
	},
	api.ProblemInUse: func(_, _ string, p *ProblemError) error {
		return &refused{leasecore.ErrInUse, p}
	},
	api.ProblemManaged: func(_, _ string, p *ProblemError) error {
		return &refused{leasecore.ErrManaged, p}
	},
	// about:blank: the status says it all.
	api.ProblemBlank: func(op, _ string, p *ProblemError) error {
		switch {
		case p.Status == http.StatusUnauthorized:
			return &refused{ErrUnauthorized, p}
		case p.Status >= 500:
			// A bug of the sidecar's (500), or a proxy's failure: a caller
			// guarding housekeeping may fail open on it, as on a store
			// failure. It is never held.
			return leasecore.Unavailable(op, p)
		default: // 404 of no route, 405, 408, 413, 415
			return p
		}
	},
}

// refusal is the outcome of a refusal (a status other than 2xx) of op on
// task: the model's answers of claim, renew and release (held, lost,
// unavailable) and the problems, each through its row. A refusal that is
// neither (a proxy's page, a problem of a type this client does not know)
// is a *ProblemError holding the body's text; from a 5xx it is unavailable.
//
// scrub masks what must not reach a message (the client's token) in the
// text taken from the answer.
func refusal(op, task string, status int, header http.Header, body []byte, scrub func(string) string) error {
	mt, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	if mt == "application/json" {
		var m struct {
			Reason string      `json:"reason"`
			Detail string      `json:"detail"`
			Holder *api.Holder `json:"holder"`
		}
		if json.Unmarshal(body, &m) == nil {
			switch {
			case status == http.StatusConflict && m.Reason == string(api.Held) && m.Holder != nil:
				holder, err := api.ToHolder(m.Holder)
				if err == nil {
					return &leasecore.HeldError{Task: task, Holder: holder}
				}
			case status == http.StatusConflict && op == "renew" && m.Reason != "":
				return &leasecore.LostError{Task: task, Reason: leasecore.LostReason(m.Reason), Detail: scrub(m.Detail)}
			case status == http.StatusServiceUnavailable && m.Reason == "unavailable":
				return leasecore.Unavailable(op, errors.New(scrub(m.Detail)))
			}
		}
	}
	p := &ProblemError{Status: status}
	var doc api.Problem
	if mt == "application/problem+json" && json.Unmarshal(body, &doc) == nil {
		p.Type, p.Title, p.Detail = doc.Type, scrub(doc.Title), scrub(doc.Detail)
		if doc.InvalidParams != nil {
			for _, ip := range *doc.InvalidParams {
				p.InvalidParams = append(p.InvalidParams, api.InvalidParam{Name: scrub(ip.Name), Reason: scrub(ip.Reason)})
			}
		}
		if row, ok := problemTable[p.Type]; ok {
			return row(op, task, p)
		}
	}
	if p.Detail == "" && p.Title == "" {
		p.Detail = scrub(excerpt(body))
	}
	if status >= 500 {
		return leasecore.Unavailable(op, p)
	}
	return p
}

// noScrub leaves text as it is: Outcome has no token to mask.
func noScrub(s string) string { return s }

// excerpt is the start of a body that is no problem, for a message.
func excerpt(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Outcome reads a raw answer (status, header, body) to a claim, renew or
// release (op) of task through the same table the Client applies: the
// lease granted (claim, renew), whether a lease was released (release), or
// the refusal's error. A 2xx answer that is not the operation's is
// unavailable wrapping a *NotSidecarError. Unlike the Client's own calls
// it does not check the answer against openapi.yaml first: it serves
// programs that record answers made by other clients (the chaos harness
// records the Python client's).
func Outcome(op, task string, status int, header http.Header, body []byte) (*leasecore.Lease, bool, error) {
	x := &exchange{method: http.MethodPost, path: taskPath(task) + "/" + op, status: status, header: header, body: body}
	lease, released, err := outcome(op, task, x, noScrub, func(why string) error {
		return leasecore.Unavailable(op, &NotSidecarError{Addr: "(recorded)", Method: x.method, Path: x.path, Status: status, Reason: why})
	})
	return lease, released.Released, err
}

// outcome is Outcome of the exchange x, a release's answer whole (with the
// end of the hold it reports); bad makes the error of an answer that is not
// the operation's.
func outcome(op, task string, x *exchange, scrub func(string) string, bad func(why string) error) (*leasecore.Lease, leasecore.ReleaseResult, error) {
	var none leasecore.ReleaseResult
	if x.status/100 != 2 {
		return nil, none, refusal(op, task, x.status, x.header, x.body, scrub)
	}
	if mt, _, _ := mime.ParseMediaType(x.header.Get("Content-Type")); mt != "application/json" {
		return nil, none, bad(fmt.Sprintf("status %d with Content-Type %q", x.status, x.header.Get("Content-Type")))
	}
	// Pointers: a field the answer lacks is no answer of the operation's
	// (api.ClaimAcquired would read a missing "acquired" as false).
	var a struct {
		Acquired  *bool          `json:"acquired"`
		Renewed   *bool          `json:"renewed"`
		Released  *bool          `json:"released"`
		HoldUntil *api.Timestamp `json:"hold_until"`
		Lease     *api.Lease     `json:"lease"`
	}
	if err := json.Unmarshal(x.body, &a); err != nil {
		return nil, none, bad(fmt.Sprintf("status %d with a body that does not decode: %v", x.status, err))
	}
	granted := map[string]*bool{"claim": a.Acquired, "renew": a.Renewed}
	switch {
	case op == "release" && a.Released != nil:
		res, err := api.ToRelease(&api.ReleaseResult{Released: *a.Released, HoldUntil: a.HoldUntil})
		if err != nil {
			return nil, none, bad(err.Error())
		}
		return nil, res, nil
	case granted[op] != nil && *granted[op] && a.Lease != nil:
		lease, err := api.ToLease(a.Lease)
		if err != nil {
			return nil, none, bad(err.Error())
		}
		return &lease, none, nil
	}
	return nil, none, bad(fmt.Sprintf("status %d that is not a %s's answer", x.status, op))
}
