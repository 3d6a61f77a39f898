package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/fence"
	"github.com/leasehold/leasehold/leasecore"
	"github.com/leasehold/leasehold/leasecore/storeurl"
	"github.com/leasehold/leasehold/sidecar"
)

// A job holds its task through the Go client and writes to its own
// database, checking its fencing token in the transaction that writes. A
// holder that wakes up after its lease passed on (here, replayed with the
// first run's token) is refused, and writes nothing. A program would use
// client.FromEnv() and its own database; the example starts a sidecar and
// opens an SQLite file of its own (fence.Postgres works the same way).
func Example() {
	addr, dir, stop := exampleSidecar()
	defer stop()
	ctx := context.Background()

	db, err := sql.Open("sqlite", filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := fence.Install(ctx, db, fence.SQLite); err != nil { // or leasehold fence install --db sqlite:app.db
		panic(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE report (line TEXT, token INTEGER)"); err != nil {
		panic(err)
	}

	// write is one fenced write: the check and the row commit together.
	write := func(ctx context.Context, task string, token int64, line string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fence.Check(ctx, tx, fence.SQLite, task, token); err != nil {
			return err // errors.Is(err, fence.ErrStale): a newer holder has the task
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO report VALUES (?, ?)", line, token); err != nil {
			return err
		}
		return tx.Commit()
	}

	c, err := client.New(addr, client.WithOwner("replica-1"))
	if err != nil {
		panic(err)
	}
	job := func(ctx context.Context, lease leasecore.Lease) error {
		fmt.Println("running under token", lease.Token)
		return write(ctx, lease.Task, lease.Token, "totals")
	}
	for range 2 { // two runs, one after the other: tokens 1 and 2
		if err := c.Run(ctx, "nightly-report", job); err != nil {
			panic(err)
		}
	}

	// The first run's holder, paused past its ttl, wakes and writes.
	err = write(ctx, "nightly-report", 1, "late totals")
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("refused:", stale)
	}
	var rows int
	_ = db.QueryRowContext(ctx, "SELECT count(*) FROM report").Scan(&rows)
	fmt.Println("rows written:", rows)
	// Output:
	// running under token 1
	// running under token 2
	// refused: stale fencing token 1 for task "nightly-report": highest seen is 2
	// rows written: 2
}

// An HTTP resource fenced by the middleware: a holder sends its task and
// token in the Leasehold-Task and Leasehold-Token headers (SetHeaders); a
// token lower than one the resource has seen is answered 409 with a problem
// document, and the handler does not run.
func ExampleMiddleware() {
	dir, err := os.MkdirTemp("", "leasehold-fence-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := fence.Install(context.Background(), db, fence.SQLite); err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		// A handler that writes to db would fence again in its write
		// transaction with these (an equal token is accepted).
		task, token, _ := fence.FromContext(r.Context())
		fmt.Fprintf(w, "accepted %s at token %d", task, token)
	})
	srv := httptest.NewServer(fence.Middleware(db, fence.SQLite, mux))
	defer srv.Close()

	for _, token := range []int64{2, 1} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/report", nil)
		if err != nil {
			panic(err)
		}
		fence.SetHeaders(req.Header, "nightly-report", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
		fmt.Println(string(body))
	}
	// Output:
	// 200 text/plain; charset=utf-8
	// accepted nightly-report at token 2
	// 409 application/problem+json
	// {"type":"urn:leasehold:problem:stale-token","title":"Stale fencing token","status":409,"detail":"stale fencing token 1 for task \"nightly-report\": highest seen is 2","task":"nightly-report","token":1,"highest_token":2}
}

// exampleSidecar starts a sidecar over a fresh SQLite store in a directory
// of its own.
func exampleSidecar() (addr, dir string, stop func()) {
	dir, err := os.MkdirTemp("", "leasehold-fence-example")
	if err != nil {
		panic(err)
	}
	st, err := storeurl.Open(context.Background(), storeurl.MustParse("sqlite:"+filepath.Join(dir, "leasehold.db")))
	if err != nil {
		panic(err)
	}
	srv, err := sidecar.New(sidecar.Options{Store: st})
	if err != nil {
		panic(err)
	}
	if err := srv.Migrate(context.Background()); err != nil {
		panic(err)
	}
	hs := httptest.NewServer(srv.Handler())
	return hs.URL, dir, func() { hs.Close(); _ = st.Close(); _ = os.RemoveAll(dir) }
}
