// Package storetest is the conformance suite every leasecore.Store driver
// passes: the lease model of docs/design.md, one named case per rule. A driver is
// correct when Exercise passes against it; a new behaviour starts as a case
// here, and both drivers then have to meet it.
//
// # What the suite promises
//
// Every rule of the model has a case written to fail when the rule is
// broken, not merely to pass when it holds: each case was written against the
// wrong driver that would sneak past a weaker check (a refresh that issues a
// new token, a renewal that resurrects an expired lease, a release that ends
// a lease re-granted to someone else, a claim that reports "held" when the
// store is down, a counter that restarts with the process, a read-then-write
// race that lets two contenders win). The cases cover
//
//   - claim: a free task, a same-owner refresh, another owner's live lease
//     (held, with the holder), takeover after expiry and after release, the
//     default TTL, and 32 concurrent contenders on a free and on an expired
//     task, on one store and across two stores over the same data;
//   - renew: extension, TTL kept or changed, the note replaced by a renewal
//     that carries one and kept by one that does not (alone and batched),
//     the token check, and each lost
//     reason (not_held, expired, held_by_other, token_mismatch), never
//     resurrecting an expired lease; concurrent renewals each counted once
//     and never moving the expiry backwards;
//   - release: idempotence, owner and token checks, a stale holder that
//     cannot release its successor's lease, the counter surviving release;
//   - tokens that never repeat or go down, also across a closed and re-opened
//     store;
//   - get and list: live leases only, ordered by task, with TTLRemaining
//     measured by the store and never above the TTL, also while renewals
//     race the reads;
//   - input validation through leasecore.Service: every bound of the model,
//     the field named in the error, nothing written. Validation is the
//     Service's, for every driver alike (leasecore.Store's validation
//     stance): no case hands a driver input that fails Validate, and none
//     expects a driver to refuse such input itself;
//   - failure: an unmigrated, an unreachable and a closed store, and a
//     cancelled context, answer ErrUnavailable from every operation, never
//     ErrHeld or ErrLost; Migrate makes an empty database work and is
//     idempotent;
//   - the catalog: task declarations and retention policies created, read,
//     listed in name order, updated (created_at kept) and deleted; exists,
//     not found (a missing task or policy) and in use (a policy tasks name,
//     listed; the default policy, which Migrate creates and nothing
//     deletes); every input rule, naming the field, with nothing written;
//     claims and renewals honouring declarations (declared ttl, max_ttl,
//     required declarations); catalog operations unavailable like the rest;
//   - who manages a declaration or policy (leasecore.Writer): the writer
//     recorded and shown; an operator's change or removal of what Terraform
//     manages refused with *ManagedError and nothing written, unless it
//     takes it over; Terraform's write adopting an operator's;
//   - the feed (leasecore.HistoryFeed, for a driver that has one): every
//     event once, in id order, from any position or from now, also while
//     writers race the reader; expiries recorded once by the sweep, as the
//     lease's end for later claims and renewals; the change signal;
//   - history: one event per grant and one per end of a lease (released,
//     or expired at the lease's expiry, each once), one lost per lease
//     whose owner renewed too late, none per refresh, renewal or refused
//     operation, newest first with rising ids; the same events whether or
//     not an expiry sweep (a watch's) recorded an end first; pruning by
//     keep_last and keep_for per task, undeclared tasks by the default
//     policy, ids never reused;
//   - credentials: each event records the credential of the operation that
//     recorded it (the claimer's for acquired, the refused renewer's for
//     lost, the releaser's for released), each operation its own when a
//     driver batches them, none for an operation that names none and none
//     for expired, which nobody does; a credential name that breaks the
//     rule is refused, naming Credential, with nothing written.
//
// A few cases hunt for races (concurrent claims, renewals, and reads during
// renewals): a correct store never fails them, while a store with the race
// fails them often but, for the narrowest windows, not necessarily on every
// run.
//
// The suite drives a store both through leasecore.New(store), as programs
// use it, and directly where a case is about the driver's own contract (the
// error types it returns, the operation named in an *UnavailableError).
//
// Cases run in parallel over shared data: each one works on task names no
// other case uses (derived from its test name plus a random suffix), so a
// driver's backing database can be reused between runs. The cases that need
// a whole database (store-wide pruning, the default policy as Migrate makes
// it) migrate one of their own from OpenUnmigrated. Waiting for an expiry
// uses the minimum TTL (100 ms) and polls the store with a deadline; no
// assertion depends on how long anything took.
//
// # How a driver uses it
//
// A driver's test builds a Driver and calls Exercise:
//
//	func TestConformance(t *testing.T) {
//		path := filepath.Join(t.TempDir(), "leasehold.db")
//		storetest.Exercise(t, storetest.Driver{
//			Open:            func(t *testing.T) leasecore.Store { return openMigrated(t, path) },
//			OpenUnmigrated:  func(t *testing.T) leasecore.Store { return openEmpty(t) },
//			OpenUnreachable: func(t *testing.T) leasecore.Store { return openBadPath(t) },
//		})
//	}
//
// The suite closes every store it opens (a second Close is never issued by
// the suite).
package storetest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/leasecore"
)

// Driver tells the suite how to make stores of one driver.
type Driver struct {
	// Open returns a new, migrated store over the suite's backing data. Every
	// call opens new connections to the same data (one SQLite file, one
	// PostgreSQL database), so what one store wrote the next one reads: that
	// is how the suite re-opens a store. The suite closes what it opens, and
	// uses task names unique to each case, so cases may run in parallel over
	// shared data.
	Open func(t *testing.T) leasecore.Store
	// OpenUnmigrated returns a store over an empty database whose schema was
	// never created: a new database on every call. Cases that need data no
	// other case touches (store-wide pruning, the default policy) migrate one
	// and work there.
	OpenUnmigrated func(t *testing.T) leasecore.Store
	// OpenUnreachable returns a store whose database cannot be reached at all
	// (nothing listens, or the path cannot be opened).
	OpenUnreachable func(t *testing.T) leasecore.Store
	// HistoryFeed says that the driver's stores implement
	// leasecore.HistoryFeed: the Feed cases then run, and fail if a store
	// does not implement it. (They also run for a store that implements it
	// without the driver saying so.)
	HistoryFeed bool
	// RewindHistory puts the history of st, a store that Open or
	// OpenUnmigrated returned, back as a restore from a copy taken when its
	// newest event was to would: it deletes the events above to and sets
	// the history's id high-water mark back to to, so that the next event
	// gets id to+1 again. The Feed cases need it to check what a cursor does
	// when the history goes back under it, and fail without it.
	RewindHistory func(t *testing.T, st leasecore.Store, to int64)
}

// sharedOpTimeout bounds one operation of the Services over the store all
// cases share. The cases run in parallel and a store may serialise their
// writes (SQLite has one writer): under the race detector on a small, busy
// machine an operation can wait behind the others' for longer than
// leasecore.DefaultOpTimeout. The suite checks what operations do, not how
// fast; the benchmarks measure that. Cases about timeouts and unreachable
// stores use Services of their own.
const sharedOpTimeout = time.Minute

// Exercise runs every conformance case against d, each as a named parallel
// subtest of t. It fails t for every rule of the lease model the driver
// breaks.
func Exercise(t *testing.T, d Driver) {
	t.Helper()
	if d.Open == nil || d.OpenUnmigrated == nil || d.OpenUnreachable == nil {
		t.Fatal("storetest: Driver needs Open, OpenUnmigrated and OpenUnreachable")
	}
	s := &suite{d: d}
	s.store = s.open(t, d.Open)
	s.svc = leasecore.New(s.store, leasecore.WithOpTimeout(sharedOpTimeout))

	groups := append(s.groups(), group{"MinHold", s.minHoldCases()})
	if feed := s.feedCases(); len(feed) > 0 {
		groups = append(groups, group{"Feed", feed})
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t)
				})
			}
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T)
}

type group struct {
	name  string
	cases []testCase
}

// groups lists every case. The names are the rules' names: a failure reads
// as the rule the driver broke.
func (s *suite) groups() []group {
	return []group{
		{"Claim", []testCase{
			{"FreeTask", s.testClaimFreeTask},
			{"SameOwnerRefreshes", s.testClaimSameOwnerRefreshes},
			{"OtherOwnerWhileLiveIsHeld", s.testClaimOtherOwnerWhileLiveIsHeld},
			{"OtherOwnerAfterExpiry", s.testClaimOtherOwnerAfterExpiry},
			{"SameOwnerAfterExpiryGetsNewToken", s.testClaimSameOwnerAfterExpiry},
			{"SameOwnerAfterRelease", s.testClaimSameOwnerAfterRelease},
			{"OtherOwnerAfterRelease", s.testClaimOtherOwnerAfterRelease},
			{"DefaultTTL", s.testClaimDefaultTTL},
			{"RaceOnFreeTask", s.testClaimRaceOnFreeTask},
			{"RaceOnExpiredTask", s.testClaimRaceOnExpiredTask},
			{"RaceAcrossStores", s.testClaimRaceAcrossStores},
		}},
		{"Renew", []testCase{
			{"Extends", s.testRenewExtends},
			{"TTL", s.testRenewTTL},
			{"WithToken", s.testRenewWithToken},
			{"Note", s.testRenewNote},
			{"BatchNotes", s.testRenewBatchNotes},
			{"TokenMismatch", s.testRenewTokenMismatch},
			{"HeldByOther", s.testRenewHeldByOther},
			{"NeverClaimedIsNotHeld", s.testRenewNeverClaimed},
			{"AfterReleaseIsNotHeld", s.testRenewAfterRelease},
			{"AfterExpiryIsExpiredAndNotResurrected", s.testRenewAfterExpiry},
			{"OtherOwnersExpiredLeaseIsNotHeld", s.testRenewOtherOwnersExpired},
			{"AfterTakeoverIsHeldByOther", s.testRenewAfterTakeover},
			{"ConcurrentRenewalsOrdered", s.testRenewConcurrent},
			{"BatchEachOnItsOwn", s.testRenewBatchEachOnItsOwn},
			{"BatchLarge", s.testRenewBatchLarge},
			{"BatchUnavailable", s.testRenewBatchUnavailable},
		}},
		{"Release", []testCase{
			{"Idempotent", s.testReleaseIdempotent},
			{"WithToken", s.testReleaseWithToken},
			{"WrongToken", s.testReleaseWrongToken},
			{"NotOwner", s.testReleaseNotOwner},
			{"StaleAfterRegrant", s.testReleaseStaleAfterRegrant},
			{"Expired", s.testReleaseExpired},
			{"NeverClaimed", s.testReleaseNeverClaimed},
			{"CounterSurvives", s.testReleaseCounterSurvives},
			{"Revoke", s.testReleaseRevoke},
		}},
		{"Token", []testCase{
			{"MonotonicAcrossReopen", s.testTokenMonotonicAcrossReopen},
			{"SharedBetweenStores", s.testTokenSharedBetweenStores},
		}},
		{"Read", []testCase{
			{"GetUnknownIsNil", s.testGetUnknown},
			{"GetExpiredIsNil", s.testGetExpired},
			{"GetMatchesClaim", s.testGetMatchesClaim},
			{"ListLiveOrderedByTask", s.testListLiveOrdered},
			{"ListPages", s.testListPages},
			{"ListPrefix", s.testListPrefix},
			{"TTLRemainingMeasuredByStore", s.testTTLRemaining},
			{"ConsistentDuringRenewals", s.testReadsDuringRenewals},
		}},
		{"Validation", []testCase{
			{"Refused", s.testValidationRefused},
			{"Accepted", s.testValidationAccepted},
			{"NothingWritten", s.testValidationNothingWritten},
			{"NoteWithNUL", s.testValidationNoteWithNUL},
		}},
		{"Unavailable", []testCase{
			{"Unmigrated", s.testUnavailableUnmigrated},
			{"Unreachable", s.testUnavailableUnreachable},
			{"Closed", s.testUnavailableClosed},
			{"CancelledContext", s.testUnavailableCancelledContext},
		}},
		{"Migrate", []testCase{
			{"Idempotent", s.testMigrateIdempotent},
			{"Ping", s.testPing},
		}},
		{"DriverErrors", []testCase{
			{"Types", s.testDriverErrorTypes},
		}},
		{"Task", []testCase{
			{"Create", s.testTaskCreate},
			{"CreateExisting", s.testTaskCreateExisting},
			{"Update", s.testTaskUpdate},
			{"UpdateMissing", s.testTaskUpdateMissing},
			{"MissingPolicy", s.testTaskMissingPolicy},
			{"Delete", s.testTaskDelete},
			{"ListOrderedByName", s.testTaskList},
			{"ListPages", s.testTaskListPages},
			{"ListPrefix", s.testTaskListPrefix},
		}},
		{"Policy", []testCase{
			{"DefaultAfterMigrate", s.testPolicyDefaultAfterMigrate},
			{"DeleteDefault", s.testPolicyDeleteDefault},
			{"CreateUpdate", s.testPolicyCreateUpdate},
			{"CreateExisting", s.testPolicyCreateExisting},
			{"DeleteInUse", s.testPolicyDeleteInUse},
			{"DeleteUnused", s.testPolicyDeleteUnused},
		}},
		{"Managed", []testCase{
			{"Recorded", s.testManagedRecorded},
			{"SameManagerUpdates", s.testManagedSameManagerUpdates},
			{"OperatorRefused", s.testManagedOperatorRefused},
			{"TakeOver", s.testManagedTakeOver},
			{"TerraformAdopts", s.testManagedTerraformAdopts},
			{"BadWriter", s.testManagedBadWriter},
			{"Declare", s.testManagedDeclare},
		}},
		{"CatalogValidation", []testCase{
			{"Refused", s.testCatalogValidationRefused},
			{"Accepted", s.testCatalogValidationAccepted},
		}},
		{"Declared", []testCase{
			{"DefaultTTL", s.testDeclaredDefaultTTL},
			{"MaxTTL", s.testDeclaredMaxTTL},
			{"MaxTTLLoweredUnderALiveLease", s.testDeclaredMaxTTLLoweredUnderALiveLease},
			{"ReservedTasksIgnoreDeclarations", s.testDeclaredReservedTasks},
			{"Required", s.testDeclaredRequired},
		}},
		{"Catalog", []testCase{
			{"Unavailable", s.testCatalogUnavailable},
			{"DriverErrors", s.testCatalogDriverErrors},
		}},
		{"History", []testCase{
			{"AcquiredOnceNotPerRenewal", s.testHistoryAcquired},
			{"Released", s.testHistoryReleased},
			{"ExpiredThenSameOwner", s.testHistoryExpired},
			{"ExpiredThenOtherOwner", s.testHistoryExpiredThenOtherOwner},
			{"LostOnce", s.testHistoryLost},
			{"SameWhetherWatched", s.testHistorySameWhetherWatched},
			{"OrderAndLimit", s.testHistoryOrderAndLimit},
			{"NeverClaimedIsEmpty", s.testHistoryNeverClaimed},
			{"RaceRecordsTheWinner", s.testHistoryRace},
		}},
		{"Credential", []testCase{
			{"EachEventKind", s.testCredentialEachEventKind},
			{"RenewBatchEachItsOwn", s.testCredentialRenewBatch},
			{"ConcurrentEachItsOwn", s.testCredentialConcurrent},
		}},
		{"Prune", []testCase{
			{"KeepLast", s.testPruneKeepLast},
			{"KeepFor", s.testPruneKeepFor},
			{"DefaultPolicy", s.testPruneDefaultPolicy},
		}},
		{"Pruner", []testCase{
			{"TwoRacingOnePrunesOneSkips", s.testPrunerTwoRacing},
			{"BrokenLockPrunesAnyway", s.testPrunerBrokenLockPrunesAnyway},
		}},
	}
}
