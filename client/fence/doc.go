// Package fence is the resource's half of fencing: it lets the database a
// job writes to refuse the writes of a holder whose lease has passed on.
//
// A lease's TTL does not stop its holder. A process paused past its ttl
// (a long GC, a frozen VM, SIGSTOP) wakes up and writes as if it still held
// the task, while the store has granted the task to another holder, with a
// higher fencing token. Only the resource can tell the two apart, by
// remembering the highest token it has seen for the task and refusing a
// lower one. This package keeps that record in the resource database
// itself, in the transaction that writes, so that the check and the write
// commit together or not at all.
//
// Install (or `leasehold fence install --db URL`, or the DDL SQL returns,
// for a migration tool) adds a table, leasehold_fence, holding the highest
// token seen per task, with a trigger that refuses to lower one, and on
// PostgreSQL the function leasehold_fence(task, token). Then, in every
// transaction that writes on behalf of a lease:
//
//	tx, err := db.BeginTx(ctx, nil)
//	…
//	if err := fence.Check(ctx, tx, fence.Postgres, lease.Task, lease.Token); err != nil {
//		tx.Rollback()
//		return err // errors.Is(err, fence.ErrStale): a newer holder has the task; stop
//	}
//	// … the writes …
//	return tx.Commit()
//
// Check refuses a token lower than the highest seen for the task with a
// *StaleTokenError (PostgreSQL's SQLSTATE LH001 underneath), accepts an
// equal one (a holder writes many times under one token) and records a
// higher one. The row it writes stays locked until the transaction ends:
// of two holders writing at once, the older one commits before the newer
// one's check returns (so the newer one's writes come after its own), or
// it is refused. A write outside the checked transaction, or to another
// database than the one holding the record, is not fenced.
//
// The Python and TypeScript clients have the same check, against the
// same table, so holders written in any of them fence each other. Package
// fencepgx has it for pgx.
//
// For HTTP resources, Middleware checks the Leasehold-Task and
// Leasehold-Token headers (set them with SetHeaders) before the handler
// runs, and answers a stale token with a problem document of its own type
// (409, ProblemStaleToken); FromContext gives the handler what it checked,
// to fence again inside its own write transaction.
package fence
