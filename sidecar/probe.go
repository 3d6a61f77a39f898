package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/sidecar/api"
)

// Routing to the holder. A Kubernetes Service that should send traffic only
// to the pod holding a task's lease gives the app's container a readiness
// probe on GET /v1/leases/{task}/held-here: 200 while one of this sidecar's
// keepalive streams (a `leasehold run --addr`, a client's Holder) holds the
// lease, 503 otherwise. The answer comes from the book of streams, never
// from the store, so the probes of every pod cost the store nothing.
//
// The kubelet probes the pod's IP and sends no token, while the sidecar's
// listener is loopback-only unless it requires a token. So `serve
// --probe-listen ADDR` opens a second listener that answers GET and HEAD on
// the probe routes only (probeRoutes), with no authentication and no Host
// check: a caller there learns whether the store is ready and whether this
// sidecar holds a task (with the lease's owner and fencing token), and can
// change nothing and read nothing else. Every other path is 404 there.

// heldHereRoute is the echo route of GET /v1/leases/{task}/held-here.
const heldHereRoute = "/v1/leases/:task/held-here"

// HeldHere answers GET /v1/leases/{task}/held-here from memory.
func (h *handlers) HeldHere(c echo.Context, task api.Task) error {
	lease, ok := h.streams.holder(task)
	if !ok {
		return writeJSON(c, http.StatusServiceUnavailable, api.HeldHereState{Task: task})
	}
	return writeJSON(c, http.StatusOK, api.HeldHereState{Task: task, HeldHere: true, Token: &lease.Token, Owner: &lease.Owner})
}

// probeRequestKey marks, in a request's context, a request that came
// through the probe listener (ProbeHandler) to one of its routes.
type probeRequestKey struct{}

// isProbeRequest says whether c is a request of the probe listener for
// held-here, which authenticate lets through without a token. Both are
// checked: the mark, which only ProbeHandler sets, and the route echo
// matched, so that nothing but held-here is ever let through.
func isProbeRequest(c echo.Context) bool {
	probe, _ := c.Request().Context().Value(probeRequestKey{}).(bool)
	return probe && c.Path() == heldHereRoute
}

// isProbePath says whether an escaped path is one the probe listener
// serves: /healthz, /readyz, or /v1/leases/{task}/held-here with {task} one
// non-empty segment.
func isProbePath(path string) bool {
	if path == "/healthz" || path == "/readyz" {
		return true
	}
	parts := strings.Split(path, "/")
	return len(parts) == 5 && parts[0] == "" && parts[1] == "v1" && parts[2] == "leases" && parts[3] != "" && parts[4] == "held-here"
}

// ProbeHandler returns the handler of the probe listener (serve
// --probe-listen): GET and HEAD of /healthz, /readyz and
// /v1/leases/{task}/held-here, answered as on the sidecar's own listener
// (validated, counted in the metrics) but with no token required and no
// Host checked; 404 on any other path and 405 for any other method.
func (s *Server) ProbeHandler() http.Handler {
	api := headAsGet(s.echo)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.EscapedPath()
		if !isProbePath(path) {
			writeProblemHTTP(w, newProblem(http.StatusNotFound, problemBlank, "",
				fmt.Sprintf("the probe listener (--probe-listen) serves GET /healthz, /readyz and /v1/leases/{task}/held-here only, not %s", path)))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set(echo.HeaderAllow, "GET, HEAD")
			writeProblemHTTP(w, newProblem(http.StatusMethodNotAllowed, problemBlank, "",
				fmt.Sprintf("%s is not allowed on %s: the probe listener answers GET and HEAD only", r.Method, path)))
			return
		}
		api.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), probeRequestKey{}, true)))
	})
}

// ProbeHTTPServer returns an *http.Server for ProbeHandler. Its answers are
// short, so unlike HTTPServer it bounds writes too.
func (s *Server) ProbeHTTPServer() *http.Server {
	hs := s.HTTPServer()
	hs.Handler = s.ProbeHandler()
	hs.WriteTimeout = readTimeout
	hs.MaxHeaderBytes = 8 << 10
	return hs
}
