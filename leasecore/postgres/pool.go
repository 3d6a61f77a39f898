package postgres

import (
	"context"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Giving up on a statement without hanging up.
//
// pgx's default answer to a context that ends during a statement is to
// close the connection. Behind PgBouncer in transaction mode that is the
// expensive answer: PgBouncer does not read from a client whose query waits
// for a server connection, so it learns of the hang-up only when it hands
// that client a server, and then it must close that server connection too
// (the query is half sent: "client disconnect while server was not ready").
// It opens server connections one at a time, about 20 ms each. After a
// PostgreSQL restart, with PgBouncer waiting out server_login_retry, every
// sidecar's statements time out in its queue; when PostgreSQL is back, each
// new server connection goes to the oldest waiting client, which has hung
// up, and is closed again. Once hang-ups outpace one login every 20 ms or
// so, no server connection survives and the fleet stays unavailable after
// PostgreSQL is back (the thousand-pod simulation showed it: docs/design.md,
// "Giving up on a statement"). Against PostgreSQL itself a hang-up costs a
// new backend per timed-out statement.
//
// So the Store gives up on a statement differently: the caller gets its
// answer (unavailable) when its context ends, as before, while the
// statement goes on in the background on its connection. The connection
// asks the server (or PgBouncer) to cancel it, and waits for its answer:
// PostgreSQL cancels a running statement in milliseconds, and PgBouncer
// sends a waiting one as soon as it has a server, so the connection
// returns to the pool whole. It hangs up only when the cancel request
// cannot be delivered (nothing answers at that address: the host is gone),
// when drainTimeout passes, or when the Store closes.
//
// A write given up this way may still take effect after its caller was
// told unavailable, as one whose answer was lost may; DESIGN's unavailable
// promises no more (docs/design.md says what it costs).

// drainTimeout bounds how long a connection waits for a statement its
// caller gave up on before it hangs up. It outlasts several of PgBouncer's
// default server_login_retry (15 s), so that a PostgreSQL restart behind
// PgBouncer is waited out. It bounds what a connection whose route died
// silently (new connections get through, this one's answers never come)
// costs. And it keeps the hang-ups of a long outage rare: a thousand
// sidecars with two connections each hang up 33 times a second, under the
// one login per 20 ms or so that PgBouncer can replace.
const drainTimeout = 60 * time.Second

// cancelRequestTimeout bounds the delivery of one cancel request (the
// making of its connection): a server or PgBouncer that is there accepts
// it in milliseconds. What follows delivery is not bounded by it
// (cancelRequest).
const cancelRequestTimeout = 2 * time.Second

// cancelSettle is how long a connection stays out of the pool after a
// delivered cancel request: PostgreSQL signals the backend after it has
// closed the request's connection, so a cancel of a statement that had just
// finished could otherwise hit the connection's next one (pgx's
// CancelRequestContextWatcherHandler waits the same).
const cancelSettle = 100 * time.Millisecond

// cancelThenWait is the connections' pgx context watcher handler: when a
// statement's context ends, it sends a cancel request and lets the
// statement finish, hanging up only as described above.
type cancelThenWait struct {
	conn    *pgconn.PgConn
	closing <-chan struct{} // closed when the Store closes: hang up at once

	unwatched context.CancelFunc
	done      chan struct{}
}

// HandleCancel is called by pgx when the context of the connection's
// current operation ends.
func (h *cancelThenWait) HandleCancel(context.Context) {
	nc := h.conn.Conn()
	if h.conn.PID() == 0 {
		// Still logging in: there is nothing to cancel and no server
		// connection to waste. Hang up, as pgx does.
		_ = nc.SetDeadline(time.Now())
		h.done = nil
		return
	}
	ctx, unwatched := context.WithCancel(context.Background())
	h.unwatched, h.done = unwatched, make(chan struct{})
	_ = nc.SetDeadline(time.Now().Add(drainTimeout))
	go func() {
		defer close(h.done)
		hangUp := func() { _ = nc.SetDeadline(time.Now()) }
		if !h.cancelRequest() {
			hangUp() // nobody there to ask
			return
		}
		select {
		case <-time.After(cancelSettle):
		case <-h.closing:
			hangUp()
			return
		}
		select {
		case <-ctx.Done(): // the statement ended
		case <-h.closing:
			hangUp()
		}
	}()
}

// cancelRequest asks the server to cancel the connection's statement and
// reports whether the request was delivered: its connection was made
// within cancelRequestTimeout. Once delivered, the request's connection is
// left for the server to close, which it does when it has acted on it,
// however long that takes (up to drainTimeout), even when the statement
// ends first or the Store closes meanwhile: PgBouncer 1.18 and 1.19 exit
// with a FATAL ("disconnect_client(): bad client state") when a client
// closes a cancel request's connection while PgBouncer still forwards it.
func (h *cancelThenWait) cancelRequest() bool {
	dialed := make(chan struct{})
	cctx, stop := context.WithTimeout(context.WithValue(context.Background(), cancelDialKey{}, dialed), drainTimeout)
	answered := make(chan error, 1)
	go func() {
		answered <- h.conn.CancelRequest(cctx)
		stop()
	}()
	timer := time.NewTimer(cancelRequestTimeout)
	defer timer.Stop()
	select {
	case <-dialed:
	case <-answered: // refused before its connection was made, or delivered and done
		select {
		case <-dialed:
		default:
			return false
		}
	case <-timer.C:
		stop() // abandon the dial: nothing answers at that address
		return false
	case <-h.closing:
		stop() // not yet delivered: nothing for the server to finish
		return false
	}
	select {
	case <-answered:
	case <-h.closing:
		// The Store hangs up on the statement's connection now; the
		// request's goroutine still waits for its connection to be
		// closed by the server, as above.
	}
	return true
}

// cancelDialKey is the key of the context value by which dialNotifying
// tells cancelRequest that the cancel request's connection was made.
type cancelDialKey struct{}

// dialNotifying wraps a connection's dial function so that a dial whose
// context carries a cancelDialKey channel closes it once connected: pgx
// dials a cancel request's connection with the connection's own dial
// function, and cancelRequest tells delivery from its answer that way.
func dialNotifying(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if dialed, ok := ctx.Value(cancelDialKey{}).(chan struct{}); ok && err == nil {
			close(dialed)
		}
		return c, err
	}
}

// HandleUnwatchAfterCancel is called by pgx when the operation whose
// context ended is over.
func (h *cancelThenWait) HandleUnwatchAfterCancel() {
	if h.done == nil {
		_ = h.conn.Conn().SetDeadline(time.Time{})
		return
	}
	h.unwatched()
	<-h.done
	_ = h.conn.Conn().SetDeadline(time.Time{})
}

// pool is the Store's pgx pool whose statements return when their context
// ends, leaving the statement to finish (or be cancelled) in the
// background, on a goroutine that holds its connection until then.
type pool struct {
	*pgxpool.Pool
}

// Exec is pgxpool.Pool's Exec, returning ctx's error when ctx ends first.
func (p pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	type result struct {
		tag pgconn.CommandTag
		err error
	}
	out := make(chan result, 1)
	go func() {
		tag, err := p.Pool.Exec(ctx, sql, args...)
		out <- result{tag, err}
	}()
	select {
	case r := <-out:
		return r.tag, r.err
	case <-ctx.Done():
		return pgconn.CommandTag{}, ctx.Err()
	}
}

// Query is pgxpool.Pool's Query, returning ctx's error when ctx ends before
// the statement's first answer; the rows are then closed in the background.
func (p pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	type result struct {
		rows pgx.Rows
		err  error
	}
	out := make(chan result) // unbuffered: rows are handed over or closed, never left in it
	abandoned := make(chan struct{})
	go func() {
		rows, err := p.Pool.Query(ctx, sql, args...)
		select {
		case out <- result{rows, err}:
		case <-abandoned:
			if err == nil {
				rows.Close()
			}
		}
	}()
	select {
	case r := <-out:
		return r.rows, r.err
	case <-ctx.Done():
	}
	// Both may be ready: the rows, if they came, are closed here or by
	// the goroutine, never left open.
	close(abandoned)
	select {
	case r := <-out:
		if r.err == nil {
			r.rows.Close()
		}
	default:
	}
	return nil, ctx.Err()
}

// QueryRow is pgxpool.Pool's QueryRow over Query.
func (p pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, sql, args...)
	return row{rows: rows, err: err}
}

// row is one row of rows, as pgx's own QueryRow reads it.
type row struct {
	rows pgx.Rows
	err  error
}

// Scan reads the first row into dest and closes the rows; pgx.ErrNoRows
// when there is none.
func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// newContextWatcher builds each connection's cancelThenWait.
func newContextWatcher(closing <-chan struct{}) func(*pgconn.PgConn) ctxwatch.Handler {
	return func(c *pgconn.PgConn) ctxwatch.Handler {
		return &cancelThenWait{conn: c, closing: closing}
	}
}
