package storetest

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// memStore is the lease model in memory: the reference the suite is checked
// against (it must pass), and the body of the mutants the suite must catch.
// It is never a stand-in for a real store outside this package's tests.
type memStore struct {
	data        *memData
	mutant      string
	unreachable bool

	mu     sync.Mutex
	closed bool
}

// memData is what the stores of one "database" share.
type memData struct {
	mu       sync.Mutex
	migrated bool
	rows     map[string]*memRow
}

type memRow struct {
	owner                                  string
	token                                  int64
	acquired, renewed, expires, releasedAt time.Time
	released                               bool
	ttl                                    time.Duration
	renewCount                             int64
	note                                   string
}

var _ leasecore.Store = (*memStore)(nil)

var errMem = errors.New("memstore: unavailable")

// now is the store's clock, kept to the millisecond like SQLite's.
func memNow() time.Time { return time.Now().Truncate(time.Millisecond) }

// readNow is the clock of a read.
func (m *memStore) readNow() time.Time {
	if m.mutant == "readStaleNow" { // a read whose now lags what it reads
		return memNow().Add(-10 * time.Second)
	}
	return memNow()
}

// begin checks that the store can answer, and locks the data.
func (m *memStore) begin(ctx context.Context, op string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil && m.mutant != "ignoresContext" {
		return nil, leasecore.Unavailable(op, err)
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed && m.mutant != "closedStillWorks" {
		return nil, leasecore.Unavailable(op, errors.New("store closed"))
	}
	if m.unreachable {
		return nil, leasecore.Unavailable(op, errMem)
	}
	m.data.mu.Lock()
	if !m.data.migrated {
		m.data.mu.Unlock()
		if m.mutant == "unmigratedIsHeld" && op == "claim" {
			return nil, &leasecore.HeldError{Task: "?", Holder: leasecore.Holder{Owner: "?", TTLRemaining: time.Second}}
		}
		return nil, leasecore.Unavailable(op, errors.New("no such table: leasehold_leases"))
	}
	return m.data.mu.Unlock, nil
}

func (r *memRow) live(now time.Time) bool {
	if r.released {
		return false
	}
	if r.expires.After(now) {
		return true
	}
	return false
}

func (m *memStore) lease(task string, r *memRow, now time.Time) *leasecore.Lease {
	rem := r.expires.Sub(now)
	if m.mutant == "ttlRemainingConstant" {
		rem = r.ttl
	}
	return &leasecore.Lease{Task: task, Owner: r.owner, Token: r.token, AcquiredAt: r.acquired, RenewedAt: r.renewed,
		ExpiresAt: r.expires, TTL: r.ttl, TTLRemaining: rem, RenewCount: r.renewCount, Note: r.note}
}

func (m *memStore) Claim(ctx context.Context, p leasecore.ClaimParams) (*leasecore.Lease, error) {
	unlock, err := m.begin(ctx, "claim")
	if err != nil {
		return nil, err
	}
	now := memNow()
	r := m.data.rows[p.Task]
	if m.mutant == "nonAtomicClaim" {
		// read, let the others read too, then write: the classic lost race.
		unlock()
		for range 50 {
			runtime.Gosched()
		}
		m.data.mu.Lock()
	}
	defer unlock()
	if m.mutant == "expiredIsRefresh" && r != nil && !r.released && r.owner == p.Owner {
		r.expires, r.renewed, r.renewCount, r.note, r.ttl = now.Add(p.TTL), now, r.renewCount+1, p.Note, p.TTL
		return m.lease(p.Task, r, now), nil
	}
	switch {
	case r == nil || !r.live(now):
		token := int64(1)
		if r != nil {
			token = r.token + 1
		}
		nr := &memRow{owner: p.Owner, token: token, acquired: now, renewed: now, expires: now.Add(p.TTL), ttl: p.TTL, note: p.Note}
		m.data.rows[p.Task] = nr
		return m.lease(p.Task, nr, now), nil
	case r.owner == p.Owner:
		switch m.mutant {
		case "refreshNewToken":
			r.token++
		case "refreshMovesAcquired":
			r.acquired = now
		}
		oldNote := r.note
		r.expires, r.renewed, r.renewCount, r.note, r.ttl = now.Add(p.TTL), now, r.renewCount+1, p.Note, p.TTL
		if m.mutant == "refreshResetsCount" {
			r.renewCount = 0
		}
		if m.mutant == "refreshKeepsNote" {
			r.note = oldNote
		}
		return m.lease(p.Task, r, now), nil
	default:
		if m.mutant == "heldTouches" {
			r.expires = now.Add(p.TTL)
		}
		return nil, &leasecore.HeldError{Task: p.Task, Holder: leasecore.Holder{Owner: r.owner, ExpiresAt: r.expires, TTLRemaining: r.expires.Sub(now)}}
	}
}

func (m *memStore) Renew(ctx context.Context, p leasecore.RenewParams) (*leasecore.Lease, error) {
	unlock, err := m.begin(ctx, "renew")
	if err != nil {
		return nil, err
	}
	defer unlock()
	now := memNow()
	r := m.data.rows[p.Task]
	lost := func(reason leasecore.LostReason) error { return &leasecore.LostError{Task: p.Task, Reason: reason} }
	switch {
	case r == nil:
		return nil, lost(leasecore.LostNotHeld)
	case r.owner != p.Owner && r.live(now):
		return nil, lost(leasecore.LostHeldByOther)
	case r.owner != p.Owner, r.released:
		return nil, lost(leasecore.LostNotHeld)
	case !r.live(now) && m.mutant != "renewResurrects":
		if m.mutant == "expiredIsNotHeld" {
			return nil, lost(leasecore.LostNotHeld)
		}
		return nil, lost(leasecore.LostExpired)
	case p.Token != 0 && p.Token != r.token && m.mutant != "renewIgnoresToken":
		return nil, lost(leasecore.LostTokenMismatch)
	}
	ttl := p.TTL
	if ttl == 0 || m.mutant == "renewIgnoresTTL" {
		ttl = r.ttl
	}
	count := r.renewCount + 1
	if m.mutant == "renewLostUpdate" { // read-modify-write across a gap
		m.data.mu.Unlock()
		for range 50 {
			runtime.Gosched()
		}
		m.data.mu.Lock()
	}
	r.expires, r.ttl, r.renewCount = now.Add(ttl), ttl, count
	if m.mutant != "renewKeepsRenewedAt" {
		r.renewed = now
	} else {
		r.expires = r.renewed.Add(ttl)
	}
	return m.lease(p.Task, r, now), nil
}

func (m *memStore) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	unlock, err := m.begin(ctx, "release")
	if err != nil {
		return false, err
	}
	defer unlock()
	now := memNow()
	r := m.data.rows[p.Task]
	if r == nil || r.released {
		return false, nil
	}
	if !r.live(now) && m.mutant != "releaseExpired" {
		return false, nil
	}
	if r.owner != p.Owner && m.mutant != "releaseIgnoresOwner" {
		return false, nil
	}
	if p.Token != 0 && p.Token != r.token && m.mutant != "releaseIgnoresToken" {
		return false, nil
	}
	if m.mutant == "releaseDeletesRow" { // the seed's releaseLease
		delete(m.data.rows, p.Task)
		return true, nil
	}
	r.released, r.releasedAt = true, now
	if r.expires.After(now) {
		r.expires = now
	}
	return true, nil
}

func (m *memStore) Get(ctx context.Context, task string) (*leasecore.Lease, error) {
	unlock, err := m.begin(ctx, "get")
	if err != nil {
		return nil, err
	}
	defer unlock()
	now := m.readNow()
	r := m.data.rows[task]
	if r == nil || (!r.live(now) && !(m.mutant == "getExpired" && !r.released)) {
		return nil, nil
	}
	return m.lease(task, r, now), nil
}

func (m *memStore) List(ctx context.Context) ([]leasecore.Lease, error) {
	unlock, err := m.begin(ctx, "list")
	if err != nil {
		return nil, err
	}
	defer unlock()
	now := m.readNow()
	var out []leasecore.Lease
	for task, r := range m.data.rows {
		if r.live(now) || (m.mutant == "listReleased" && r.released) {
			out = append(out, *m.lease(task, r, now))
		}
	}
	slices.SortFunc(out, func(a, b leasecore.Lease) int {
		if m.mutant == "listFoldsCase" {
			return strings.Compare(strings.ToLower(a.Task), strings.ToLower(b.Task))
		}
		return strings.Compare(a.Task, b.Task)
	})
	return out, nil
}

func (m *memStore) Ping(ctx context.Context) error {
	unlock, err := m.begin(ctx, "ping")
	if err != nil {
		return err
	}
	unlock()
	return nil
}

func (m *memStore) Migrate(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return leasecore.Unavailable("migrate", err)
	}
	if m.unreachable {
		return leasecore.Unavailable("migrate", errMem)
	}
	m.data.mu.Lock()
	defer m.data.mu.Unlock()
	if m.mutant == "migrateWipes" {
		m.data.rows = map[string]*memRow{}
	}
	m.data.migrated = true
	return nil
}

func (m *memStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}
