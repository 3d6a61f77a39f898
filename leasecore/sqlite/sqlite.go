package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/internal/notify"
	"github.com/leasehold/leasehold/leasecore/migration"

	msqlite "modernc.org/sqlite"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var (
	_ leasecore.Store        = (*Store)(nil)
	_ leasecore.BatchRenewer = (*Store)(nil)
	_ leasecore.WriteCounter = (*Store)(nil)
)

// BusyTimeout is how long a statement waits for another process's write
// lock on the file before it gives up with "database is locked". A context
// that ends sooner ends the wait sooner.
const BusyTimeout = 10 * time.Second

// readerConns bounds the connections that serve Get, List and Ping. In WAL
// mode readers never block the writer or each other, so a few let reads run
// in parallel with a write without holding many file descriptors.
const readerConns = 4

// errClosed is what every call after Close reports.
var errClosed = errors.New("store is closed")

// Store is the SQLite implementation of leasecore.Store over one database
// file. It is safe for concurrent use, and any number of processes may open
// the same file. Claim, Renew and Release are queued for the Store's one
// writer goroutine, which commits whatever is pending in one transaction
// (group commit; see the package doc).
type Store struct {
	// writer has exactly one connection, used by the writer goroutine's
	// batches and by Migrate. SQLite admits one writer per file at a time
	// anyway; one connection per process means only other processes meet
	// SQLite's busy handler, which polls with sleeps of up to 100 ms.
	writer *sql.DB
	// reader serves the read-only operations (see readerConns).
	reader *sql.DB
	// changes serves HistoryChanges: each call holds one of its
	// connections for as long as it follows the file.
	changes *sql.DB
	// file keeps the Store on the file its first connection opened.
	file       *fileGuard
	migrations []migration.Migration
	// closed is set, under mu, by Close; reads check it without the lock.
	closed atomic.Bool

	// mu guards pending, the requests queued for the writer in arrival
	// order, and the closing of the store.
	mu      sync.Mutex
	pending []*request
	// wake tells the writer that pending may have grown (capacity 1: one
	// wake-up waiting is enough).
	wake chan struct{}
	// ctx lives from Open to Close; cancel ends the writer and interrupts
	// the batch it is running. writerDone is closed when the writer exits.
	ctx        context.Context
	cancel     context.CancelFunc
	writerDone chan struct{}
	// batchTimeout bounds one batch: the constant batchTimeout, which
	// tests shorten.
	batchTimeout time.Duration
	// pruneRound is how many tasks one transaction of PruneHistory visits:
	// the constant pruneRoundTasks, which tests shorten.
	pruneRound int
	// pruneEvents is how many events one transaction of PruneHistory
	// deletes at most: the constant pruneRoundEvents, which tests shorten.
	pruneEvents int
	// changesPoll is how often HistoryChanges polls the file: the constant
	// changesPoll, which tests lengthen.
	changesPoll time.Duration

	// committed is notified after the writer commits a batch that wrote
	// history, so that HistoryChanges looks at once rather than at its
	// next poll. feeds counts the HistoryChanges goroutines, which Close
	// waits for.
	committed notify.Notifier
	feeds     sync.WaitGroup

	// stmts are the writer's prepared statements, owned by the writer
	// goroutine (see statements).
	stmts *writeStmts

	// batches and taken count the batches the writer has taken and the
	// requests in them, for tests.
	batches, taken atomic.Int64
	// writes counts committed writes per operation, for WriteCounts.
	writes [len(writeOps)]writeCount
}

// Open returns a Store over the SQLite database file at path, created on
// first use if it does not exist. It does not touch the file: a path that
// cannot be opened (say, its directory is missing) makes every operation
// unavailable rather than Open fail. It does not migrate either; call
// Migrate (leasehold serve and leasehold migrate do). ctx bounds Open only;
// the Store lives until Close.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	migrations, err := loadMigrations()
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	base, err := msqlite.NewConnector(dataSourceName(path))
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	file := &fileGuard{path: path}
	c := patientConnector{Connector: base, file: file}
	writer := sql.OpenDB(c)
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	reader := sql.OpenDB(c)
	reader.SetMaxOpenConns(readerConns)
	reader.SetMaxIdleConns(readerConns)
	changes := sql.OpenDB(c)
	changes.SetMaxIdleConns(0)
	// The writer's context is not ctx: that one may end as soon as Open
	// returns.
	life, cancel := context.WithCancel(context.Background())
	s := &Store{
		writer:       writer,
		reader:       reader,
		changes:      changes,
		file:         file,
		migrations:   migrations,
		wake:         make(chan struct{}, 1),
		ctx:          life,
		cancel:       cancel,
		writerDone:   make(chan struct{}),
		batchTimeout: batchTimeout,
		pruneRound:   pruneRoundTasks,
		pruneEvents:  pruneRoundEvents,
		changesPoll:  changesPoll,
	}
	go s.write()
	return s, nil
}

// dataSourceName builds the modernc.org/sqlite DSN for path. Every
// connection gets:
//   - busy_timeout first, so the pragmas after it wait for a lock too (all
//     but the switch to WAL; see patientConnector);
//   - journal_mode WAL: readers and the one writer do not block each other;
//   - synchronous FULL: a commit is on disk (the WAL fsynced) before it
//     returns, so a grant survives power loss;
//   - foreign_keys on, for the tables later migrations add;
//   - _txlock=immediate: BEGIN takes the write lock at once, so two
//     transactions never both read and then deadlock upgrading to write.
func dataSourceName(path string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	// A file: URI, with the characters that would end or escape its path
	// escaped, so that any file name survives.
	escaped := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	return "file:" + escaped + "?" + q.Encode()
}

// patientConnector opens connections like the driver's own connector, but
// waits, as a statement would under busy_timeout, when opening finds the file
// locked. SQLite does not call its busy handler while it switches a new file
// to WAL: when processes open a fresh file together, all but the one that
// converts it would fail at once with "database is locked". Every
// connection it opens must have opened the Store's file (see fileGuard).
type patientConnector struct {
	driver.Connector
	file *fileGuard
}

// Connect opens a connection, retrying while the file is locked, for up to
// BusyTimeout or until ctx ends.
func (c patientConnector) Connect(ctx context.Context) (driver.Conn, error) {
	const firstRetry, maxRetry = time.Millisecond, 100 * time.Millisecond
	deadline := time.Now().Add(BusyTimeout)
	retry := backoff.New(firstRetry, maxRetry)
	for {
		conn, err := c.Connector.Connect(ctx)
		if err == nil {
			if err := c.file.remember(); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		}
		delay := retry.Next()
		if !isBusy(err) || time.Now().Add(delay).After(deadline) {
			return nil, err
		}
		if err := backoff.Sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// Close stops the writer and closes the store's connections. Operations
// still queued are answered unavailable, and so is a batch in flight (it is
// interrupted; like any cut-off write it may or may not have committed).
// Calls after Close are unavailable; closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed.Store(true)
	queued := s.pending
	s.pending = nil
	s.mu.Unlock()

	for _, r := range queued {
		r.done <- answer{err: interpretError(r.op, errClosed)}
	}
	s.cancel()
	<-s.writerDone
	s.feeds.Wait()
	return errors.Join(s.writer.Close(), s.reader.Close(), s.changes.Close())
}

// usable reports errClosed, as unavailable, once the store is closed.
func (s *Store) usable(op string) error {
	if s.closed.Load() {
		return interpretError(op, errClosed)
	}
	return nil
}

// inWriteTx runs fn in one IMMEDIATE transaction on the writer connection
// and commits; any failure is unavailable. Migrate uses it; lease
// operations go through the writer goroutine's batches instead.
func (s *Store) inWriteTx(ctx context.Context, op string, fn func(*sql.Tx) error) error {
	if err := s.usable(op); err != nil {
		return err
	}
	if err := s.file.check(true); err != nil {
		return interpretError(op, err)
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return interpretError(op, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return interpretError(op, err)
	}
	if err := tx.Commit(); err != nil {
		return interpretError(op, err)
	}
	// Checked again now that a connection has opened the file: a Migrate
	// with nothing left to write succeeds on a read-only file, but the
	// Store could not grant a lease there.
	if err := s.file.check(true); err != nil {
		return interpretError(op, err)
	}
	return nil
}
