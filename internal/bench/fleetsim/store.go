package main

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// checkStore checks, on the database itself, that each pod's task has one
// live lease, the pod's, with the token the pod last got.
func checkStore(ctx context.Context, dbURL string, pods []*pod, fail func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	type row struct {
		owner string
		token int64
		live  bool
	}
	rows, err := conn.Query(ctx, `SELECT task, owner, token, released_at IS NULL AND expires_at > now() FROM leasehold_leases WHERE task LIKE 'pod-%'`)
	if err != nil {
		return fmt.Errorf("read the leases: %w", err)
	}
	stored := map[string]row{}
	for rows.Next() {
		var task string
		var r row
		if err := rows.Scan(&task, &r.owner, &r.token, &r.live); err != nil {
			return err
		}
		stored[task] = r
	}
	if err := rows.Err(); err != nil {
		return err
	}
	bad := 0
	for _, p := range pods {
		tok, _ := p.lastToken()
		r, ok := stored[p.task]
		if !ok || !r.live || r.owner != p.owner || r.token != tok {
			if bad < 5 {
				fmt.Printf("# %s: stored %+v (present %v), the pod %s holds token %d\n", p.task, r, ok, p.owner, tok)
			}
			bad++
		}
	}
	if bad > 0 || len(stored) != len(pods) {
		fail("store: %d of %d tasks not held live by their pod with its last token; %d tasks stored", bad, len(pods), len(stored))
	}
	return nil
}

// dbName is the database a postgres:// URL names.
func dbName(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// portOf is the port a URL names, 0 if none.
func portOf(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

func numCPU() int { return runtime.NumCPU() }
