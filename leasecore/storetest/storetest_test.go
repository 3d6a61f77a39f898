package storetest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/leasecore"
)

// mutantEnv names the mutant TestMemoryConformance runs; empty runs the
// correct model.
const mutantEnv = "STORETEST_MUTANT"

// TestMemoryConformance runs the suite against the in-memory reference
// model, which must pass it; with STORETEST_MUTANT set (by TestMutants) it
// runs against a broken model instead, which must not.
func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	mutant := os.Getenv(mutantEnv)
	shared := newMemData(true)
	Exercise(t, Driver{
		Open: func(*testing.T) leasecore.Store {
			data := shared
			if mutant == "reopenLosesData" {
				data = newMemData(true)
			}
			return &memStore{data: data, mutant: mutant}
		},
		OpenUnmigrated: func(*testing.T) leasecore.Store {
			return &memStore{data: newMemData(false), mutant: mutant}
		},
		OpenUnreachable: func(*testing.T) leasecore.Store {
			return &memStore{data: shared, mutant: mutant, unreachable: true}
		},
	})
}

// TestMutants checks that the suite fails each broken model, in the case
// that names the rule it breaks: a case that a wrong driver passes is no
// case at all.
func TestMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		return // this process is itself a mutant's run
	}
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("-short: each mutant runs the whole suite in a subprocess (CI never skips this)")
	}
	t.Parallel()
	for mutant, wantFailing := range map[string][]string{
		"refreshNewToken":           {"Claim/SameOwnerRefreshes"},
		"refreshMovesAcquired":      {"Claim/SameOwnerRefreshes"},
		"refreshResetsCount":        {"Claim/SameOwnerRefreshes"},
		"refreshKeepsNote":          {"Claim/SameOwnerRefreshes"},
		"heldTouches":               {"Claim/OtherOwnerWhileLiveIsHeld"},
		"expiredIsRefresh":          {"Claim/SameOwnerAfterExpiryGetsNewToken"},
		"nonAtomicClaim":            {"Claim/RaceOnFreeTask", "Claim/RaceOnExpiredTask", "Claim/RaceAcrossStores"},
		"renewResurrects":           {"Renew/AfterExpiryIsExpiredAndNotResurrected"},
		"expiredIsNotHeld":          {"Renew/AfterExpiryIsExpiredAndNotResurrected"},
		"renewIgnoresToken":         {"Renew/TokenMismatch"},
		"renewIgnoresTTL":           {"Renew/TTL"},
		"renewKeepsRenewedAt":       {"Renew/Extends"},
		"renewDropsNote":            {"Renew/Note", "Renew/BatchNotes"},
		"renewClearsNote":           {"Renew/Extends", "Renew/Note", "Renew/BatchNotes"},
		"batchDropsNote":            {"Renew/BatchNotes"},
		"releaseExpired":            {"Release/Expired"},
		"releaseIgnoresOwner":       {"Release/NotOwner", "Release/StaleAfterRegrant"},
		"releaseIgnoresToken":       {"Release/WrongToken"},
		"releaseDeletesRow":         {"Release/CounterSurvives", "Claim/SameOwnerAfterRelease", "Token/MonotonicAcrossReopen"},
		"getExpired":                {"Read/GetExpiredIsNil"},
		"listReleased":              {"Read/ListLiveOrderedByTask", "Release/Idempotent"},
		"listFoldsCase":             {"Read/ListLiveOrderedByTask"},
		"listAfterInclusive":        {"Read/ListPages", "Task/ListPages"},
		"listLimitCountsDead":       {"Read/ListPages"},
		"listIgnoresPrefix":         {"Read/ListPrefix", "Task/ListPrefix"},
		"ttlRemainingConstant":      {"Read/TTLRemainingMeasuredByStore"},
		"unmigratedIsHeld":          {"Unavailable/Unmigrated"},
		"closedStillWorks":          {"Unavailable/Closed"},
		"ignoresContext":            {"Unavailable/CancelledContext"},
		"renewLostUpdate":           {"Renew/ConcurrentRenewalsOrdered"},
		"readStaleNow":              {"Read/ConsistentDuringRenewals"},
		"migrateWipes":              {"Migrate/Idempotent"},
		"reopenLosesData":           {"Token/MonotonicAcrossReopen", "Token/SharedBetweenStores"},
		"refreshRecordsAcquired":    {"History/AcquiredOnceNotPerRenewal"},
		"takeoverRecorded":          {"History/SameWhetherWatched", "History/ExpiredThenOtherOwner", "History/RaceRecordsTheWinner", "Credential/EachEventKind", "Credential/ConcurrentEachItsOwn"},
		"endAtNotice":               {"History/SameWhetherWatched"},
		"endByNoticer":              {"History/SameWhetherWatched", "Credential/EachEventKind", "Credential/RenewBatchEachItsOwn", "Credential/ConcurrentEachItsOwn"},
		"lostIsTheEnd":              {"History/SameWhetherWatched", "History/LostOnce", "Credential/EachEventKind", "Credential/RenewBatchEachItsOwn"},
		"lostEveryRenewal":          {"History/LostOnce"},
		"historyOldestFirst":        {"History/OrderAndLimit"},
		"idsReused":                 {"Prune/KeepFor"},
		"pruneSkipsUndeclared":      {"Prune/DefaultPolicy"},
		"pruneKeepsOneMore":         {"Prune/KeepLast"},
		"deletePolicyInUse":         {"Policy/DeleteInUse"},
		"updateMovesCreated":        {"Task/Update"},
		"createOverwrites":          {"Task/CreateExisting"},
		"missingPolicyAccepted":     {"Task/MissingPolicy"},
		"migrateResetsDefault":      {"Policy/DefaultAfterMigrate"},
		"credentialDropped":         {"Credential/EachEventKind", "Credential/RenewBatchEachItsOwn", "Credential/ConcurrentEachItsOwn"},
		"endByHolderCredential":     {"Credential/EachEventKind", "Credential/RenewBatchEachItsOwn"},
		"releaseByHolderCredential": {"Credential/EachEventKind", "Credential/ConcurrentEachItsOwn"},
		"batchSharesCredential":     {"Credential/RenewBatchEachItsOwn"},
		"releaseDropsDetail":        {"Release/Revoke"},
		"managerNotRecorded":        {"Managed/Recorded", "Managed/TerraformAdopts"},
		"managerIgnored":            {"Managed/OperatorRefused", "Managed/TerraformAdopts"},
		"minHoldIgnored":            {"MinHold/ReleaseRestsTheTask", "MinHold/ExpiryRestsTheTask"},
		"minHoldOwnerExempt":        {"MinHold/ReleaseRestsTheTask", "MinHold/ExpiryRestsTheTask"},
		"refreshResetsHold":         {"MinHold/RefreshKeepsTheLaterEnd"},
		"grantKeepsHold":            {"MinHold/GrantWithoutHoldClearsIt"},
		"releaseDropsRun":           {"MinHold/ReleaseKeepsRunOutcome"},
	} {
		t.Run(mutant, func(t *testing.T) {
			t.Parallel()
			// The race cases catch a racy mutant with high probability, not
			// certainty, so a mutant gets a few runs and each wanted case must
			// fail in at least one of them. A correct model fails none.
			caught := map[string]bool{}
			var out []byte
			for attempt := 0; attempt < 5 && len(caught) < len(wantFailing); attempt++ {
				cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestMemoryConformance$", "-test.count=1", "-test.v", "-test.parallel=64")
				cmd.Env = append(os.Environ(), mutantEnv+"="+mutant)
				var err error
				out, err = cmd.CombinedOutput()
				if err == nil {
					continue
				}
				for _, c := range wantFailing {
					if strings.Contains(string(out), "--- FAIL: TestMemoryConformance/"+c+" ") {
						caught[c] = true
					}
				}
			}
			for _, c := range wantFailing {
				if !caught[c] {
					t.Errorf("mutant %s did not fail case %s in 5 runs", mutant, c)
				}
			}
			if t.Failed() {
				t.Logf("output of the last run:\n%s", out)
			}
		})
	}
}
