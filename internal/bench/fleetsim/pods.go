package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/bench/benchproc"
	"github.com/leasehold/leasehold/internal/sse"
)

// streamClient opens one connection per stream, never reused, as a pod's
// client would.
var streamClient = &http.Client{Transport: &http.Transport{
	MaxIdleConnsPerHost: -1,
	DisableKeepAlives:   true,
	DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
}}

// fleet counts what the simulated pods' streams report.
type fleet struct {
	renewed     atomic.Int64 // renewed events
	acquired    atomic.Int64 // acquired events (first grants and re-claims)
	lost        atomic.Int64 // lost events, and streams that ended under a pod
	reopens     atomic.Int64 // streams a pod opened again after losing one
	openFailed  atomic.Int64 // keepalive requests answered other than 200 (503 while the store is down)
	tokenWentBy atomic.Int64 // an acquired token below one the pod had before (must stay 0)
}

// pod is one simulated pod: a singleton job held over a keepalive stream
// at the default ttl, opened again whenever it ends, as a pod's lease loop
// does (docs/clients.md's keepalive client: on lost or a broken stream the job
// stops and the pod tries again; 503 and 409 are retried after a pause).
type pod struct {
	f     *fleet
	base  string // its sidecar
	task  string
	owner string

	mu        sync.Mutex
	holding   bool
	token     int64     // the last token acquired
	tokens    []int64   // every distinct token acquired, in order
	confirmed time.Time // the last acquired or renewed event
	firstHeld chan struct{}
	once      sync.Once
}

func newPod(f *fleet, base, task, owner string) *pod {
	return &pod{f: f, base: base, task: task, owner: owner, firstHeld: make(chan struct{})}
}

// keepaliveURL asks for the default ttl: the query names no ttl_ms.
func (p *pod) keepaliveURL() string {
	return p.base + "/v1/leases/" + url.PathEscape(p.task) + "/keepalive?owner=" + url.QueryEscape(p.owner)
}

// run holds the pod's lease until ctx ends, opening its stream again after
// each loss.
func (p *pod) run(ctx context.Context) {
	b := backoff.New(500*time.Millisecond, 5*time.Second)
	for opened := 0; ctx.Err() == nil; {
		resp, err := benchproc.OpenStream(ctx, streamClient, p.keepaliveURL())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.f.openFailed.Add(1)
			// Jitter, so that a fleet whose store came back does not retry
			// in lockstep.
			d := b.Next()
			_ = backoff.Sleep(ctx, d/2+rand.N(d/2+1))
			continue
		}
		if opened > 0 {
			p.f.reopens.Add(1)
		}
		opened++
		b = backoff.New(500*time.Millisecond, 5*time.Second)
		p.read(ctx, resp.Body)
		resp.Body.Close()
	}
}

// read follows one stream until it ends.
func (p *pod) read(ctx context.Context, body io.Reader) {
	r := sse.NewReader(body)
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		switch ev.Name {
		case "acquired":
			var l struct {
				Token int64 `json:"token"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &l); err != nil {
				break
			}
			p.f.acquired.Add(1)
			p.mu.Lock()
			if l.Token < p.token {
				p.f.tokenWentBy.Add(1)
			}
			if l.Token != p.token {
				p.tokens = append(p.tokens, l.Token)
			}
			p.token, p.holding, p.confirmed = l.Token, true, ev.At
			p.mu.Unlock()
			p.once.Do(func() { close(p.firstHeld) })
		case "renewed":
			p.f.renewed.Add(1)
			p.mu.Lock()
			p.confirmed = ev.At
			p.mu.Unlock()
		case "lost", "released":
			p.mu.Lock()
			p.holding = false
			p.mu.Unlock()
			p.f.lost.Add(1)
			return
		}
	}
	p.mu.Lock()
	was := p.holding
	p.holding = false
	p.mu.Unlock()
	if was && ctx.Err() == nil {
		p.f.lost.Add(1) // the stream ended under the pod
	}
}

// probe asks the pod's sidecar /readyz every period from a random phase
// until ctx ends, as the kubelet's readiness probe does (each answer needs
// the store: two statements at PostgreSQL).
func (p *pod) probe(ctx context.Context, period time.Duration, probes, failed *atomic.Int64) {
	if backoff.Sleep(ctx, rand.N(period)) != nil {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		probes.Add(1)
		resp, err := streamClient.Get(p.base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			failed.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// heldSince says whether the pod holds its lease with an event after t.
func (p *pod) heldSince(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding && p.confirmed.After(t)
}

func (p *pod) lastToken() (int64, []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.token, append([]int64(nil), p.tokens...)
}

// watcher is one GET /v1/watch stream, reconnected with Last-Event-ID
// when it ends, recording the events of the pods' tasks.
type watcher struct {
	base, prefix string

	mu         sync.Mutex
	lastID     int64
	acquired   map[string]map[int64]bool // task → tokens seen acquired
	released   map[string]int64          // task → token last seen released
	events     int
	reconnects int
	resets     int
	outOfOrder int // an id not above the one before (must stay 0)
	ready      chan struct{}
	readyOnce  sync.Once
}

func newWatcher(base, prefix string) *watcher {
	return &watcher{base: base, prefix: prefix, acquired: map[string]map[int64]bool{}, released: map[string]int64{}, ready: make(chan struct{})}
}

// run follows the watch until ctx ends.
func (w *watcher) run(ctx context.Context) {
	b := backoff.New(200*time.Millisecond, 2*time.Second)
	first := true
	for ctx.Err() == nil {
		u := w.base + "/v1/watch?prefix=" + url.QueryEscape(w.prefix)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return
		}
		w.mu.Lock()
		if !first {
			w.reconnects++
			req.Header.Set("Last-Event-ID", strconv.FormatInt(w.lastID, 10))
		}
		w.mu.Unlock()
		first = false
		resp, err := streamClient.Do(req)
		if err == nil && resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			err = fmt.Errorf("watch: %s", resp.Status)
		}
		if err != nil {
			_ = backoff.Sleep(ctx, b.Next())
			continue
		}
		w.read(resp.Body)
		resp.Body.Close()
	}
}

func (w *watcher) read(body io.Reader) {
	r := sse.NewReader(body)
	for {
		ev, err := r.Next()
		if err != nil {
			return
		}
		switch ev.Name {
		case "ready":
			w.readyOnce.Do(func() { close(w.ready) })
			continue
		case "reset":
			// Start over: the history went back under the sidecar.
			w.mu.Lock()
			w.resets++
			w.lastID = 0
			w.mu.Unlock()
			continue
		case "end":
			return
		}
		var e struct {
			ID    int64  `json:"id"`
			Task  string `json:"task"`
			Kind  string `json:"kind"`
			Token int64  `json:"token"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			continue
		}
		w.mu.Lock()
		if e.ID <= w.lastID {
			w.outOfOrder++
		}
		w.lastID = e.ID
		w.events++
		switch e.Kind {
		case "acquired":
			if w.acquired[e.Task] == nil {
				w.acquired[e.Task] = map[int64]bool{}
			}
			w.acquired[e.Task][e.Token] = true
		case "released":
			w.released[e.Task] = e.Token
		}
		w.mu.Unlock()
	}
}

// missing counts the grants of pods this watcher has not seen acquired,
// and, when released is set, the pods whose last token it has not seen
// released.
func (w *watcher) missing(pods []*pod, released bool) (grants, releases int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pods {
		last, tokens := p.lastToken()
		for _, tok := range tokens {
			if !w.acquired[p.task][tok] {
				grants++
			}
		}
		if released && w.released[p.task] != last {
			releases++
		}
	}
	return grants, releases
}

// awaitAll polls cond every 100 ms until it holds or the deadline passes.
func awaitAll(ctx context.Context, deadline time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	for !cond() {
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return errors.New("timed out")
		}
	}
	return nil
}
