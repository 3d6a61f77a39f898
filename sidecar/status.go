package sidecar

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold/internal/version"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar/api"
)

// statusSource is what GET /v1/status reports beyond the handlers' own
// fields: when the server started, its store's driver, and the open watch
// streams.
type statusSource struct {
	started   time.Time
	storeKind string // "sqlite" or "postgres" (storeurl.Kind)
	watchers  *atomic.Int64
}

// GetStatus answers GET /v1/status. It answers 200 whatever the store's
// state: a store that is down is reported in store.ready and store.detail.
func (h *handlers) GetStatus(c echo.Context) error {
	st := api.SidecarStatus{
		Version:   version.String(),
		StartedAt: api.FormatTime(h.status.started),
		Store:     api.StoreStatus{Kind: api.StoreStatusKind(h.status.storeKind), Ready: true},
		Watchers:  h.status.watchers.Load(),
		Batching:  []api.WriteCount{},
	}
	cred := caller(c)
	st.Caller = &api.Caller{Name: cred.Name, Prefixes: cred.Prefixes, Right: api.CallerRight(cred.Top())}
	if err := h.ready(c.Request().Context()); err != nil {
		st.Store.Ready, st.Store.Detail = false, storeurl.Redact(err.Error())
	}
	st.Streams.Open, st.Streams.Max = h.streams.active.Load(), h.streams.max
	for _, wc := range h.svc.WriteCounts() {
		st.Batching = append(st.Batching, api.WriteCount{Op: wc.Op, Statements: int64(wc.Statements), Operations: int64(wc.Operations)}) //nolint:gosec // counts since start stay far below 2^63
	}
	return writeJSON(c, http.StatusOK, st)
}
