package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	tasks    map[string]leasecore.TaskDecl
	policies map[string]leasecore.RetentionPolicy
	history  []leasecore.Event // oldest first
	lastID   int64             // the id of the newest event ever recorded
}

// newMemData returns an empty database, migrated or not.
func newMemData(migrated bool) *memData {
	d := &memData{rows: map[string]*memRow{}, tasks: map[string]leasecore.TaskDecl{}, policies: map[string]leasecore.RetentionPolicy{}}
	if migrated {
		d.migrate(false)
	}
	return d
}

// migrate creates the schema: once, with the default policy, as the
// catalog's migration does (reseed: the migrateResetsDefault mutant, which
// creates it again every time).
func (d *memData) migrate(reseed bool) {
	if !d.migrated || reseed {
		now := memNow()
		d.policies[leasecore.DefaultPolicy] = leasecore.RetentionPolicy{Name: leasecore.DefaultPolicy,
			KeepFor: leasecore.DefaultKeepFor, KeepLast: leasecore.DefaultKeepLast, CreatedAt: now, UpdatedAt: now, ManagedBy: leasecore.ManagedByOperator}
	}
	d.migrated = true
}

type memRow struct {
	owner                                  string
	token                                  int64
	acquired, renewed, expires, releasedAt time.Time
	released                               bool
	ttl                                    time.Duration
	renewCount                             int64
	note                                   string
	// ended: the end of the lease, which ran out unreleased, is in the
	// history already (expired), so nothing records it again.
	ended bool
	// lost: the lease's loss (its owner's refused late renewal) is in the
	// history already.
	lost bool
	// credential is the credential of the claim that granted the lease,
	// which the history never records again (the endByHolderCredential and
	// releaseByHolderCredential mutants do).
	credential string
	// holdUntil is the end of the lease's minimum hold (zero: none).
	holdUntil time.Time
}

// resting: the row's lease ended before its minimum hold did.
func (r *memRow) resting(now time.Time) bool { return !r.live(now) && r.holdUntil.After(now) }

var (
	_ leasecore.Store        = (*memStore)(nil)
	_ leasecore.BatchRenewer = (*memStore)(nil)
)

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
		ExpiresAt: r.expires, TTL: r.ttl, TTLRemaining: rem, RenewCount: r.renewCount, Note: r.note, HoldUntil: r.holdUntil}
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
	if r != nil && r.resting(now) && m.mutant != "minHoldIgnored" && (r.owner != p.Owner || m.mutant != "minHoldOwnerExempt") {
		return nil, &leasecore.HeldError{Task: p.Task, Holder: leasecore.Holder{Owner: r.owner, ExpiresAt: r.holdUntil,
			TTLRemaining: r.holdUntil.Sub(now), AcquiredAt: r.acquired, HoldUntil: r.holdUntil, Resting: true}}
	}
	var hold time.Time
	if p.MinHold > 0 {
		hold = now.Add(p.MinHold)
	}
	switch {
	case r == nil || !r.live(now):
		token := int64(1)
		if r != nil {
			token = r.token + 1
			if !r.released && !r.ended { // ran out unreleased: its end is recorded now
				m.recordEnd(p.Task, r, now, p.Owner, p.Credential)
			}
		}
		nr := &memRow{owner: p.Owner, token: token, acquired: now, renewed: now, expires: now.Add(p.TTL), ttl: p.TTL, note: p.Note, credential: p.Credential, holdUntil: hold}
		if m.mutant == "grantKeepsHold" && r != nil && hold.IsZero() {
			nr.holdUntil = r.holdUntil
		}
		m.data.rows[p.Task] = nr
		m.record(leasecore.Event{Task: p.Task, Kind: leasecore.EventAcquired, Owner: p.Owner, Token: token, At: now, Credential: p.Credential})
		return m.lease(p.Task, nr, now), nil
	case r.owner == p.Owner:
		switch m.mutant {
		case "refreshNewToken":
			r.token++
		case "refreshMovesAcquired":
			r.acquired = now
		case "refreshRecordsAcquired":
			m.record(leasecore.Event{Task: p.Task, Kind: leasecore.EventAcquired, Owner: p.Owner, Token: r.token, At: now})
		}
		if until := r.acquired.Add(p.MinHold); p.MinHold > 0 && (until.After(r.holdUntil) || m.mutant == "refreshResetsHold") {
			r.holdUntil = until
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
		return nil, &leasecore.HeldError{Task: p.Task, Holder: leasecore.Holder{Owner: r.owner, ExpiresAt: r.expires, TTLRemaining: r.expires.Sub(now),
			AcquiredAt: r.acquired, HoldUntil: r.holdUntil}}
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
		if !r.ended {
			if m.mutant == "lostIsTheEnd" { // the loss stands for the end
				r.ended = true
			} else {
				m.recordEnd(p.Task, r, now, p.Owner, p.Credential)
			}
		}
		if !r.lost || m.mutant == "lostEveryRenewal" {
			r.lost = true
			m.record(leasecore.Event{Task: p.Task, Kind: leasecore.EventLost, Owner: r.owner, Token: r.token, At: now,
				Credential: m.endCredential(p.Credential, r)})
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
	switch {
	case p.Note != nil && m.mutant != "renewDropsNote":
		r.note = *p.Note
	case p.Note == nil && m.mutant == "renewClearsNote":
		r.note = ""
	}
	if m.mutant != "renewKeepsRenewedAt" {
		r.renewed = now
	} else {
		r.expires = r.renewed.Add(ttl)
	}
	return m.lease(p.Task, r, now), nil
}

func (m *memStore) Release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
	res, err := m.ReleaseHold(ctx, p)
	return res.Released, err
}

func (m *memStore) ReleaseHold(ctx context.Context, p leasecore.ReleaseParams) (leasecore.ReleaseResult, error) {
	released, err := m.release(ctx, p)
	if err != nil || !released {
		return leasecore.ReleaseResult{}, err
	}
	res := leasecore.ReleaseResult{Released: true}
	m.data.mu.Lock()
	defer m.data.mu.Unlock()
	if r := m.data.rows[p.Task]; r != nil && r.holdUntil.After(r.releasedAt) {
		res.HoldUntil = r.holdUntil
	}
	return res, nil
}

func (m *memStore) release(ctx context.Context, p leasecore.ReleaseParams) (bool, error) {
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
	credential := p.Credential
	if m.mutant == "releaseByHolderCredential" {
		credential = r.credential
	}
	detail := p.Detail
	if m.mutant == "releaseDropsDetail" {
		detail = ""
	}
	ev := leasecore.Event{Task: p.Task, Kind: leasecore.EventReleased, Owner: r.owner, Token: r.token, At: now, Credential: credential, Detail: detail, Run: p.Run}
	if r.holdUntil.After(now) {
		ev.HoldUntil = r.holdUntil
	}
	if m.mutant == "releaseDropsRun" {
		ev.Run = nil
	}
	m.record(ev)
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

func (m *memStore) List(ctx context.Context, p leasecore.ListParams) ([]leasecore.Lease, error) {
	unlock, err := m.begin(ctx, "list")
	if err != nil {
		return nil, err
	}
	defer unlock()
	now := m.readNow()
	tasks := make([]string, 0, len(m.data.rows))
	for task := range m.data.rows {
		tasks = append(tasks, task)
	}
	slices.SortFunc(tasks, func(a, b string) int {
		if m.mutant == "listFoldsCase" {
			return strings.Compare(strings.ToLower(a), strings.ToLower(b))
		}
		return strings.Compare(a, b)
	})
	out := []leasecore.Lease{}
	seen := 0 // rows, live or not, the listLimitCountsDead mutant counts
	for _, task := range tasks {
		if !m.after(task, p.After) || !m.inPrefix(task, p.Prefix) {
			continue
		}
		if p.Limit > 0 && (len(out) == p.Limit || (m.mutant == "listLimitCountsDead" && seen == p.Limit)) {
			break
		}
		seen++
		if r := m.data.rows[task]; r.live(now) || (m.mutant == "listReleased" && r.released) {
			out = append(out, *m.lease(task, r, now))
		}
	}
	return out, nil
}

// inPrefix reports whether name belongs to a list kept to prefix (the
// listIgnoresPrefix mutant keeps every name).
func (m *memStore) inPrefix(name, prefix string) bool {
	return m.mutant == "listIgnoresPrefix" || strings.HasPrefix(name, prefix)
}

// after reports whether name belongs to the page that starts after after
// (the listAfterInclusive mutant includes after itself).
func (m *memStore) after(name, after string) bool {
	if m.mutant == "listAfterInclusive" {
		return name >= after
	}
	return name > after
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
	m.data.migrate(m.mutant == "migrateResetsDefault")
	return nil
}

func (m *memStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// recordEnd records the end of r's lease, which ran out unreleased, noticed
// at now by an operation of owner acting for credential (none for the
// sweep): one expired event at the lease's expiry, for nobody, whoever
// noticed it. The mutants record it as the noticing operation saw it: as
// taken_over when another owner claims (takeoverRecorded), at the instant
// it was noticed (endAtNotice), for the noticing operation's credential
// (endByNoticer).
func (m *memStore) recordEnd(task string, r *memRow, now time.Time, owner, credential string) {
	r.ended = true
	e := leasecore.Event{Task: task, Kind: leasecore.EventExpired, Owner: r.owner, Token: r.token, At: r.expires}
	switch {
	case m.mutant == "takeoverRecorded" && owner != "" && owner != r.owner:
		e.Kind, e.Detail, e.At = leasecore.EventTakenOver, fmt.Sprintf("expired unreleased and taken over by %q", owner), now
	case m.mutant == "endAtNotice":
		e.At = now
	case m.mutant == "endByNoticer":
		e.Credential = credential
	}
	m.record(e)
}

// RecordExpiries is the expiry sweep (leasecore.HistoryFeed's): the end of
// every lease that ran out unreleased with its end unrecorded, at most
// limit, in task order, and the earliest live expiry. The model has no
// cursor, so it is no HistoryFeed: the Feed cases do not run on it, and
// History/SameWhetherSwept sweeps through this method alone.
func (m *memStore) RecordExpiries(ctx context.Context, limit int) (leasecore.ExpirySweep, error) {
	unlock, err := m.begin(ctx, leasecore.OpRecordExpiries)
	if err != nil {
		return leasecore.ExpirySweep{}, err
	}
	defer unlock()
	now := memNow()
	var sw leasecore.ExpirySweep
	for _, task := range slices.Sorted(maps.Keys(m.data.rows)) {
		r := m.data.rows[task]
		switch {
		case r.live(now):
			if sw.NextExpiry.IsZero() || r.expires.Before(sw.NextExpiry) {
				sw.NextExpiry = r.expires
			}
		case !r.released && !r.ended && sw.Recorded < limit:
			m.recordEnd(task, r, now, "", "")
			sw.Recorded++
		}
	}
	return sw, nil
}

// endCredential is the credential of the lost event of r's lease, which an
// operation acting for credential finds ran out: that operation's (the
// endByHolderCredential mutant: that of the claim that granted the lease,
// as a driver that kept it on the lease row and wrote the event from the
// row would).
func (m *memStore) endCredential(credential string, r *memRow) string {
	if m.mutant == "endByHolderCredential" {
		return r.credential
	}
	return credential
}

// RenewBatch renews ps one after another under the store's checks, as a
// driver's batch does (the batchSharesCredential mutant sends them all for
// the first renewal's credential, as a batch statement with one credential
// parameter would; batchDropsNote sends them without their notes, as a
// batch statement that forgot the notes' array would).
func (m *memStore) RenewBatch(ctx context.Context, ps []leasecore.RenewParams) ([]leasecore.RenewResult, error) {
	unlock, err := m.begin(ctx, "renew")
	if err != nil {
		return nil, err
	}
	unlock()
	out := make([]leasecore.RenewResult, len(ps))
	for i, p := range ps {
		if m.mutant == "batchSharesCredential" {
			p.Credential = ps[0].Credential
		}
		if m.mutant == "batchDropsNote" {
			p.Note = nil
		}
		l, err := m.Renew(ctx, p)
		if errors.Is(err, leasecore.ErrUnavailable) {
			return nil, err
		}
		out[i] = leasecore.RenewResult{Lease: l, Err: err}
	}
	return out, nil
}

// record appends an event to the history under the next id. The data is
// locked.
func (m *memStore) record(e leasecore.Event) {
	if m.mutant == "credentialDropped" {
		e.Credential = ""
	}
	if m.mutant == "idsReused" { // the next id after the newest one left
		e.ID = 1
		if n := len(m.data.history); n > 0 {
			e.ID = m.data.history[n-1].ID + 1
		}
	} else {
		m.data.lastID++
		e.ID = m.data.lastID
	}
	m.data.history = append(m.data.history, e)
}

// managedBy is the manager a write by w records: mutant managerNotRecorded
// records every write as an operator's.
func (m *memStore) managedBy(w leasecore.Writer) leasecore.Manager {
	if m.mutant == "managerNotRecorded" {
		return leasecore.ManagedByOperator
	}
	return w.Manager()
}

// mayWrite refuses w's change of what m manages: mutant managerIgnored lets
// every writer through.
func (m *memStore) mayWrite(kind, name string, by leasecore.Manager, w leasecore.Writer) error {
	if w.May(by) || m.mutant == "managerIgnored" {
		return nil
	}
	return &leasecore.ManagedError{Kind: kind, Name: name, By: by}
}

func (m *memStore) CreateTask(ctx context.Context, d leasecore.TaskDecl, w leasecore.Writer) (*leasecore.TaskDecl, error) {
	unlock, err := m.begin(ctx, "create_task")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, ok := m.data.tasks[d.Name]; ok && m.mutant != "createOverwrites" {
		return nil, &leasecore.ExistsError{Kind: "task", Name: d.Name}
	}
	if _, ok := m.data.policies[d.RetentionPolicy]; !ok && m.mutant != "missingPolicyAccepted" {
		return nil, &leasecore.NotFoundError{Kind: "retention policy", Name: d.RetentionPolicy}
	}
	d.CreatedAt = memNow()
	d.UpdatedAt = d.CreatedAt
	d.ManagedBy = m.managedBy(w)
	m.data.tasks[d.Name] = d
	return &d, nil
}

func (m *memStore) UpdateTask(ctx context.Context, d leasecore.TaskDecl, w leasecore.Writer) (*leasecore.TaskDecl, error) {
	unlock, err := m.begin(ctx, "update_task")
	if err != nil {
		return nil, err
	}
	defer unlock()
	old, ok := m.data.tasks[d.Name]
	if !ok {
		return nil, &leasecore.NotFoundError{Kind: "task", Name: d.Name}
	}
	if err := m.mayWrite("task", d.Name, old.ManagedBy, w); err != nil {
		return nil, err
	}
	if _, ok := m.data.policies[d.RetentionPolicy]; !ok {
		return nil, &leasecore.NotFoundError{Kind: "retention policy", Name: d.RetentionPolicy}
	}
	d.CreatedAt, d.UpdatedAt, d.ManagedBy = old.CreatedAt, memNow(), m.managedBy(w)
	if m.mutant == "updateMovesCreated" {
		d.CreatedAt = d.UpdatedAt
	}
	m.data.tasks[d.Name] = d
	return &d, nil
}

func (m *memStore) GetTask(ctx context.Context, name string) (*leasecore.TaskDecl, error) {
	unlock, err := m.begin(ctx, "get_task")
	if err != nil {
		return nil, err
	}
	defer unlock()
	d, ok := m.data.tasks[name]
	if !ok {
		return nil, nil
	}
	return &d, nil
}

func (m *memStore) ListTasks(ctx context.Context, p leasecore.ListParams) ([]leasecore.TaskDecl, error) {
	unlock, err := m.begin(ctx, "list_tasks")
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]leasecore.TaskDecl, 0, len(m.data.tasks))
	for _, d := range m.data.tasks {
		if m.after(d.Name, p.After) && m.inPrefix(d.Name, p.Prefix) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b leasecore.TaskDecl) int { return strings.Compare(a.Name, b.Name) })
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

func (m *memStore) DeleteTask(ctx context.Context, name string, w leasecore.Writer) (bool, error) {
	unlock, err := m.begin(ctx, "delete_task")
	if err != nil {
		return false, err
	}
	defer unlock()
	old, ok := m.data.tasks[name]
	if ok {
		if err := m.mayWrite("task", name, old.ManagedBy, w); err != nil {
			return false, err
		}
	}
	delete(m.data.tasks, name)
	return ok, nil
}

func (m *memStore) CreatePolicy(ctx context.Context, p leasecore.RetentionPolicy, w leasecore.Writer) (*leasecore.RetentionPolicy, error) {
	unlock, err := m.begin(ctx, "create_policy")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, ok := m.data.policies[p.Name]; ok {
		return nil, &leasecore.ExistsError{Kind: "retention policy", Name: p.Name}
	}
	p.CreatedAt = memNow()
	p.UpdatedAt = p.CreatedAt
	p.ManagedBy = m.managedBy(w)
	m.data.policies[p.Name] = p
	return &p, nil
}

func (m *memStore) UpdatePolicy(ctx context.Context, p leasecore.RetentionPolicy, w leasecore.Writer) (*leasecore.RetentionPolicy, error) {
	unlock, err := m.begin(ctx, "update_policy")
	if err != nil {
		return nil, err
	}
	defer unlock()
	old, ok := m.data.policies[p.Name]
	if !ok {
		return nil, &leasecore.NotFoundError{Kind: "retention policy", Name: p.Name}
	}
	if err := m.mayWrite("retention policy", p.Name, old.ManagedBy, w); err != nil {
		return nil, err
	}
	p.CreatedAt, p.UpdatedAt, p.ManagedBy = old.CreatedAt, memNow(), m.managedBy(w)
	m.data.policies[p.Name] = p
	return &p, nil
}

func (m *memStore) GetPolicy(ctx context.Context, name string) (*leasecore.RetentionPolicy, error) {
	unlock, err := m.begin(ctx, "get_policy")
	if err != nil {
		return nil, err
	}
	defer unlock()
	p, ok := m.data.policies[name]
	if !ok {
		return nil, nil
	}
	return &p, nil
}

func (m *memStore) ListPolicies(ctx context.Context) ([]leasecore.RetentionPolicy, error) {
	unlock, err := m.begin(ctx, "list_policies")
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]leasecore.RetentionPolicy, 0, len(m.data.policies))
	for _, p := range m.data.policies {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b leasecore.RetentionPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (m *memStore) DeletePolicy(ctx context.Context, name string, w leasecore.Writer) (bool, error) {
	unlock, err := m.begin(ctx, "delete_policy")
	if err != nil {
		return false, err
	}
	defer unlock()
	if name == leasecore.DefaultPolicy {
		return false, &leasecore.InUseError{Policy: name}
	}
	if old, ok := m.data.policies[name]; ok {
		if err := m.mayWrite("retention policy", name, old.ManagedBy, w); err != nil {
			return false, err
		}
	}
	var users []string
	for _, d := range m.data.tasks {
		if d.RetentionPolicy == name {
			users = append(users, d.Name)
		}
	}
	if len(users) > 0 && m.mutant != "deletePolicyInUse" {
		slices.Sort(users)
		return false, &leasecore.InUseError{Policy: name, Tasks: users}
	}
	_, ok := m.data.policies[name]
	delete(m.data.policies, name)
	return ok, nil
}

func (m *memStore) History(ctx context.Context, task string, limit int) ([]leasecore.Event, error) {
	unlock, err := m.begin(ctx, "history")
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []leasecore.Event{}
	for i := len(m.data.history) - 1; i >= 0 && len(out) < limit; i-- {
		if e := m.data.history[i]; e.Task == task {
			out = append(out, e)
		}
	}
	if m.mutant == "historyOldestFirst" {
		slices.Reverse(out)
	}
	return out, nil
}

func (m *memStore) PruneHistory(ctx context.Context) (int64, error) {
	unlock, err := m.begin(ctx, "prune")
	if err != nil {
		return 0, err
	}
	defer unlock()
	now := memNow()
	newer := map[string]int64{} // per task, the events kept so far, newest first
	var kept []leasecore.Event
	for i := len(m.data.history) - 1; i >= 0; i-- {
		e := m.data.history[i]
		name := leasecore.DefaultPolicy
		d, declared := m.data.tasks[e.Task]
		if declared {
			name = d.RetentionPolicy
		}
		p := m.data.policies[name]
		keepLast := p.KeepLast
		if m.mutant == "pruneKeepsOneMore" && keepLast > 0 {
			keepLast++
		}
		drop := (keepLast > 0 && newer[e.Task] >= keepLast) || (p.KeepFor > 0 && e.At.Before(now.Add(-p.KeepFor)))
		if drop && !(m.mutant == "pruneSkipsUndeclared" && !declared) {
			continue
		}
		newer[e.Task]++
		kept = append(kept, e)
	}
	slices.Reverse(kept)
	n := int64(len(m.data.history) - len(kept))
	m.data.history = kept
	return n, nil
}
