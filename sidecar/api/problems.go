package api

// The RFC 9457 problem types (a Problem's Type) the sidecar answers, as
// openapi.yaml lists them: the server writes them (sidecar/problem.go) and
// the Go client (package client) reads them, from this one list.
const (
	// ProblemMalformed (400): the body is missing or is not decodable JSON.
	ProblemMalformed = "urn:leasehold:problem:malformed-request"
	// ProblemInvalid (422): the request breaks a rule; InvalidParams names
	// each field.
	ProblemInvalid = "urn:leasehold:problem:invalid-request"
	// ProblemUnavailable (503): the store cannot answer, or the sidecar
	// cannot take the request now (too many streams, shutting down).
	ProblemUnavailable = "urn:leasehold:problem:unavailable"
	// ProblemUndeclared (404): the task has no declaration.
	ProblemUndeclared = "urn:leasehold:problem:undeclared-task"
	// ProblemReserved (403): the task is one of leasehold's own.
	ProblemReserved = "urn:leasehold:problem:reserved-task"
	// ProblemForbidden (403): the credential (or the store's role) may not
	// do this on this task.
	ProblemForbidden = "urn:leasehold:problem:forbidden"
	// ProblemCrossSite (403): a browser sent a /v1 request for a page of
	// another origin.
	ProblemCrossSite = "urn:leasehold:problem:cross-site-request"
	// ProblemHostNotAllowed (421): the Host header names a host the
	// sidecar does not answer for.
	ProblemHostNotAllowed = "urn:leasehold:problem:host-not-allowed"
	// ProblemNotFound (404): the retention policy does not exist.
	ProblemNotFound = "urn:leasehold:problem:not-found"
	// ProblemExists (409): a create named what exists (no route creates
	// without replacing today; mapped so that one never turns into a 500).
	ProblemExists = "urn:leasehold:problem:exists"
	// ProblemInUse (409): the policy is the default, or tasks name it.
	ProblemInUse = "urn:leasehold:problem:in-use"
	// ProblemManaged (409): the declaration or policy is managed by
	// Terraform, and the operator's write did not take it over.
	ProblemManaged = "urn:leasehold:problem:managed-by-terraform"
	// ProblemBlank is the type of problems whose status says it all (401,
	// 404 of no route, 405, 408, 413, 415, 500), as RFC 9457 recommends.
	ProblemBlank = "about:blank"
)
